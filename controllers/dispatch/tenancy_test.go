package dispatch

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/fakeapi"
	"botpool.dev/botpool/controllers/internal/metrics"
	"botpool.dev/botpool/controllers/internal/tenancy"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// TestAWaveBindsTheBotsOfAdmittedNamespacesOnly: a pool shared with the namespaces labelled
// for it binds its own namespace's bots and those of an admitted namespace (the slot's botRef
// naming the bot's namespace), never one of a namespace it does not admit (a bot routed there
// before its namespace lost the label), though a slot is free for it. Two tenants' bots with one
// deduplication key are no duplicates: both are bound.
func TestAWaveBindsTheBotsOfAdmittedNamespacesOnly(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
	queued := func(ns, name string, age time.Duration) *bt.BotWrapper {
		return bt.MakeBot(ns, name).UID(types.UID("uid-" + ns + "-" + name)).Phase(v1.BotQueued).Created(clk.Now().Add(-age))
	}
	pool := bt.MakePool("platform", "pool").UID("pool-uid").MaxSlots(5).SharedWith(map[string]string{"tenant": "yes"}).Obj()
	objs := []client.Object{pool,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"tenant": "yes"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}},
		queued("platform", "own", 4*time.Minute).InPool("pool").Obj(),
		queued("team-a", "standup", 3*time.Minute).PoolIn("platform", "pool").InPoolOf("platform", "pool").DeduplicationKey("standup").Obj(),
		queued("team-b", "dropped", 2*time.Minute).PoolIn("platform", "pool").InPoolOf("platform", "pool").Obj(),
		queued("team-c", "standup", time.Minute).InPoolOf("platform", "pool").DeduplicationKey("standup").Obj(),
	}
	// team-c is not labelled either, but no Namespace object: a namespace that is gone.
	for i := range 5 {
		name := "pool-zoom-00" + string(rune('1'+i))
		objs = append(objs, bt.MakeSlot("platform", name, "pool").UID(types.UID("s-"+name)).Phase(v1.SlotIdle).
			Since(clk.Now().Add(-time.Duration(i+1)*time.Minute)).App("a-"+name).Obj())
	}
	c := fakeapi.New(t, interceptor.Funcs{}, objs...)
	d := &Dispatcher{Client: c, Clock: clk, Metrics: metrics.New(nil), Admission: tenancy.Admission{Reader: c}}
	got := boundBots(t, d, c, pool)
	if got["own"] == "" || got["standup"] == "" || got["dropped"] != "" || len(got) != 2 {
		t.Fatalf("bound %v; want own and team-a's standup only", got)
	}
	var slots v1.BotPoolSlotList
	if err := c.List(t.Context(), &slots, client.InNamespace("platform")); err != nil {
		t.Fatal(err)
	}
	refs := map[string]string{}
	for _, s := range slots.Items {
		if ref := s.Spec.BotRef; ref != nil {
			refs[ref.Name] = ref.Namespace
		}
	}
	if refs["own"] != "" || refs["standup"] != "team-a" {
		t.Errorf("botRef namespaces %v; want none for the pool's own bot, team-a for the tenant's", refs)
	}

	// team-c admitted (every namespace now): its bot of the same key as team-a's is bound too.
	pool.Spec.AllowedNamespaces = &v1.AllowedNamespaces{From: v1.NamespacesAll}
	if err := c.Update(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pool)}); err != nil {
		t.Fatal(err)
	}
	bound := 0
	if err := c.List(t.Context(), &slots, client.InNamespace("platform")); err != nil {
		t.Fatal(err)
	}
	for _, s := range slots.Items {
		if ref := s.Spec.BotRef; ref != nil && ref.Name == "standup" {
			bound++
		}
	}
	if bound != 2 {
		t.Errorf("%d bots named standup bound; want team-a's and team-c's, one meeting key each", bound)
	}
}
