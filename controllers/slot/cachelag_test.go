package slot

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/deploygate"
	"botpool.dev/botpool/controllers/internal/metrics"
	"botpool.dev/botpool/controllers/internal/pass"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/internal/cachelag"
	"botpool.dev/botpool/store/memory"
)

// TestReleaseWaitsForTheCacheAfterItsOwnStatusWrite: the pass that unbinds a finished bot
// writes twice, the spec (botRef cleared) and then the status (the unbind's new generation
// changes the conditions). Both replaced versions are ours: a next pass that reads either
// from a lagging cache must wait for the cache, not act. It once recorded the status write as
// replacing the version the pass read, so a pass on the unbind's version saw a Busy slot
// without a bot and released it a second time (the audit log read "Releasing Idle Releasing
// Idle", TestSlotLifecycle on a loaded machine). Single passes, no timing: the lagging cache
// is a client that answers with the unbind's version.
func TestReleaseWaitsForTheCacheAfterItsOwnStatusWrite(t *testing.T) {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1.AddToScheme(scheme))
	fclk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))

	bot := bt.MakeBot("ns", "first").UID("bot-uid").MeetingURL("https://zoom.us/j/1").PoolRef("pool").Phase(v1.BotDone).Obj()
	slot := bt.MakeSlot("ns", "pool-zoom-001", "pool").UID("slot-uid").Finalizers(v1.FinalizerSlot).Generation(2).
		BoundTo(bot.Name, bot.UID).Phase(v1.SlotBusy).App("app-uuid").Obj()
	setSlotConditions(slot)
	// The conditions were written for generation 1, as after the slot's last status write once
	// the unbind (a spec change) moved the generation on: the unbind's pass rewrites them.
	for i := range slot.Status.Conditions {
		slot.Status.Conditions[i].ObservedGeneration = 1
	}

	var (
		lagging       *v1.BotPoolSlot // when set, the cache's answer for the slot
		unbound       *v1.BotPoolSlot // the slot as the unbind left it
		specPatches   int
		statusPatches int
	)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(slot, bot).
		WithStatusSubresource(&v1.BotPoolSlot{}, &v1.Bot{}).
		WithInterceptorFuncs(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if s, ok := obj.(*v1.BotPoolSlot); ok && lagging != nil {
					lagging.DeepCopyInto(s)
					return nil
				}
				return c.Get(ctx, key, obj, opts...)
			},
			Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				err := c.Patch(ctx, obj, patch, opts...)
				if s, ok := obj.(*v1.BotPoolSlot); ok && err == nil {
					specPatches++
					unbound = s.DeepCopy()
				}
				return err
			},
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				if _, ok := obj.(*v1.BotPoolSlot); ok {
					statusPatches++
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	writes := &cachelag.Tracker{}
	r := &Reconciler{Client: cachelag.NewClient(c, writes), APIReader: c, Writes: writes, Store: memory.New(memory.WithClock(fclk)),
		Clock: fclk, Recorder: bt.DiscardEvents{}, Metrics: metrics.New(nil), Gate: &deploygate.Gate{Clock: fclk}}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(slot)}

	// The bot is done: the pass unbinds, then writes the status the unbind's generation changed.
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if specPatches != 1 || statusPatches != 1 || unbound == nil || unbound.Spec.BotRef != nil {
		t.Fatalf("the release pass made %d spec and %d status writes, want the unbind and then the status", specPatches, statusPatches)
	}
	if ready := meta.FindStatusCondition(unbound.Status.Conditions, v1.ConditionReady); ready == nil || ready.ObservedGeneration != 1 {
		t.Fatalf("the unbind's version carries conditions %+v, want the ones for generation 1", unbound.Status.Conditions)
	}

	// The cache shows the unbind's version: Busy, no bot. Our status write replaced it.
	lagging = unbound
	res, err := r.Reconcile(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter != pass.CacheWait || specPatches != 1 || statusPatches != 1 {
		t.Fatalf("a pass on version %s, which our own status write replaced, acted (result %+v, %d spec and %d status writes): want it to wait %v for the cache",
			unbound.ResourceVersion, res, specPatches, statusPatches, pass.CacheWait)
	}
}
