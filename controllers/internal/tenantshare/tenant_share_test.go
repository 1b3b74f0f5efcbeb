package tenantshare

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"botpool.dev/botpool/controllers/internal/metrics"
)

func shareReq(ns string, i int) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("pool-%02d", i)}}
}

// newTestShare is a share of 8 workers (a share of 2 each) over inner, whose queue records what
// is put back on it.
func newTestShare(inner reconcile.Reconciler) (*Share, *addLog) {
	share := New(inner, "botpool", 8, metrics.New(nil))
	queue := &addLog{}
	share.queue = queue
	return share, queue
}

// entered asks n passes of ns, from request from on, and counts those that started.
func entered(share *Share, ns string, from, n int) int {
	got := 0
	for i := range n {
		if share.enter(shareReq(ns, from+i)) {
			got++
		}
	}
	return got
}

// TestTenantShareBoundsANamespace: with 8 workers, one namespace holds its share (2) and the
// pool (8), never more; a second namespace holds its share but none of the full pool; a third
// still gets its share at once. A place freed goes on at once: the pool's to the parked
// namespace with the fewest passes in flight, a share's to its own namespace's oldest, and the
// request it goes to keeps it (issue 30, point 1: one namespace's pools on black-holed Coolify
// URLs held every worker, and a bound per namespace on a fixed set of workers is beaten by a
// second namespace).
func TestTenantShareBoundsANamespace(t *testing.T) {
	share, queue := newTestShare(reconcile.Func(func(context.Context, ctrl.Request) (ctrl.Result, error) { return ctrl.Result{}, nil }))
	if got := entered(share, "a1", 0, 24); got != 10 {
		t.Fatalf("a namespace alone started %d of 24 passes, want 10 (its share and the pool of 8)", got)
	}
	if got := entered(share, "a1", 10, 1); got != 0 {
		t.Fatalf("a request parked before was let in again: %d", got)
	}
	if got := entered(share, "a2", 0, 5); got != 2 {
		t.Fatalf("a second namespace started %d of 5, want its share, 2", got)
	}
	if got := entered(share, "victim", 0, 3); got != 2 {
		t.Fatalf("a third namespace, beside two that hold all they may, started %d of 3, want its share, 2", got)
	}
	if share.parked["a1"].Len() != 14 || share.parked["a2"].Len() != 3 || share.parked["victim"].Len() != 1 {
		t.Fatalf("parked %d, %d, %d; want 14 (each once), 3 and 1", share.parked["a1"].Len(), share.parked["a2"].Len(), share.parked["victim"].Len())
	}

	// A pass of a1 ends, one of the pool: the place goes to a2's oldest (2 in flight, like the
	// victim, and parked first), already counted, and the request keeps it whatever comes
	// first.
	share.leave("a1")
	if want := shareReq("a2", 2); len(queue.added) != 1 || queue.added[0] != want {
		t.Fatalf("handed on to %v, want %v", queue.added, want)
	}
	if entered(share, "victim", 9, 1) != 0 {
		t.Fatal("a request took the place handed on")
	}
	if !share.enter(shareReq("a2", 2)) || share.held["a2"] != 3 || share.inPool != 8 {
		t.Fatalf("the request handed a place did not take it: held %v, %d of the pool", share.held, share.inPool)
	}
	// A pass of the victim ends, one of its share: its own oldest takes it.
	share.leave("victim")
	if want := shareReq("victim", 2); queue.added[1] != want {
		t.Fatalf("handed on to %v, want %v", queue.added[1], want)
	}
	share.enter(shareReq("victim", 2))
	// Another pass of a1 ends: the victim has the fewest in flight (2, against a2's 3).
	share.leave("a1")
	if want := shareReq("victim", 9); queue.added[2] != want {
		t.Fatalf("handed on to %v, want %v (the fewest in flight)", queue.added[2], want)
	}
}

