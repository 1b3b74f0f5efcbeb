package controllers

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// One controller's reconcile workers serve every namespace. A pass may hold its worker for
// seconds on a slow Coolify (a call's budget is 10 s, 20 s with its retry, and a tenant names
// its own Coolify URLs, as many as it likes): without a bound, one namespace with a few dozen
// pools on black-holed URLs held every worker of the pool controller, and another namespace's
// new pool waited for one (issue 30). tenantShare bounds the passes one namespace has in
// flight in a controller: its share of the workers (a quarter, at least one) at any time, and
// beyond that only workers that leave some idle: a share's worth while other namespaces have
// had passes within othersWindow, one while it has been alone (a namespace that comes along
// finds that one at once, and from then on the share's worth is kept). A request past it is put
// back on the queue at once, without holding a worker, and runs when the namespace's own passes
// end. So one namespace, however many objects, URLs or tokens it has, holds at most 6 of the
// default 8 workers beside others and 7 alone, and a single tenant keeps nearly all the
// throughput.

const (
	// tenantShareDivisor: a namespace holds at most a quarter of a controller's workers
	// (2 of the default 8), at least one.
	tenantShareDivisor = 4
	// othersWindow is how long a namespace counts as active after its last pass began.
	othersWindow = time.Minute
	// shareRetry is when a request turned away for its namespace's share comes back, jittered
	// (half to the whole of it): soon enough that a namespace's own work is barely delayed,
	// and a request bounced while the share stays full costs a queue pop, no I/O.
	shareRetry = 500 * time.Millisecond
)

// tenantShare wraps a controller's reconciler (see above).
type tenantShare struct {
	inner      reconcile.Reconciler
	controller string // the metric's label
	limit      int
	metrics    *Metrics
	jitter     func() float64 // [0,1); nil: math/rand

	workers int
	now     func() time.Time // nil: time.Now

	mu    sync.Mutex
	held  map[string]int       // passes in flight, by namespace
	total int                  // passes in flight
	seen  map[string]time.Time // when each namespace's last pass began (othersWindow)
	swept time.Time
}

// shareOf is a namespace's share of a controller's workers.
func shareOf(workers int) int { return max(1, workers/tenantShareDivisor) }

// newTenantShare bounds each namespace to its share of workers reconciles of inner at once.
func newTenantShare(inner reconcile.Reconciler, controller string, workers int, m *Metrics) *tenantShare {
	return &tenantShare{inner: inner, controller: controller, limit: shareOf(workers), workers: max(workers, 1), metrics: m,
		held: map[string]int{}, seen: map[string]time.Time{}}
}

func (t *tenantShare) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if !t.enter(req.Namespace) {
		t.metrics.deferredOne(t.controller)
		return ctrl.Result{RequeueAfter: t.retry()}, nil
	}
	defer t.leave(req.Namespace)
	return t.inner.Reconcile(ctx, req)
}

func (t *tenantShare) enter(ns string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now
	if t.now != nil {
		now = t.now
	}
	at := now()
	t.seen[ns] = at
	t.sweep(at)
	// Within its share, always; beyond it, only while workers stay idle for the others.
	if t.held[ns] >= t.limit && t.total+t.reserve(ns, at) >= t.workers {
		return false
	}
	t.held[ns]++
	t.total++
	return true
}

// reserve is how many workers ns leaves idle beyond its share: a share's worth while another
// namespace had a pass within othersWindow, else one. Callers hold t.mu.
func (t *tenantShare) reserve(ns string, now time.Time) int {
	for other, at := range t.seen {
		if other != ns && now.Sub(at) <= othersWindow {
			return t.limit
		}
	}
	return 1
}

// sweep forgets the namespaces quiet for othersWindow, at most once per othersWindow, so seen
// holds only those active lately. Callers hold t.mu.
func (t *tenantShare) sweep(now time.Time) {
	if now.Sub(t.swept) < othersWindow {
		return
	}
	t.swept = now
	for ns, at := range t.seen {
		if now.Sub(at) > othersWindow && t.held[ns] == 0 {
			delete(t.seen, ns)
		}
	}
}

func (t *tenantShare) leave(ns string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total--
	if t.held[ns]--; t.held[ns] <= 0 {
		delete(t.held, ns) // the map holds only namespaces with passes in flight
	}
}

func (t *tenantShare) retry() time.Duration {
	f := rand.Float64
	if t.jitter != nil {
		f = t.jitter
	}
	return shareRetry/2 + time.Duration(f()*float64(shareRetry/2))
}
