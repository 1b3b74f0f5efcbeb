package memory

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"botpool.dev/botpool/store"
)

// The readers below are for tests and debugging tools; controllers use store.Store. They return
// copies, in the order the Postgres store's queries use.

// Bot returns a bot's projection and whether it exists.
func (s *Store) Bot(_ context.Context, uid types.UID) (store.BotRecord, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	b, ok := s.bots[uid]
	if !ok {
		return store.BotRecord{}, false, nil
	}
	return b.rec, true, nil
}

// Slot returns a slot's projection and whether it exists.
func (s *Store) Slot(_ context.Context, namespace, name string) (store.SlotRecord, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	rec, ok := s.slots[slotKey{namespace, name}]
	return rec, ok, nil
}

// Transitions returns the transitions of one slot, oldest first.
func (s *Store) Transitions(_ context.Context, namespace, slot string) ([]store.Transition, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []store.Transition
	for _, t := range s.transitions {
		if t.Namespace == namespace && t.Slot == slot {
			out = append(out, t)
		}
	}
	slices.SortStableFunc(out, func(a, b store.Transition) int { return a.At.Compare(b.At) })
	return out, nil
}

// BotEvents returns the events of one bot, oldest first.
func (s *Store) BotEvents(_ context.Context, uid types.UID) ([]store.BotEvent, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []store.BotEvent
	for _, e := range s.events {
		if e.BotUID == uid {
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b store.BotEvent) int { return a.At.Compare(b.At) })
	return out, nil
}
