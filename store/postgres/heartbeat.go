package postgres

import (
	"context"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"botpool.dev/botpool/store"
)

// beatBatch is a group commit of heartbeats: every caller whose beat is in it waits on done and
// reads err, so one statement acknowledges them all.
type beatBatch struct {
	beats map[types.UID]store.Heartbeat // coalesced: one row per bot, as ON CONFLICT requires
	first time.Time                     // when the first beat arrived; the flush deadline counts from it
	done  chan struct{}
	err   error
}

func (b *beatBatch) beatOf(uid types.UID) (store.Heartbeat, bool) {
	if b == nil {
		return store.Heartbeat{}, false
	}
	hb, ok := b.beats[uid]
	return hb, ok
}

// RecordHeartbeat implements store.Store. While Postgres is up the beat joins the current batch
// and the call returns when that batch is committed; while it is down the beat is coalesced into
// the outage buffer and the call returns ErrBuffered at once.
func (s *Store) RecordHeartbeat(ctx context.Context, hb store.Heartbeat) error {
	if err := hb.Validate(); err != nil {
		return err
	}
	hb.At = store.Timestamp(hb.At, s.cfg.clock.Now())

	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return errClosed
	case !s.available:
		s.buf.beat(hb)
		s.mu.Unlock()
		return store.ErrBuffered
	}
	// Beats join the newest batch; a full batch is closed to newcomers, so no statement carries
	// more than batchSize rows however fast beats arrive.
	var b *beatBatch
	if n := len(s.batches); n > 0 {
		b = s.batches[n-1]
	}
	if _, again := b.beatOf(hb.BotUID); b == nil || (len(b.beats) >= s.cfg.batchSize && !again) {
		b = &beatBatch{beats: map[types.UID]store.Heartbeat{}, first: s.cfg.clock.Now(), done: make(chan struct{})}
		s.batches = append(s.batches, b)
	}
	if old, ok := b.beats[hb.BotUID]; ok {
		hb = mergeBeat(old, hb)
	}
	b.beats[hb.BotUID] = hb
	// Wake the flusher for a new batch (to start its timer) and for a full one.
	if len(b.beats) == 1 || len(b.beats) >= s.cfg.batchSize {
		select {
		case s.flushKick <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()

	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
		return ctx.Err() // the beat stays in its batch and is written anyway
	}
}

// flushLoop writes heartbeat batches, one statement at a time: beats arriving during a write
// gather in the next batch, so the batch size grows with the load (group commit).
func (s *Store) flushLoop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.flushKick:
		case <-s.done:
			for s.flushNow(true) {
			}
			return
		}
		for s.flushNow(false) {
		}
	}
}

// flushNow writes the oldest batch if it is full or due (or final), else waits until it is due
// or kicked. It reports whether to look again.
func (s *Store) flushNow(final bool) bool {
	s.mu.Lock()
	if len(s.batches) == 0 {
		s.mu.Unlock()
		return false
	}
	b := s.batches[0]
	wait := s.cfg.flushInterval - s.cfg.clock.Since(b.first)
	if !final && wait > 0 && len(b.beats) < s.cfg.batchSize {
		s.mu.Unlock()
		t := s.cfg.clock.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C():
		case <-s.flushKick:
		case <-s.done: // flushLoop's last act writes what is left
			return false
		}
		return true
	}
	s.batches[0] = nil
	s.batches = s.batches[1:]
	available := s.available
	s.mu.Unlock()

	b.err = s.flushBatch(b, available)
	close(b.done)
	return true
}

// flushBatch writes one batch, or buffers it during an outage.
func (s *Store) flushBatch(b *beatBatch, available bool) error {
	beats := make([]store.Heartbeat, 0, len(b.beats))
	for _, hb := range b.beats {
		beats = append(beats, hb)
	}
	if available {
		start := time.Now()
		err := s.exec(context.Background(), "heartbeat_batch", func(ctx context.Context) error {
			return s.execBeats(ctx, beats)
		})
		if err == nil {
			s.m.batchSize.Observe(float64(len(beats)))
			s.m.flushDuration.Observe(time.Since(start).Seconds())
			return nil
		}
		// Any failed heartbeat write means liveness is unknown, whatever the error: a beat
		// refused and only logged would leave older beats in the database for the controllers
		// to read, and fail live bots. So the beats are buffered and the store is unavailable
		// (its reads answer "unknown") until the recovery loop has written them.
		if kind := classify(err); kind != kindConnection {
			s.cfg.log.Error(err, "The database refused a heartbeat batch; liveness is unknown until it is written", "kind", kind.String(), "beats", len(beats))
		}
		s.mu.Lock()
		s.markUnavailableLocked(err)
		s.mu.Unlock()
	}
	s.mu.Lock()
	for _, hb := range beats {
		s.buf.beat(hb)
	}
	s.mu.Unlock()
	return store.ErrBuffered
}

// upsertBeatsSQL writes many bots' heartbeats in one statement. A beat for an unknown bot
// inserts a minimal row; liveness only moves forward (GREATEST ignores NULL); a beat names the
// bot only where the row has no name yet.
const upsertBeatsSQL = `
INSERT INTO bots (uid, namespace, name, last_heartbeat)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[])
ON CONFLICT (uid) DO UPDATE SET
	last_heartbeat = GREATEST(bots.last_heartbeat, EXCLUDED.last_heartbeat),
	namespace = CASE WHEN bots.namespace = '' THEN EXCLUDED.namespace ELSE bots.namespace END,
	name = CASE WHEN bots.name = '' THEN EXCLUDED.name ELSE bots.name END`

// execBeats runs upsertBeatsSQL. Rows go in uid order, so two statements upserting the same bots
// (a batch and a replay) lock them in the same order and cannot deadlock.
func (s *Store) execBeats(ctx context.Context, beats []store.Heartbeat) error {
	slices.SortFunc(beats, func(a, b store.Heartbeat) int { return strings.Compare(string(a.BotUID), string(b.BotUID)) })
	uids := make([]string, len(beats))
	namespaces := make([]string, len(beats))
	names := make([]string, len(beats))
	ats := make([]time.Time, len(beats))
	for i, hb := range beats {
		uids[i], namespaces[i], names[i], ats[i] = string(hb.BotUID), hb.Namespace, hb.Name, s.toDB(hb.At)
	}
	_, err := s.pool.Exec(ctx, upsertBeatsSQL, uids, namespaces, names, ats)
	return err
}

// LastHeartbeats implements store.Store with one query, whatever the number of bots.
func (s *Store) LastHeartbeats(ctx context.Context, uids []types.UID) (map[types.UID]time.Time, error) {
	out := make(map[types.UID]time.Time, len(uids))
	if len(uids) == 0 {
		return out, nil
	}
	ids := make([]string, len(uids))
	for i, uid := range uids {
		ids[i] = string(uid)
	}
	err := s.read(ctx, "last_heartbeats", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, `SELECT uid, last_heartbeat FROM bots WHERE uid = ANY($1) AND last_heartbeat IS NOT NULL`, ids)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var uid string
			var at time.Time
			if err := rows.Scan(&uid, &at); err != nil {
				return err
			}
			out[types.UID(uid)] = s.fromDB(at)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
