package callback

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"botpool.dev/botpool/store/memory"
)

// tarpit is a RoundTripper standing for receivers that hold every request until the request
// timeout, played on the fake clock: the notifier's own timeout runs on the real clock (inside
// net/http), so it is set far off and the tarpit ends each request timeout after it arrived, when
// the test steps the clock.
type tarpit struct {
	clk     *clocktesting.FakeClock
	timeout time.Duration

	mu      sync.Mutex
	arrived []arrival // every request, in the order it reached a receiver
	hanging int
}

type arrival struct {
	host string
	at   time.Time
	id   string // the webhook-id header, for a webhook
}

func (tp *tarpit) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_ = r.Body.Close()
	}
	ended := tp.clk.After(tp.timeout) // registered before the request counts as arrived
	tp.mu.Lock()
	tp.arrived = append(tp.arrived, arrival{host: r.URL.Host, at: tp.clk.Now(), id: r.Header.Get(HeaderWebhookID)})
	tp.hanging++
	tp.mu.Unlock()
	defer func() {
		tp.mu.Lock()
		tp.hanging--
		tp.mu.Unlock()
	}()
	select {
	case <-ended:
		return nil, context.DeadlineExceeded
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
}

// state is how many requests arrived and how many hang now.
func (tp *tarpit) state() (arrived, hanging int) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return len(tp.arrived), tp.hanging
}

// to is the first request that reached host, if any did.
func (tp *tarpit) to(host string) (arrival, bool) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	i := slices.IndexFunc(tp.arrived, func(a arrival) bool { return a.host == host })
	if i < 0 {
		return arrival{}, false
	}
	return tp.arrived[i], true
}

// namespaced is a callback of a bot in namespace ns.
func namespaced(ns, url, key string) Callback {
	cb := callbackTo(url, key)
	cb.Body.Namespace = ns
	return cb
}

// TestOneNamespaceDelaysAnotherByOneRequestTimeoutAtMost: namespace team-a has 160 receivers
// that hold every request until the request timeout, and they keep all 16 workers busy. Another
// namespace's callback, or its webhook, leaves when the first of team-a's requests ends: one
// request timeout after it was handed over. Workers used to take receivers in turn, whoever's
// they were: team-b's waited behind all 160 of team-a's, 10 request timeouts, and its webhook,
// whose claim allows 90 s in the queue, was dropped unsent every time it was claimed.
func TestOneNamespaceDelaysAnotherByOneRequestTimeoutAtMost(t *testing.T) {
	const workers, receivers, timeout = 16, 160, 10 * time.Second
	for _, webhook := range []bool{false, true} {
		t.Run(map[bool]string{false: "callback", true: "webhook"}[webhook], func(t *testing.T) {
			clk := clocktesting.NewFakeClock(epoch)
			tp := &tarpit{clk: clk, timeout: timeout}
			n := New(Options{
				Client: &http.Client{Transport: tp}, Clock: clk, Workers: workers, MaxAttempts: 1,
				RequestTimeout: time.Hour, // the tarpit plays the timeout on the fake clock
			})
			ctx, cancel := context.WithCancel(context.Background())
			stopped := make(chan struct{})
			go func() { _ = n.Start(ctx); close(stopped) }()
			t.Cleanup(func() { cancel(); <-stopped })

			for i := range receivers {
				if !n.Enqueue(namespaced("team-a", fmt.Sprintf("http://tarpit-%d.a.example/hook", i), fmt.Sprint("a", i))) {
					t.Fatalf("Enqueue(a%d) refused", i)
				}
			}
			waitFor(t, "every worker held by team-a", func() bool { a, h := tp.state(); return a == workers && h == workers })

			handedOver, wantID := clk.Now(), ""
			if webhook {
				outbox := memory.NewOutbox(100)
				m := tenantMessage(t, outbox, clk.Now(), "team-b", 0, "http://b.example/hook", nil)
				relay := NewRelay(RelayOptions{Outbox: outbox, Sender: n, Secrets: &secrets{}, Clock: clk, Registerer: prometheus.NewRegistry()})
				if sent := relay.Pass(ctx); sent != 1 {
					t.Fatalf("the relay handed over %d messages, want team-b's", sent)
				}
				wantID = m.ID
			} else if !n.Enqueue(namespaced("team-b", "http://b.example/hook", "b")) {
				t.Fatal("Enqueue(b) refused")
			}

			// One request timeout: team-a's 16 requests end and every worker takes the next
			// callback. Which ones it takes is decided then, so this is a single observation.
			clk.Step(timeout)
			waitFor(t, "the workers to take the next 16", func() bool { a, h := tp.state(); return a == 2*workers && h == workers })
			got, ok := tp.to("b.example")
			if !ok {
				t.Fatalf("team-b's request had not left one request timeout (%s) after it was handed over: the workers took team-a's receivers", timeout)
			}
			if wait := got.at.Sub(handedOver); wait > timeout {
				t.Errorf("team-b's request left %s after it was handed over, want at most one request timeout (%s)", wait, timeout)
			}
			if got.id != wantID {
				t.Errorf("team-b's request carried webhook-id %q, want %q", got.id, wantID)
			}
		})
	}
}

