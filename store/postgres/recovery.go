package postgres

import (
	"context"
	"errors"
	"math/rand/v2"

	"botpool.dev/botpool/store"
)

// recoverLoop waits for an outage, then pings with backoff until Postgres answers and the
// buffer is replayed.
func (s *Store) recoverLoop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.recoverKick:
		case <-s.done:
			return
		}
		if s.Status().Available {
			continue // a stale kick
		}
		// Connections opened before the outage are dead or about to be: start afresh.
		s.pool.Reset()
		backoff := s.cfg.minBackoff
		for !s.Status().Available {
			err := s.recover(s.replayCtx) // each statement has its own timeout
			if err == nil {
				break
			}
			if s.replayCtx.Err() != nil {
				return // closing
			}
			// Connections may carry what made the writes fail: a session opened read-only (a
			// database set read-only, a primary demoted to a replica) stays so. Start afresh
			// on every attempt.
			s.pool.Reset()
			s.mu.Lock()
			s.lastErr = err.Error()
			s.mu.Unlock()
			// Full jitter on the upper half, so many managers do not ping in step.
			delay := backoff/2 + rand.N(backoff/2+1)
			t := s.cfg.clock.NewTimer(delay)
			select {
			case <-t.C():
			case <-s.done:
				t.Stop()
				return
			}
			backoff = min(2*backoff, s.cfg.maxBackoff)
		}
	}
}

