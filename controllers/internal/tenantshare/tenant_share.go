package tenantshare

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

	"botpool.dev/botpool/controllers/internal/metrics"
)

// One controller's reconcile workers serve every namespace, and a pass may hold its worker for
// seconds on a slow Coolify: a call's budget is 10 s (20 s with its retry), and a tenant names
// its own Coolify URLs, as many as it likes. With a fixed set of workers, one namespace with 24
// pools on black-holed URLs held every worker of the pool controller, and another namespace's
// new pool waited 36 s for its first slot, against 2 s alone (issue 30); and a bound per
// namespace alone on a fixed set is beaten by a second namespace.
//
// Share gives every namespace places of its own. Each namespace may always have its
// share in flight (a quarter of --max-concurrent-reconciles, at least one); beyond it, its
// passes take places of a pool that all namespaces share, as large as the workers. So one
// namespace holds at most its share and the pool (10 of the default 8 + 2), a namespace alone
// runs as many passes as before and two more, and every other namespace still finds its share
// at once. The controller runs four times the workers as goroutines (32): that many shares and
// the pool, so twelve namespaces would have to hold their shares at once before a thirteenth
// waits for a goroutine.
//
// A request past its namespace's places holds no goroutine: it is parked, and runs when a place
// frees. A pass that ends hands its place on at once, so nothing waits on a timer: a place of
// the namespace's share to the namespace's oldest parked request, a place of the pool to the
// oldest of the namespace with the fewest passes in flight among those with requests parked
// (on a tie, the one whose request has waited longest).

// shareOf is a namespace's own places in a controller: a quarter of the workers (2 of the
// default 8), at least one.
func shareOf(workers int) int { return max(1, workers/4) }

// goroutinesPerWorker: the goroutines a controller runs per worker (see above).
const goroutinesPerWorker = 4

// Share wraps a controller's reconciler (see above).
type Share struct {
	inner      reconcile.Reconciler
	controller string // the metric's label
	pool       int    // the places all namespaces share: the workers
	share      int    // each namespace's own places
	metrics    *metrics.Metrics

	mu     sync.Mutex
	queue  workqueue.TypedInterface[reconcile.Request] // set by the controller's NewQueue, before its first pass
	held   map[string]int                              // passes in flight (and places handed on), by namespace
	inPool int                                         // of those, the ones beyond their namespace's share
	parked map[string]*list.List                       // parkedReq turned away, by namespace, oldest first
	isIn   map[reconcile.Request]*list.Element         // where each parked request is: parked once
	handed map[reconcile.Request]bool                  // requests a place was handed to, on their way back
	seq    uint64                                      // parkings so far: their order across namespaces
}

// parkedReq is a request turned away, and when (t.seq).
type parkedReq struct {
	req reconcile.Request
	seq uint64
}

func New(inner reconcile.Reconciler, controller string, workers int, m *metrics.Metrics) *Share {
	workers = max(workers, 1)
	return &Share{inner: inner, controller: controller, pool: workers, share: shareOf(workers), metrics: m,
		held: map[string]int{}, parked: map[string]*list.List{}, isIn: map[reconcile.Request]*list.Element{},
		handed: map[reconcile.Request]bool{}}
}

// Options are the controller's: the goroutines, a rate limiter whose backoff a parked request
// keeps, and controller-runtime's own queue, of which the share keeps a handle to put parked
// requests back.
func (t *Share) Options(mgr ctrl.Manager, rateLimiter workqueue.TypedRateLimiter[reconcile.Request]) controller.Options {
	usePriority := ptr.Deref(mgr.GetControllerOptions().UsePriorityQueue, true)
	log := mgr.GetLogger().WithValues("controller", t.controller)
	return controller.Options{
		RateLimiter:             keepBackoff{TypedRateLimiter: rateLimiter, share: t},
		MaxConcurrentReconciles: goroutinesPerWorker * t.pool,
		// The queue controller-runtime builds when NewQueue is unset.
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

// WorkersOf is --max-concurrent-reconciles: the pool of each controller's Share
// (controller-runtime's default is one).
func WorkersOf(mgr ctrl.Manager) int {
	return max(1, mgr.GetControllerOptions().MaxConcurrentReconciles)
}

func (t *Share) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if !t.enter(req) {
		t.metrics.DeferredOne(t.controller)
		return reconcile.Result{}, nil
	}
	defer t.leave(req.Namespace) // a panic too: controller-runtime recovers it above
	return t.inner.Reconcile(ctx, req)
}

// enter starts a pass of req, or parks req and reports false.
func (t *Share) enter(req reconcile.Request) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.handed[req] {
		delete(t.handed, req) // its place was taken for it when it was handed on
		return true
	}
	ns := req.Namespace
	if t.held[ns] >= t.share && t.inPool >= t.pool {
		if t.isIn[req] == nil {
			if t.parked[ns] == nil {
				t.parked[ns] = list.New()
			}
			t.seq++
			t.isIn[req] = t.parked[ns].PushBack(parkedReq{req: req, seq: t.seq})
		}
		return false
	}
	// Parked before and back by another way (an event of its object): this pass serves both.
	if e := t.isIn[req]; e != nil {
		t.unpark(ns, e)
	}
	t.take(ns)
	return true
}

// take counts a place for a pass of ns. Callers hold t.mu.
func (t *Share) take(ns string) {
	if t.held[ns] >= t.share {
		t.inPool++
	}
	t.held[ns]++
}

// leave ends a pass of ns and hands its place on (see above).
func (t *Share) leave(ns string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ofPool := t.held[ns] > t.share
	if ofPool {
		t.inPool--
	}
	if t.held[ns]--; t.held[ns] <= 0 {
		delete(t.held, ns) // held names only namespaces with passes in flight
	}
	to := ns
	if ofPool {
		to = t.neediest()
	}
	waiting := t.parked[to]
	if waiting == nil {
		return
	}
	req := t.unpark(to, waiting.Front())
	t.take(to)
	t.handed[req] = true
	t.queue.Add(req)
}

// neediest is the namespace with requests parked and the fewest passes in flight, on a tie the
// one whose request has waited longest; "" when none is parked. Callers hold t.mu.
func (t *Share) neediest() string {
	best, bestSeq := "", uint64(0)
	for ns, l := range t.parked {
		seq := l.Front().Value.(parkedReq).seq
		if best == "" || t.held[ns] < t.held[best] || t.held[ns] == t.held[best] && seq < bestSeq {
			best, bestSeq = ns, seq
		}
	}
	return best
}

// unpark takes e off namespace ns's parked requests. Callers hold t.mu.
func (t *Share) unpark(ns string, e *list.Element) reconcile.Request {
	req := t.parked[ns].Remove(e).(parkedReq).req
	delete(t.isIn, req)
	if t.parked[ns].Len() == 0 {
		delete(t.parked, ns)
	}
	return req
}

// waiting reports whether req is parked or on its way back with a place.
func (t *Share) waiting(req reconcile.Request) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.isIn[req] != nil || t.handed[req]
}

// keepBackoff is a controller's rate limiter, except that a request parked keeps its failures:
// the pass that parks it ends without error, and controller-runtime then forgets them, so a
// request that keeps failing in a busy namespace would retry at the first step of its backoff.
type keepBackoff struct {
	workqueue.TypedRateLimiter[reconcile.Request]
	share *Share
}

func (k keepBackoff) Forget(req reconcile.Request) {
	if !k.share.waiting(req) {
		k.TypedRateLimiter.Forget(req)
	}
}
