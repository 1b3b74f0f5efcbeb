package postgres

import (
	"context"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"botpool.dev/botpool/store"
)

// RecordSlotAsk implements store.Store: one statement on the direct path (a container asks
// once a long-poll, and the bot API records at most one ask a second per slot), buffered and
// coalesced per slot during an outage, as heartbeats are: only the latest ask matters.
func (s *Store) RecordSlotAsk(ctx context.Context, ask store.SlotAsk) error {
	if err := ask.Validate(); err != nil {
		return err
	}
	ask.At = store.Timestamp(ask.At, s.cfg.clock.Now())
	ask.LeftAt = time.Time{} // an ask is the container asking: it has not left
	return s.write(ctx, "upsert_slot_asks",
		func(b *buffer) { b.ask(ask) },
		func(ctx context.Context) error { return s.execAsks(ctx, []store.SlotAsk{ask}) })
}

// upsertAsksSQL writes many slots' asks in one statement; an older ask never replaces a newer,
// and an ask clears the hang-up of the one it replaces (left_at).
const upsertAsksSQL = `
INSERT INTO slot_asks (slot_uid, namespace, name, token_sha256, at)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[])
ON CONFLICT (slot_uid) DO UPDATE SET
	namespace = EXCLUDED.namespace, name = EXCLUDED.name,
	token_sha256 = EXCLUDED.token_sha256, at = EXCLUDED.at, left_at = NULL
WHERE slot_asks.at <= EXCLUDED.at`

// execAsks runs upsertAsksSQL, rows in uid order (no deadlock between a write and a replay).
// Times go in the database's clock, as heartbeats do (see clock.go).
func (s *Store) execAsks(ctx context.Context, asks []store.SlotAsk) error {
	asks = slices.Clone(asks)
	slices.SortFunc(asks, func(a, b store.SlotAsk) int { return strings.Compare(string(a.SlotUID), string(b.SlotUID)) })
	uids := make([]string, len(asks))
	namespaces := make([]string, len(asks))
	names := make([]string, len(asks))
	hashes := make([]string, len(asks))
	ats := make([]time.Time, len(asks))
	for i, a := range asks {
		uids[i], namespaces[i], names[i], hashes[i], ats[i] = string(a.SlotUID), a.Namespace, a.Name, a.TokenSHA256, s.toDB(a.At)
	}
	_, err := s.pool.Exec(ctx, upsertAsksSQL, uids, namespaces, names, hashes, ats)
	return err
}

// RecordSlotLeft implements store.Store: one statement on the direct path (a container hangs
// up at most once a wait), buffered during an outage and applied after the asks buffered with
// it, so an ask that came after the hung-up wait still wins.
func (s *Store) RecordSlotLeft(ctx context.Context, left store.SlotLeft) error {
	left.At = store.Timestamp(left.At, s.cfg.clock.Now())
	left.Since = store.Timestamp(left.Since, left.At)
	if err := left.Validate(); err != nil {
		return err
	}
	return s.write(ctx, "record_slot_lefts",
		func(b *buffer) { b.left(left) },
		func(ctx context.Context) error { return s.execLefts(ctx, []store.SlotLeft{left}) })
}

// leftSQL marks many slots' latest asks left in one statement, each only when the hang-up is
// of that ask's container and wait (store.SlotAsk.Left); the latest hang-up wins (GREATEST
// ignores a NULL). A slot appears once per statement (the buffer keeps one left per slot).
const leftSQL = `
UPDATE slot_asks AS a SET left_at = GREATEST(a.left_at, l.at)
FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[]) AS l(slot_uid, token_sha256, since, at)
WHERE a.slot_uid = l.slot_uid AND a.token_sha256 = l.token_sha256 AND a.at <= l.since`

// execLefts runs leftSQL, rows in uid order, times in the database's clock.
func (s *Store) execLefts(ctx context.Context, lefts []store.SlotLeft) error {
	lefts = slices.Clone(lefts)
	slices.SortFunc(lefts, func(a, b store.SlotLeft) int { return strings.Compare(string(a.SlotUID), string(b.SlotUID)) })
	uids := make([]string, len(lefts))
	hashes := make([]string, len(lefts))
	sinces := make([]time.Time, len(lefts))
	ats := make([]time.Time, len(lefts))
	for i, l := range lefts {
		uids[i], hashes[i], sinces[i], ats[i] = string(l.SlotUID), l.TokenSHA256, s.toDB(l.Since), s.toDB(l.At)
	}
	_, err := s.pool.Exec(ctx, leftSQL, uids, hashes, sinces, ats)
	return err
}

// LastSlotAsks implements store.Store with one query, whatever the number of slots.
func (s *Store) LastSlotAsks(ctx context.Context, slots []types.UID) (map[types.UID]store.SlotAsk, error) {
	out := make(map[types.UID]store.SlotAsk, len(slots))
	if len(slots) == 0 {
		return out, nil
	}
	ids := make([]string, len(slots))
	for i, uid := range slots {
		ids[i] = string(uid)
	}
	err := s.read(ctx, "last_slot_asks", func(ctx context.Context) error {
		rows, err := s.pool.Query(ctx, `SELECT slot_uid, namespace, name, token_sha256, at, left_at FROM slot_asks WHERE slot_uid = ANY($1)`, ids)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var a store.SlotAsk
			var uid string
			var left *time.Time
			if err := rows.Scan(&uid, &a.Namespace, &a.Name, &a.TokenSHA256, &a.At, &left); err != nil {
				return err
			}
			a.SlotUID, a.At = types.UID(uid), s.fromDB(a.At)
			if left != nil {
				a.LeftAt = s.fromDB(*left)
			}
			out[a.SlotUID] = a
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
