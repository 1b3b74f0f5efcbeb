package postgres

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"k8s.io/apimachinery/pkg/types"

	"botpool.dev/botpool/store"
)

// The projection writes and appends of store.Store. Each is one statement on the direct path;
// the same statements replay the outage buffer.

// UpsertBot implements store.Store; the bot's liveness (last_heartbeat) is left alone.
func (s *Store) UpsertBot(ctx context.Context, rec store.BotRecord) error {
	if err := rec.Validate(); err != nil {
		return err
	}
	rec = normalizeBot(rec)
	return s.write(ctx, "upsert_bot",
		func(b *buffer) { b.upsertBot(rec) },
		func(ctx context.Context) error { return s.execUpsertBot(ctx, rec) })
}

// DeleteBot implements store.Store.
func (s *Store) DeleteBot(ctx context.Context, uid types.UID) error {
	if uid == "" {
		return fmt.Errorf("%w: delete of a bot without a uid", store.ErrInvalid)
	}
	return s.write(ctx, "delete_bot",
		func(b *buffer) { b.deleteBot(uid) },
		func(ctx context.Context) error { return s.execDeleteBot(ctx, uid) })
}

// UpsertSlot implements store.Store.
func (s *Store) UpsertSlot(ctx context.Context, rec store.SlotRecord) error {
	if err := rec.Validate(); err != nil {
		return err
	}
	rec.UpdatedAt = store.Timestamp(rec.UpdatedAt, s.cfg.clock.Now())
	if rec.LastUsedAt != nil {
		t := rec.LastUsedAt.Truncate(time.Microsecond)
		rec.LastUsedAt = &t
	}
	return s.write(ctx, "upsert_slot",
		func(b *buffer) { b.upsertSlot(rec) },
		func(ctx context.Context) error { return s.execUpsertSlot(ctx, rec) })
}

// DeleteSlot implements store.Store.
func (s *Store) DeleteSlot(ctx context.Context, namespace, name string) error {
	if namespace == "" || name == "" {
		return fmt.Errorf("%w: delete of a slot without a namespace and name", store.ErrInvalid)
	}
	return s.write(ctx, "delete_slot",
		func(b *buffer) { b.deleteSlot(namespace, name) },
		func(ctx context.Context) error { return s.execDeleteSlot(ctx, namespace, name) })
}

// RecordTransition implements store.Store.
func (s *Store) RecordTransition(ctx context.Context, t store.Transition) error {
	if err := t.Validate(); err != nil {
		return err
	}
	t.At = store.Timestamp(t.At, s.cfg.clock.Now())
	rows := []row{{id: newID(), transition: &t}}
	return s.write(ctx, "insert_transitions",
		func(b *buffer) { s.appendRows(b, rows) },
		func(ctx context.Context) error { return s.execInsertRows(ctx, rows) })
}

// AppendBotEvents implements store.Store; the events of one call are one statement, all or
// nothing. During an outage they queue as separate rows.
func (s *Store) AppendBotEvents(ctx context.Context, events []store.BotEvent) error {
	if len(events) == 0 {
		return nil
	}
	now := s.cfg.clock.Now()
	rows := make([]row, 0, len(events))
	for _, e := range events {
		if err := e.Validate(); err != nil {
			return err
		}
		e.At = store.Timestamp(e.At, now)
		e.Data = append([]byte(nil), e.Data...) // buffered beyond the call: the caller may reuse it
		rows = append(rows, row{id: newID(), event: &e})
	}
	return s.write(ctx, "insert_events",
		func(b *buffer) { s.appendRows(b, rows) },
		func(ctx context.Context) error { return s.execInsertRows(ctx, rows) })
}

// appendRows queues rows in the outage buffer and logs what the bound dropped.
func (s *Store) appendRows(b *buffer, rows []row) {
	if n := b.appendRows(rows...); n > 0 {
		s.cfg.log.Info("Outage buffer full, dropped the oldest transitions and events", "dropped", n, "droppedTotal", b.dropped)
	}
}

func normalizeBot(rec store.BotRecord) store.BotRecord {
	rec.CreatedAt = rec.CreatedAt.Truncate(time.Microsecond)
	if rec.FinishedAt != nil {
		t := rec.FinishedAt.Truncate(time.Microsecond)
		rec.FinishedAt = &t
	}
	return rec
}

// newID makes the id of an append-only row: a random (version 4) UUID.
func newID() [16]byte {
	var id [16]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails
	id[6] = id[6]&0x0f | 0x40
	id[8] = id[8]&0x3f | 0x80
	return id
}

// nullTime maps the zero time to SQL NULL.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

const upsertBotSQL = `
INSERT INTO bots (uid, namespace, name, platform, phase, pool, slot_name, application_uuid, created_at, finished_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, now())
ON CONFLICT (uid) DO UPDATE SET
	namespace = EXCLUDED.namespace, name = EXCLUDED.name, platform = EXCLUDED.platform,
	phase = EXCLUDED.phase, pool = EXCLUDED.pool, slot_name = EXCLUDED.slot_name,
	application_uuid = EXCLUDED.application_uuid, created_at = EXCLUDED.created_at,
	finished_at = EXCLUDED.finished_at, updated_at = now()`

func (s *Store) execUpsertBot(ctx context.Context, r store.BotRecord) error {
	_, err := s.pool.Exec(ctx, upsertBotSQL, string(r.UID), r.Namespace, r.Name, r.Platform, r.Phase,
		r.Pool, r.SlotName, r.ApplicationUUID, nullTime(r.CreatedAt), r.FinishedAt)
	return err
}

