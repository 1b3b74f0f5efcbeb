package callback

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestServerErrorsAreRetriedWithBackoff(t *testing.T) {
	rc := newReceiver(t, statuses(500, 500, 200))
	e := startNotifier(t, Options{})
	e.n.Enqueue(callbackTo(rc.url(), "k"))

	// Attempt 1 fails; attempt 2 is due after BackoffBase (1s), not a moment earlier.
	e.waitForRetry(t)
	e.clk.Step(time.Second - time.Millisecond)
	if n := rc.count(); n != 1 || !e.clk.HasWaiters() {
		t.Fatalf("after 999ms: %d requests (want 1), retry still pending %v", n, e.clk.HasWaiters())
	}
	e.clk.Step(time.Millisecond)
	waitFor(t, "attempt 2", func() bool { return rc.count() == 2 })

	// Attempt 2 fails; attempt 3 waits 2s.
	e.waitForRetry(t)
	e.clk.Step(2*time.Second - time.Millisecond)
	if n := rc.count(); n != 2 {
		t.Fatalf("attempt 3 came before its 2s backoff: %d requests", n)
	}
	e.clk.Step(time.Millisecond)

	if r := e.result(t); r.err != nil {
		t.Fatalf("OnResult error %v, want nil", r.err)
	}
	if n := rc.count(); n != 3 {
		t.Errorf("receiver got %d requests, want 3", n)
	}
	if got := e.attempts(); got != 3 {
		t.Errorf("attempts = %v, want 3", got)
	}
	if got := e.deliveries(resultSuccess); got != 1 {
		t.Errorf("deliveries{success} = %v, want 1", got)
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	e := startNotifier(t, Options{})
	e.n.Enqueue(callbackTo(rc.url(), "k"))

	e.waitForRetry(t)
	e.clk.Step(29 * time.Second)
	if n := rc.count(); n != 1 || !e.clk.HasWaiters() {
		t.Fatalf("after 29s of a 30s Retry-After: %d requests, want 1", n)
	}
	e.clk.Step(time.Second)
	if r := e.result(t); r.err != nil {
		t.Fatalf("OnResult error %v, want nil", r.err)
	}
	if n := rc.count(); n != 2 {
		t.Errorf("receiver got %d requests, want 2", n)
	}
}

func TestRetryAfterIsCappedByBackoffCap(t *testing.T) {
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			w.Header().Set("Retry-After", "86400")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	e := startNotifier(t, Options{BackoffCap: time.Minute})
	e.n.Enqueue(callbackTo(rc.url(), "k"))

	e.waitForRetry(t)
	e.clk.Step(time.Minute)
	if r := e.result(t); r.err != nil {
		t.Fatalf("not delivered one BackoffCap after a day-long Retry-After: %v", r.err)
	}
}

func TestClientErrorIsNotRetried(t *testing.T) {
	rc := newReceiver(t, statuses(http.StatusBadRequest))
	e := startNotifier(t, Options{})
	e.n.Enqueue(callbackTo(rc.url(), "k"))

	r := e.result(t)
	var se *StatusError
	if !errors.Is(r.err, ErrRejected) || !errors.As(r.err, &se) || se.StatusCode != http.StatusBadRequest {
		t.Fatalf("OnResult error %v, want ErrRejected with a 400 StatusError", r.err)
	}
	if e.clk.HasWaiters() {
		t.Error("a retry was scheduled after a 400")
	}
	if n := rc.count(); n != 1 {
		t.Errorf("receiver got %d requests, want 1", n)
	}
	if got := e.deliveries(resultRejected); got != 1 {
		t.Errorf("deliveries{rejected} = %v, want 1", got)
	}
}

func TestRetryableStatuses(t *testing.T) {
	for _, code := range []int{http.StatusRequestTimeout, http.StatusTooManyRequests, 500, 502, 503} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			rc := newReceiver(t, statuses(code, 200))
			e := startNotifier(t, Options{})
			e.n.Enqueue(callbackTo(rc.url(), "k"))
			e.waitForRetry(t)
			e.clk.Step(time.Second)
			if r := e.result(t); r.err != nil {
				t.Fatalf("%d then 200: OnResult error %v", code, r.err)
			}
		})
	}
}

func TestTransportErrorIsRetriedUntilMaxAttempts(t *testing.T) {
	rc := newReceiver(t, statuses(200))
	url := rc.url()
	rc.srv.Close() // connection refused from now on

	e := startNotifier(t, Options{MaxAttempts: 3})
	e.n.Enqueue(callbackTo(url, "k"))
	for attempt := 1; attempt < 3; attempt++ {
		e.waitForRetry(t)
		e.noResult(t)
		e.clk.Step(time.Second << (attempt - 1))
	}

	r := e.result(t)
	if !errors.Is(r.err, ErrGaveUp) || !strings.Contains(r.err.Error(), "after 3 attempts") {
		t.Fatalf("OnResult error %v, want ErrGaveUp after 3 attempts", r.err)
	}
	if got := e.attempts(); got != 3 {
		t.Errorf("attempts = %v, want 3", got)
	}
	if got := e.deliveries(resultFailed); got != 1 {
		t.Errorf("deliveries{failed} = %v, want 1", got)
	}
	if e.clk.HasWaiters() {
		t.Error("a retry is still scheduled after giving up")
	}
}

func TestGivesUpAfterMaxAttempts(t *testing.T) {
	rc := newReceiver(t, statuses(http.StatusServiceUnavailable))
	e := startNotifier(t, Options{MaxAttempts: 4, BackoffCap: 3 * time.Second})
	e.n.Enqueue(callbackTo(rc.url(), "k"))
	for _, backoff := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} { // the last one capped
		e.waitForRetry(t)
		e.clk.Step(backoff)
	}

	r := e.result(t)
	var se *StatusError
	if !errors.Is(r.err, ErrGaveUp) || !errors.As(r.err, &se) || se.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("OnResult error %v, want ErrGaveUp wrapping a 503", r.err)
	}
	if n := rc.count(); n != 4 {
		t.Errorf("receiver got %d requests, want 4", n)
	}
	e.noResult(t) // exactly once
}

func TestWaitingRetryDoesNotHoldAWorker(t *testing.T) {
	failing := newReceiver(t, statuses(500))
	ok := newReceiver(t, statuses(200))
	e := startNotifier(t, Options{Workers: 1})

	e.n.Enqueue(callbackTo(failing.url(), "failing"))
	e.waitForRetry(t)
	// No clock step: the only worker is free while "failing" waits for its backoff.
	e.n.Enqueue(callbackTo(ok.url(), "ok"))
	if r := e.result(t); r.cb.Key != "ok" || r.err != nil {
		t.Fatalf("OnResult (%q, %v), want (ok, nil)", r.cb.Key, r.err)
	}
}
