package pool

import (
	"reflect"
	"testing"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

func TestSlotNames(t *testing.T) {
	if got := SlotName(v1.PlatformGoogleMeet, 7); got != "pool-google-meet-007" {
		t.Errorf("slotName = %q", got)
	}
	if got := SlotName(v1.PlatformZoom, 1000); got != "pool-zoom-1000" {
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
