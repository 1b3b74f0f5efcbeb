package coolify_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/internal/egress"
)

// boundedCtx ends a call that would otherwise sleep on a fake clock for good: a client that
// sleeps fails the test by the context's error instead of hanging it.
func boundedCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestHugeRetryAfterIsCappedAndHandedBack: a 429 asking for a year is neither slept on nor
// believed. The call returns a *WaitError at once with the wait capped to MaxPause, the
// shared limiter pauses for at most MaxPause, and calls during the pause are not sent.
func TestHugeRetryAfterIsCappedAndHandedBack(t *testing.T) {
	srv, n := stub(t, http.StatusTooManyRequests, map[string]string{"Retry-After": "31536000"}, `{"message":"Too Many Attempts."}`)
	fc := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0)) // timers fire only when stepped
	c, err := coolify.New(srv.URL, secretToken, coolify.WithHTTPClient(checkedHTTP(t)), coolify.WithClock(fc), coolify.WithVersion("4.3.11"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := boundedCtx(t)
	_, err = c.ListServers(ctx)
	var we *coolify.WaitError
	if !errors.As(err, &we) || !errors.Is(err, coolify.ErrThrottled) || !errors.Is(err, coolify.ErrRateLimited) {
		t.Fatalf("err = %v, want a *WaitError for the 429", err)
	}
	if we.Wait != coolify.MaxPause || we.Reason != coolify.WaitRateLimited {
		t.Fatalf("wait = %s (%s), want MaxPause (%s)", we.Wait, we.Reason, coolify.MaxPause)
	}
	if *n != 1 {
		t.Fatalf("%d requests, want 1 (no retry on a long Retry-After)", *n)
	}
	// During the pause: not sent, told how long is left.
	fc.Step(time.Minute)
	_, err = c.ListServers(ctx)
	if !errors.As(err, &we) || we.Reason != coolify.WaitLimiter || we.Wait != coolify.MaxPause-time.Minute {
		t.Fatalf("during the pause: %v, want a limiter wait of %s", err, coolify.MaxPause-time.Minute)
	}
	if *n != 1 {
		t.Fatalf("a request was sent during the pause")
	}
	// After MaxPause (not a year) the client asks again.
	fc.Step(coolify.MaxPause)
	_, _ = c.ListServers(ctx)
	if *n != 2 {
		t.Fatalf("%d requests after the capped pause, want 2", *n)
	}
}

// TestRetryAfterHTTPDateIsCapped: the date form of Retry-After is capped as well.
func TestRetryAfterHTTPDateIsCapped(t *testing.T) {
	far := time.Unix(1_800_000_000, 0).Add(24 * 365 * time.Hour).UTC().Format(http.TimeFormat)
	srv, _ := stub(t, http.StatusServiceUnavailable, map[string]string{"Retry-After": far}, `{"message":"Service Unavailable"}`)
	fc := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	c, _ := coolify.New(srv.URL, secretToken, coolify.WithHTTPClient(checkedHTTP(t)), coolify.WithClock(fc), coolify.WithVersion("4.3.11"))
	_, err := c.ListServers(boundedCtx(t))
	var apiErr *coolify.APIError
	if !errors.As(err, &apiErr) || apiErr.RetryAfter != coolify.MaxPause {
		t.Fatalf("err = %v, want an APIError with RetryAfter capped to %s", err, coolify.MaxPause)
	}
}

// blockingServer answers only when released, counting requests in flight.
type blockingServer struct {
	*httptest.Server
	release  chan struct{}
	arrived  chan struct{}
	requests atomic.Int32
}

func newBlockingServer(t *testing.T) *blockingServer {
	b := &blockingServer{release: make(chan struct{}), arrived: make(chan struct{}, 100)}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.requests.Add(1)
		b.arrived <- struct{}{}
		select {
		case <-b.release:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`[]`))
	}))
	t.Cleanup(b.Close)
	return b
}

