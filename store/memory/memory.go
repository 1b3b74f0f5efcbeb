// Package memory is the in-memory store.Store: the embedded default when the manager has no
// database URL. It has the semantics of the Postgres store (the same UNIQUE rules, heartbeats
// that only move forward, a beat that recreates a vanished bot) without an outage: it is always
// available and never buffers. Nothing survives a restart of the manager, and the audit log and
// bot events keep only the most recent rows (WithHistoryLimit) so a long-running manager does
// not grow without bound.
package memory

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"botpool.dev/botpool/store"
)

// DefaultHistoryLimit is how many transitions, and separately how many bot events, the store
// keeps by default.
const DefaultHistoryLimit = 10000

var errClosed = errors.New("memory store closed")

// Store is a map-based store.Store guarded by one mutex.
type Store struct {
	clock        clock.PassiveClock
	historyLimit int
	since        time.Time

	mu          sync.RWMutex
	closed      bool
	bots        map[types.UID]*botEntry
	slots       map[slotKey]store.SlotRecord
	slotByApp   map[string]slotKey
	slotByBot   map[types.UID]slotKey
	asks        map[types.UID]store.SlotAsk // by slot uid
	transitions []store.Transition
	events      []store.BotEvent
	// finished queues the uids of bots upserted as finished, oldest first: beyond the history
	// limit the oldest finished bots are forgotten, so a manager that never deletes its Bots
	// (or never runs the retention job) does not grow without bound.
	finished []types.UID
}

// botEntry is one row of the Postgres bots table: a projection and the liveness beside it.
type botEntry struct {
	rec           store.BotRecord
	lastHeartbeat time.Time
}

type slotKey struct{ namespace, name string }

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock that stamps records given without a time.
func WithClock(c clock.PassiveClock) Option { return func(s *Store) { s.clock = c } }

// WithHistoryLimit bounds how many transitions and bot events are kept (oldest dropped first).
func WithHistoryLimit(n int) Option { return func(s *Store) { s.historyLimit = max(n, 1) } }

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{
		clock:        clock.RealClock{},
		historyLimit: DefaultHistoryLimit,
		bots:         map[types.UID]*botEntry{},
		slots:        map[slotKey]store.SlotRecord{},
		slotByApp:    map[string]slotKey{},
		slotByBot:    map[types.UID]slotKey{},
		asks:         map[types.UID]store.SlotAsk{},
	}
	for _, o := range opts {
		o(s)
	}
	s.since = s.clock.Now()
	return s
}

var (
	_ store.Store  = (*Store)(nil)
	_ store.Pruner = (*Store)(nil)
)

// lock takes the write lock, refusing calls after Close.
func (s *Store) lock() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	return nil
}

// RecordHeartbeat implements store.Store. Like GREATEST in SQL, an older beat arriving late
// never moves liveness backwards.
func (s *Store) RecordHeartbeat(_ context.Context, hb store.Heartbeat) error {
	if err := hb.Validate(); err != nil {
		return err
	}
	at := store.Timestamp(hb.At, s.clock.Now())
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	b, ok := s.bots[hb.BotUID]
	if !ok {
		b = &botEntry{rec: store.BotRecord{UID: hb.BotUID}}
		s.bots[hb.BotUID] = b
	}
	// A beat names its bot only where the projection has no name yet, as the SQL upsert does.
	if b.rec.Namespace == "" {
		b.rec.Namespace = hb.Namespace
	}
	if b.rec.Name == "" {
		b.rec.Name = hb.Name
	}
	if at.After(b.lastHeartbeat) {
		b.lastHeartbeat = at
	}
	return nil
}

// LastHeartbeats implements store.Store.
func (s *Store) LastHeartbeats(_ context.Context, uids []types.UID) (map[types.UID]time.Time, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errClosed
	}
	out := make(map[types.UID]time.Time, len(uids))
	for _, uid := range uids {
		if b, ok := s.bots[uid]; ok && !b.lastHeartbeat.IsZero() {
			out[uid] = b.lastHeartbeat
		}
	}
	return out, nil
}

