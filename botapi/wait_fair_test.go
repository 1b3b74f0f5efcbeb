package botapi

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"botpool.dev/botpool/botapi/botclient"
)

// holds reports whether slot's wait w still holds its place.
func (ws *waiters) holds(slot types.UID, w *waiter) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.bySlot[slot] == w
}

// TestWaitPlacesAreSharedFairly: four namespaces' standby containers take every place of a
// replica (each at the per-namespace cap); a fifth namespace's first wait still gets in, in the
// place of the newest wait of the namespace holding the most, which is told to end (and answers
// as a wait that ran out: ask again). The hog that asks again is refused, not let in at another
// hog's expense. A single pass over the waiters, no server.
func TestWaitPlacesAreSharedFairly(t *testing.T) {
	ws := newWaiters(DefaultMaxWaiters, DefaultMaxWaitersPerNamespace, nil)
	type place struct {
		slot types.UID
		w    *waiter
	}
	newest := map[string]place{}
	for i := range DefaultMaxWaiters {
		ns := fmt.Sprintf("hog-%d", i%4)
		slot := types.UID(fmt.Sprintf("%s-%d", ns, i))
		w, err := ws.add(ns, slot)
		if err != nil {
			t.Fatalf("wait %d of %s: %v", i, ns, err)
		}
		newest[ns] = place{slot, w}
	}
	if _, err := ws.add("hog-0", "hog-0-more"); err == nil {
		t.Fatal("a hog past the per-namespace cap got in")
	}

	w, err := ws.add("tenant", "tenant-0")
	if err != nil {
		t.Fatalf("a namespace with no wait on a full replica: %v, want a place", err)
	}
	if got := len(ws.bySlot); got != DefaultMaxWaiters {
		t.Errorf("%d waits, want the cap %d", got, DefaultMaxWaiters)
	}
	var evicted []string
	for ns, p := range newest {
		if !ws.holds(p.slot, p.w) {
			evicted = append(evicted, ns)
		}
	}
	if len(evicted) != 1 {
		t.Fatalf("hogs whose newest wait was evicted: %v, want exactly one", evicted)
	}
	if !ws.holds("tenant-0", w) {
		t.Error("the tenant's wait holds no place")
	}

	// The evicted container asks again: its namespace still holds more than the tenant's, so
	// it is refused (503: retry later), and no other hog loses a place for it.
	_, err = ws.add(evicted[0], "the-evicted-one-again")
	var ae *apiError
	if !errors.As(err, &ae) || ae.code != http.StatusServiceUnavailable || ae.retryAfter == 0 {
		t.Fatalf("the evicted hog asking again: %v, want 503 with Retry-After", err)
	}
	for ns, p := range newest {
		if ns != evicted[0] && !ws.holds(p.slot, p.w) {
			t.Errorf("hog %s lost a wait to another hog", ns)
		}
	}
}

// TestWaitPlacesConvergeToFairShares: namespaces that keep asking, on a replica that is
// full, each end with at least their fair share, the places divided by the namespaces that
// wait (within the per-namespace cap), however the places were taken first.
func TestWaitPlacesConvergeToFairShares(t *testing.T) {
	for _, tc := range []struct {
		max, perNamespace int
		demand            map[string]int // the standby slots of each namespace
	}{
		{max: 12, perNamespace: 12, demand: map[string]int{"a": 12, "b": 12, "c": 1, "d": 3}},
		{max: 100, perNamespace: 40, demand: map[string]int{"a": 40, "b": 40, "c": 40, "d": 40, "e": 40}},
		{max: 10, perNamespace: 10, demand: map[string]int{"a": 10, "b": 1, "c": 1, "d": 1, "e": 1, "f": 1, "g": 1, "h": 1, "i": 1, "j": 1}},
	} {
		ws := newWaiters(tc.max, tc.perNamespace, nil)
		names := []string{}
		for ns := range tc.demand {
			names = append(names, ns)
		}
		held := map[types.UID]*waiter{}
		// Rounds in which every container without a place asks once; evicted ones ask again.
		for range 4 * tc.max {
			for _, ns := range names {
				for i := range tc.demand[ns] {
					slot := types.UID(fmt.Sprintf("%s-%d", ns, i))
					if w, ok := held[slot]; ok && ws.holds(slot, w) {
						continue
					}
					if w, err := ws.add(ns, slot); err == nil {
						held[slot] = w
					}
				}
			}
		}
		count := map[string]int{}
		for _, w := range ws.bySlot {
			count[w.namespace]++
		}
		share := tc.max / len(tc.demand)
		for ns, d := range tc.demand {
			if want := min(d, tc.perNamespace, share); count[ns] < want {
				t.Errorf("max %d: namespace %s holds %d places, want at least %d (counts %v)", tc.max, ns, count[ns], want, count)
			}
		}
	}
}