// TestOneNamespaceCannotFillTheQueue: a namespace with 10 receiver hosts floods the notifier
// (with its defaults: 10,000 callbacks, 1,000 per receiver). It is refused once it holds its
// share of the queue, half of it while it is the only namespace holding callbacks, so another
// namespace's callback still gets in; shares shrink as namespaces arrive. Before, the flood
// filled all 10,000 places and every namespace's callbacks were refused.
func TestOneNamespaceCannotFillTheQueue(t *testing.T) {
	e := newEnv(Options{}) // not started: what is accepted stays held
	flood := func(ns string, hosts, per int) (accepted int) {
		for h := range hosts {
			for i := range per {
				if e.n.Enqueue(namespaced(ns, fmt.Sprintf("https://r%d.%s.example/hook", h, ns), fmt.Sprintf("%s-%d-%d", ns, h, i))) {
					accepted++
				}
			}
		}
		return accepted
	}
	if got := flood("team-a", 10, DefaultReceiverCapacity); got != DefaultQueueCapacity/2 {
		t.Fatalf("team-a alone got %d places, want its share, half of %d", got, DefaultQueueCapacity)
	}
	if got := e.deliveries(resultDropped); got != DefaultQueueCapacity/2 {
		t.Errorf("deliveries{dropped} = %v, want the %d refused", got, DefaultQueueCapacity/2)
	}
	if got := value(e.n.metrics.refusals.WithLabelValues(limitNamespace)); got != DefaultQueueCapacity/2 {
		t.Errorf("refusals{namespace} = %v, want the %d refused", got, DefaultQueueCapacity/2)
	}
	if !e.n.Enqueue(namespaced("team-b", "https://hooks.b.example/hook", "b-first")) {
		t.Fatal("team-b's callback was refused while team-a held its share")
	}
	// Two namespaces hold callbacks: each may hold a third, team-a no more now.
	if e.n.Enqueue(namespaced("team-a", "https://r0.team-a.example/hook", "a-more")) {
		t.Error("team-a got a place beyond its share")
	}
	if got := flood("team-b", 10, DefaultReceiverCapacity); got != DefaultQueueCapacity/3-1 {
		t.Errorf("team-b got %d more places, want up to its share, a third of %d", got, DefaultQueueCapacity)
	}
	if got := value(e.n.metrics.queueDepth); got != DefaultQueueCapacity/2+DefaultQueueCapacity/3 {
		t.Errorf("queue depth %v, want team-a's half and team-b's third", got)
	}
}

// TestNamespacesSharingAReceiverTakeTurns: one receiver host used by two namespaces is two
// receivers, one per namespace, so a namespace's backlog to a shared host (a public service
// anyone may point a webhook at) does not queue another namespace's callbacks behind it. With one
// worker the namespaces take turns; the receiver's queue used to be one, first come first served.
func TestNamespacesSharingAReceiverTakeTurns(t *testing.T) {
	var order []string
	rc := newReceiver(t, func(_ int, _ http.ResponseWriter, r *http.Request) {})
	e := newEnv(Options{Workers: 1, PerReceiver: 1})
	for _, k := range []string{"a1", "a2", "a3"} {
		e.n.Enqueue(namespaced("team-a", rc.url(), k))
	}
	e.n.Enqueue(namespaced("team-b", rc.url(), "b1"))
	e.start(t)
	for range 4 {
		order = append(order, e.result(t).cb.Body.Namespace)
	}
	if want := []string{"team-a", "team-b", "team-a", "team-a"}; !slices.Equal(order, want) {
		t.Errorf("callbacks went out for %v, want %v", order, want)
	}
}
