package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"k8s.io/apimachinery/pkg/types"

	"botpool.dev/botpool/store"
)

// The readers below are for tests and debugging tools (and show the queries dashboards make);
// controllers use store.Store. Like every read they return ErrUnavailable during an outage.

// Bot returns a bot's projection and whether it exists.
func (s *Store) Bot(ctx context.Context, uid types.UID) (store.BotRecord, bool, error) {
	var r store.BotRecord
	var created *time.Time
	found := false
	err := s.read(ctx, "read_bot", func(ctx context.Context) error {
		err := s.pool.QueryRow(ctx, `
			SELECT uid, namespace, name, platform, phase, pool, slot_name, application_uuid, created_at, finished_at
			FROM bots WHERE uid = $1`, string(uid)).
			Scan(&r.UID, &r.Namespace, &r.Name, &r.Platform, &r.Phase, &r.Pool, &r.SlotName, &r.ApplicationUUID, &created, &r.FinishedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	if err != nil || !found {
		return store.BotRecord{}, false, err
	}
	if created != nil {
		r.CreatedAt = *created
	}
	return r, true, nil
}

// Slot returns a slot's projection and whether it exists.
func (s *Store) Slot(ctx context.Context, namespace, name string) (store.SlotRecord, bool, error) {
	var r store.SlotRecord
	found := false
	err := s.read(ctx, "read_slot", func(ctx context.Context) error {
		err := s.pool.QueryRow(ctx, `
			SELECT namespace, name, pool, phase, coalesce(application_uuid, ''), coalesce(bot_uid, ''), bot_name, last_used_at, updated_at
			FROM bot_pool_slots WHERE namespace = $1 AND name = $2`, namespace, name).
			Scan(&r.Namespace, &r.Name, &r.Pool, &r.Phase, &r.ApplicationUUID, &r.BotUID, &r.BotName, &r.LastUsedAt, &r.UpdatedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	if err != nil || !found {
		return store.SlotRecord{}, false, err
	}
	return r, true, nil
}

// Transitions returns the transitions of one slot, oldest first.
func (s *Store) Transitions(ctx context.Context, namespace, slot string) ([]store.Transition, error) {
	var out []store.Transition
	err := s.read(ctx, "read_transitions", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, `
			SELECT namespace, slot, pool, from_phase, to_phase, bot_uid, bot_name, application_uuid, reason, correlation_id, at
			FROM slot_transitions WHERE namespace = $1 AND slot = $2 ORDER BY at, seq`, namespace, slot)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Transition, error) {
			var t store.Transition
			err := row.Scan(&t.Namespace, &t.Slot, &t.Pool, &t.From, &t.To, &t.BotUID, &t.BotName,
				&t.ApplicationUUID, &t.Reason, &t.CorrelationID, &t.At)
			return t, err
		})
		return err
	})
	return out, err
}

// BotEvents returns the events of one bot, oldest first. Data comes back as jsonb prints it.
func (s *Store) BotEvents(ctx context.Context, uid types.UID) ([]store.BotEvent, error) {
	var out []store.BotEvent
	err := s.read(ctx, "read_events", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, `
			SELECT bot_uid, namespace, name, type, data::text, at
			FROM bot_events WHERE bot_uid = $1 ORDER BY at, seq`, string(uid))
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.BotEvent, error) {
			var e store.BotEvent
			var data *string
			err := row.Scan(&e.BotUID, &e.Namespace, &e.Name, &e.Type, &data, &e.At)
			if data != nil {
				e.Data = []byte(*data)
			}
			return e, err
		})
		return err
	})
	return out, err
}