// TestBulkheadBoundsOneInstance: with MaxInFlight requests hanging on one instance, the next
// call to it fails fast with a *WaitError, while another instance (same registry) answers.
func TestBulkheadBoundsOneInstance(t *testing.T) {
	slow := newBlockingServer(t)
	fast, _ := stub(t, 200, nil, `[]`)
	fc := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	reg := coolify.NewRegistry(1_000_000, coolify.WithClock(fc), coolify.WithVersion("4.3.11"),
		coolify.WithMaxWait(0), coolify.WithInstanceLimits(coolify.InstanceLimits{MaxInFlight: 2}))
	slowA, _ := reg.Client(slow.URL, "tenant-a")
	slowB, _ := reg.Client(slow.URL, "tenant-b") // another token, same instance: same bulkhead
	other, _ := reg.Client(fast.URL, "tenant-c")
	ctx := boundedCtx(t)

	var wg sync.WaitGroup
	for _, c := range []*coolify.Client{slowA, slowB} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.ListServers(ctx); err != nil {
				t.Errorf("held call: %v", err)
			}
		}()
	}
	<-slow.arrived
	<-slow.arrived // both hang in the server now

	_, err := slowA.ListProjects(ctx)
	var we *coolify.WaitError
	if !errors.As(err, &we) || we.Reason != coolify.WaitBulkhead || we.Wait <= 0 {
		t.Fatalf("third call to the hanging instance: %v, want a bulkhead *WaitError", err)
	}
	if got := slow.requests.Load(); got != 2 {
		t.Fatalf("%d requests reached the hanging instance, want 2", got)
	}
	if _, err := other.ListServers(ctx); err != nil {
		t.Fatalf("another instance: %v", err)
	}
	close(slow.release)
	wg.Wait()
	if _, err := slowA.ListProjects(ctx); err != nil {
		t.Fatalf("after the instance answered: %v", err)
	}
}

// failingTransport fails every request below HTTP, as a black-holed instance's timeouts do,
// until ok is set.
type failingTransport struct {
	calls atomic.Int32
	ok    atomic.Bool
}

func (f *failingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	f.calls.Add(1)
	if f.ok.Load() {
		return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}, Request: r}, nil
	}
	return nil, context.DeadlineExceeded
}

// TestBreakerFailsFastAfterRepeatedTimeouts: after three attempts time out in a row, calls
// fail fast (nothing sent) until the open period passes; a failed probe doubles the period;
// a probe that gets an answer closes the breaker.
func TestBreakerFailsFastAfterRepeatedTimeouts(t *testing.T) {
	ft := &failingTransport{}
	fc := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	c, _ := coolify.New("https://coolify.example", secretToken, coolify.WithHTTPClient(&http.Client{Transport: ft}),
		coolify.WithClock(fc), coolify.WithVersion("4.3.11"), coolify.WithMaxRetries(0))
	ctx := boundedCtx(t)
	for i := range 3 {
		if _, err := c.ListServers(ctx); !errors.Is(err, coolify.ErrTransport) {
			t.Fatalf("call %d: %v, want ErrTransport", i, err)
		}
	}
	_, err := c.ListServers(ctx)
	var we *coolify.WaitError
	if !errors.As(err, &we) || we.Reason != coolify.WaitBreaker || we.Wait != coolify.DefaultBreakerOpen {
		t.Fatalf("4th call: %v, want the breaker's *WaitError for %s", err, coolify.DefaultBreakerOpen)
	}
	if got := ft.calls.Load(); got != 3 {
		t.Fatalf("%d attempts reached the transport, want 3", got)
	}
	fc.Step(coolify.DefaultBreakerOpen)
	if _, err := c.ListServers(ctx); !errors.Is(err, coolify.ErrTransport) { // the probe
		t.Fatalf("probe: %v, want ErrTransport", err)
	}
	if _, err := c.ListServers(ctx); !errors.As(err, &we) || we.Wait != 2*coolify.DefaultBreakerOpen {
		t.Fatalf("after a failed probe: %v, want a breaker wait of %s", err, 2*coolify.DefaultBreakerOpen)
	}
	fc.Step(2 * coolify.DefaultBreakerOpen)
	ft.ok.Store(true)
	for i := range 2 {
		if _, err := c.ListServers(ctx); errors.Is(err, coolify.ErrThrottled) || errors.Is(err, coolify.ErrTransport) {
			t.Fatalf("call %d after the instance answered: %v", i, err)
		}
	}
}