// UpsertBot implements store.Store; the liveness beside the projection is kept.
func (s *Store) UpsertBot(_ context.Context, rec store.BotRecord) error {
	if err := rec.Validate(); err != nil {
		return err
	}
	rec.CreatedAt = truncate(rec.CreatedAt)
	if rec.FinishedAt != nil {
		t := truncate(*rec.FinishedAt)
		rec.FinishedAt = &t
	}
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	b, ok := s.bots[rec.UID]
	if !ok {
		b = &botEntry{}
		s.bots[rec.UID] = b
	}
	if rec.FinishedAt != nil && b.rec.FinishedAt == nil {
		s.finished = append(s.finished, rec.UID)
		if len(s.finished) > s.historyLimit {
			s.forgetFinished(s.finished[0])
			s.finished = s.finished[1:]
		}
	}
	b.rec = rec
	return nil
}

// forgetFinished drops a bot queued as finished, unless it was recreated since (a beat or an
// upsert without FinishedAt).
func (s *Store) forgetFinished(uid types.UID) {
	if b, ok := s.bots[uid]; ok && b.rec.FinishedAt != nil {
		delete(s.bots, uid)
	}
}

// Prune implements store.Pruner: history older than the cutoffs, bots finished before theirs,
// and bots known only from a late heartbeat (no projection) that has not beaten since.
func (s *Store) Prune(_ context.Context, c store.Cutoffs) (store.Pruned, error) {
	if err := s.lock(); err != nil {
		return store.Pruned{}, err
	}
	defer s.mu.Unlock()
	var p store.Pruned
	if !c.Events.IsZero() {
		s.events, p.Events = keepSince(s.events, c.Events, func(e store.BotEvent) time.Time { return e.At })
	}
	if !c.Transitions.IsZero() {
		s.transitions, p.Transitions = keepSince(s.transitions, c.Transitions, func(t store.Transition) time.Time { return t.At })
	}
	if !c.FinishedBots.IsZero() {
		for uid, b := range s.bots {
			finished := b.rec.FinishedAt != nil && b.rec.FinishedAt.Before(c.FinishedBots)
			orphan := b.rec.Phase == "" && b.rec.CreatedAt.IsZero() && b.lastHeartbeat.Before(c.FinishedBots)
			if finished || orphan {
				delete(s.bots, uid)
				p.Bots++
			}
		}
		s.finished = slices.DeleteFunc(s.finished, func(uid types.UID) bool { _, ok := s.bots[uid]; return !ok })
	}
	return p, nil
}

// keepSince keeps the rows at or after since, returning them and how many went.
func keepSince[T any](rows []T, since time.Time, at func(T) time.Time) ([]T, int) {
	kept := slices.DeleteFunc(rows, func(r T) bool { return at(r).Before(since) })
	return kept, len(rows) - len(kept)
}

// DeleteBot implements store.Store.
func (s *Store) DeleteBot(_ context.Context, uid types.UID) error {
	if uid == "" {
		return fmt.Errorf("%w: delete of a bot without a uid", store.ErrInvalid)
	}
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	delete(s.bots, uid) // its uid may stay queued in finished: forgetting it later is a no-op
	return nil
}

// UpsertSlot implements store.Store with the UNIQUE rules of the Postgres table: one slot per
// application uuid and per assigned bot, empty values exempt.
func (s *Store) UpsertSlot(_ context.Context, rec store.SlotRecord) error {
	if err := rec.Validate(); err != nil {
		return err
	}
	rec.UpdatedAt = store.Timestamp(rec.UpdatedAt, s.clock.Now())
	if rec.LastUsedAt != nil {
		t := truncate(*rec.LastUsedAt)
		rec.LastUsedAt = &t
	}
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	key := slotKey{rec.Namespace, rec.Name}
	if other, ok := s.slotByApp[rec.ApplicationUUID]; ok && rec.ApplicationUUID != "" && other != key {
		return fmt.Errorf("%w: application %s already belongs to slot %s/%s", store.ErrConflict, rec.ApplicationUUID, other.namespace, other.name)
	}
	if other, ok := s.slotByBot[rec.BotUID]; ok && rec.BotUID != "" && other != key {
		return fmt.Errorf("%w: bot %s already assigned to slot %s/%s", store.ErrConflict, rec.BotUID, other.namespace, other.name)
	}
	s.unindexSlot(key)
	s.slots[key] = rec
	if rec.ApplicationUUID != "" {
		s.slotByApp[rec.ApplicationUUID] = key
	}
	if rec.BotUID != "" {
		s.slotByBot[rec.BotUID] = key
	}
	return nil
}

