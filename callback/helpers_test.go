package callback

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clocktesting "k8s.io/utils/clock/testing"

	"botpool.dev/botpool/internal/egress"
)

// allowLoopback lets the notifier reach httptest servers, which the default policy refuses.
var allowLoopback = egress.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}

var epoch = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// received is one request as the receiver saw it.
type received struct {
	header http.Header
	method string
	body   []byte
}

// receiver is an httptest server whose reply to the n-th request (1-based) is respond's.
type receiver struct {
	srv *httptest.Server

	mu  sync.Mutex
	got []received
}

func newReceiver(t *testing.T, respond func(n int, w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, received{header: r.Header.Clone(), method: r.Method, body: body})
		n := len(rc.got)
		rc.mu.Unlock()
		respond(n, w, r)
	}))
	// Registered before the notifier's cleanup, so it runs after the notifier stopped and
	// hanging handlers saw their requests cancelled.
	t.Cleanup(rc.srv.Close)
	return rc
}

// statuses answers the n-th request with codes[n-1], and later ones with the last code.
func statuses(codes ...int) func(int, http.ResponseWriter, *http.Request) {
	return func(n int, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(codes[min(n, len(codes))-1])
	}
}

func (rc *receiver) url() string { return rc.srv.URL + "/hook" }

func (rc *receiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.got)
}

func (rc *receiver) request(i int) received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.got[i]
}

type result struct {
	cb  Callback
	err error
}

// env is a started Notifier on a fake clock with exact (jitter-free) backoff.
type env struct {
	n       *Notifier
	clk     *clocktesting.FakeClock
	reg     *prometheus.Registry
	results chan result
}

func startNotifier(t *testing.T, opts Options) *env {
	t.Helper()
	e := newEnv(opts)
	e.start(t)
	return e
}

func newEnv(opts Options) *env {
	e := &env{clk: clocktesting.NewFakeClock(epoch), reg: prometheus.NewRegistry(), results: make(chan result, 100)}
	opts.Clock = e.clk
	if opts.Egress.Allowed == nil {
		opts.Egress = allowLoopback // the receivers are httptest servers
	}
	opts.Registerer = e.reg
	if opts.Jitter == nil {
		opts.Jitter = func(d time.Duration) time.Duration { return d }
	}
	opts.OnResult = func(r Result) { e.results <- result{r.Callback, r.Err} }
	e.n = New(opts)
	return e
}

func (e *env) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- e.n.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-stopped:
			if err != nil {
				t.Errorf("Start returned %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("Start did not return within a minute of cancel")
		}
	})
}

func (e *env) result(t *testing.T) result {
	t.Helper()
	select {
	case r := <-e.results:
		return r
	case <-time.After(time.Minute): // a liveness bound: a busy machine only waits longer
		t.Fatal("no OnResult within a minute")
		return result{}
	}
}

func (e *env) noResult(t *testing.T) {
	t.Helper()
	select {
	case r := <-e.results:
		t.Fatalf("unexpected OnResult %+v", r)
	default:
	}
}

// waitForRetry waits until a retry is scheduled on the fake clock.
func (e *env) waitForRetry(t *testing.T) {
	t.Helper()
	waitFor(t, "a retry timer", e.clk.HasWaiters)
}

func (e *env) deliveries(result string) float64 {
	return value(e.n.metrics.deliveries.WithLabelValues(result))
}

func (e *env) attempts() float64 { return value(e.n.metrics.attempts) }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a liveness bound: a busy machine only waits longer
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func callbackTo(url, key string) Callback {
	return Callback{URL: url, Key: key, Body: Payload{
		Bot: "standup", Namespace: "team-a", UID: "uid-" + key, Phase: "Done", FinishedAt: epoch,
	}}
}

func decode(t *testing.T, body []byte) Payload {
	t.Helper()
	var p Payload
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return p
}

// value reads a counter or gauge; prometheus/testutil would need a module outside go.mod.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if c := d.GetCounter(); c != nil {
		return c.GetValue()
	}
	return d.GetGauge().GetValue()
}
