package controllers

import (
	"reflect"
	"testing"

	v1 "botpool.dev/botpool/api/v1alpha1"
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

func TestSlotNames(t *testing.T) {
	if got := slotName(v1.PlatformGoogleMeet, 7); got != "pool-google-meet-007" {
		t.Errorf("slotName = %q", got)
	}
	if got := slotName(v1.PlatformZoom, 1000); got != "pool-zoom-1000" {
		t.Errorf("slotName(1000) = %q", got)
	}
	prefix := slotPrefix(v1.PlatformZoom)
	for name, want := range map[string]int{"pool-zoom-001": 1, "pool-zoom-120": 120, "pool-zoom-1000": 1000} {
		if n, ok := slotNumber(prefix, name); !ok || n != want {
			t.Errorf("slotNumber(%q) = %d, %v", name, n, ok)
		}
	}
	for _, name := range []string{"pool-zoom-", "pool-zoom-abc", "pool-google-meet-001", "pool-zoom-000"} {
		if _, ok := slotNumber(prefix, name); ok {
			t.Errorf("slotNumber(%q) accepted", name)
		}
	}
	got := lowestFree(map[int]bool{1: true, 2: true, 4: true, 7: true}, 4)
	if want := []int{3, 5, 6, 8}; !reflect.DeepEqual(got, want) {
		t.Errorf("lowestFree = %v, want %v", got, want)
	}
}
