package controllers

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestTenantShareBoundsANamespace: of 8 workers, one namespace alone takes 6, never the last
// 2; another namespace then takes them at once; past its share a namespace waits while others
// are busy; a request turned away is put back soon and never reaches the reconciler (issue 30,
// point 1: one namespace's pools on black-holed Coolify URLs held every worker).
func TestTenantShareBoundsANamespace(t *testing.T) {
	calls := 0
	inner := reconcile.Func(func(context.Context, ctrl.Request) (ctrl.Result, error) {
		calls++
		return ctrl.Result{}, nil
	})
	share := newTenantShare(inner, "botpool", 8, NewMetrics(nil))
	share.jitter = func() float64 { return 0 }
	entered := func(ns string, n int) int {
		got := 0
		for range n {
			if share.enter(ns) {
				got++
			}
		}
		return got
	}
	if got := entered("attacker", 24); got != 6 {
		t.Fatalf("a namespace alone entered %d of 24 passes on 8 workers, want 6 (its share, 2, and the workers beyond that leave 2 idle)", got)
	}
	if got := entered("victim", 3); got != 2 {
		t.Fatalf("another namespace entered %d of 3, want 2: the workers the first one left, its share", got)
	}
	res, err := share.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "victim", Name: "pool"}})
	if err != nil || calls != 0 || res.RequeueAfter != shareRetry/2 {
		t.Fatalf("a request past the share: %+v, %v, %d calls; want it put back after %s without a call", res, err, calls, shareRetry/2)
	}
	// The attacker's passes end: beside the victim's two it takes four, leaving two idle.
	for range 6 {
		share.leave("attacker")
	}
	if got := entered("attacker", 24); got != 4 {
		t.Fatalf("with the other namespace's 2 in flight, the first entered %d, want 4 (2 left idle)", got)
	}
	for range 2 {
		share.leave("victim")
	}
	if got := entered("attacker", 24); got != 2 {
		t.Fatalf("with the other namespace done, the first entered %d more, want 2 (6 in all, 2 left idle)", got)
	}
	for range 6 {
		share.leave("attacker")
	}
	if len(share.held) != 0 || share.total != 0 {
		t.Fatalf("nothing in flight, yet held %v and total %d", share.held, share.total)
	}
	if _, err := share.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "victim", Name: "pool"}}); err != nil || calls != 1 {
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