// DeleteSlot implements store.Store.
func (s *Store) DeleteSlot(_ context.Context, namespace, name string) error {
	if namespace == "" || name == "" {
		return fmt.Errorf("%w: delete of a slot without a namespace and name", store.ErrInvalid)
	}
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	key := slotKey{namespace, name}
	s.unindexSlot(key)
	delete(s.slots, key)
	// A scan, not an index: slots are deleted rarely, and there are as many asks as slots.
	for uid, a := range s.asks {
		if a.Namespace == namespace && a.Name == name {
			delete(s.asks, uid)
		}
	}
	return nil
}

// RecordSlotAsk implements store.Store; like a heartbeat, an older ask never replaces a newer.
func (s *Store) RecordSlotAsk(_ context.Context, ask store.SlotAsk) error {
	if err := ask.Validate(); err != nil {
		return err
	}
	ask.At = store.Timestamp(ask.At, s.clock.Now())
	ask.LeftAt = time.Time{} // an ask is the container asking: it has not left
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if old, ok := s.asks[ask.SlotUID]; ok && old.At.After(ask.At) {
		return nil
	}
	s.asks[ask.SlotUID] = ask
	return nil
}

// RecordSlotLeft implements store.Store: it marks the latest ask left when the hang-up is of
// that ask's container and wait (store.SlotAsk.Left); the latest hang-up time wins.
func (s *Store) RecordSlotLeft(_ context.Context, left store.SlotLeft) error {
	left.At = store.Timestamp(left.At, s.clock.Now())
	left.Since = store.Timestamp(left.Since, left.At)
	if err := left.Validate(); err != nil {
		return err
	}
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if a, ok := s.asks[left.SlotUID]; ok && a.Left(left) && left.At.After(a.LeftAt) {
		a.LeftAt = left.At
		s.asks[left.SlotUID] = a
	}
	return nil
}

// LastSlotAsks implements store.Store.
func (s *Store) LastSlotAsks(_ context.Context, slots []types.UID) (map[types.UID]store.SlotAsk, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, errClosed
	}
	out := make(map[types.UID]store.SlotAsk, len(slots))
	for _, uid := range slots {
		if a, ok := s.asks[uid]; ok {
			out[uid] = a
		}
	}
	return out, nil
}

func (s *Store) unindexSlot(key slotKey) {
	old, ok := s.slots[key]
	if !ok {
		return
	}
	if s.slotByApp[old.ApplicationUUID] == key {
		delete(s.slotByApp, old.ApplicationUUID)
	}
	if s.slotByBot[old.BotUID] == key {
		delete(s.slotByBot, old.BotUID)
	}
}

// RecordTransition implements store.Store.
func (s *Store) RecordTransition(_ context.Context, t store.Transition) error {
	if err := t.Validate(); err != nil {
		return err
	}
	t.At = store.Timestamp(t.At, s.clock.Now())
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	s.transitions = appendBounded(s.transitions, s.historyLimit, t)
	return nil
}

// AppendBotEvents implements store.Store; a batch is all or nothing, as in one SQL statement.
func (s *Store) AppendBotEvents(_ context.Context, events []store.BotEvent) error {
	now := s.clock.Now()
	batch := make([]store.BotEvent, 0, len(events))
	for _, e := range events {
		if err := e.Validate(); err != nil {
			return err
		}
		e.At = store.Timestamp(e.At, now)
		e.Data = append([]byte(nil), e.Data...) // the caller may reuse its buffer
		batch = append(batch, e)
	}
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	s.events = appendBounded(s.events, s.historyLimit, batch...)
	return nil
}

// appendBounded appends and drops the oldest rows beyond limit, copying now and then so the
// dropped rows do not stay reachable through the backing array.
func appendBounded[T any](rows []T, limit int, more ...T) []T {
	rows = append(rows, more...)
	if over := len(rows) - limit; over > 0 {
		rows = rows[over:]
		if cap(rows) > 2*limit {
			rows = append(make([]T, 0, limit), rows...)
		}
	}
	return rows
}

// Status implements store.Store: memory is always available.
func (s *Store) Status() store.Status {
	return store.Status{Available: true, Since: s.since}
}

// Close implements store.Store; later calls fail.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

func truncate(t time.Time) time.Time { return t.Truncate(time.Microsecond) }
