// Package storetest is the conformance suite every store.Store passes: the in-memory store and
// the Postgres store run the same cases, so "same semantics" is checked, not promised. Outage
// behaviour is Postgres-only and tested in its package.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"botpool.dev/botpool/store"
)

// Inspector reads back what a store holds. Both implementations provide it for tests and
// debugging tools; controllers only use store.Store.
type Inspector interface {
	Bot(ctx context.Context, uid types.UID) (store.BotRecord, bool, error)
	Slot(ctx context.Context, namespace, name string) (store.SlotRecord, bool, error)
	Transitions(ctx context.Context, namespace, slot string) ([]store.Transition, error)
	BotEvents(ctx context.Context, uid types.UID) ([]store.BotEvent, error)
}

// Subject is a store under test.
type Subject interface {
	store.Store
	Inspector
}

// Run runs the suite; newStore returns a fresh, empty store for each case (and closes it in a
// t.Cleanup of its own if it needs to).
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	cases := []struct {
		name string
		run  func(t *testing.T, s Subject)
	}{
		{"HeartbeatRoundTrip", testHeartbeatRoundTrip},
		{"HeartbeatNeverMovesBackwards", testHeartbeatNeverMovesBackwards},
		{"HeartbeatWithoutTimeIsNow", testHeartbeatWithoutTimeIsNow},
		{"HeartbeatRecreatesVanishedBot", testHeartbeatRecreatesVanishedBot},
		{"UpsertBotKeepsLiveness", testUpsertBotKeepsLiveness},
		{"ConcurrentHeartbeats", testConcurrentHeartbeats},
		{"SlotRoundTrip", testSlotRoundTrip},
		{"SlotUniqueness", testSlotUniqueness},
		{"ConcurrentBindingsOneWinner", testConcurrentBindingsOneWinner},
		{"Transitions", testTransitions},
		{"BotEvents", testBotEvents},
		{"InvalidRecords", testInvalidRecords},
		{"StatusAvailable", testStatusAvailable},
		{"Retention", testRetention},
		{"SlotAsks", testSlotAsks},
		{"DeleteSlotRemovesItsAsks", testDeleteSlotRemovesItsAsks},
		{"InvalidSlotAsks", testInvalidSlotAsks},
		{"SlotLefts", testSlotLefts},
		{"InvalidSlotLefts", testInvalidSlotLefts},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, ok := newStore(t).(Subject)
			if !ok {
				t.Fatal("the store does not implement storetest.Inspector")
			}
			c.run(t, s)
		})
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// must fails the test on an error; it keeps the cases about behaviour, not plumbing.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func lastBeats(t *testing.T, s store.Store, uids ...types.UID) map[types.UID]time.Time {
	t.Helper()
	got, err := s.LastHeartbeats(ctxFor(t), uids)
	must(t, err)
	return got
}

func wantBeats(t *testing.T, got, want map[types.UID]time.Time) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("last heartbeats = %v, want %v", got, want)
	}
	for uid, w := range want {
		if g, ok := got[uid]; !ok || !g.Equal(w) {
			t.Fatalf("last heartbeat of %s = %v, want %v (all: %v)", uid, g, w, got)
		}
	}
}

func testHeartbeatRoundTrip(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	must(t, s.RecordHeartbeat(ctx, Beat("a", T0)))
	must(t, s.RecordHeartbeat(ctx, Beat("b", T0.Add(time.Second))))
	must(t, s.RecordHeartbeat(ctx, Beat("a", T0.Add(2*time.Second+1500*time.Nanosecond))))

	wantBeats(t, lastBeats(t, s, "a", "b", "never-seen"), map[types.UID]time.Time{
		"a": T0.Add(2*time.Second + time.Microsecond), // kept to the microsecond
		"b": T0.Add(time.Second),
	})
	wantBeats(t, lastBeats(t, s), nil)
}

func testHeartbeatNeverMovesBackwards(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	must(t, s.RecordHeartbeat(ctx, Beat("a", T0.Add(time.Minute))))
	must(t, s.RecordHeartbeat(ctx, Beat("a", T0))) // a late, older beat
	wantBeats(t, lastBeats(t, s, "a"), map[types.UID]time.Time{"a": T0.Add(time.Minute)})
}

