package slot

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/fakeapi"
	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/coolify"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/store/memory"
)

// TestSettle: what a body returned becomes the reconcile's answer in one place: a wait and a
// stall are handled passes with a requeue (the earliest timer wins), a failure goes to the
// error backoff with no requeue of its own, and only the slot skeleton (classify) reads an
// error a person must fix as a stall.
func TestSettle(t *testing.T) {
	refused := fmt.Errorf("deploying: %w", coolify.ErrForbidden)
	tests := []struct {
		name     string
		err      error
		classify bool
		timer    time.Duration
		want     ctrl.Result
		wantErr  bool
		stalled  string
		handled  bool
	}{
		{name: "done", timer: time.Minute, want: ctrl.Result{RequeueAfter: time.Minute}, handled: true},
		{name: "wait sooner than the timer", err: pass.WaitFor(time.Second, "", ""), timer: time.Minute,
			want: ctrl.Result{RequeueAfter: time.Second}, handled: true},
		{name: "timer sooner than the wait", err: pass.WaitFor(time.Hour, "", ""), timer: time.Minute,
			want: ctrl.Result{RequeueAfter: time.Minute}, handled: true},
		{name: "wrapped wait", err: fmt.Errorf("step: %w", pass.WaitFor(3*time.Second, "", "")),
			want: ctrl.Result{RequeueAfter: 3 * time.Second}, handled: true},
		{name: "stall", err: pass.Stall("Broken", "fix it", nil), want: ctrl.Result{RequeueAfter: pass.StalledRetry},
			stalled: "Broken", handled: true},
		{name: "a person must fix it, classified", err: refused, classify: true,
			want: ctrl.Result{RequeueAfter: pass.StalledRetry}, stalled: v1.ReasonPermissionDenied, handled: true},
		{name: "a person must fix it, not classified", err: refused, timer: time.Minute, wantErr: true},
		{name: "failure", err: errors.New("boom"), classify: true, timer: time.Minute, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := pass.Settle(tt.err, tt.classify)
			res, err := o.Result(tt.timer, pass.StalledRetry)
			if (err != nil) != tt.wantErr || res != tt.want {
				t.Errorf("result = %+v, %v; want %+v, error %v", res, err, tt.want, tt.wantErr)
			}
			got := ""
			if o.Stalled != nil {
				got = o.Stalled.Reason
			}
			if got != tt.stalled {
				t.Errorf("stalled %q, want %q", got, tt.stalled)
			}
			if o.Handled() != tt.handled {
				t.Errorf("handled = %v, want %v", o.Handled(), tt.handled)
			}
		})
	}
}

// failingDeployAPI refuses every deploy with a server error: a failure the backoff retries.
// TestObservedGenerationOnlyAfterAHandledPass: a slot pass that fails still writes what it
// must remember (deployingSince: the failed request may have been queued), but not
// status.observedGeneration: the generation it read was not dealt with, and kstatus must not
// read the slot as current. The slot and bot controllers once set it on every status write.
// Single passes on a fake client and the fake clock.
func TestObservedGenerationOnlyAfterAHandledPass(t *testing.T) {
	fclk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
	pool := bt.MakePool("ns", "pool").UID("pool-uid").MaxSlots(1).Image("bot", "1").Obj()
	bot := bt.MakeBot("ns", "bot").UID("bot-uid").MeetingURL("https://zoom.us/j/1").PoolRef("pool").Phase(v1.BotDeploying).Obj()
	// Bound since the last handled pass: the binding moved the generation on.
	slot := bt.MakeSlot("ns", "pool-zoom-001", "pool").UID("slot-uid").Generation(2).ObservedGeneration(1).
		Finalizers(v1.FinalizerSlot).BoundTo(bot.Name, bot.UID).
		Phase(v1.SlotIdle).Since(fclk.Now().Add(-time.Minute)).App("app-uuid").
		Token("0000000000000000000000000000000000000000000000000000000000000000").Obj()
	c := fakeapi.New(t, interceptor.Funcs{}, pool, bot, slot)
	api := &bt.Coolify{
		SetDescriptionFn: func(context.Context, string, string) error { return nil },
		DeployFn: func(context.Context, string) (coolify.DeployResult, error) {
			return coolify.DeployResult{}, coolify.ErrServer
		},
	}
	r := onePassSlots(c, c, fclk, api, memory.New(memory.WithClock(fclk)))
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(slot)}

	if res, err := r.Reconcile(context.Background(), req); !errors.Is(err, coolify.ErrServer) || res != (ctrl.Result{}) {
		t.Fatalf("failed pass = %+v, %v; want no requeue and the deploy's error (the backoff retries)", res, err)
	}
	got := &v1.BotPoolSlot{}
	if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if got.Generation != 2 {
		t.Fatalf("the fake API server keeps generation %d, want 2: the test proves nothing", got.Generation)
	}
	if got.Status.DeployingSince == nil {
		t.Fatal("the failed pass did not record deployingSince")
	}
	if got.Status.ObservedGeneration != 1 {
		t.Errorf("observedGeneration %d after a failed pass, want 1 (left behind)", got.Status.ObservedGeneration)
	}
}

// TestRemoveFinalizer: the one removal idiom stores the object without the finalizer, keeps
// the status the pass computed (an update answers with the stored one), moves the pass on to
// the version the update answered, and counts an object already gone as released.
func TestRemoveFinalizer(t *testing.T) {
	ctx := context.Background()
	pool := bt.MakePool("ns", "pool").Obj()
	pool.Finalizers = []string{v1.FinalizerPool}
	c := fake.NewClientBuilder().WithScheme(bt.Scheme()).WithObjects(pool).WithStatusSubresource(&v1.BotPool{}).Build()
	live := &v1.BotPool{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pool), live); err != nil {
		t.Fatal(err)
	}
	before := live.ResourceVersion
	live.Status.Queued = 7 // computed by this pass

	removed, err := pass.RemoveFinalizer(ctx, c, live, v1.FinalizerPool)
	if err != nil || !removed {
		t.Fatalf("removeFinalizer = %v, %v; want true, nil", removed, err)
	}
	if live.Status.Queued != 7 || live.ResourceVersion == before {
		t.Fatalf("after the update the pass holds queued=%d at version %s (was %s); want its own status at the new version",
			live.Status.Queued, live.ResourceVersion, before)
	}
	stored := &v1.BotPool{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pool), stored); err != nil {
		t.Fatal(err)
	}
	if len(stored.Finalizers) != 0 || stored.ResourceVersion != live.ResourceVersion {
		t.Fatalf("stored finalizers %v at %s; want none at %s", stored.Finalizers, stored.ResourceVersion, live.ResourceVersion)
	}
	if removed, err := pass.RemoveFinalizer(ctx, c, live, v1.FinalizerPool); removed || err != nil {
		t.Fatalf("a second removal = %v, %v; want nothing to do", removed, err)
	}

	gone := bt.MakePool("ns", "gone").Obj()
	gone.Finalizers = []string{v1.FinalizerPool}
	if removed, err := pass.RemoveFinalizer(ctx, c, gone, v1.FinalizerPool); !removed || err != nil {
		t.Fatalf("removing from an object already gone = %v, %v; want true, nil", removed, err)
	}
}