// recover pings the server, replays the buffer pass after pass and, when a pass leaves it
// empty, makes the store available again. Writes that arrive meanwhile are buffered behind the
// replayed ones, so order holds. It returns the error that stopped it.
func (s *Store) recover(ctx context.Context) error {
	s.mu.Lock()
	pending := s.setupPending
	s.mu.Unlock()
	if pending {
		// Bounded, as every statement is: a server that hangs must not hold the loop. The
		// migration may wait for another replica's, under its advisory lock.
		sctx, cancel := context.WithTimeout(ctx, 10*s.cfg.writeTimeout)
		err := s.setUp(sctx)
		cancel()
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.setupPending = false
		s.mu.Unlock()
		s.cfg.log.Info("Postgres reachable: the schema is migrated", "at", s.where)
	} else if err := s.exec(ctx, "ping", s.pool.Ping); err != nil {
		return err
	}
	for {
		s.mu.Lock()
		if s.buf.len() == 0 {
			if !s.available {
				s.available = true
				s.since = s.cfg.clock.Now()
				s.cfg.log.Info("Postgres reachable again, buffer replayed", "dropped", s.buf.dropped)
			}
			s.mu.Unlock()
			return nil
		}
		snap := s.buf.snapshot(replayRows)
		s.mu.Unlock()
		if err := s.replay(ctx, snap); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// replay writes one snapshot: projections in the order they were last written, then the
// heartbeats, the slots' asks and their containers' hang-ups (always after: a buffered beat
// or ask is newer than any buffered delete of its bot or slot), then the oldest append-only rows. It stops at the first connection failure; a write the
// server refuses is retried on the next passes, then given up.
func (s *Store) replay(ctx context.Context, snap snapshot) error {
	for _, op := range snap.ops {
		err := s.exec(ctx, "replay", func(ctx context.Context) error { return s.execOp(ctx, op) })
		if err != nil && (classify(err) == kindConnection || ctx.Err() != nil) {
			return err // not the write's fault: keep it as it is
		}
		s.mu.Lock()
		if err == nil {
			s.buf.ackOp(op)
			s.m.replayed.Inc()
		} else if s.buf.failOp(op, maxReplayFailures) {
			s.lastErr = err.Error()
			s.cfg.log.Info("Gave up a buffered write the database keeps refusing", "error", err.Error())
		}
		s.mu.Unlock()
	}
	for start := 0; start < len(snap.beats); start += s.cfg.batchSize {
		end := min(start+s.cfg.batchSize, len(snap.beats))
		beats := snap.beats[start:end]
		err := s.exec(ctx, "heartbeat_batch", func(ctx context.Context) error {
			return s.execBeats(ctx, append([]store.Heartbeat(nil), beats...))
		})
		if err != nil {
			return err // heartbeats are plain upserts: only an outage makes them fail
		}
		s.m.batchSize.Observe(float64(len(beats)))
		s.mu.Lock()
		s.buf.ackBeats(beats, snap.seqs[start:end])
		s.m.replayed.Add(float64(len(beats)))
		s.mu.Unlock()
	}
	for start := 0; start < len(snap.asks); start += s.cfg.batchSize {
		end := min(start+s.cfg.batchSize, len(snap.asks))
		asks := snap.asks[start:end]
		err := s.exec(ctx, "upsert_slot_asks", func(ctx context.Context) error { return s.execAsks(ctx, asks) })
		if err != nil {
			return err // asks are plain upserts of validated rows: only an outage makes them fail
		}
		s.mu.Lock()
		s.buf.ackAsks(asks, snap.aseqs[start:end])
		s.m.replayed.Add(float64(len(asks)))
		s.mu.Unlock()
	}
	// After the asks: a hang-up applies only to an ask not newer than its wait, so an ask
	// buffered after it (the container came back) must be in place first.
	for start := 0; start < len(snap.lefts); start += s.cfg.batchSize {
		end := min(start+s.cfg.batchSize, len(snap.lefts))
		lefts := snap.lefts[start:end]
		err := s.exec(ctx, "record_slot_lefts", func(ctx context.Context) error { return s.execLefts(ctx, lefts) })
		if err != nil {
			return err // plain updates of validated rows: only an outage makes them fail
		}
		s.mu.Lock()
		s.buf.ackLefts(lefts, snap.lseqs[start:end])
		s.m.replayed.Add(float64(len(lefts)))
		s.mu.Unlock()
	}
	if len(snap.rows) > 0 {
		rejected, err := s.replayRows(ctx, snap.rows)
		if err != nil {
			return err // an outage: what was written is written again, idempotently (row ids)
		}
		s.mu.Lock()
		s.buf.ackRows(snap.rows[len(snap.rows)-1].seq)
		s.m.replayed.Add(float64(len(snap.rows) - len(rejected)))
		for _, r := range rejected {
			// Rows are validated before they are buffered; one the server refuses anyway (a
			// number beyond jsonb's range…) is given up alone, and the rows around it, other
			// tenants' audit log among them, are written.
			s.buf.dropped++
			s.m.rejected.WithLabelValues(r.table()).Inc()
			s.lastErr = r.err.Error()
			s.cfg.log.Info("Gave up a buffered row the database refused", "table", r.table(),
				"namespace", r.namespace(), "error", r.err.Error())
		}
		s.mu.Unlock()
	}
	return nil
}

// rejectedRow is a buffered row the server refused for its own data, with the refusal.
type rejectedRow struct {
	row
	err error
}

// replayRows writes rows in one statement; when the server refuses the statement for the data
// of some row, it halves the rows until it has found the ones at fault, writes the others and
// returns the rejected (a bad row among n costs about 2·log2(n) statements). It returns an
// error only for an outage, which stops the replay with nothing given up.
func (s *Store) replayRows(ctx context.Context, rows []row) ([]rejectedRow, error) {
	err := s.exec(ctx, "replay_rows", func(ctx context.Context) error { return s.execInsertRows(ctx, rows) })
	switch {
	case err == nil:
		return nil, nil
	case classify(err) == kindConnection || ctx.Err() != nil:
		return nil, err
	case len(rows) == 1:
		return []rejectedRow{{row: rows[0], err: err}}, nil
	}
	mid := len(rows) / 2
	first, err := s.replayRows(ctx, rows[:mid])
	if err != nil {
		return nil, err
	}
	second, err := s.replayRows(ctx, rows[mid:])
	if err != nil {
		return nil, err
	}
	return append(first, second...), nil
}

func (r row) table() string {
	if r.transition != nil {
		return "slot_transitions"
	}
	return "bot_events"
}

func (r row) namespace() string {
	if r.transition != nil {
		return r.transition.Namespace
	}
	return r.event.Namespace
}

func (s *Store) execOp(ctx context.Context, op keyedOp) error {
	switch op.kind {
	case opUpsertBot:
		return s.execUpsertBot(ctx, op.bot)
	case opDeleteBot:
		return s.execDeleteBot(ctx, op.bot.UID)
	case opUpsertSlot:
		return s.execUpsertSlot(ctx, op.slot)
	case opDeleteSlot:
		return s.execDeleteSlot(ctx, op.slot.Namespace, op.slot.Name)
	}
	return errors.New("unknown buffered operation")
}