// TestTenantSharePutsBackEveryParkedRequest: once the passes end, a worker taking what comes
// back on the queue runs every parked request, each once: each pass's end brings the next.
func TestTenantSharePutsBackEveryParkedRequest(t *testing.T) {
	share, queue := newTestShare(reconcile.Func(func(context.Context, ctrl.Request) (ctrl.Result, error) { return ctrl.Result{}, nil }))
	entered(share, "a1", 0, 24)
	entered(share, "victim", 0, 3)
	entered(share, "a1", 12, 3) // back by another way (its object's events) while parked: parked once
	ran := map[reconcile.Request]int{}
	for range 10 {
		share.leave("a1")
	}
	share.leave("victim")
	share.leave("victim")
	for len(queue.added) > 0 {
		r := queue.added[0]
		queue.added = queue.added[1:]
		if share.enter(r) {
			ran[r]++
			share.leave(r.Namespace)
		}
	}
	if len(ran) != 15 {
		t.Errorf("%d parked requests ran, want the 15", len(ran))
	}
	if len(share.held) != 0 || share.inPool != 0 || len(share.parked) != 0 || len(share.isIn) != 0 || len(share.handed) != 0 {
		t.Fatalf("nothing in flight, yet held %v, %d of the pool, %d namespaces and %d requests parked, %d handed",
			share.held, share.inPool, len(share.parked), len(share.isIn), len(share.handed))
	}
	for r, n := range ran {
		if n != 1 {
			t.Errorf("%v ran %d times", r, n)
		}
	}
}

// TestTenantShareReconcile: a request parked never reaches the reconciler and asks nothing of
// the queue; one that enters gives its place back however its pass ends, a panic too.
func TestTenantShareReconcile(t *testing.T) {
	calls := 0
	var fail error
	share, _ := newTestShare(reconcile.Func(func(context.Context, ctrl.Request) (ctrl.Result, error) {
		calls++
		if fail != nil {
			panic(fail)
		}
		return ctrl.Result{}, nil
	}))
	entered(share, "a1", 0, 10)
	res, err := share.Reconcile(context.Background(), shareReq("a1", 10))
	if err != nil || calls != 0 || res != (reconcile.Result{}) {
		t.Fatalf("a request past its places: %+v, %v, %d calls; want it parked without a call", res, err, calls)
	}
	if _, err := share.Reconcile(context.Background(), shareReq("victim", 0)); err != nil || calls != 1 {
		t.Fatalf("a request within its share: %v, %d calls; want it reconciled", err, calls)
	}
	fail = errors.New("boom")
	func() {
		defer func() { _ = recover() }()
		_, _ = share.Reconcile(context.Background(), shareReq("victim", 1))
	}()
	if calls != 2 || share.held["victim"] != 0 {
		t.Fatalf("after a pass that panicked, %d calls and the victim holds %d places; want 2 and none", calls, share.held["victim"])
	}
}

// TestTenantShareKeepsAParkedRequestsBackoff: controller-runtime forgets a request's failures
// when its pass ends without error, which a parked one's does; the share's rate limiter keeps
// them until it runs.
func TestTenantShareKeepsAParkedRequestsBackoff(t *testing.T) {
	share, _ := newTestShare(reconcile.Func(func(context.Context, ctrl.Request) (ctrl.Result, error) { return ctrl.Result{}, nil }))
	limiter := keepBackoff{TypedRateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](50*time.Millisecond, 30*time.Second), share: share}
	parked, other := shareReq("a1", 10), shareReq("a1", 11)
	for range 3 {
		limiter.When(parked)
		limiter.When(other)
	}
	entered(share, "a1", 0, 11)
	limiter.Forget(parked)
	limiter.Forget(other)
	if limiter.NumRequeues(parked) != 3 || limiter.NumRequeues(other) != 0 {
		t.Fatalf("failures after Forget: parked %d, other %d; want 3 kept and 0", limiter.NumRequeues(parked), limiter.NumRequeues(other))
	}
}

// TestShareOf: a quarter of the workers, at least one.
func TestShareOf(t *testing.T) {
	for workers, want := range map[int]int{0: 1, 1: 1, 2: 1, 4: 1, 8: 2, 16: 4} {
		if got := shareOf(workers); got != want {
			t.Errorf("shareOf(%d) = %d, want %d", workers, got, want)
		}
	}
}

// addLog is a queue that records what is added to it.
type addLog struct {
	workqueue.TypedInterface[reconcile.Request]
	added []reconcile.Request
}

func (q *addLog) Add(r reconcile.Request) { q.added = append(q.added, r) }
