package callback

import (
	"fmt"
	"testing"
	"time"
)

func TestRecentSetForgetsAfterTTL(t *testing.T) {
	s := newRecentSet(time.Hour, 10)
	s.add("a", Result{}, epoch)
	s.add("b", Result{}, epoch.Add(30*time.Minute))
	if !s.contains("a", epoch.Add(59*time.Minute)) {
		t.Error("a forgotten before its TTL")
	}
	if s.contains("a", epoch.Add(time.Hour)) {
		t.Error("a remembered past its TTL")
	}
	if !s.contains("b", epoch.Add(time.Hour)) {
		t.Error("b forgotten before its TTL")
	}
	s.add("b", Result{}, epoch.Add(time.Hour)) // refreshed
	if !s.contains("b", epoch.Add(time.Hour+45*time.Minute)) {
		t.Error("a refreshed key expired on its first timestamp")
	}
}

func TestRecentSetIsBounded(t *testing.T) {
	s := newRecentSet(time.Hour, 3)
	for i := range 5 {
		s.add(fmt.Sprint(i), Result{}, epoch)
	}
	if len(s.entries) != 3 || s.order.Len() != 3 {
		t.Fatalf("%d entries, %d in order; want 3", len(s.entries), s.order.Len())
	}
	for i, want := range []bool{false, false, true, true, true} {
		if got := s.contains(fmt.Sprint(i), epoch); got != want {
			t.Errorf("contains(%d) = %v, want %v (oldest evicted first)", i, got, want)
		}
	}
}
