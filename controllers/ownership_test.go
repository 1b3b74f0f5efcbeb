package controllers

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/bot"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/deploygate"
	"botpool.dev/botpool/controllers/internal/index"
	"botpool.dev/botpool/controllers/internal/metrics"
	slotctrl "botpool.dev/botpool/controllers/slot"
	"botpool.dev/botpool/coolify"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/store/memory"
)

// ownershipAPI is a Coolify holding one running application, which stops and deletes on request.
type ownershipAPI struct {
	coolify.API // calls the tests do not expect panic on the nil interface

	mu      sync.Mutex
	app     coolify.Application
	deleted bool
	stops   int
}

func (a *ownershipAPI) SetDescription(context.Context, string, string) error { return nil }

// UpsertEnvs takes the fresh credential a slot sets once its container is stopped.
func (a *ownershipAPI) UpsertEnvs(_ context.Context, _ string, env []coolify.EnvVar) ([]coolify.EnvVar, error) {
	return env, nil
}

func (a *ownershipAPI) ListApplications(context.Context, string) ([]coolify.Application, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.deleted {
		return nil, nil
	}
	return []coolify.Application{a.app}, nil
}

func (a *ownershipAPI) GetApplication(context.Context, string) (*coolify.Application, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.deleted {
		return nil, coolify.ErrNotFound
	}
	app := a.app
	return &app, nil
}

func (a *ownershipAPI) Stop(context.Context, string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stops++
	a.app.Status = "exited:unhealthy"
	return nil
}

func (a *ownershipAPI) DeleteApplication(context.Context, string, coolify.DeleteOptions) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.deleted = true
	return nil
}

// ownershipWorld runs the slot and bot controllers one pass at a time on one fake API server,
// each through its own client, which records what it writes.
type ownershipWorld struct {
	t      *testing.T
	clk    *clocktesting.FakeClock
	base   client.WithWatch
	api    *ownershipAPI
	slots  *slotctrl.Reconciler
	bots   *bot.Reconciler
	writes map[string][]string // by component: "kind verb"
	slot   client.ObjectKey
	bot    client.ObjectKey
}

func newOwnershipWorld(t *testing.T, slot *v1.BotPoolSlot, b *v1.Bot) *ownershipWorld {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1.AddToScheme(scheme))
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
	pool := bt.MakePool("ns", "pool").UID("pool-uid").MaxSlots(1).Image("bot", "1").Obj()
	base := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pool, slot, b).
		WithStatusSubresource(&v1.BotPoolSlot{}, &v1.Bot{}, &v1.BotPool{}).
		WithIndex(&v1.BotPoolSlot{}, index.SlotPool, func(o client.Object) []string { return []string{o.(*v1.BotPoolSlot).Spec.Pool} }).
		WithIndex(&v1.BotPoolSlot{}, index.SlotBotUID, func(o client.Object) []string {
			if ref := o.(*v1.BotPoolSlot).Spec.BotRef; ref != nil {
				return []string{string(ref.UID)}
			}
			return nil
		}).
		WithIndex(&v1.Bot{}, index.BotPool, func(o client.Object) []string {
			pool := o.(*v1.Bot).PoolKey()
			return []string{index.PoolKey(pool.Namespace, pool.Name)}
		}).
		Build()
	w := &ownershipWorld{t: t, clk: clk, base: base, writes: map[string][]string{},
		api:  &ownershipAPI{app: coolify.Application{UUID: slot.Status.ApplicationUUID, Name: slot.Name, Status: "running:healthy"}},
		slot: client.ObjectKeyFromObject(slot), bot: client.ObjectKeyFromObject(b)}
	store := memory.New(memory.WithClock(clk))
	// The slot reconciler as its own package's single-pass tests build it: a fixed jitter, and
	// a process that has run for an hour, so no restart rule applies.
	w.slots = &slotctrl.Reconciler{Client: w.recording("slot controller"), APIReader: base,
		Connector: &bt.Connector[coolifyview.CoolifyAPI]{API: w.api}, Store: store, Clock: clk, Recorder: bt.DiscardEvents{},
		Metrics: metrics.New(nil), Coolify: &coolifyview.BulkReader{Clock: clk}, Gate: &deploygate.Gate{Clock: clk},
		Jitter: func() float64 { return 0.5 }, Started: clk.Now().Add(-time.Hour)}
	w.bots = &bot.Reconciler{Client: w.recording("bot controller"), Clock: clk, Recorder: bt.DiscardEvents{}, Store: store,
		Started: clk.Now().Add(-time.Hour)}
	return w
}

