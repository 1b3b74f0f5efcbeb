package controllers

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/store"
)

// lossyStore loses chosen projection writes, as a crash or a cancelled request between a
// status patch and the store would.
type lossyStore struct {
	store.Store
	mu   sync.Mutex
	lose map[string]bool // "bot/<phase>", "slot/<phase>": lose the next such write
}

func (l *lossyStore) lost(kind, phase string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := kind + "/" + phase
	if l.lose[key] {
		delete(l.lose, key)
		return true
	}
	return false
}

func (l *lossyStore) pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lose)
}

func (l *lossyStore) UpsertBot(ctx context.Context, rec store.BotRecord) error {
	if l.lost("bot", rec.Phase) {
		return context.Canceled
	}
	return l.Store.UpsertBot(ctx, rec)
}

func (l *lossyStore) UpsertSlot(ctx context.Context, rec store.SlotRecord) error {
	if l.lost("slot", rec.Phase) {
		return context.Canceled
	}
	return l.Store.UpsertSlot(ctx, rec)
}

// TestLostProjectionIsWrittenAgain: the projection of a finished bot and of its released slot
// is lost on the way to the store; the next passes write it, although they change no status.
// (Found by the soak test: a manager stopped between a status patch and the store left a
// bot projected InCall for good.)
func TestLostProjectionIsWrittenAgain(t *testing.T) {
	lossy := &lossyStore{Store: liveStore, lose: map[string]bool{}}
	managerStore = lossy
	restartManager(t)
	t.Cleanup(func() {
		managerStore = liveStore
		restartManager(t)
	})
	sc := newScenario(t, "projection", sim.Config{})
	bot, slot := sc.running("projected")
	lossy.mu.Lock()
	lossy.lose["bot/"+string(v1.BotDone)], lossy.lose["slot/"+string(v1.SlotIdle)] = true, true
	lossy.mu.Unlock()
	finish(t, bot)
	sc.slot("released", func(s *v1.BotPoolSlot) bool { return s.Status.Phase == v1.SlotIdle && s.Spec.BotRef == nil })
	ctx := context.Background()
	kubetest.Eventually(t, 10*time.Second, func() error {
		step(time.Second)
		if n := lossy.pending(); n > 0 {
			return fmt.Errorf("%d writes still to lose", n)
		}
		b, ok, err := liveStore.Bot(ctx, bot.UID)
		if err != nil {
			return err
		}
		if !ok || b.Phase != string(v1.BotDone) {
			return fmt.Errorf("bot projected %+v (found %v), want Done", b, ok)
		}
		s, ok, err := liveStore.Slot(ctx, slot.Namespace, slot.Name)
		if err != nil {
			return err
		}
		if !ok || s.Phase != string(v1.SlotIdle) || s.BotUID != "" {
			return fmt.Errorf("slot projected %+v (found %v), want Idle and free", s, ok)
		}
		return nil
	})
}
