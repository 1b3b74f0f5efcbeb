package postgres

import (
	"context"
	"time"

	"botpool.dev/botpool/store"
)

// DefaultPruneBatch is how many rows one retention statement deletes.
const DefaultPruneBatch = 1000

// WithPruneBatch sets how many rows one retention statement deletes: small batches keep every
// statement short, so pruning never holds long locks against the writers.
func WithPruneBatch(n int) Option { return func(o *config) { o.pruneBatch = max(n, 1) } }

// The deletes pick a batch by the time index, then delete by key: each statement is short and
// locks only the rows it deletes.
const (
	pruneEventsSQL      = `DELETE FROM bot_events WHERE id IN (SELECT id FROM bot_events WHERE at < $1 LIMIT $2)`
	pruneTransitionsSQL = `DELETE FROM slot_transitions WHERE id IN (SELECT id FROM slot_transitions WHERE at < $1 LIMIT $2)`
	pruneBotsSQL        = `DELETE FROM bots WHERE uid IN (SELECT uid FROM bots WHERE finished_at < $1 LIMIT $2)`
	pruneWebhooksSQL    = `DELETE FROM webhook_outbox WHERE id IN (SELECT id FROM webhook_outbox WHERE finished_at < $1 LIMIT $2)`
)

// Prune implements store.Pruner in batches of WithPruneBatch rows, one statement each, until a
// batch comes back short. Times are compared as the writers stored them (their clocks), the
// outbox's in the database's clock. Webhook messages delivered or given up go with the events:
// they are the bot's history too; pending ones stay whatever their age.
func (s *Store) Prune(ctx context.Context, c store.Cutoffs) (store.Pruned, error) {
	var p store.Pruned
	var webhooks time.Time
	if !c.Events.IsZero() {
		webhooks = s.toDB(c.Events)
	}
	for _, t := range []struct {
		op, sql, table string
		before         time.Time
		count          *int
	}{
		{"prune_events", pruneEventsSQL, "bot_events", c.Events, &p.Events},
		{"prune_transitions", pruneTransitionsSQL, "slot_transitions", c.Transitions, &p.Transitions},
		{"prune_bots", pruneBotsSQL, "bots", c.FinishedBots, &p.Bots},
		{"prune_webhooks", pruneWebhooksSQL, "webhook_outbox", webhooks, &p.Webhooks},
	} {
		if t.before.IsZero() {
			continue
		}
		for {
			var n int64
			err := s.read(ctx, t.op, func(ctx context.Context) error {
				tag, err := s.pool.Exec(ctx, t.sql, t.before, s.cfg.pruneBatch)
				n = tag.RowsAffected()
				return err
			})
			if err != nil {
				return p, err
			}
			*t.count += int(n)
			s.m.pruned.WithLabelValues(t.table).Add(float64(n))
			if n < int64(s.cfg.pruneBatch) {
				break
			}
			if err := ctx.Err(); err != nil {
				return p, err
			}
		}
	}
	return p, nil
}
