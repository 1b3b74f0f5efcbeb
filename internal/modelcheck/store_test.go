package modelcheck

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers"
	"botpool.dev/botpool/store"
	"botpool.dev/botpool/store/memory"
)

// flakyStore is the operator's store. In an "embedded" epoch it is store/memory as the
// manager embeds it: always available, lost at a restart. In a "postgres" epoch it stands for
// the Postgres store: it survives restarts and can be down, and then behaves as the Postgres
// store does (store.Store's contract) — reads answer ErrUnavailable, writes are buffered
// (ErrBuffered) and replayed in order when it comes back.
type flakyStore struct {
	mu       sync.Mutex
	mem      *memory.Store
	down     bool
	buffered []func(*memory.Store) error
	// conflicts are the projection writes the UNIQUE rules refused: the store's second net
	// under invariant 1 caught something.
	conflicts []string
	// illegal are the audited slot transitions slotTransitions does not allow, taken as the
	// controller hands them over (an outage buffers them, it does not hide them).
	illegal []string
}

var _ interface {
	RecordHeartbeat(context.Context, store.Heartbeat) error
	LastHeartbeats(context.Context, []types.UID) (map[types.UID]time.Time, error)
	UpsertBot(context.Context, store.BotRecord) error
	UpsertSlot(context.Context, store.SlotRecord) error
	DeleteSlot(context.Context, string, string) error
	RecordTransition(context.Context, store.Transition) error
	AppendBotEvents(context.Context, []store.BotEvent) error
} = (*flakyStore)(nil)

// reset replaces the store with an empty one (an embedded store across a restart).
func (s *flakyStore) reset(mem *memory.Store) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mem, s.down, s.buffered = mem, false, nil
}

// setDown starts or ends an outage; the end replays the buffer.
func (s *flakyStore) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
	if down {
		return
	}
	for _, f := range s.buffered {
		s.note(f(s.mem))
	}
	s.buffered = nil
}

func (s *flakyStore) isDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down
}

// note keeps a conflict; callers hold s.mu.
func (s *flakyStore) note(err error) {
	if errors.Is(err, store.ErrConflict) {
		s.conflicts = append(s.conflicts, err.Error())
	}
}

func (s *flakyStore) write(f func(*memory.Store) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		s.buffered = append(s.buffered, f)
		return store.ErrBuffered
	}
	err := f(s.mem)
	s.note(err)
	return err
}

func (s *flakyStore) RecordHeartbeat(ctx context.Context, hb store.Heartbeat) error {
	return s.write(func(m *memory.Store) error { return m.RecordHeartbeat(ctx, hb) })
}

func (s *flakyStore) LastHeartbeats(ctx context.Context, bots []types.UID) (map[types.UID]time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return nil, fmt.Errorf("postgres: %w", store.ErrUnavailable)
	}
	return s.mem.LastHeartbeats(ctx, bots)
}

func (s *flakyStore) LastSlotAsks(ctx context.Context, slots []types.UID) (map[types.UID]store.SlotAsk, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return nil, fmt.Errorf("postgres: %w", store.ErrUnavailable)
	}
	return s.mem.LastSlotAsks(ctx, slots)
}

func (s *flakyStore) UpsertBot(ctx context.Context, rec store.BotRecord) error {
	return s.write(func(m *memory.Store) error { return m.UpsertBot(ctx, rec) })
}

func (s *flakyStore) UpsertSlot(ctx context.Context, rec store.SlotRecord) error {
	return s.write(func(m *memory.Store) error {
		if err := m.UpsertSlot(ctx, rec); err != nil {
			return fmt.Errorf("slot %s (bot %s, app %s): %w", rec.Name, rec.BotName, rec.ApplicationUUID, err)
		}
		return nil
	})
}

func (s *flakyStore) DeleteSlot(ctx context.Context, namespace, name string) error {
	return s.write(func(m *memory.Store) error { return m.DeleteSlot(ctx, namespace, name) })
}

func (s *flakyStore) RecordTransition(ctx context.Context, t store.Transition) error {
	if !controllers.SlotTransitionAllowed(v1.SlotPhase(t.From), v1.SlotPhase(t.To)) {
		s.mu.Lock()
		s.illegal = append(s.illegal, fmt.Sprintf("slot %s: %q → %q (%s)", t.Slot, t.From, t.To, t.Reason))
		s.mu.Unlock()
	}
	return s.write(func(m *memory.Store) error { return m.RecordTransition(ctx, t) })
}

func (s *flakyStore) RecordSlotAsk(ctx context.Context, a store.SlotAsk) error {
	return s.write(func(m *memory.Store) error { return m.RecordSlotAsk(ctx, a) })
}

func (s *flakyStore) RecordSlotLeft(ctx context.Context, l store.SlotLeft) error {
	return s.write(func(m *memory.Store) error { return m.RecordSlotLeft(ctx, l) })
}

func (s *flakyStore) AppendBotEvents(ctx context.Context, events []store.BotEvent) error {
	return s.write(func(m *memory.Store) error { return m.AppendBotEvents(ctx, events) })
}
