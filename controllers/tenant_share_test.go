package controllers

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestTenantShareBoundsANamespace: of 8 workers and a reserve of 2, one namespace alone takes
// the 8, never the reserve; another namespace takes the reserve at once, but no more than its
// share (2) while the workers are busy. A request turned away never reaches the reconciler
// and holds nothing: it goes back on the queue, oldest first, when a pass of its namespace
// ends (issue 30, point 1: one namespace's pools on black-holed Coolify URLs held every
// worker).
func TestTenantShareBoundsANamespace(t *testing.T) {
	calls := 0
	inner := reconcile.Func(func(context.Context, ctrl.Request) (ctrl.Result, error) {
		calls++
		return ctrl.Result{}, nil
	})
	share := newTenantShare(inner, "botpool", 8, NewMetrics(nil))
	queue := &addLog{}
	share.queue = queue
	req := func(ns string, i int) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("pool-%02d", i)}}
	}
	entered := func(ns string, from, n int) int {
		got := 0
		for i := range n {
			if share.enter(req(ns, from+i)) {
				got++
			}
		}
		return got
	}
	if got := entered("attacker", 0, 24); got != 8 {
		t.Fatalf("a namespace alone entered %d of 24 passes on 8 workers, want 8 (the reserve stays idle)", got)
	}
	if got := entered("attacker", 8, 1); got != 0 {
		t.Fatalf("a request parked before was let in again: %d", got)
	}
	if got := entered("victim", 0, 3); got != 2 {
		t.Fatalf("another namespace entered %d of 3, want its share, 2 (the reserve)", got)
	}
	res, err := share.Reconcile(context.Background(), req("attacker", 30))
	if err != nil || calls != 0 || res != (reconcile.Result{}) {
		t.Fatalf("a request past the share: %+v, %v, %d calls; want it parked without a call", res, err, calls)
	}
	if share.parked["attacker"].Len() != 17 || share.parked["victim"].Len() != 1 {
		t.Fatalf("parked %d of the attacker's, %d of the victim's; want 17 (each once) and 1",
			share.parked["attacker"].Len(), share.parked["victim"].Len())
	}

	// An attacker's pass ends: its oldest parked request goes back on the queue, and finds the
	// workers busy (9 in flight, the attacker holds 7): parked again, last.
	share.leave("attacker")
	if want := []reconcile.Request{req("attacker", 8)}; !slices.Equal(queue.added, want) {
		t.Fatalf("put back %v, want %v", queue.added, want)
	}
	if share.enter(req("attacker", 8)) {
		t.Fatal("the attacker entered with the workers busy and more than its share in flight")
	}
	// A victim's pass ends: its parked request comes back, and enters (below its share).
	share.leave("victim")
	if want := req("victim", 2); queue.added[len(queue.added)-1] != want {
		t.Fatalf("put back %v, want %v", queue.added[len(queue.added)-1], want)
	}
	if !share.enter(req("victim", 2)) {
		t.Fatal("the victim's parked request did not enter below its share")
	}
	// Passes end until fewer than the workers are in flight: the attacker enters again.
	share.leave("victim")
	share.leave("victim")
	if got := share.total; got != 7 {
		t.Fatalf("%d in flight, want 7", got)
	}
	// A parked request back by another way (its object's event) enters, and is parked no more.
	if !share.enter(req("attacker", 9)) {
		t.Fatal("with a worker idle, the attacker was turned away")
	}
	if _, ok := share.isIn[req("attacker", 9)]; ok || share.parked["attacker"].Len() != 16 {
		t.Fatalf("a request that entered is still parked, or the others went: %d parked", share.parked["attacker"].Len())
	}
	// The attacker's passes end, and a worker takes what comes back on the queue: each parked
	// request runs in turn, and its pass's end brings the next.
	queue.added = nil
	for range 8 {
		share.leave("attacker")
	}
	ran := 0
	for len(queue.added) > 0 {
		r := queue.added[0]
		queue.added = queue.added[1:]
		if share.enter(r) {
			ran++
			share.leave(r.Namespace)
		}
	}
	if ran != 16 {
		t.Fatalf("%d parked requests ran once the attacker's passes ended, want the 16", ran)
	}
	if len(share.held) != 0 || share.total != 0 || len(share.parked) != 0 || len(share.isIn) != 0 {
		t.Fatalf("nothing in flight, yet held %v, total %d, %d namespaces and %d requests parked", share.held, share.total, len(share.parked), len(share.isIn))
	}
	if _, err := share.Reconcile(context.Background(), req("victim", 0)); err != nil || calls != 1 {
		t.Fatalf("a request within the share: %v, %d calls; want it reconciled", err, calls)
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
