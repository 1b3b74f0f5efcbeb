package coolify

import (
	"context"
	"slices"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

var guardEpoch = time.Unix(1_800_000_000, 0)

// guardUsers names the guard's users for the tests below.
type guardUsers struct {
	t  *testing.T
	in *Instance
}

// queue queues a call of user for a place (it may get one at once) and returns it.
func (g guardUsers) queue(user string, prio Priority) *placeWaiter {
	g.in.mu.Lock()
	defer g.in.mu.Unlock()
	return g.in.enqueue(g.in.user(user, guardEpoch), prio)
}

// hold takes a place for user at once, failing the test when there is none.
func (g guardUsers) hold(user string, prio Priority) (release func()) {
	g.t.Helper()
	release, err := g.in.acquire(context.Background(), clocktesting.NewFakeClock(guardEpoch), user, "op", 0, prio)
	if err != nil {
		g.t.Fatalf("%s: no place at once: %v", user, err)
	}
	return release
}

// done releases w's place.
func (g guardUsers) done(user string, w *placeWaiter) {
	g.t.Helper()
	if !w.granted {
		g.t.Fatalf("%s: releasing a place it does not hold", user)
	}
	g.in.release(g.in.users[user], w.prio, false)
}

// placed lists which of the named waiters hold a place.
func placed(ws map[string]*placeWaiter) map[string]bool {
	out := map[string]bool{}
	for name, w := range ws {
		if w.granted {
			out[name] = true
		}
	}
	return out
}

func sameSet(got map[string]bool, want ...string) bool {
	if len(got) != len(want) {
		return false
	}
	for _, w := range want {
		if !got[w] {
			return false
		}
	}
	return true
}

// TestInstanceServesUsersInTurn: user a took all four places while alone; b and c queue
// behind a's own waiting calls. Each place a gives back goes to the next waiting user under its
// share (max(1, 4/3) = 1), users in turn, never to a while it holds more than its share; with
// each user at its share a place stays free. When c is done, the share is 2 again.
func TestInstanceServesUsersInTurn(t *testing.T) {
	g := guardUsers{t: t, in: NewInstance(InstanceLimits{MaxInFlight: 4})}
	var releaseA []func()
	for range 4 {
		releaseA = append(releaseA, g.hold("a", StartPath))
	}
	ws := map[string]*placeWaiter{
		"a1": g.queue("a", StartPath), "b1": g.queue("b", StartPath), "b2": g.queue("b", StartPath),
		"c1": g.queue("c", StartPath), "a2": g.queue("a", StartPath),
	}
	if got := placed(ws); len(got) != 0 {
		t.Fatalf("placed with the instance full: %v", got)
	}
	done := func(user, name string) func() {
		return func() { g.done(user, ws[name]); delete(ws, name) }
	}
	steps := []struct {
		release func()
		want    []string
		held    int
	}{
		{releaseA[0], []string{"b1"}, 4},             // a holds 3 of 4: over its share
		{releaseA[1], []string{"b1", "c1"}, 4},       // b had its turn: c's
		{releaseA[2], []string{"b1", "c1"}, 3},       // a, b, c at their share: a place stays free
		{done("b", "b1"), []string{"b2", "c1"}, 3},   // b below its share again
		{done("c", "c1"), []string{"a1", "b2"}, 3},   // two users now: a's share is 2
		{releaseA[3], []string{"a1", "a2", "b2"}, 3}, // a and b below their share, nobody waits
	}
	for i, s := range steps {
		s.release()
		if got := placed(ws); !sameSet(got, s.want...) || g.in.inFlight != s.held {
			t.Fatalf("step %d: placed %v with %d places held, want %v with %d", i, got, g.in.inFlight, s.want, s.held)
		}
	}
}

// TestInstanceTakesTurns: places freed one at a time go to the waiting users in turn, one
// each, not to the first user's queue until it reaches its share.
func TestInstanceTakesTurns(t *testing.T) {
	g := guardUsers{t: t, in: NewInstance(InstanceLimits{MaxInFlight: 6})}
	var releaseX []func()
	for range 5 {
		releaseX = append(releaseX, g.hold("x", StartPath))
	}
	g.hold("b", StartPath)
	ws := map[string]*placeWaiter{}
	for _, name := range []string{"a1", "a2", "a3", "b1", "b2"} {
		ws[name] = g.queue(name[:1], StartPath)
	}
	var order []string
	for i := range 3 { // x holds 4, 3, 2 (its share is 2); a and b hold 2 at most
		releaseX[i]()
		for name := range placed(ws) {
			if !slices.Contains(order, name) {
				order = append(order, name)
			}
		}
	}
	if want := []string{"a1", "b1", "a2"}; !slices.Equal(order, want) {
		t.Fatalf("places went to %v, want %v", order, want)
	}
}

// TestInstanceKeepsTheLastPlace: a user holding places does not take the last free one while
// another user of the instance holds none; once that user is forgotten, it does.
func TestInstanceKeepsTheLastPlace(t *testing.T) {
	g := guardUsers{t: t, in: NewInstance(InstanceLimits{MaxInFlight: 4})}
	g.in.touch("b", guardEpoch)
	for range 3 {
		g.hold("a", StartPath)
	}
	ws := map[string]*placeWaiter{"a4": g.queue("a", StartPath)}
	if got := placed(ws); len(got) != 0 {
		t.Fatalf("placed %v, want the last place kept for b", got)
	}
	ws["b1"] = g.queue("b", StartPath)
	if got := placed(ws); !sameSet(got, "b1") {
		t.Fatalf("placed %v, want b's call in the last place", got)
	}
	g.done("b", ws["b1"])
	delete(ws, "b1")
	if got := placed(ws); len(got) != 0 {
		t.Fatalf("placed %v after b's call ended, want the place kept for b", got)
	}
	later := guardEpoch.Add(registryIdle + time.Minute)
	g.in.touch("a", later)
	if g.in.prune(later.Add(-registryIdle), later); !sameSet(placed(ws), "a4") {
		t.Fatalf("placed %v after b was forgotten, want a4", placed(ws))
	}
}

// TestInstanceHousekeepingKeepsToItsHalf: housekeeping holds at most half the places, so the
// start path finds one; and each user holds at most its share of housekeeping's half.
func TestInstanceHousekeepingKeepsToItsHalf(t *testing.T) {
	g := guardUsers{t: t, in: NewInstance(InstanceLimits{MaxInFlight: 8})}
	var releaseA []func()
	for range 4 {
		releaseA = append(releaseA, g.hold("a", Housekeeping))
	}
	ws := map[string]*placeWaiter{"aHouse": g.queue("a", Housekeeping)}
	if got := placed(ws); len(got) != 0 {
		t.Fatalf("housekeeping placed beyond half the places: %v", got)
	}
	ws["aStart"] = g.queue("a", StartPath)
	if got := placed(ws); !sameSet(got, "aStart") {
		t.Fatalf("placed %v, want a's start-path call beside its housekeeping", got)
	}
	g.done("a", ws["aStart"])
	delete(ws, "aStart")
	ws["bHouse"] = g.queue("b", Housekeeping)
	releaseA[0]() // a holds 3 of its share of 4 places, but of housekeeping's half it has 2
	if got := placed(ws); !sameSet(got, "bHouse") {
		t.Fatalf("placed %v, want b's housekeeping call, not a's", got)
	}

	// More users than housekeeping has places: each gets at most one, together at most half.
	g = guardUsers{t: t, in: NewInstance(InstanceLimits{MaxInFlight: 4})}
	ws = map[string]*placeWaiter{"p": g.queue("p", Housekeeping), "q": g.queue("q", Housekeeping),
		"r": g.queue("r", Housekeeping)}
	if got := placed(ws); !sameSet(got, "p", "q") {
		t.Fatalf("placed %v, want housekeeping of p and q only (half the places)", got)
	}
	ws["rStart"] = g.queue("r", StartPath)
	if got := placed(ws); !sameSet(got, "p", "q", "rStart") {
		t.Fatalf("placed %v, want r's start-path call too", got)
	}
}

// TestInstanceForgetsIdleUsers: the guard forgets a user idle since the cutoff, but not one with
// a call in flight or an open breaker; it reports itself empty once every user is gone.
func TestInstanceForgetsIdleUsers(t *testing.T) {
	g := guardUsers{t: t, in: NewInstance(InstanceLimits{BreakerOpen: time.Hour})}
	for _, u := range []string{"busy", "broken", "idle"} {
		g.in.touch(u, guardEpoch)
	}
	release := g.hold("busy", StartPath)
	for range DefaultBreakerThreshold {
		g.in.record(guardEpoch, "broken", true)
	}
	later := guardEpoch.Add(20 * time.Minute)
	cutoff := later.Add(-registryIdle)
	if g.in.prune(cutoff, later) {
		t.Fatal("empty with a call in flight and an open breaker")
	}
	if _, ok := g.in.users["idle"]; ok || len(g.in.users) != 2 {
		t.Fatalf("users after pruning: %d (idle kept: %v), want busy and broken", len(g.in.users), ok)
	}
	release()
	end := guardEpoch.Add(time.Hour)
	if !g.in.prune(end.Add(-registryIdle), end) {
		t.Fatalf("%d users left after the call ended and the breaker's hour", len(g.in.users))
	}
}
