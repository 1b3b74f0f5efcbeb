package memory_test

import (
	"testing"
	"time"

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