// TestCallBudgetBoundsRetries: a call that keeps failing stops retrying within its budget,
// however many retries it is allowed.
func TestCallBudgetBoundsRetries(t *testing.T) {
	ft := &failingTransport{}
	fc := autoClock{clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))}
	c, _ := coolify.New("https://coolify.example", secretToken, coolify.WithHTTPClient(&http.Client{Transport: ft}),
		coolify.WithClock(fc), coolify.WithVersion("4.3.11"), coolify.WithMaxRetries(100),
		coolify.WithCallBudget(3*time.Second), coolify.WithInstanceLimits(coolify.InstanceLimits{BreakerThreshold: 1000}))
	start := fc.Now()
	if _, err := c.ListServers(boundedCtx(t)); !errors.Is(err, coolify.ErrTransport) {
		t.Fatalf("err = %v, want ErrTransport", err)
	}
	if spent := fc.Since(start); spent > 3*time.Second {
		t.Fatalf("the call spent %s, over its 3s budget", spent)
	}
	if got := ft.calls.Load(); got < 2 || got > 10 {
		t.Fatalf("%d attempts, want a few retries within the budget", got)
	}
}

// TestLimiterPacingBeyondMaxWaitIsHandedBack: a request the client-side limiter would hold
// longer than maxWait is not slept on, and does not use up the budget it did not spend.
func TestLimiterPacingBeyondMaxWaitIsHandedBack(t *testing.T) {
	srv, n := stub(t, 200, nil, `[]`)
	fc := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	c, _ := coolify.New(srv.URL, secretToken, coolify.WithHTTPClient(checkedHTTP(t)), coolify.WithClock(fc), coolify.WithVersion("4.3.11"),
		coolify.WithLimiter(coolify.NewLimiter(1)))
	ctx := boundedCtx(t)
	if _, err := c.ListServers(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_, err := c.ListServers(ctx)
		if wait, ok := coolify.RetryAfter(err); !ok || wait < 59*time.Second || wait > time.Minute {
			t.Fatalf("err = %v, want a limiter wait of about a minute", err)
		}
	}
	fc.Step(time.Minute)
	if _, err := c.ListServers(ctx); err != nil {
		t.Fatalf("after the minute: %v", err)
	}
	if *n != 2 {
		t.Fatalf("%d requests, want 2", *n)
	}
}