func (s *Store) execDeleteBot(ctx context.Context, uid types.UID) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM bots WHERE uid = $1`, string(uid))
	return err
}

// Empty application uuids and bots are stored as NULL, which the UNIQUE constraints ignore.
const upsertSlotSQL = `
INSERT INTO bot_pool_slots (namespace, name, pool, phase, application_uuid, bot_uid, bot_name, last_used_at, updated_at)
VALUES ($1, $2, $3, $4, NULLIF($5, ''), NULLIF($6, ''), $7, $8, $9)
ON CONFLICT (namespace, name) DO UPDATE SET
	pool = EXCLUDED.pool, phase = EXCLUDED.phase, application_uuid = EXCLUDED.application_uuid,
	bot_uid = EXCLUDED.bot_uid, bot_name = EXCLUDED.bot_name, last_used_at = EXCLUDED.last_used_at,
	updated_at = EXCLUDED.updated_at`

func (s *Store) execUpsertSlot(ctx context.Context, r store.SlotRecord) error {
	_, err := s.pool.Exec(ctx, upsertSlotSQL, r.Namespace, r.Name, r.Pool, r.Phase, r.ApplicationUUID,
		string(r.BotUID), r.BotName, r.LastUsedAt, r.UpdatedAt)
	return err
}

// deleteSlotSQL removes a slot's projection and its containers' asks in one statement.
const deleteSlotSQL = `
WITH asks AS (DELETE FROM slot_asks WHERE namespace = $1 AND name = $2)
DELETE FROM bot_pool_slots WHERE namespace = $1 AND name = $2`

func (s *Store) execDeleteSlot(ctx context.Context, namespace, name string) error {
	_, err := s.pool.Exec(ctx, deleteSlotSQL, namespace, name)
	return err
}

// The ids make replays idempotent: a row whose commit was not acknowledged is not written twice.
const insertTransitionsSQL = `
INSERT INTO slot_transitions (id, namespace, slot, pool, from_phase, to_phase, bot_uid, bot_name,
	application_uuid, reason, correlation_id, at)
SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
	$7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::timestamptz[])
ON CONFLICT (id) DO NOTHING`

const insertEventsSQL = `
INSERT INTO bot_events (id, bot_uid, namespace, name, type, data, at)
SELECT id, bot_uid, namespace, name, type, data::jsonb, at
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[])
	AS u(id, bot_uid, namespace, name, type, data, at)
ON CONFLICT (id) DO NOTHING`

// execInsertRows writes transitions and events, one statement per table, in one transaction
// when both are present.
func (s *Store) execInsertRows(ctx context.Context, rows []row) error {
	var tr transitionColumns
	var ev eventColumns
	for _, r := range rows {
		if r.transition != nil {
			tr.add(r.id, r.transition)
		} else {
			ev.add(r.id, r.event)
		}
	}
	insertTransitions := func(ctx context.Context, q querier) error {
		if len(tr.id) == 0 {
			return nil
		}
		_, err := q.Exec(ctx, insertTransitionsSQL, tr.id, tr.namespace, tr.slot, tr.pool, tr.from, tr.to,
			tr.botUID, tr.botName, tr.app, tr.reason, tr.correlation, tr.at)
		return err
	}
	insertEvents := func(ctx context.Context, q querier) error {
		if len(ev.id) == 0 {
			return nil
		}
		_, err := q.Exec(ctx, insertEventsSQL, ev.id, ev.botUID, ev.namespace, ev.name, ev.typ, ev.data, ev.at)
		return err
	}
	if len(tr.id) == 0 || len(ev.id) == 0 { // one statement: no transaction needed
		return errors.Join(insertTransitions(ctx, s.pool), insertEvents(ctx, s.pool))
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := insertTransitions(ctx, tx); err != nil {
			return err
		}
		return insertEvents(ctx, tx)
	})
}

// querier is what a pool and a transaction share.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// transitionColumns and eventColumns lay rows out as the arrays unnest takes.
type transitionColumns struct {
	id                                                                         []pgtype.UUID
	namespace, slot, pool, from, to, botUID, botName, app, reason, correlation []string
	at                                                                         []time.Time
}

func (c *transitionColumns) add(id [16]byte, t *store.Transition) {
	c.id = append(c.id, pgtype.UUID{Bytes: id, Valid: true})
	c.namespace = append(c.namespace, t.Namespace)
	c.slot = append(c.slot, t.Slot)
	c.pool = append(c.pool, t.Pool)
	c.from = append(c.from, t.From)
	c.to = append(c.to, t.To)
	c.botUID = append(c.botUID, string(t.BotUID))
	c.botName = append(c.botName, t.BotName)
	c.app = append(c.app, t.ApplicationUUID)
	c.reason = append(c.reason, t.Reason)
	c.correlation = append(c.correlation, t.CorrelationID)
	c.at = append(c.at, t.At)
}

type eventColumns struct {
	id                           []pgtype.UUID
	botUID, namespace, name, typ []string
	data                         []*string // NULL for an event without data
	at                           []time.Time
}

func (c *eventColumns) add(id [16]byte, e *store.BotEvent) {
	c.id = append(c.id, pgtype.UUID{Bytes: id, Valid: true})
	c.botUID = append(c.botUID, string(e.BotUID))
	c.namespace = append(c.namespace, e.Namespace)
	c.name = append(c.name, e.Name)
	c.typ = append(c.typ, e.Type)
	var data *string
	if len(e.Data) > 0 {
		d := string(e.Data)
		data = &d
	}
	c.data = append(c.data, data)
	c.at = append(c.at, e.At)
}
