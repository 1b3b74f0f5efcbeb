package postgres

import (
	"context"
	"time"
)

// One clock for liveness. A heartbeat is received by whichever replica the bot's request
// reached and judged by the leader; stamped with the receiver's clock and judged by the
// leader's, a skew of minutes would fail live bots or keep dead ones. So beats are stored in
// the database's time: a replica adds its offset (database minus local) when it writes a beat
// and subtracts its own when it reads one, and every replica's controllers keep judging in
// their own (injected) clock.
//
// The offset is measured once, when the store opens, not on every statement: a replica then
// writes and reads with the same offset, so its own beats come back exactly as they went in
// (whatever happens to the clocks meanwhile, a fake clock stepped in a test included), and only
// beats from replicas with other clocks are translated. Real clocks drift by microseconds a
// day; a replica whose clock is stepped after it started (NTP correcting a bad start) keeps
// its old offset until it restarts. botpool_store_clock_offset_seconds shows each replica's
// offset, so a replica that disagrees with the others stands out.

// syncClock measures the offset: the database's clock_timestamp() against the middle of the
// round trip on the local clock, rounded to the microsecond so times stored and read back
// keep the precision of a timestamptz.
func (s *Store) syncClock(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.writeTimeout)
	defer cancel()
	before := s.cfg.clock.Now()
	var db time.Time
	if err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&db); err != nil {
		return err
	}
	after := s.cfg.clock.Now()
	local := before.Add(after.Sub(before) / 2)
	offset := db.Sub(local).Round(time.Microsecond)
	s.offset.Store(int64(offset))
	if offset.Abs() > time.Second {
		s.cfg.log.Info("This replica's clock disagrees with the database's; heartbeats are kept in the database's time", "offset", offset.String())
	}
	return nil
}

// clockOffset is the database's clock minus this replica's.
func (s *Store) clockOffset() time.Duration { return time.Duration(s.offset.Load()) }

// toDB turns a local time into the database's.
func (s *Store) toDB(t time.Time) time.Time { return t.Add(s.clockOffset()) }

// fromDB turns a time of the database's clock into the local one.
func (s *Store) fromDB(t time.Time) time.Time { return t.Add(-s.clockOffset()) }