// TestConfigWaitEvictedAsksAgain: over HTTP, two namespaces fill the replica; a third
// namespace's wait gets in, and the wait it displaced is answered as a wait that ran out (404,
// which the clients take for "ask again", not for an error to back off on or exit).
func TestConfigWaitEvictedAsksAgain(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxWaiters, c.MaxWaitersPerNamespace = 4, 2 })
	other := &harness{t: t, ns: env.Namespace(t), clock: h.clock, url: h.url, srv: h.srv}
	late := &harness{t: t, ns: env.Namespace(t), clock: h.clock, url: h.url, srv: h.srv}
	a1, a2 := h.slot("pool-google-meet-001"), h.slot("pool-google-meet-002")
	b1, b2 := other.slot("pool-google-meet-001"), other.slot("pool-google-meet-002")
	c1 := late.slot("pool-google-meet-001")

	hogs := map[*slotFixture]<-chan answer{}
	var gone *slotFixture
	for i, f := range []*slotFixture{a1, b1, a2, b2} {
		hogs[f] = h.waitCall(t.Context(), f, "60s")
		h.waiting(i + 1)
	}
	tenant := h.waitCall(t.Context(), c1, "60s")
	var got answer
	h.eventually(func() error {
		select {
		case a := <-tenant:
			t.Fatalf("the tenant's wait answered %d %s, want it waiting", a.code, a.body)
		default:
		}
		for f, ch := range hogs {
			select {
			case got = <-ch:
				delete(hogs, f)
				gone = f
				return nil
			default:
			}
		}
		return errors.New("no hog's wait has ended")
	})
	wantStatus(t, "the evicted wait", got.code, got.body, http.StatusNotFound, "no bot is bound")
	if gone != a2 && gone != b2 {
		t.Errorf("the wait of %s/%s was evicted, want the newest of a namespace", gone.slot.Namespace, gone.slot.Name)
	}
	if err := (&botclient.Error{StatusCode: got.code}); !errors.Is(err, botclient.ErrSlotFree) || botclient.Retryable(err) {
		t.Errorf("the clients read %d as %v: want ErrSlotFree (ask again), not a failure", got.code, err)
	}
	h.waiting(4)
	h.eventually(func() error {
		if n := h.waitResults("evicted"); n != 1 {
			return fmt.Errorf("%v waits evicted, want 1", n)
		}
		return nil
	})
	select {
	case a := <-tenant:
		t.Fatalf("the tenant's wait answered %d %s, want it waiting", a.code, a.body)
	default:
	}
	if len(hogs) != 3 {
		t.Errorf("%d hogs' waits still wait, want 3", len(hogs))
	}

	// The tenant's wait is woken by its binding as any other.
	late.bind(c1, late.bot("standup"))
	a := receive(t, tenant, 20*time.Second)
	wantStatus(t, "the tenant's wait", a.code, a.body, http.StatusOK, `"bot":"standup"`)
}