// recording is a client that notes every write of the component.
func (w *ownershipWorld) recording(component string) client.Client {
	note := func(obj client.Object, verb string) {
		w.writes[component] = append(w.writes[component], fmt.Sprintf("%T %s", obj, verb))
	}
	return interceptor.NewClient(w.base, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			note(obj, "update")
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			note(obj, "patch")
			return c.Patch(ctx, obj, patch, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			note(obj, "delete")
			return c.Delete(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			note(obj, sub+" patch")
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			note(obj, sub+" update")
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
}

func (w *ownershipWorld) reconcileSlot() {
	w.t.Helper()
	if _, err := w.slots.Reconcile(context.Background(), ctrl.Request{NamespacedName: w.slot}); err != nil {
		w.t.Fatalf("slot pass: %v", err)
	}
}

func (w *ownershipWorld) reconcileBot() {
	w.t.Helper()
	if _, err := w.bots.Reconcile(context.Background(), ctrl.Request{NamespacedName: w.bot}); err != nil {
		w.t.Fatalf("bot pass: %v", err)
	}
}

func (w *ownershipWorld) getSlot() *v1.BotPoolSlot {
	w.t.Helper()
	s := &v1.BotPoolSlot{}
	if err := w.base.Get(context.Background(), w.slot, s); err != nil {
		w.t.Fatal(err)
	}
	return s
}

// getBot returns the bot, or nil once it is gone.
func (w *ownershipWorld) getBot() *v1.Bot {
	w.t.Helper()
	b := &v1.Bot{}
	if err := w.base.Get(context.Background(), w.bot, b); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil
		}
		w.t.Fatal(err)
	}
	return b
}

// checkOwners fails the test if either controller wrote the other's kind.
func (w *ownershipWorld) checkOwners() {
	w.t.Helper()
	for _, wr := range w.writes["slot controller"] {
		if wr[:len("*v1alpha1.Bot ")] == "*v1alpha1.Bot " {
			w.t.Errorf("the slot controller wrote a bot (%s); bots are the bot controller's", wr)
		}
	}
	for _, wr := range w.writes["bot controller"] {
		if len(wr) > len("*v1alpha1.BotPoolSlot") && wr[:len("*v1alpha1.BotPoolSlot")] == "*v1alpha1.BotPoolSlot" {
			w.t.Errorf("the bot controller wrote a slot (%s); slots are the slot controller's", wr)
		}
	}
}

func runningBot() *v1.Bot {
	return bt.MakeBot("ns", "bot").UID("bot-uid").Finalizers(v1.FinalizerBot).MeetingURL("https://zoom.us/j/1").PoolRef("pool").
		Phase(v1.BotInCall).InPool("pool").OnSlot("pool-zoom-001", "app-uuid").
		StartedAt(time.Date(2026, 1, 15, 8, 59, 50, 0, time.UTC)).Obj()
}

func boundSlot(phase v1.SlotPhase) *v1.BotPoolSlot {
	return bt.MakeSlot("ns", "pool-zoom-001", "pool").UID("slot-uid").Finalizers(v1.FinalizerSlot).BoundTo("bot", "bot-uid").
		Phase(phase).Since(time.Date(2026, 1, 15, 8, 50, 0, 0, time.UTC)).App("app-uuid").
		Token("0000000000000000000000000000000000000000000000000000000000000000").Obj()
}

// TestAFailedSlotKeepsItsReasonAndTheBotControllerEndsTheBot: a slot in Error does not write
// its bot (it once failed it itself, a second writer of Bot.status); it keeps its reason while
// the bot is bound, the bot controller ends the bot Fatal with that reason and message, and
// only then does the slot release it and recover. Single passes on a fake API server.
func TestAFailedSlotKeepsItsReasonAndTheBotControllerEndsTheBot(t *testing.T) {
	slot := boundSlot(v1.SlotError)
	slot.Status.Reason, slot.Status.Message = string(v1.ReasonDeploymentFailed), "Deployment d-1 ended failed"
	w := newOwnershipWorld(t, slot, runningBot())

	w.reconcileSlot()
	if s := w.getSlot(); s.Spec.BotRef == nil || s.Status.Phase != v1.SlotError || s.Status.Reason != string(v1.ReasonDeploymentFailed) {
		t.Fatalf("the failed slot let its bot go or lost its reason before the bot ended: %s/%s, botRef %v", s.Status.Phase, s.Status.Reason, s.Spec.BotRef)
	}
	if b := w.getBot(); b.Status.Phase.Terminal() {
		t.Fatalf("the slot controller ended the bot (%s/%s): that is the bot controller's", b.Status.Phase, b.Status.Reason)
	}

	w.reconcileBot()
	b := w.getBot()
	if b.Status.Phase != v1.BotFatal || b.Status.Reason != v1.ReasonDeploymentFailed || b.Status.Message != "Deployment d-1 ended failed" || b.Status.FinishedAt == nil {
		t.Fatalf("bot %s/%s %q (finishedAt %v), want Fatal/DeploymentFailed with the slot's message", b.Status.Phase, b.Status.Reason, b.Status.Message, b.Status.FinishedAt)
	}

	w.reconcileSlot() // releases the ended bot
	w.reconcileSlot() // recovers: stops the container, Idle
	if s := w.getSlot(); s.Spec.BotRef != nil || s.Status.Phase != v1.SlotIdle || w.api.stops != 1 {
		t.Fatalf("after the bot ended the slot is %s with botRef %v (%d stops), want released and recovered to Idle with one stop",
			s.Status.Phase, s.Spec.BotRef, w.api.stops)
	}
	w.checkOwners()
}

// TestADeletedBotIsReleasedByItsSlot: the bot controller of a deleted bot asks it to leave and
// waits; the slot controller alone clears spec.botRef, leaveGracePeriod after the request (the
// bot controller once cleared it itself, a second writer of the binding). Then the bot goes.
func TestADeletedBotIsReleasedByItsSlot(t *testing.T) {
	bot := runningBot()
	bot.DeletionTimestamp = &metav1.Time{Time: time.Date(2026, 1, 15, 8, 59, 0, 0, time.UTC)}
	w := newOwnershipWorld(t, boundSlot(v1.SlotBusy), bot)

	w.reconcileBot()
	if b := w.getBot(); b == nil || b.Status.Phase != v1.BotLeaving || b.Status.LeaveRequestedAt == nil {
		t.Fatalf("the deleted bot was not asked to leave: %+v", b)
	}
	w.clk.Step(14 * time.Second) // within leaveGracePeriod (15 s)
	w.reconcileSlot()
	if s := w.getSlot(); s.Spec.BotRef == nil {
		t.Fatal("the slot let the deleted bot go before leaveGracePeriod had passed")
	}
	w.reconcileBot()
	if w.getBot() == nil {
		t.Fatal("the bot went while its slot still held it")
	}

	w.clk.Step(2 * time.Second)
	w.reconcileSlot()
	if s := w.getSlot(); s.Spec.BotRef != nil {
		t.Fatal("the slot kept the deleted bot past leaveGracePeriod")
	}
	w.reconcileBot()
	if b := w.getBot(); b != nil {
		t.Fatalf("the released bot was not let go: finalizers %v", b.Finalizers)
	}
	w.checkOwners()
}

// TestADeletedSlotDrainsThenTheBotControllerEndsTheBot: a deleted slot lets its running bot
// leave; when the drain is over the bot controller ends the bot (SlotLost, saying why), and
// only then does the slot release it and delete the application. The bot is never unbound
// while running (invariant 5), and neither controller writes the other's kind.
func TestADeletedSlotDrainsThenTheBotControllerEndsTheBot(t *testing.T) {
	slot := boundSlot(v1.SlotBusy)
	slot.DeletionTimestamp = &metav1.Time{Time: time.Date(2026, 1, 15, 8, 59, 0, 0, time.UTC)}
	w := newOwnershipWorld(t, slot, runningBot())

	w.reconcileSlot()
	if s := w.getSlot(); s.Status.DrainingSince == nil || s.Spec.BotRef == nil || w.api.deleted {
		t.Fatalf("the deleted slot did not start draining: drainingSince %v, botRef %v, application deleted %v", s.Status.DrainingSince, s.Spec.BotRef, w.api.deleted)
	}
	w.reconcileBot()
	if b := w.getBot(); b.Status.Phase.Terminal() {
		t.Fatalf("the bot ended %s/%s within its leave grace", b.Status.Phase, b.Status.Reason)
	}

	w.clk.Step(16 * time.Second) // past leaveGracePeriod
	w.reconcileSlot()
	if s := w.getSlot(); s.Spec.BotRef == nil || w.api.deleted {
		t.Fatalf("the slot let its running bot go (botRef %v) or deleted the application (%v) before the bot ended", s.Spec.BotRef, w.api.deleted)
	}
	w.reconcileBot()
	b := w.getBot()
	if b.Status.Phase != v1.BotFatal || b.Status.Reason != v1.ReasonSlotLost || b.Status.Message != "Slot pool-zoom-001 was deleted; the bot did not leave within leaveGracePeriod" {
		t.Fatalf("bot %s/%s %q, want Fatal/SlotLost saying the slot was deleted", b.Status.Phase, b.Status.Reason, b.Status.Message)
	}

	w.reconcileSlot() // releases the ended bot
	w.reconcileSlot() // deletes the application
	w.reconcileSlot() // Coolify answers 404: the finalizer goes
	if !w.api.deleted {
		t.Fatal("the application was not deleted after the bot ended")
	}
	if err := w.base.Get(context.Background(), w.slot, &v1.BotPoolSlot{}); client.IgnoreNotFound(err) != nil || err == nil {
		t.Fatalf("the deleted slot is still there (%v)", err)
	}
	w.checkOwners()
}
