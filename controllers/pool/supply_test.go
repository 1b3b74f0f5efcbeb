package pool

import (
	"testing"
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
	bt "botpool.dev/botpool/internal/botpooltest"
)

func TestSlotsToCreate(t *testing.T) {
	tests := []struct {
		name                                      string
		maxSlots, minIdle, total, available, wait int
		want                                      int
	}{
		{"lazy pool, nobody waits", 100, 0, 0, 0, 0, 0},
		{"lazy pool, a burst arrives", 100, 0, 0, 0, 1000, 100},
		{"waiting bots use free slots first", 100, 0, 10, 4, 6, 2},
		{"free slots cover the queue", 100, 0, 10, 8, 6, 0},
		{"pre-warm minIdle", 10, 3, 0, 0, 0, 3},
		{"minIdle already free", 10, 3, 5, 3, 0, 0},
		{"queue and minIdle: the larger need wins", 10, 3, 2, 1, 2, 2},
		{"at maxSlots", 10, 3, 10, 0, 50, 0},
		{"over maxSlots after maxSlots was lowered", 5, 0, 8, 0, 3, 0},
	}
	for _, tt := range tests {
		if got := slotsToCreate(tt.maxSlots, tt.minIdle, tt.total, tt.available, tt.wait); got != tt.want {
			t.Errorf("%s: slotsToCreate = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestAvailableCountsAStandbyContainerOnItsWay: supply counts a free standby slot whose fresh
// container deploys (it is Ready in seconds), and never a slot deploying a bot's container.
// Before, a standby pool warming up created a slot beside each one deploying, up to maxSlots.
func TestAvailableCountsAStandbyContainerOnItsWay(t *testing.T) {
	at := time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)
	slot := func() *bt.SlotWrapper { return bt.MakeSlot("ns", "pool-zoom-001", "pool").Phase(v1.SlotDeploying) }
	tests := []struct {
		name string
		slot *v1.BotPoolSlot
		want bool
	}{
		{"a standby container deploying, unbound", slot().Standby(v1.StandbyStarting, at).Obj(), true},
		{"a bot's container deploying", slot().BoundTo("bot", "uid").Obj(), false},
		{"a Stopped pool's slot deploying without a bot (its bot let go)", slot().Obj(), false},
		{"a standby container deploying on a deleted slot", slot().Standby(v1.StandbyStarting, at).Deleting(at).Obj(), false},
	}
	for _, tt := range tests {
		if got := policy.Available(tt.slot); got != tt.want {
			t.Errorf("%s: available = %v, want %v", tt.name, got, tt.want)
		}
	}
}
