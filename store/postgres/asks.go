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
	return s.write(ctx, "upsert_slot_asks",
		func(b *buffer) { b.ask(ask) },
		func(ctx context.Context) error { return s.execAsks(ctx, []store.SlotAsk{ask}) })
}

// upsertAsksSQL writes many slots' asks in one statement; an older ask never replaces a newer.
const upsertAsksSQL = `
INSERT INTO slot_asks (slot_uid, namespace, name, token_sha256, at)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[])
ON CONFLICT (slot_uid) DO UPDATE SET
	namespace = EXCLUDED.namespace, name = EXCLUDED.name,
	token_sha256 = EXCLUDED.token_sha256, at = EXCLUDED.at
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
		rows, err := s.pool.Query(ctx, `SELECT slot_uid, namespace, name, token_sha256, at FROM slot_asks WHERE slot_uid = ANY($1)`, ids)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var a store.SlotAsk
			var uid string
			if err := rows.Scan(&uid, &a.Namespace, &a.Name, &a.TokenSHA256, &a.At); err != nil {
				return err
			}
			a.SlotUID, a.At = types.UID(uid), s.fromDB(a.At)
			out[a.SlotUID] = a
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
