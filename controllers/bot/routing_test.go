package bot

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/dispatch"
	"botpool.dev/botpool/controllers/internal/fakeapi"
	"botpool.dev/botpool/controllers/internal/tenancy"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// TestResolvePoolAcrossNamespaces: the order a bot finds its pool in (its poolRef; else its
// own namespace's pools; else the pools shared with its namespace, the roomiest first), and
// what it is told when the pool it names, or was routed to, does not admit its namespace.
func TestResolvePoolAcrossNamespaces(t *testing.T) {
	tenantLabels := map[string]string{"tenant": "yes"}
	ns := func(name string, labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	free := func(p *v1.BotPool, idle int32) *v1.BotPool {
		p.Status.Slots = &v1.SlotCounts{Total: p.Spec.MaxSlots, Idle: idle}
		return p
	}
	objs := []client.Object{
		ns("team-a", tenantLabels), ns("team-b", nil), ns("team-own", tenantLabels),
		// Two shared zoom pools: the roomier one wins.
		free(bt.MakePool("platform", "zoom").MaxSlots(10).SharedWith(tenantLabels).Obj(), 2),
		free(bt.MakePool("platform-2", "zoom").MaxSlots(10).SharedWith(tenantLabels).Obj(), 5),
		// Not shared: never chosen for another namespace.
		free(bt.MakePool("private", "zoom").MaxSlots(10).Obj(), 9),
		// A namespace with a pool of its own uses it, however roomy the shared ones are.
		free(bt.MakePool("team-own", "zoom").MaxSlots(1).Obj(), 0),
	}
	c := fakeapi.New(t, interceptor.Funcs{}, objs...)
	r := &Reconciler{Client: c, Admission: tenancy.Admission{Reader: c}}

	tests := []struct {
		name      string
		bot       *v1.Bot
		wantPool  string // namespace/name, or "" for none
		wantRefus bool
	}{
		{name: "no poolRef, none of its own: the roomiest shared pool", bot: bt.MakeBot("team-a", "b").Obj(), wantPool: "platform-2/zoom"},
		{name: "no poolRef, one of its own", bot: bt.MakeBot("team-own", "b").Obj(), wantPool: "team-own/zoom"},
		{name: "named with its namespace", bot: bt.MakeBot("team-a", "b").PoolIn("platform", "zoom").Obj(), wantPool: "platform/zoom"},
		{name: "named, its namespace not admitted", bot: bt.MakeBot("team-b", "b").PoolIn("platform", "zoom").Obj(), wantRefus: true},
		{name: "named, not shared", bot: bt.MakeBot("team-a", "b").PoolIn("private", "zoom").Obj(), wantRefus: true},
		// The same answer for a pool that does not exist or is of another platform: naming
		// pools is no way to learn what other namespaces hold.
		{name: "named in another namespace, no such pool", bot: bt.MakeBot("team-a", "b").PoolIn("private", "teams").Obj(), wantRefus: true},
		{name: "named in another namespace, another platform", bot: bt.MakeBot("team-a", "b").MeetingURL("https://meet.google.com/abc-defg-hij").PoolIn("platform", "zoom").Obj(), wantRefus: true},
		{name: "named in its own namespace, no such pool", bot: bt.MakeBot("team-a", "b").PoolRef("nope").Obj()},
		{name: "no poolRef, not admitted anywhere", bot: bt.MakeBot("team-b", "b").Obj()},
		{name: "routed before, admitted no longer, another pool admits it", bot: bt.MakeBot("team-a", "b").InPoolOf("private", "zoom").Obj(),
			wantPool: "platform-2/zoom"},
		{name: "routed before, admitted no longer, no other pool", bot: bt.MakeBot("team-b", "b").InPoolOf("platform", "zoom").Obj(), wantRefus: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool, refused, err := r.resolvePool(t.Context(), tt.bot)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if pool != nil {
				got = pool.Namespace + "/" + pool.Name
			}
			if got != tt.wantPool || (refused != "") != tt.wantRefus {
				t.Fatalf("pool %q, refused %q; want pool %q, a refusal: %v", got, refused, tt.wantPool, tt.wantRefus)
			}
		})
	}
}

