package controllers

import (
	"container/list"
	"context"
	"sync"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// One controller's reconcile workers serve every namespace, and a pass may hold its worker for
// seconds on a slow Coolify: a call's budget is 10 s (20 s with its retry), and a tenant names
// its own Coolify URLs, as many as it likes. Unbounded, one namespace with 24 pools on
// black-holed URLs held every worker of the pool controller, and another namespace's new pool
// waited 36 s for its first slot, against 2 s alone (issue 30).
//
// tenantShare bounds what one namespace holds. A controller runs its workers (the manager's
// --max-concurrent-reconciles) and a reserve on top, a quarter as many, at least one. A pass
// of any namespace starts while fewer than the workers are in flight; beyond that, only a pass
// of a namespace below its share (the reserve's size) in flight. So one namespace, however many
// objects, URLs or tokens it has, holds at most the workers, the reserve stays for the others,
// and a namespace alone keeps every worker it had before.
//
// A request turned away does not hold a goroutine: it is parked, and goes back on the
// controller's queue when a pass of its namespace ends. A namespace is turned away only while
// it has its share in flight, so such a pass always comes, and the parked request runs as soon
// as it would have had it waited in the queue.

// shareOf is a namespace's share of a controller's workers, and the reserve: a quarter of them
// (2 of the default 8), at least one.
func shareOf(workers int) int { return max(1, workers/4) }

// tenantShare wraps a controller's reconciler (see above).
type tenantShare struct {
	inner      reconcile.Reconciler
	controller string // the metric's label
	workers    int
	share      int
	metrics    *Metrics

	mu     sync.Mutex
	queue  workqueue.TypedInterface[reconcile.Request] // set by newQueue, before the first pass
	held   map[string]int                              // passes in flight, by namespace
	total  int                                         // passes in flight
	parked map[string]*list.List                       // turned away, by namespace, oldest first
	isIn   map[reconcile.Request]*list.Element         // where each is parked: once, and let go when it enters
}

func newTenantShare(inner reconcile.Reconciler, controller string, workers int, m *Metrics) *tenantShare {
	workers = max(workers, 1)
	return &tenantShare{inner: inner, controller: controller, workers: workers, share: shareOf(workers), metrics: m,
		held: map[string]int{}, parked: map[string]*list.List{}, isIn: map[reconcile.Request]*list.Element{}}
}

// options are the controller's: its rate limiter, the workers and the reserve, and a queue the
// share can put parked requests back on.
func (t *tenantShare) options(mgr ctrl.Manager, rateLimiter workqueue.TypedRateLimiter[reconcile.Request]) controller.Options {
	usePriority := ptr.Deref(mgr.GetControllerOptions().UsePriorityQueue, true)
	log := mgr.GetLogger().WithValues("controller", t.controller)
	return controller.Options{
		RateLimiter:             rateLimiter,
		MaxConcurrentReconciles: t.workers + t.share,
		// controller-runtime's own queue (it builds the same one when NewQueue is unset).
		NewQueue: func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
			var q workqueue.TypedRateLimitingInterface[reconcile.Request]
			if usePriority {
				q = priorityqueue.New(name, func(o *priorityqueue.Opts[reconcile.Request]) { o.Log, o.RateLimiter = log, rl })
			} else {
				q = workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Name: name})
			}
			t.mu.Lock()
			t.queue = q
			t.mu.Unlock()
			return q
		},
	}
}

// workersOf is the reconcile workers each controller of mgr runs (controller-runtime's default
// is one), before tenantShare's reserve.
func workersOf(mgr ctrl.Manager) int {
	return max(1, mgr.GetControllerOptions().MaxConcurrentReconciles)
}

func (t *tenantShare) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if !t.enter(req) {
		t.metrics.deferredOne(t.controller)
		return reconcile.Result{}, nil
	}
	defer t.leave(req.Namespace)
	return t.inner.Reconcile(ctx, req)
}

// enter starts a pass of req, or parks req and reports false.
func (t *tenantShare) enter(req reconcile.Request) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ns := req.Namespace
	if t.total >= t.workers && t.held[ns] >= t.share {
		if t.isIn[req] == nil {
			if t.parked[ns] == nil {
				t.parked[ns] = list.New()
			}
			t.isIn[req] = t.parked[ns].PushBack(req)
		}
		return false
	}
	// Parked before and back by another way (an event of its object): the pass serves both.
	if e := t.isIn[req]; e != nil {
		t.unpark(ns, e)
	}
	t.held[ns]++
	t.total++
	return true
}

// leave ends a pass of namespace ns and puts its oldest parked request back on the queue.
func (t *tenantShare) leave(ns string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total--
	if t.held[ns]--; t.held[ns] <= 0 {
		delete(t.held, ns) // the maps hold only namespaces with passes in flight or parked
	}
	waiting := t.parked[ns]
	if waiting == nil {
		return
	}
	next := t.unpark(ns, waiting.Front())
	if t.queue != nil {
		t.queue.Add(next)
	}
}

// unpark takes e off namespace ns's parked requests. Callers hold t.mu.
func (t *tenantShare) unpark(ns string, e *list.Element) reconcile.Request {
	req := t.parked[ns].Remove(e).(reconcile.Request)
	delete(t.isIn, req)
	if t.parked[ns].Len() == 0 {
		delete(t.parked, ns)
	}
	return req
}
