package storetest

import (
	"crypto/sha256"
	"encoding/hex"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"botpool.dev/botpool/store"
)

// Ask returns an ask of slot uid (named slot-<uid> in namespace ns) with the hash of token at t.
func Ask(uid types.UID, ns, token string, at time.Time) store.SlotAsk {
	sum := sha256.Sum256([]byte(token))
	return store.SlotAsk{SlotUID: uid, Namespace: ns, Name: "slot-" + string(uid), TokenSHA256: hex.EncodeToString(sum[:]), At: at}
}

func lastAsks(t *testing.T, s store.Store, uids ...types.UID) map[types.UID]store.SlotAsk {
	t.Helper()
	got, err := s.LastSlotAsks(ctxFor(t), uids)
	must(t, err)
	return got
}

func wantAsks(t *testing.T, got, want map[types.UID]store.SlotAsk) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("last asks = %+v, want %+v", got, want)
	}
	for uid, w := range want {
		g, ok := got[uid]
		if !ok || !g.At.Equal(w.At) {
			t.Fatalf("last ask of %s = %+v, want %+v", uid, g, w)
		}
		g.At, w.At = time.Time{}, time.Time{}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("last ask of %s = %+v, want %+v", uid, g, w)
		}
	}
}

func testSlotAsks(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	a1 := Ask("a", "ns", "bpt_one", T0)
	b1 := Ask("b", "ns", "bpt_b", T0.Add(time.Second+1500*time.Nanosecond))
	must(t, s.RecordSlotAsk(ctx, a1))
	must(t, s.RecordSlotAsk(ctx, b1))
	b1.At = b1.At.Truncate(time.Microsecond) // kept to the microsecond
	wantAsks(t, lastAsks(t, s, "a", "b", "never-asked"), map[types.UID]store.SlotAsk{"a": a1, "b": b1})
	wantAsks(t, lastAsks(t, s), nil)

	// A fresh container with a new credential asks later: its ask replaces the old one.
	a2 := Ask("a", "ns", "bpt_two", T0.Add(time.Minute))
	must(t, s.RecordSlotAsk(ctx, a2))
	// An older ask arriving late (another replica's) never replaces a newer one.
	must(t, s.RecordSlotAsk(ctx, Ask("a", "ns", "bpt_one", T0.Add(30*time.Second))))
	wantAsks(t, lastAsks(t, s, "a"), map[types.UID]store.SlotAsk{"a": a2})

	// An ask without a time is now.
	before := time.Now().Truncate(time.Microsecond)
	must(t, s.RecordSlotAsk(ctx, Ask("c", "ns", "bpt_c", time.Time{})))
	if got := lastAsks(t, s, "c")["c"].At; got.Before(before) || got.After(time.Now()) {
		t.Fatalf("an ask without a time was stamped %v, want about now (%v)", got, before)
	}
}

// testDeleteSlotRemovesItsAsks: the asks of a slot's containers go with its projection, and
// only those.
func testDeleteSlotRemovesItsAsks(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	a := Ask("a", "ns", "bpt_a", T0)
	other := Ask("b", "ns", "bpt_b", T0)
	otherNS := Ask("c", "ns2", "bpt_c", T0)
	otherNS.Name = a.Name // the same slot name in another namespace
	must(t, s.UpsertSlot(ctx, Slot("ns", a.Name).App("app-a").Record()))
	for _, ask := range []store.SlotAsk{a, other, otherNS} {
		must(t, s.RecordSlotAsk(ctx, ask))
	}
	must(t, s.DeleteSlot(ctx, "ns", a.Name))
	wantAsks(t, lastAsks(t, s, "a", "b", "c"), map[types.UID]store.SlotAsk{"b": other, "c": otherNS})

	// A slot whose projection was never written (an ask can come first) loses its asks too.
	must(t, s.DeleteSlot(ctx, "ns", other.Name))
	wantAsks(t, lastAsks(t, s, "a", "b", "c"), map[types.UID]store.SlotAsk{"c": otherNS})
}

func testInvalidSlotAsks(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	good := Ask("a", "ns", "bpt_a", T0)
	for name, mutate := range map[string]func(*store.SlotAsk){
		"no uid":       func(a *store.SlotAsk) { a.SlotUID = "" },
		"no namespace": func(a *store.SlotAsk) { a.Namespace = "" },
		"no name":      func(a *store.SlotAsk) { a.Name = "" },
		"no hash":      func(a *store.SlotAsk) { a.TokenSHA256 = "" },
		"not hex":      func(a *store.SlotAsk) { a.TokenSHA256 = "bpt_" + a.TokenSHA256[4:] },
		"upper hex":    func(a *store.SlotAsk) { a.TokenSHA256 = "ABCDEF" + a.TokenSHA256[6:] },
		"short":        func(a *store.SlotAsk) { a.TokenSHA256 = a.TokenSHA256[:63] },
	} {
		bad := good
		mutate(&bad)
		if err := s.RecordSlotAsk(ctx, bad); !isInvalid(err) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	wantAsks(t, lastAsks(t, s, "a", ""), nil)
}
