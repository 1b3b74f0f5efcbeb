package controllers

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestTenantShareBoundsANamespace: of 8 workers, one namespace alone takes 7, never the last;
// another namespace takes that one at once; from then on the first takes at most what leaves 2
// idle (its share, 2, always); alone again for a minute, 7 again. A request turned away is put
// back soon and never reaches the reconciler (issue 30, point 1: one namespace's pools on
// black-holed Coolify URLs held every worker).
func TestTenantShareBoundsANamespace(t *testing.T) {
	calls := 0
	inner := reconcile.Func(func(context.Context, ctrl.Request) (ctrl.Result, error) {
		calls++
		return ctrl.Result{}, nil
	})
	now := time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)
	share := newTenantShare(inner, "botpool", 8, NewMetrics(nil))
	share.jitter = func() float64 { return 0 }
	share.now = func() time.Time { return now }
	entered := func(ns string, n int) int {
		got := 0
		for range n {
			if share.enter(ns) {
				got++
			}
		}
		return got
	}
	if got := entered("attacker", 24); got != 7 {
		t.Fatalf("a namespace alone entered %d of 24 passes on 8 workers, want 7 (the last one stays idle)", got)
	}
	if got := entered("victim", 1); got != 1 {
		t.Fatalf("another namespace entered %d, want the idle worker", got)
	}
	res, err := share.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "attacker", Name: "pool"}})
	if err != nil || calls != 0 || res.RequeueAfter != shareRetry/2 {
		t.Fatalf("a request past the share: %+v, %v, %d calls; want it put back after %s without a call", res, err, calls, shareRetry/2)
	}
	// The attacker's passes end: beside the victim's one, it takes 5, leaving 2 idle.
	for range 7 {
		share.leave("attacker")
	}
	if got := entered("attacker", 24); got != 5 {
		t.Fatalf("with the other namespace active, the first entered %d, want 5 (2 left idle)", got)
	}
	share.leave("victim")
	if got := entered("attacker", 24); got != 1 {
		t.Fatalf("the other namespace's pass ended a moment ago: the first entered %d more, want 1 (2 still left idle)", got)
	}
	now = now.Add(othersWindow + time.Second)
	if got := entered("attacker", 24); got != 1 {
		t.Fatalf("alone for a minute, the first entered %d more, want 1 (7 in all)", got)
	}
	for range 7 {
		share.leave("attacker")
	}
	if len(share.held) != 0 || share.total != 0 {
		t.Fatalf("nothing in flight, yet held %v and total %d", share.held, share.total)
	}
	if _, err := share.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "victim", Name: "pool"}}); err != nil || calls != 1 {
		t.Fatalf("a request within the share: %v, %d calls; want it reconciled", err, calls)
	}
	now = now.Add(2*othersWindow + time.Second)
	share.enter("attacker")
	if _, ok := share.seen["victim"]; ok {
		t.Fatalf("a namespace quiet for two minutes is still remembered: %v", share.seen)
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
