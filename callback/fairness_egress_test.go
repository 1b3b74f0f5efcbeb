package callback

import (
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"botpool.dev/botpool/internal/egress"
)

// blocking is a receiver whose requests hang until release is closed (or the request ends).
func blocking(t *testing.T) (*receiver, chan struct{}) {
	t.Helper()
	release := make(chan struct{})
	rc := newReceiver(t, func(_ int, _ http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	return rc, release
}

// TestSlowReceiverDelaysOnlyItsOwnCallbacks: a receiver that does not answer holds at most
// PerReceiver workers; another receiver's callback goes out while all of its callbacks hang.
// With one shared pool of workers (the old notifier) the hung receiver took all four.
func TestSlowReceiverDelaysOnlyItsOwnCallbacks(t *testing.T) {
	slow, release := blocking(t)
	defer close(release)
	fast := newReceiver(t, statuses(200))
	e := startNotifier(t, Options{Workers: 4, PerReceiver: 2})

	for _, k := range []string{"s1", "s2", "s3", "s4", "s5", "s6"} {
		if !e.n.Enqueue(callbackTo(slow.url(), k)) {
			t.Fatalf("Enqueue(%s) refused", k)
		}
	}
	waitFor(t, "two requests to the slow receiver", func() bool { return slow.count() == 2 })
	if !e.n.Enqueue(callbackTo(fast.url(), "fast")) {
		t.Fatal("Enqueue(fast) refused")
	}
	if r := e.result(t); r.cb.Key != "fast" || r.err != nil {
		t.Fatalf("first result (%q, %v), want (fast, nil) while the slow receiver hangs", r.cb.Key, r.err)
	}
	if n := slow.count(); n != 2 {
		t.Errorf("the slow receiver got %d requests at once, want PerReceiver = 2", n)
	}
}

// TestReceiverQueueIsBounded: one receiver cannot fill the whole queue; others still get in.
func TestReceiverQueueIsBounded(t *testing.T) {
	slow, release := blocking(t)
	defer close(release)
	other := newReceiver(t, statuses(200))
	e := startNotifier(t, Options{ReceiverCapacity: 2, QueueCapacity: 100})

	for _, k := range []string{"a", "b"} {
		if !e.n.Enqueue(callbackTo(slow.url(), k)) {
			t.Fatalf("Enqueue(%s) refused below ReceiverCapacity", k)
		}
	}
	if e.n.Enqueue(callbackTo(slow.url(), "c")) {
		t.Fatal("Enqueue accepted a callback beyond ReceiverCapacity")
	}
	if !e.n.Enqueue(callbackTo(other.url(), "d")) {
		t.Fatal("another receiver's callback was refused because one receiver is full")
	}
	if r := e.result(t); r.cb.Key != "d" || r.err != nil {
		t.Fatalf("result (%q, %v), want (d, nil)", r.cb.Key, r.err)
	}
}

// TestReceiversTakeTurns: with one worker, receivers are served round-robin rather than in
// arrival order, so a receiver with a long backlog does not make another wait behind all of it.
func TestReceiversTakeTurns(t *testing.T) {
	var mu sync.Mutex
	var order []string
	record := func(name string) func(int, http.ResponseWriter, *http.Request) {
		return func(int, http.ResponseWriter, *http.Request) {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
		}
	}
	a := newReceiver(t, record("a"))
	b := newReceiver(t, record("b"))
	e := newEnv(Options{Workers: 1, PerReceiver: 1})
	for _, k := range []string{"a1", "a2", "a3"} {
		e.n.Enqueue(callbackTo(a.url(), k))
	}
	e.n.Enqueue(callbackTo(b.url(), "b1"))
	e.start(t)
	for range 4 {
		e.result(t)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"a", "b", "a", "a"}; !slices.Equal(order, want) {
		t.Errorf("requests went to %v, want %v", order, want)
	}
}

// TestResultIsKeptForTheController: the outcome stays readable for DedupTTL, so the bot
// controller can record it on the Bot; Enqueue of the key then sends nothing.
func TestResultIsKeptForTheController(t *testing.T) {
	rc := newReceiver(t, statuses(503, 200))
	e := startNotifier(t, Options{DedupTTL: time.Hour})
	cb := callbackTo(rc.url(), "uid-1/Done")
	e.n.Enqueue(cb)
	e.waitForRetry(t)
	e.clk.Step(time.Second)
	e.result(t)

	res, ok := e.n.Result(cb.Key)
	if !ok || res.Err != nil || res.Attempts != 2 || !res.At.Equal(epoch.Add(time.Second)) || res.Callback.Key != cb.Key {
		t.Fatalf("Result = %+v, %v; want delivered after 2 attempts at epoch+1s", res, ok)
	}
	e.clk.Step(time.Hour)
	if _, ok := e.n.Result(cb.Key); ok {
		t.Error("the result outlived DedupTTL")
	}
}

// TestRefusedDestinationIsAPermanentFailure: the default policy refuses loopback (and
// link-local, private…) at connect time; the callback fails at once, without a retry, with an
// error saying why, and the receiver never sees a request.
func TestRefusedDestinationIsAPermanentFailure(t *testing.T) {
	rc := newReceiver(t, statuses(200))
	e := startNotifier(t, Options{Egress: egress.Policy{Allowed: []netip.Prefix{}}}) // the manager's default
	e.n.Enqueue(callbackTo(rc.url(), "k"))
	r := e.result(t)
	if !errors.Is(r.err, ErrRejected) || !errors.Is(r.err, egress.ErrRefused) {
		t.Fatalf("result error %v, want ErrRejected wrapping egress.ErrRefused", r.err)
	}
	if !strings.Contains(r.err.Error(), "loopback") {
		t.Errorf("error %q does not say why the destination was refused", r.err)
	}
	if n := rc.count(); n != 0 {
		t.Errorf("the refused receiver got %d requests", n)
	}
	if got := e.attempts(); got != 1 {
		t.Errorf("attempts = %v, want 1 (no retry)", got)
	}
}

// TestRedirectsAreNotFollowed: a receiver cannot bounce the POST to another address.
func TestRedirectsAreNotFollowed(t *testing.T) {
	target := newReceiver(t, statuses(200))
	redirecting := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.url(), http.StatusTemporaryRedirect)
	})
	e := startNotifier(t, Options{})
	e.n.Enqueue(callbackTo(redirecting.url(), "k"))
	if r := e.result(t); !errors.Is(r.err, ErrRejected) {
		t.Fatalf("result error %v, want ErrRejected", r.err)
	}
	if n := target.count(); n != 0 {
		t.Errorf("the redirect target got %d requests", n)
	}
}