// TestServerTextIsSanitised: the server's message reaches statuses and Events: it is cut to
// MaxMessageLength runes, on one line, without control characters.
func TestServerTextIsSanitised(t *testing.T) {
	long := strings.Repeat("x", 5000)
	for _, tc := range []struct{ name, body string }{
		{"json message", `{"message":"line one\nline two\r\u001b[31mred\u0000 ` + long + `"}`},
		{"plain text", "oops\n\tforged log line"},
		{"field errors", `{"message":"Validation failed.","errors":{"name\n":["` + long + `\n"]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := stub(t, 422, nil, tc.body)
			c := stubClient(t, srv.URL)
			_, err := c.ListServers(boundedCtx(t))
			var apiErr *coolify.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %v", err)
			}
			text := err.Error()
			if strings.ContainsAny(text, "\n\r\t\x00\x1b") {
				t.Fatalf("error text carries control characters: %q", text)
			}
			if n := len([]rune(apiErr.Message)); n > coolify.MaxMessageLength {
				t.Fatalf("message of %d runes", n)
			}
			for k, vs := range apiErr.Fields {
				for _, v := range vs {
					if len([]rune(v)) > coolify.MaxMessageLength || strings.ContainsAny(k+v, "\n") {
						t.Fatalf("field %q: %q not sanitised", k, v)
					}
				}
			}
			if len(text) > 1000 {
				t.Fatalf("error text of %d bytes", len(text))
			}
		})
	}
}

func TestSanitize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"plain", 10, "plain"},
		{"a\nb\r\nc", 10, "a b c"},
		{"  lead  trail  ", 20, "lead trail"},
		{"ab\x00\x1bcd", 10, "ab cd"},
		{"abcdefghij", 5, "abcd…"},
		{"abcde", 5, "abcde"},
		{"héllo wörld", 7, "héllo…"},
		{"bad\xffutf8", 20, "bad\uFFFDutf8"},
		{"a\u2028b", 10, "a b"},
	} {
		if got := coolify.Sanitize(tc.in, tc.max); got != tc.want {
			t.Errorf("Sanitize(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}

// TestMalformedURLDoesNotLeakItsPassword: a base URL that does not parse is quoted in the
// error (which reaches pool conditions and Events) without its user info.
func TestMalformedURLDoesNotLeakItsPassword(t *testing.T) {
	for _, raw := range []string{
		"https://admin:hunter2-secret@coolify.example:notaport",
		"https://admin:hunter2-secret@coolify.example:notaport/api/v1",
		"https://admin:hunter2%zz-secret@coolify.example",
		"ftp://admin:hunter2-secret@coolify.example",
		"admin:hunter2-secret@coolify.example",
	} {
		_, err := coolify.New(raw, "token")
		if err == nil {
			t.Fatalf("%q: no error", raw)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: the error shows the password: %v", raw, err)
		}
		if _, err := coolify.NewRegistry(0).Client(raw, "token"); err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: registry error %v", raw, err)
		}
	}
	// The cause is still said.
	_, err := coolify.New("https://u:p@coolify.example:notaport", "t")
	if !strings.Contains(err.Error(), "port") || !strings.Contains(err.Error(), "redacted@coolify.example") {
		t.Errorf("err = %v, want the cause and the redacted URL", err)
	}
}

// TestRedirectToAnotherHostIsRefused: a Coolify URL redirecting elsewhere (say, to a cluster
// address) is not followed, with or without an egress policy.
func TestRedirectToAnotherHostIsRefused(t *testing.T) {
	var hit atomic.Bool
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hit.Store(true) }))
	t.Cleanup(target.Close)
	elsewhere := strings.Replace(target.URL, "127.0.0.1", "localhost", 1) + "/api/v1/servers"
	srv := httptest.NewServer(http.RedirectHandler(elsewhere, http.StatusFound))
	t.Cleanup(srv.Close)
	loopback := egress.Policy{Allowed: mustPrefixes(t, "127.0.0.0/8,::1/128")}
	for name, opts := range map[string][]coolify.Option{
		"default":  nil,
		"egress":   {coolify.WithEgress(loopback)},
		"registry": nil,
	} {
		var c *coolify.Client
		var err error
		if name == "registry" {
			c, err = coolify.NewRegistry(0, coolify.WithEgress(loopback), coolify.WithVersion("4.3.11")).Client(srv.URL, secretToken)
		} else {
			c, err = coolify.New(srv.URL, secretToken, append(opts, coolify.WithVersion("4.3.11"))...)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.ListServers(boundedCtx(t)); !errors.Is(err, egress.ErrRefused) {
			t.Errorf("%s: err = %v, want ErrRefused", name, err)
		}
		if hit.Load() {
			t.Fatalf("%s: the redirect was followed", name)
		}
	}
}

// TestEgressPolicyRefusesAndIsNotRetried: a client whose policy refuses the instance's address
// fails with egress.ErrRefused without retrying, and does not trip the breaker.
func TestEgressPolicyRefusesAndIsNotRetried(t *testing.T) {
	srv, n := stub(t, 200, nil, `[]`)
	c, _ := coolify.New(srv.URL, secretToken, coolify.WithEgress(egress.Policy{}), coolify.WithVersion("4.3.11"))
	for range 5 {
		_, err := c.ListServers(boundedCtx(t))
		if !errors.Is(err, egress.ErrRefused) || errors.Is(err, coolify.ErrThrottled) {
			t.Fatalf("err = %v, want ErrRefused (and no breaker)", err)
		}
	}
	if *n != 0 {
		t.Fatalf("%d requests reached a refused address", *n)
	}
	allowed, _ := coolify.New(srv.URL, secretToken, coolify.WithEgress(egress.Policy{Allowed: mustPrefixes(t, "127.0.0.0/8")}), coolify.WithVersion("4.3.11"))
	if _, err := allowed.ListServers(boundedCtx(t)); err != nil {
		t.Fatalf("allowed: %v", err)
	}
}

// TestRegistryForgetsIdleEntries: limiters and instance guards nobody asked for in a while
// are dropped; a paused limiter is kept until its pause ends.
func TestRegistryForgetsIdleEntries(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	reg := coolify.NewRegistry(0, coolify.WithClock(fc), coolify.WithVersion("4.3.11"))
	for _, u := range []string{"https://a.example", "https://b.example", "https://c.example"} {
		if _, err := reg.Client(u, "t"); err != nil {
			t.Fatal(err)
		}
	}
	if l, i := reg.Len(); l != 3 || i != 3 {
		t.Fatalf("registry holds %d limiters, %d instances; want 3, 3", l, i)
	}
	fc.Step(10 * time.Minute)
	_, _ = reg.Client("https://a.example", "t") // a is in use
	fc.Step(10 * time.Minute)
	_, _ = reg.Client("https://d.example", "t")
	if l, i := reg.Len(); l != 2 || i != 2 {
		t.Fatalf("after b and c went idle: %d limiters, %d instances; want 2 (a, d)", l, i)
	}
}

func mustPrefixes(t *testing.T, s string) []netip.Prefix {
	t.Helper()
	p, err := egress.ParsePrefixes(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
