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
		if !ok || !g.At.Equal(w.At) || !g.LeftAt.Equal(w.LeftAt) {
			t.Fatalf("last ask of %s = %+v, want %+v", uid, g, w)
		}
		g.At, w.At, g.LeftAt, w.LeftAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
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

// Left returns the hang-up of a wait of slot uid's container with the hash of token, the wait
// begun at since and hung up at at.
func Left(uid types.UID, token string, since, at time.Time) store.SlotLeft {
	return store.SlotLeft{SlotUID: uid, TokenSHA256: Ask(uid, "ns", token, at).TokenSHA256, Since: since, At: at}
}

// testSlotLefts: a hang-up marks the latest ask of the same credential that is not newer than
// the hung-up wait; an ask after it clears it, an older one arriving late does not.
func testSlotLefts(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	ask := Ask("a", "ns", "bpt_one", T0)
	must(t, s.RecordSlotAsk(ctx, ask))
	// A hang-up of a slot that never asked is nothing to record, and no error.
	must(t, s.RecordSlotLeft(ctx, Left("never-asked", "bpt_x", T0, T0.Add(time.Second))))
	wantAsks(t, lastAsks(t, s, "never-asked"), nil)

	// The container hangs up the wait it began with its ask.
	left := ask
	left.LeftAt = T0.Add(20 * time.Second)
	must(t, s.RecordSlotLeft(ctx, Left("a", "bpt_one", T0, T0.Add(20*time.Second))))
	wantAsks(t, lastAsks(t, s, "a"), map[types.UID]store.SlotAsk{"a": left})
	// An earlier hang-up arriving late (another replica's) does not move it back; a later one
	// of a wait begun after the ask (the ask throttled away) moves it on.
	must(t, s.RecordSlotLeft(ctx, Left("a", "bpt_one", T0, T0.Add(10*time.Second))))
	wantAsks(t, lastAsks(t, s, "a"), map[types.UID]store.SlotAsk{"a": left})
	left.LeftAt = T0.Add(25 * time.Second)
	must(t, s.RecordSlotLeft(ctx, Left("a", "bpt_one", T0.Add(time.Second), T0.Add(25*time.Second))))
	wantAsks(t, lastAsks(t, s, "a"), map[types.UID]store.SlotAsk{"a": left})
	// An older ask arriving late neither replaces the ask nor clears its hang-up.
	must(t, s.RecordSlotAsk(ctx, Ask("a", "ns", "bpt_one", T0.Add(-time.Second))))
	wantAsks(t, lastAsks(t, s, "a"), map[types.UID]store.SlotAsk{"a": left})

	// The container asks again: the hang-up is cleared.
	again := Ask("a", "ns", "bpt_one", T0.Add(30*time.Second))
	must(t, s.RecordSlotAsk(ctx, again))
	wantAsks(t, lastAsks(t, s, "a"), map[types.UID]store.SlotAsk{"a": again})
	// A hang-up of a wait begun before that ask (the old connection, noticed late, or on
	// another replica) does not apply: the container is back.
	must(t, s.RecordSlotLeft(ctx, Left("a", "bpt_one", T0.Add(29*time.Second), T0.Add(40*time.Second))))
	// Nor does one with another credential (an earlier container's), whatever its times.
	must(t, s.RecordSlotLeft(ctx, Left("a", "bpt_old", T0.Add(40*time.Second), T0.Add(41*time.Second))))
	wantAsks(t, lastAsks(t, s, "a"), map[types.UID]store.SlotAsk{"a": again})
	// A wait begun at the instant of the ask is that ask's.
	must(t, s.RecordSlotLeft(ctx, Left("a", "bpt_one", again.At, again.At)))
	again.LeftAt = again.At
	wantAsks(t, lastAsks(t, s, "a"), map[types.UID]store.SlotAsk{"a": again})

	// A fresh container (a new credential) asks: the old container's hang-up is gone with it.
	fresh := Ask("a", "ns", "bpt_two", T0.Add(time.Minute))
	must(t, s.RecordSlotAsk(ctx, fresh))
	wantAsks(t, lastAsks(t, s, "a"), map[types.UID]store.SlotAsk{"a": fresh})

	// A hang-up without times is now, its wait begun then too.
	must(t, s.RecordSlotAsk(ctx, Ask("c", "ns", "bpt_c", T0)))
	before := time.Now().Truncate(time.Microsecond)
	must(t, s.RecordSlotLeft(ctx, Left("c", "bpt_c", time.Time{}, time.Time{})))
	if got := lastAsks(t, s, "c")["c"].LeftAt; got.Before(before) || got.After(time.Now()) {
		t.Fatalf("a hang-up without a time was stamped %v, want about now (%v)", got, before)
	}
}

func testInvalidSlotLefts(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	must(t, s.RecordSlotAsk(ctx, Ask("a", "ns", "bpt_a", T0)))
	good := Left("a", "bpt_a", T0, T0.Add(time.Second))
	for name, mutate := range map[string]func(*store.SlotLeft){
		"no uid":             func(l *store.SlotLeft) { l.SlotUID = "" },
		"no hash":            func(l *store.SlotLeft) { l.TokenSHA256 = "" },
		"not hex":            func(l *store.SlotLeft) { l.TokenSHA256 = "bpt_" + l.TokenSHA256[4:] },
		"wait ends before":   func(l *store.SlotLeft) { l.Since = l.At.Add(time.Second) },
		"wait after its end": func(l *store.SlotLeft) { l.At, l.Since = time.Time{}, time.Now().Add(time.Hour) },
	} {
		bad := good
		mutate(&bad)
		if err := s.RecordSlotLeft(ctx, bad); !isInvalid(err) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	wantAsks(t, lastAsks(t, s, "a"), map[types.UID]store.SlotAsk{"a": Ask("a", "ns", "bpt_a", T0)})
}
