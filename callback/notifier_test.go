package callback

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
)

func TestDeliversOnceWithBodyAndHeaders(t *testing.T) {
	rc := newReceiver(t, statuses(http.StatusNoContent))
	e := startNotifier(t, Options{})
	cb := Callback{URL: rc.url(), Key: "uid-1/Fatal", Body: Payload{
		Bot: "standup", Namespace: "team-a", UID: "uid-1", Phase: "Fatal",
		Reason: "QueueTimeout", Message: "no slot within 5m", FinishedAt: epoch,
	}}

	if !e.n.Enqueue(cb) {
		t.Fatal("Enqueue refused a callback on an empty queue")
	}
	if r := e.result(t); r.err != nil || r.cb.Key != cb.Key {
		t.Fatalf("OnResult(%q, %v), want (%q, nil)", r.cb.Key, r.err, cb.Key)
	}

	if n := rc.count(); n != 1 {
		t.Fatalf("receiver got %d requests, want 1", n)
	}
	req := rc.request(0)
	if req.method != http.MethodPost {
		t.Errorf("method %s, want POST", req.method)
	}
	for h, want := range map[string]string{
		"Content-Type": "application/json", "User-Agent": "botpool", "Idempotency-Key": "uid-1/Fatal",
	} {
		if got := req.header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	if got := decode(t, req.body); got != cb.Body {
		t.Errorf("body %+v, want %+v", got, cb.Body)
	}
	if !bytes.Contains(req.body, []byte(`"bot":"standup"`)) || !bytes.Contains(req.body, []byte(`"finishedAt":"2026-11-23T12:00:00Z"`)) {
		t.Errorf("body %s lacks the documented field names", req.body)
	}
	if got := e.deliveries(resultSuccess); got != 1 {
		t.Errorf("deliveries{success} = %v, want 1", got)
	}
	if got := e.attempts(); got != 1 {
		t.Errorf("attempts = %v, want 1", got)
	}
	waitFor(t, "queue depth 0", func() bool { return value(e.n.metrics.queueDepth) == 0 })
}

func TestDuplicatesAreIgnored(t *testing.T) {
	release := make(chan struct{})
	rc := newReceiver(t, func(_ int, _ http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	e := newEnv(Options{DedupTTL: time.Hour})

	// Queued twice before the workers run.
	cb := callbackTo(rc.url(), "uid-1/Done")
	for range 2 {
		if !e.n.Enqueue(cb) {
			t.Fatal("Enqueue of a queued key must report true")
		}
	}
	e.start(t)
	waitFor(t, "the request in flight", func() bool { return rc.count() == 1 })

	// In flight.
	if !e.n.Enqueue(cb) {
		t.Fatal("Enqueue of an in-flight key must report true")
	}
	close(release)
	if r := e.result(t); r.err != nil {
		t.Fatal(r.err)
	}

	// Delivered: the reconciler's next passes change nothing.
	for range 3 {
		if !e.n.Enqueue(cb) {
			t.Fatal("Enqueue of a delivered key must report true")
		}
	}
	e.noResult(t)
	if n := rc.count(); n != 1 {
		t.Fatalf("receiver got %d requests, want 1", n)
	}

	// The memory of delivered keys is time-bounded.
	e.clk.Step(time.Hour)
	e.n.Enqueue(cb)
	if r := e.result(t); r.err != nil {
		t.Fatal(r.err)
	}
	if n := rc.count(); n != 2 {
		t.Errorf("after DedupTTL the key was not sent again: %d requests", n)
	}
}

func TestFinishedFailuresAreNotResent(t *testing.T) {
	rc := newReceiver(t, statuses(http.StatusNotFound))
	e := startNotifier(t, Options{})
	cb := callbackTo(rc.url(), "k")
	e.n.Enqueue(cb)
	if r := e.result(t); !errors.Is(r.err, ErrRejected) {
		t.Fatalf("OnResult error %v, want ErrRejected", r.err)
	}
	e.n.Enqueue(cb)
	e.noResult(t)
	if n := rc.count(); n != 1 {
		t.Errorf("a rejected callback was sent again: %d requests", n)
	}
}

func TestEnqueueDropsWhenFullWithoutBlocking(t *testing.T) {
	release := make(chan struct{})
	rc := newReceiver(t, func(_ int, _ http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	e := startNotifier(t, Options{Workers: 1, QueueCapacity: 1})

	if !e.n.Enqueue(callbackTo(rc.url(), "a")) {
		t.Fatal("first callback refused")
	}
	waitFor(t, "a in flight", func() bool { return rc.count() == 1 })

	accepted := make(chan bool)
	go func() { accepted <- e.n.Enqueue(callbackTo(rc.url(), "b")) }()
	select {
	case ok := <-accepted:
		if ok {
			t.Fatal("Enqueue accepted a callback beyond QueueCapacity")
		}
	case <-time.After(time.Minute): // a liveness bound: Enqueue returns at once unless it blocks
		t.Fatal("Enqueue blocked on a full queue")
	}
	if got := e.deliveries(resultDropped); got != 1 {
		t.Errorf("deliveries{dropped} = %v, want 1", got)
	}
	if got := value(e.n.metrics.queueDepth); got != 1 {
		t.Errorf("queue depth %v, want 1", got)
	}

	// A dropped key is not remembered: the reconciler's next pass gets it in.
	close(release)
	e.result(t)
	if !e.n.Enqueue(callbackTo(rc.url(), "b")) {
		t.Fatal("a dropped key was refused once the queue had room")
	}
	if r := e.result(t); r.cb.Key != "b" || r.err != nil {
		t.Fatalf("OnResult(%q, %v), want (b, nil)", r.cb.Key, r.err)
	}
}

func TestSlowReceiverDoesNotBlockOthers(t *testing.T) {
	slow := newReceiver(t, func(_ int, _ http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // hangs until the notifier's request timeout
	})
	fast := newReceiver(t, statuses(200))
	e := startNotifier(t, Options{Workers: 2, RequestTimeout: 200 * time.Millisecond})

	e.n.Enqueue(callbackTo(slow.url(), "slow"))
	waitFor(t, "the slow request in flight", func() bool { return slow.count() == 1 })
	e.n.Enqueue(callbackTo(fast.url(), "fast"))

	if r := e.result(t); r.cb.Key != "fast" || r.err != nil {
		t.Fatalf("first OnResult (%q, %v), want (fast, nil) while slow hangs", r.cb.Key, r.err)
	}
	// The hung request times out and becomes a retry on the clock.
	e.waitForRetry(t)
	if got := e.attempts(); got != 2 {
		t.Errorf("attempts = %v, want 2", got)
	}
}

func TestInvalidURLIsRejected(t *testing.T) {
	e := startNotifier(t, Options{})
	for i, u := range []string{"ftp://example.com/x", "not a url", "http://%zz"} {
		e.n.Enqueue(callbackTo(u, string(rune('a'+i))))
		if r := e.result(t); !errors.Is(r.err, ErrRejected) {
			t.Errorf("%q: OnResult error %v, want ErrRejected", u, r.err)
		}
	}
	if got := e.attempts(); got != 0 {
		t.Errorf("attempts = %v, want 0 for invalid URLs", got)
	}
}

func TestSecretsInURLAreNotLoggedOrReturned(t *testing.T) {
	var logs strings.Builder
	logger := funcr.New(func(prefix, args string) { logs.WriteString(prefix + args + "\n") }, funcr.Options{Verbosity: 1})
	rejecting := newReceiver(t, statuses(http.StatusForbidden))
	closed := newReceiver(t, statuses(200))
	closedURL := closed.url()
	closed.srv.Close()

	e := newEnv(Options{Logger: logger, Workers: 1, MaxAttempts: 2})
	e.start(t)
	e.n.Enqueue(callbackTo("http://user:pass@"+strings.TrimPrefix(rejecting.url(), "http://")+"?token=s3cret", "a"))
	r1 := e.result(t)
	e.n.Enqueue(callbackTo(closedURL+"?token=s3cret", "b"))
	e.waitForRetry(t)
	e.clk.Step(time.Second)
	r2 := e.result(t)

	for _, s := range []string{r1.err.Error(), r2.err.Error(), logs.String()} {
		if strings.Contains(s, "s3cret") || strings.Contains(s, "pass") {
			t.Errorf("secret leaked: %s", s)
		}
	}
	if !strings.Contains(logs.String(), rejecting.srv.URL[len("http://"):]+"/hook") {
		t.Errorf("logs do not name the host and path:\n%s", logs.String())
	}
}

func TestTwoNotifiersShareOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := New(Options{Registerer: reg, QueueCapacity: 1})
	b := New(Options{Registerer: reg, QueueCapacity: 1}) // must not panic
	a.Enqueue(Callback{Key: "1"})
	a.Enqueue(Callback{Key: "2"})
	b.Enqueue(Callback{Key: "1"})
	b.Enqueue(Callback{Key: "2"})
	if got := value(b.metrics.deliveries.WithLabelValues(resultDropped)); got != 2 {
		t.Errorf("shared deliveries{dropped} = %v, want 2", got)
	}
}

func TestNeedsLeaderElection(t *testing.T) {
	if !New(Options{}).NeedLeaderElection() {
		t.Error("only the leader may deliver callbacks")
	}
}

func TestStartReturnsOnCancelWithoutLeaks(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		hanging := newReceiver(t, func(_ int, _ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		failing := newReceiver(t, statuses(500))
		transport := &http.Transport{}
		defer transport.CloseIdleConnections()

		e := newEnv(Options{Client: &http.Client{Transport: transport}})
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan error, 1)
		go func() { stopped <- e.n.Start(ctx) }()
		e.n.Enqueue(callbackTo(failing.url(), "retrying"))
		e.waitForRetry(t)
		e.n.Enqueue(callbackTo(hanging.url(), "in-flight"))
		waitFor(t, "a request in flight", func() bool { return hanging.count() == 1 })

		if err := e.n.Start(ctx); err == nil {
			t.Error("a second Start succeeded")
		}
		cancel()
		select {
		case err := <-stopped:
			if err != nil {
				t.Fatalf("Start returned %v", err)
			}
		case <-time.After(time.Minute): // a liveness bound
			t.Fatal("Start did not return within a minute of cancel")
		}
		e.noResult(t) // an abandoned callback has no outcome
		hanging.srv.Close()
		failing.srv.Close()
	}()
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}

func TestEmptyKeyDefaultsToUIDAndPhase(t *testing.T) {
	rc := newReceiver(t, statuses(200))
	e := startNotifier(t, Options{})
	e.n.Enqueue(Callback{URL: rc.url(), Body: Payload{UID: "u1", Phase: "Done"}})
	if r := e.result(t); r.cb.Key != "u1/Done" || r.err != nil {
		t.Fatalf("OnResult(%q, %v), want (u1/Done, nil)", r.cb.Key, r.err)
	}
	if got := rc.request(0).header.Get("Idempotency-Key"); got != "u1/Done" {
		t.Errorf("Idempotency-Key %q, want u1/Done", got)
	}
}

// TestPrepareAndOwnedCallbacks: Prepare's headers go on the request it is called for (a
// signature of the moment it leaves); a callback Prepare drops leaves the notifier unsent and
// without an outcome; an owned callback (Done) reports to Done only: not to OnResult, and it is
// not remembered.
func TestPrepareAndOwnedCallbacks(t *testing.T) {
	rc := newReceiver(t, statuses(http.StatusNoContent))
	e := startNotifier(t, Options{})
	done := make(chan Result, 2)
	owned := func(key string, send bool) Callback {
		cb := callbackTo(rc.url(), key)
		cb.Prepare = func(now time.Time) (map[string]string, bool) {
			return map[string]string{"X-Sent-At": strconv.FormatInt(now.Unix(), 10)}, send
		}
		cb.Done = func(r Result) { done <- r }
		return cb
	}
	if !e.n.Enqueue(owned("dropped", false)) {
		t.Fatal("Enqueue refused")
	}
	if !e.n.Enqueue(owned("sent", true)) {
		t.Fatal("Enqueue refused")
	}
	var r Result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("no Done within a minute")
	}
	if r.Err != nil || r.Callback.Key != "sent" {
		t.Fatalf("Done(%q, %v), want the sent one delivered", r.Callback.Key, r.Err)
	}
	if n := rc.count(); n != 1 {
		t.Fatalf("receiver got %d requests, want only the one Prepare let go", n)
	}
	if got := rc.request(0).header.Get("X-Sent-At"); got != strconv.FormatInt(epoch.Unix(), 10) {
		t.Errorf("X-Sent-At = %q, want Prepare's header", got)
	}
	e.noResult(t)
	select {
	case r := <-done:
		t.Fatalf("Done called for %q, which Prepare dropped", r.Callback.Key)
	default:
	}
	if _, ok := e.n.Result("sent"); ok {
		t.Error("an owned callback's outcome is remembered")
	}
	// Both left the queue: the same keys are taken again.
	waitFor(t, "the queue to empty", func() bool { return value(e.n.metrics.queueDepth) == 0 })
}