func testHeartbeatWithoutTimeIsNow(t *testing.T, s Subject) {
	before := time.Now().Truncate(time.Microsecond)
	must(t, s.RecordHeartbeat(ctxFor(t), Beat("a", time.Time{})))
	after := time.Now()
	got := lastBeats(t, s, "a")["a"]
	if got.Before(before) || got.After(after) {
		t.Fatalf("a beat without a time was stamped %v, want between %v and %v", got, before, after)
	}
}

func testHeartbeatRecreatesVanishedBot(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	must(t, s.UpsertBot(ctx, Bot("a").Phase("InCall").Record()))
	must(t, s.RecordHeartbeat(ctx, Beat("a", T0)))
	must(t, s.DeleteBot(ctx, "a"))
	wantBeats(t, lastBeats(t, s, "a"), nil)
	if _, ok, err := s.Bot(ctx, "a"); err != nil || ok {
		t.Fatalf("deleted bot still there (ok=%v, err=%v)", ok, err)
	}

	// Its next beat makes it whole again: liveness plus a minimal record naming it.
	must(t, s.RecordHeartbeat(ctx, Beat("a", T0.Add(10*time.Second))))
	wantBeats(t, lastBeats(t, s, "a"), map[types.UID]time.Time{"a": T0.Add(10 * time.Second)})
	got, ok, err := s.Bot(ctx, "a")
	must(t, err)
	if want := (store.BotRecord{UID: "a", Namespace: "default", Name: "bot-a"}); !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("bot recreated by a beat = %+v (exists %v), want %+v", got, ok, want)
	}
}

func testUpsertBotKeepsLiveness(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	must(t, s.RecordHeartbeat(ctx, Beat("a", T0)))
	rec := Bot("a").Phase("Done").InSlot("pool-google-meet-001", "app-1").Finished(T0.Add(time.Hour)).Record()
	must(t, s.UpsertBot(ctx, rec))
	wantBeats(t, lastBeats(t, s, "a"), map[types.UID]time.Time{"a": T0})

	got, ok, err := s.Bot(ctx, "a")
	must(t, err)
	if !ok || !sameBot(got, rec) {
		t.Fatalf("bot = %+v, want %+v", got, rec)
	}
	// A second upsert replaces the projection (a bot created by a beat has no CreatedAt).
	rec2 := Bot("a").Phase("Fatal").Record()
	rec2.CreatedAt = time.Time{}
	must(t, s.UpsertBot(ctx, rec2))
	got, _, err = s.Bot(ctx, "a")
	must(t, err)
	if !sameBot(got, rec2) {
		t.Fatalf("bot after second upsert = %+v, want %+v", got, rec2)
	}
}

func sameBot(a, b store.BotRecord) bool {
	if (a.FinishedAt == nil) != (b.FinishedAt == nil) || (a.FinishedAt != nil && !a.FinishedAt.Equal(*b.FinishedAt)) {
		return false
	}
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return false
	}
	a.FinishedAt, b.FinishedAt, a.CreatedAt, b.CreatedAt = nil, nil, time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

func testConcurrentHeartbeats(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	const bots, beats = 20, 10
	errs := make(chan error, bots*beats)
	for b := range bots {
		for i := range beats {
			go func() {
				errs <- s.RecordHeartbeat(ctx, Beat(uidN(b), T0.Add(time.Duration(i)*time.Second)))
			}()
		}
	}
	for range bots * beats {
		must(t, <-errs)
	}
	want := map[types.UID]time.Time{}
	uids := make([]types.UID, 0, bots)
	for b := range bots {
		uids = append(uids, uidN(b))
		want[uidN(b)] = T0.Add((beats - 1) * time.Second)
	}
	wantBeats(t, lastBeats(t, s, uids...), want)
}

func uidN(n int) types.UID {
	return types.UID("bot-uid-" + string(rune('a'+n%26)) + string(rune('a'+n/26)))
}

func testStatusAvailable(t *testing.T, s Subject) {
	st := s.Status()
	if !st.Available || st.Buffered != 0 || st.Dropped != 0 {
		t.Fatalf("status of a healthy store = %+v", st)
	}
}

// sameJSON compares JSON by meaning: Postgres keeps events as jsonb, which normalises spacing.
func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

func isInvalid(err error) bool { return errors.Is(err, store.ErrInvalid) }