// TestRefusedBotStaysQueuedWhileItsFailedSlotHoldsIt: a tenant's bot whose start failed goes
// back to the queue while the failed slot still names it, and its namespace is dropped from the
// pool meanwhile. It stays Queued (saying PoolNotAllowed) until the slot lets go: a Pending bot
// is no longer one the slot has let go of (Bot.LeftSlot), and the slot would keep it, and its
// next pass take the old failure for a new one (the model check, seed 1795973968309153). Once
// the slot let go, it leaves the queue for Pending, its pool forgotten.
func TestRefusedBotStaysQueuedWhileItsFailedSlotHoldsIt(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
	pool := bt.MakePool("platform", "zoom").MaxSlots(2).SharedWith(map[string]string{"tenant": "yes"}).Obj()
	failedAt := metav1.NewTime(clk.Now().Add(-time.Second))
	bot := bt.MakeBot("team-a", "b").UID("bot-uid").PoolIn("platform", "zoom").InPoolOf("platform", "zoom").Phase(v1.BotQueued).Obj()
	bot.Status.QueuedAt = &failedAt
	bot.Status.StartAttempts = []v1.StartAttempt{{SlotName: "pool-zoom-001", Reason: v1.ReasonDeploymentFailed, At: failedAt}}
	slot := bt.MakeSlot("platform", "pool-zoom-001", "zoom").BoundTo("b", "bot-uid").Obj()
	slot.Spec.BotRef.Namespace = "team-a"
	slot.Status.Phase, slot.Status.Reason = v1.SlotError, string(v1.ReasonDeploymentFailed)
	c := fakeapi.New(t, interceptor.Funcs{}, pool, bot, slot,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}) // not labelled: dropped
	r := &Reconciler{Client: c, Clock: clk, Recorder: bt.DiscardEvents{}, Store: bt.NopLiveness{}, Admission: tenancy.Admission{Reader: c}}
	pass := func() *v1.Bot {
		t.Helper()
		if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(bot)}); err != nil {
			t.Fatal(err)
		}
		got := &v1.Bot{}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(bot), got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	got := pass()
	ready := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady)
	if got.Status.Phase != v1.BotQueued || got.Status.Pool != "zoom" || len(got.Status.StartAttempts) != 1 ||
		ready == nil || ready.Reason != string(v1.ReasonPoolNotAllowed) || !got.LeftSlot(slot) {
		t.Fatalf("phase %s, pool %q, %d attempts, Ready %+v; want Queued in its pool, one attempt, PoolNotAllowed, left the slot",
			got.Status.Phase, got.Status.Pool, len(got.Status.StartAttempts), ready)
	}

	// The slot lets go: the bot leaves the queue.
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(slot), slot); err != nil {
		t.Fatal(err)
	}
	slot.Spec.BotRef = nil
	if err := c.Update(t.Context(), slot); err != nil {
		t.Fatal(err)
	}
	got = pass()
	if got.Status.Phase != v1.BotPending || got.Status.Pool != "" || got.Status.PoolNamespace != "" {
		t.Fatalf("phase %s, pool %s/%s; want Pending with no pool", got.Status.Phase, got.Status.PoolNamespace, got.Status.Pool)
	}
}

// TestARefusedBotDropsItsGrant: a reserved bot its pool refuses (its namespace dropped) loses
// its reservation, and the grant its pool's ledger holds until the cache shows it goes too: it
// kept the pool's queue off a slot for a bot that may not be bound (the model check, seed
// 1795973968309153 on b3193b6).
func TestARefusedBotDropsItsGrant(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
	pool := bt.MakePool("platform", "zoom").MaxSlots(2).SharedWith(map[string]string{"tenant": "yes"}).Obj()
	bot := bt.MakeBot("team-a", "b").UID("bot-uid").PoolIn("platform", "zoom").InPoolOf("platform", "zoom").Phase(v1.BotScheduled).Obj()
	bt.Grant(bot, clk.Now().Add(time.Hour))
	bot.Status.Reservation.Pool = "zoom"
	c := fakeapi.New(t, interceptor.Funcs{}, pool, bot, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}})
	ledger := &dispatch.Ledger{}
	ledger.Remember(bot, clk.Now())
	r := &Reconciler{Client: c, Clock: clk, Recorder: bt.DiscardEvents{}, Store: bt.NopLiveness{}, Admission: tenancy.Admission{Reader: c},
		Reservations: ledger}
	if _, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(bot)}); err != nil {
		t.Fatal(err)
	}
	got := &v1.Bot{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(bot), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Reservation != nil || meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReserved) != nil {
		t.Errorf("the refused bot keeps its reservation: %+v", got.Status.Reservation)
	}
	if pending := ledger.WithPending(t.Context(), c, nil, pool, clk.Now()); len(pending) != 0 {
		t.Errorf("the pool's ledger still counts %d grant(s) of the refused bot", len(pending))
	}
}
