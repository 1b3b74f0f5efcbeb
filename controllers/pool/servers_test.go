package pool

import (
	"fmt"
	"testing"

	"k8s.io/utils/ptr"

	v1 "botpool.dev/botpool/api/v1alpha1"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// TestPlacementPrefersRoomThenWarmCaches: a new slot goes to the server with the fewest slots
// for its weight; between servers equally loaded, to one whose image cache holds the pool's
// image (a slot of the pool runs there); never to a cordoned server, one at its maxSlots, or
// one whose health is out.
func TestPlacementPrefersRoomThenWarmCaches(t *testing.T) {
	pool := bt.MakePool("ns", "p").Obj()
	pool.Spec.Coolify.ServerUUID = ""
	pool.Spec.Coolify.Servers = []v1.PoolServer{
		{UUID: "a", Weight: 1}, {UUID: "b", Weight: 1}, {UUID: "c", Weight: 1, Cordoned: true},
		{UUID: "d", Weight: 1, MaxSlots: ptr.To[int32](0)}, {UUID: "e", Weight: 1},
	}
	busyOnB := bt.MakeSlot("ns", "s1", "p").Phase(v1.SlotBusy).Obj()
	busyOnB.Spec.Server = "b"
	place := newPlacement(pool, []v1.BotPoolSlot{*busyOnB}, map[string]v1.ServerHealth{"e": v1.ServerUnreachable})

	var got []string
	for range 4 {
		uuid, ok := place.next()
		if !ok {
			t.Fatal("no server had room")
		}
		got = append(got, uuid)
	}
	// a (0 slots) first; then a and b hold one each and b's cache is warm: b; then a; then
	// the tie again goes to the warm b.
	if want := "[a b a b]"; fmt.Sprint(got) != want {
		t.Fatalf("placed on %v, want %s", got, want)
	}

	pool.Spec.Coolify.Servers = []v1.PoolServer{{UUID: "c", Weight: 1, Cordoned: true}, {UUID: "d", Weight: 1, MaxSlots: ptr.To[int32](0)}}
	if uuid, ok := newPlacement(pool, nil, nil).next(); ok {
		t.Fatalf("placed on %s, a cordoned or full server", uuid)
	}
}
