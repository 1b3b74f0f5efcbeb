package memory_test

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"botpool.dev/botpool/store"
	"botpool.dev/botpool/store/memory"
	"botpool.dev/botpool/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s := memory.New()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestHistoryIsBounded(t *testing.T) {
	s := memory.New(memory.WithHistoryLimit(3))
	ctx := t.Context()
	for i := range 10 {
		tr := storetest.Transition("ns", "s1", "Idle", "Busy", storetest.T0.Add(time.Duration(i)*time.Second))
		if err := s.RecordTransition(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Transitions(ctx, "ns", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || !got[0].At.Equal(storetest.T0.Add(7*time.Second)) {
		t.Fatalf("kept %d transitions from %v, want the 3 newest", len(got), got[0].At)
	}
}

func TestClosedStoreRefusesWrites(t *testing.T) {
	s := memory.New()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordHeartbeat(t.Context(), storetest.Beat("a", storetest.T0)); err == nil {
		t.Fatal("a closed store accepted a heartbeat")
	}
}

// TestFinishedBotsAreBounded: a manager that never deletes its Bots, nor prunes, keeps at most
// the history limit of finished bots; running ones are never forgotten.
func TestFinishedBotsAreBounded(t *testing.T) {
	s := memory.New(memory.WithHistoryLimit(3))
	ctx := t.Context()
	if err := s.UpsertBot(ctx, storetest.Bot("running").Phase("InCall").Record()); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		uid := types.UID(fmt.Sprintf("done-%d", i))
		if err := s.UpsertBot(ctx, storetest.Bot(uid).Phase("InCall").Record()); err != nil {
			t.Fatal(err)
		}
		// Finished twice: counted once.
		for range 2 {
			if err := s.UpsertBot(ctx, storetest.Bot(uid).Phase("Done").Finished(storetest.T0).Record()); err != nil {
				t.Fatal(err)
			}
		}
	}
	for uid, want := range map[types.UID]bool{"running": true, "done-0": false, "done-1": false, "done-2": true, "done-3": true, "done-4": true} {
		if _, ok, _ := s.Bot(ctx, uid); ok != want {
			t.Errorf("bot %s kept = %v, want %v", uid, ok, want)
		}
	}
}

// TestPruneForgetsBeatOnlyBots: a bot deleted, then beating once more (its container had not
// stopped yet), is recreated by the beat; pruning forgets it once that beat is old.
func TestPruneForgetsBeatOnlyBots(t *testing.T) {
	s := memory.New()
	ctx := t.Context()
	if err := s.RecordHeartbeat(ctx, storetest.Beat("late", storetest.T0.Add(-48*time.Hour))); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordHeartbeat(ctx, storetest.Beat("fresh", storetest.T0)); err != nil {
		t.Fatal(err)
	}
	p, err := s.Prune(ctx, store.Retention{FinishedBots: 24 * time.Hour}.CutoffsAt(storetest.T0))
	if err != nil || p.Bots != 1 {
		t.Fatalf("pruned %+v (%v), want the one beat-only bot silent for two days", p, err)
	}
	if _, ok, _ := s.Bot(ctx, "late"); ok {
		t.Error("the beat-only bot is still there")
	}
	if _, ok, _ := s.Bot(ctx, "fresh"); !ok {
		t.Error("a bot that beat recently was pruned")
	}
}

func TestOutboxConformance(t *testing.T) {
	storetest.RunOutbox(t, func(*testing.T) store.Outbox { return memory.NewOutbox(100) })
}
