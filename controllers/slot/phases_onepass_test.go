package slot

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/deploygate"
	"botpool.dev/botpool/controllers/internal/fakeapi"
	"botpool.dev/botpool/controllers/internal/metrics"
	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/store/memory"
)

// onePassSlots is a slot reconciler for single passes on a fake client: writes through c,
// reads past the cache through reader, the fake clock, the suite's checking event recorder, a
// fixed jitter (jittered(d) == d) and a process that has run for an hour, so no restart rule
// applies.
func onePassSlots(c client.Client, reader client.Reader, clk *clocktesting.FakeClock, api coolify.API, st Store) *Reconciler {
	return &Reconciler{Client: c, APIReader: reader, Connector: &bt.Connector[coolifyview.CoolifyAPI]{API: api},
		Store: st, Clock: clk, Recorder: bt.DiscardEvents{}, Metrics: metrics.New(nil),
		Coolify: &coolifyview.BulkReader{Clock: clk}, Gate: &deploygate.Gate{Clock: clk}, Jitter: func() float64 { return 0.5 },
		Started: clk.Now().Add(-time.Hour)}
}

// onePassResult is what one slot reconcile did: the stored slot afterwards (nil: gone), what
// Reconcile returned and what it asked of Coolify.
type onePassResult struct {
	Phase   v1.SlotPhase
	Reason  string
	Gone    bool
	Requeue time.Duration
	Err     bool
	Calls   []string
}

// TestSlotPhasesInOnePass drives one slot reconcile per row on controller-runtime's fake
// client (errors injected with interceptor.Funcs), the fake clock and a func-field Coolify,
// and compares the phase, reason, requeue and Coolify calls with what the row wants. Negative
// cases (a conflict, Coolify failing) need no envtest and no waiting.
func TestSlotPhasesInOnePass(t *testing.T) {
	const (
		ns    = "ns"
		slotN = "pool-zoom-001"
		app   = "app-1"
		token = "0000000000000000000000000000000000000000000000000000000000000000"
	)
	now := time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)
	poll := v1.DefaultDeploymentPollInterval // Jitter 0.5 makes jittered(d) == d
	tag := coolifyview.ClusterPoolTag("", ns, "pool")

	pool := func() client.Object {
		return bt.MakePool(ns, "pool").UID("pool-uid").MaxSlots(1).Image("bot", "1").Obj()
	}
	// The owner mark of the slot's placement (the pool's default server), and of another.
	mark := coolifyview.OwnerMark(tag, pool().(*v1.BotPool), pool().(*v1.BotPool).Spec.Coolify.DefaultServer())
	elsewhere := coolifyview.OwnerMark(tag, pool().(*v1.BotPool), "another-server")
	bot := func() client.Object {
		return bt.MakeBot(ns, "bot").UID("bot-uid").PoolRef("pool").InPool("pool").Phase(v1.BotDeploying).Obj()
	}
	slot := func() *bt.SlotWrapper {
		return bt.MakeSlot(ns, slotN, "pool").UID("slot-uid").Finalizers(v1.FinalizerSlot).Token(token)
	}
	deploying := func() *bt.SlotWrapper {
		return slot().BoundTo("bot", "bot-uid").App(app).Phase(v1.SlotDeploying).Since(now.Add(-time.Minute)).
			Deployment("dep-1", now.Add(-time.Minute))
	}
	deployment := func(status coolify.DeploymentStatus) func(context.Context, string) (*coolify.Deployment, error) {
		return func(context.Context, string) (*coolify.Deployment, error) {
			return &coolify.Deployment{DeploymentUUID: "dep-1", Status: status}, nil
		}
	}
	noActive := func(context.Context) ([]coolify.Deployment, error) { return nil, nil }
	ok := func(context.Context, string) error { return nil }
	described := func(context.Context, string, string) error { return nil }
	conflict := interceptor.Funcs{SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
		return apierrors.NewConflict(schema.GroupResource{Group: v1.GroupVersion.Group, Resource: "botpoolslots"}, slotN, fmt.Errorf("the object has been modified"))
	}}

	tests := []struct {
		name    string
		objs    []client.Object
		coolify *bt.Coolify
		funcs   interceptor.Funcs
		want    onePassResult
	}{{
		name: "Creating: the application is created and the slot turns Idle",
		objs: []client.Object{pool(), slot().Phase(v1.SlotCreating).Since(now).Obj()},
		coolify: &bt.Coolify{
			ListApplicationsFn: func(context.Context, string) ([]coolify.Application, error) { return nil, nil },
			CreateDockerImageApplicationFn: func(context.Context, coolify.CreateApplicationRequest) (string, error) {
				return app, nil
			},
			UpsertEnvsFn:     func(_ context.Context, _ string, e []coolify.EnvVar) ([]coolify.EnvVar, error) { return e, nil },
			SetDescriptionFn: described,
		},
		want: onePassResult{Phase: v1.SlotIdle,
			Calls: []string{"ListApplications " + tag, "CreateDockerImageApplication " + slotN, "UpsertEnvs " + app, "SetDescription " + app}},
	}, {
		// The model check's seed 3457702266237806: a create took effect with its answer lost,
		// then the pool's template moved to another tag; the slot cannot adopt the application
		// on the old one, and creating beside it made two of one name (invariant 2).
		name: "Creating beside its own application on an image it cannot adopt, stopped: that one is deleted, its own created",
		objs: []client.Object{pool(), slot().Phase(v1.SlotCreating).Since(now).Obj()},
		coolify: &bt.Coolify{
			ListApplicationsFn: func(context.Context, string) ([]coolify.Application, error) {
				return []coolify.Application{{UUID: "old-tag", Name: slotN, Description: "[Creating]" + mark,
					DockerRegistryImageName: "bot", DockerRegistryImageTag: "0", Status: "exited:unhealthy"}}, nil
			},
			DeleteApplicationFn: bt.DeleteKeepingImages,
			CreateDockerImageApplicationFn: func(context.Context, coolify.CreateApplicationRequest) (string, error) {
				return app, nil
			},
			UpsertEnvsFn:     func(_ context.Context, _ string, e []coolify.EnvVar) ([]coolify.EnvVar, error) { return e, nil },
			SetDescriptionFn: described,
		},
		want: onePassResult{Phase: v1.SlotIdle,
			Calls: []string{"ListApplications " + tag, "DeleteApplication old-tag", "CreateDockerImageApplication " + slotN, "UpsertEnvs " + app, "SetDescription " + app}},
	}, {
		name: "Creating beside its own application on an image it cannot adopt, running: the slot waits, nothing is created",
		objs: []client.Object{pool(), slot().Phase(v1.SlotCreating).Since(now).Obj()},
		coolify: &bt.Coolify{
			ListApplicationsFn: func(context.Context, string) ([]coolify.Application, error) {
				return []coolify.Application{{UUID: "old-tag", Name: slotN, Description: "[Creating]" + mark,
					DockerRegistryImageName: "bot", DockerRegistryImageTag: "0", Status: "running:healthy"}}, nil
			},
		},
		want: onePassResult{Phase: v1.SlotCreating, Requeue: coolifyview.ServersRefresh,
			Calls: []string{"ListApplications " + tag}},
	}, {
		name: "Idle with a botRef: the deploy is sent and the slot turns Deploying",
		objs: []client.Object{pool(), bot(), slot().BoundTo("bot", "bot-uid").App(app).Phase(v1.SlotIdle).Since(now.Add(-time.Minute)).Obj()},
		coolify: &bt.Coolify{
			SetDescriptionFn: described,
			DeployFn: func(context.Context, string) (coolify.DeployResult, error) {
				return coolify.DeployResult{DeploymentUUID: "dep-1"}, nil
			},
		},
		want: onePassResult{Phase: v1.SlotDeploying, Requeue: poll, Calls: []string{"SetDescription " + app, "Deploy " + app}},
	}, {
		name: "Idle with a botRef, Coolify answers 503: the pass fails and is retried, the slot stays Idle",
		objs: []client.Object{pool(), bot(), slot().BoundTo("bot", "bot-uid").App(app).Phase(v1.SlotIdle).Since(now.Add(-time.Minute)).Obj()},
		coolify: &bt.Coolify{
			SetDescriptionFn: described,
			DeployFn: func(context.Context, string) (coolify.DeployResult, error) {
				return coolify.DeployResult{}, fmt.Errorf("deploy: %w", coolify.ErrServer)
			},
		},
		want: onePassResult{Phase: v1.SlotIdle, Err: true, Calls: []string{"SetDescription " + app, "Deploy " + app}},
	}, {
		// The model check's seed 3457702266237806: the pool's pre-pull of a tag the registry
		// lacks failed; each standby container deployed on it failed too, the slot retired
		// after maxRecoveryAttempts and the pool created it again, forever.
		name: "Idle standby slot whose image's pre-pull failed on its server: no deploy until the pool's next pull",
		objs: []client.Object{
			bt.MakePool(ns, "pool").UID("pool-uid").MaxSlots(1).Image("bot", "1").Standby(v1.StandbyRunning).Template("h1", "bot:1").
				PullFailed(pool().(*v1.BotPool).Spec.Coolify.DefaultServer(), "bot:1", 1, now.Add(-30*time.Second)).Obj(),
			slot().App(app).Template("h1", "bot:1").Phase(v1.SlotIdle).Since(now.Add(-time.Minute)).Obj()},
		coolify: &bt.Coolify{},
		want:    onePassResult{Phase: v1.SlotIdle, Requeue: policy.PullRetry - 30*time.Second},
	}, {
		// The model check's seed 881256409367165: a slot created on a tag whose pulls all
		// failed was bound after the pool had moved on and pulled another tag, and its
		// deployment pulled the old one cold (invariant 16).
		name: "Idle with a botRef on an image its server does not hold, the pool pulled another there: given that one, then deployed",
		objs: []client.Object{
			bt.MakePool(ns, "pool").UID("pool-uid").MaxSlots(1).Image("bot", "3").Template("h3", "bot:3").
				Cached(pool().(*v1.BotPool).Spec.Coolify.DefaultServer(), "bot:2", "", now.Add(-time.Hour)).Obj(),
			bot(), slot().BoundTo("bot", "bot-uid").App(app).Template("h1", "bot:1").Phase(v1.SlotIdle).Since(now.Add(-time.Minute)).Obj()},
		coolify: &bt.Coolify{
			UpdateApplicationFn: func(_ context.Context, _ string, u coolify.AppUpdate) error {
				if u != (coolify.AppUpdate{Image: "bot", Tag: "2"}) {
					return fmt.Errorf("update %+v, want image bot tag 2 only (its env and limits stay its template's)", u)
				}
				return nil
			},
			SetDescriptionFn: described,
			DeployFn: func(context.Context, string) (coolify.DeployResult, error) {
				return coolify.DeployResult{DeploymentUUID: "dep-1"}, nil
			},
		},
		want: onePassResult{Phase: v1.SlotDeploying, Requeue: poll, Calls: []string{"UpdateApplication " + app, "SetDescription " + app, "Deploy " + app}},
	}, {
		name: "Deploying, the deployment finished: Busy",
		objs: []client.Object{pool(), bot(), deploying().Obj()},
		coolify: &bt.Coolify{
			ListActiveDeploymentsFn: noActive, GetDeploymentFn: deployment(coolify.DeploymentFinished),
			SetDescriptionFn: described,
		},
		want: onePassResult{Phase: v1.SlotBusy, Requeue: pass.DefaultAppCheck,
			Calls: []string{"ListActiveDeployments", "GetDeployment dep-1", "SetDescription " + app}},
	}, {
		name: "Deploying, the deployment failed: Error with its reason",
		objs: []client.Object{pool(), bot(), deploying().Obj()},
		coolify: &bt.Coolify{
			ListActiveDeploymentsFn: noActive, GetDeploymentFn: deployment(coolify.DeploymentFailed),
			CancelDeploymentFn: ok, SetDescriptionFn: described,
		},
		want: onePassResult{Phase: v1.SlotError, Reason: string(v1.ReasonDeploymentFailed),
			Calls: []string{"ListActiveDeployments", "GetDeployment dep-1", "CancelDeployment dep-1", "SetDescription " + app}},
	}, {
		name: "Deploying, the deployment timed out and its cancel answers 500: the pass fails, the slot stays Deploying (a deployment left queued would run over the next bot)",
		objs: []client.Object{pool(), bot(), slot().BoundTo("bot", "bot-uid").App(app).Phase(v1.SlotDeploying).Since(now.Add(-time.Hour)).
			Deployment("dep-1", now.Add(-time.Hour)).Obj()},
		coolify: &bt.Coolify{
			ListActiveDeploymentsFn: func(context.Context) ([]coolify.Deployment, error) {
				return []coolify.Deployment{{DeploymentUUID: "dep-1", Status: coolify.DeploymentQueued}}, nil
			},
			GetDeploymentFn: deployment(coolify.DeploymentQueued),
			CancelDeploymentFn: func(context.Context, string) error {
				return fmt.Errorf("cancel: %w", coolify.ErrServer)
			},
			SetDescriptionFn: described,
		},
		want: onePassResult{Phase: v1.SlotDeploying, Err: true,
			Calls: []string{"ListActiveDeployments", "ListActiveDeployments", "CancelDeployment dep-1"}},
	}, {
		name: "Deploying, the status write conflicts: the pass fails and is retried, the stored slot stays Deploying",
		objs: []client.Object{pool(), bot(), deploying().Obj()},
		coolify: &bt.Coolify{
			ListActiveDeploymentsFn: noActive, GetDeploymentFn: deployment(coolify.DeploymentFinished),
			SetDescriptionFn: described,
		},
		funcs: conflict,
		want: onePassResult{Phase: v1.SlotDeploying, Err: true,
			Calls: []string{"ListActiveDeployments", "GetDeployment dep-1", "SetDescription " + app}},
	}, {
		name: "Deploying, Coolify answers 503 to the poll: polled again later, the slot stays Deploying",
		objs: []client.Object{pool(), bot(), deploying().Obj()},
		coolify: &bt.Coolify{ListActiveDeploymentsFn: func(context.Context) ([]coolify.Deployment, error) {
			return nil, fmt.Errorf("list: %w", coolify.ErrServer)
		}},
		want: onePassResult{Phase: v1.SlotDeploying, Requeue: poll, Calls: []string{"ListActiveDeployments"}},
	}, {
		name: "Deploying, the poll times out: polled again later, the slot stays Deploying",
		objs: []client.Object{pool(), bot(), deploying().Obj()},
		coolify: &bt.Coolify{
			ListActiveDeploymentsFn: noActive,
			GetDeploymentFn: func(context.Context, string) (*coolify.Deployment, error) {
				return nil, fmt.Errorf("%w: %w", coolify.ErrTransport, context.DeadlineExceeded)
			},
		},
		want: onePassResult{Phase: v1.SlotDeploying, Requeue: poll, Calls: []string{"ListActiveDeployments", "GetDeployment dep-1"}},
	}, {
		name: "Deleted free slot: the application is stopped and deleted, the finalizer goes",
		objs: []client.Object{pool(), slot().App(app).Phase(v1.SlotIdle).Since(now.Add(-time.Hour)).Deleting(now).Obj()},
		coolify: &bt.Coolify{StopFn: ok,
			DeleteApplicationFn: bt.DeleteKeepingImages,
			GetApplicationFn: func(context.Context, string) (*coolify.Application, error) {
				return nil, fmt.Errorf("get: %w", coolify.ErrNotFound)
			},
		},
		want: onePassResult{Gone: true, Calls: []string{"Stop " + app, "DeleteApplication " + app, "GetApplication " + app}},
	}, {
		// The model check's seed 1: left behind, the application kept the slot's name in
		// Coolify, and a replacement placed on another server made a second one (invariant 2).
		name: "Deleted Creating slot whose create took effect unanswered: the application of its name and mark is deleted, the slot waits for Coolify",
		objs: []client.Object{pool(), slot().Phase(v1.SlotCreating).Since(now.Add(-time.Minute)).Deleting(now).Obj()},
		coolify: &bt.Coolify{StopFn: ok, DeleteApplicationFn: bt.DeleteKeepingImages,
			ListApplicationsFn: func(context.Context, string) ([]coolify.Application, error) {
				return []coolify.Application{
					{UUID: "other-slot", Name: "pool-zoom-002", Description: "[Creating]" + mark},
					{UUID: "elsewhere", Name: slotN, Description: "[Creating]" + elsewhere},
					{UUID: app, Name: slotN, Description: "[Creating]" + mark},
				}, nil
			},
			GetApplicationFn: func(context.Context, string) (*coolify.Application, error) {
				return &coolify.Application{UUID: app, Name: slotN}, nil // deleted in the background
			},
		},
		want: onePassResult{Phase: v1.SlotCreating, Requeue: deleteCheck,
			Calls: []string{"ListApplications " + tag, "Stop " + app, "DeleteApplication " + app, "GetApplication " + app}},
	}, {
		name: "Deleted Creating slot, no application of its name and mark: the finalizer goes",
		objs: []client.Object{pool(), slot().Phase(v1.SlotCreating).Since(now.Add(-time.Minute)).Deleting(now).Obj()},
		coolify: &bt.Coolify{ListApplicationsFn: func(context.Context, string) ([]coolify.Application, error) {
			return []coolify.Application{{UUID: "elsewhere", Name: slotN, Description: "[Creating]" + elsewhere}}, nil
		}},
		want: onePassResult{Gone: true, Calls: []string{"ListApplications " + tag}},
	}, {
		name: "Deleted Creating slot, Coolify answers 503 to the list: the slot keeps its name for the retry",
		objs: []client.Object{pool(), slot().Phase(v1.SlotCreating).Since(now.Add(-time.Minute)).Deleting(now).Obj()},
		coolify: &bt.Coolify{ListApplicationsFn: func(context.Context, string) ([]coolify.Application, error) {
			return nil, fmt.Errorf("list: %w", coolify.ErrServer)
		}},
		want: onePassResult{Phase: v1.SlotCreating, Err: true, Calls: []string{"ListApplications " + tag}},
	}, {
		name:    "Slot already gone: nothing to do",
		objs:    []client.Object{pool()},
		coolify: &bt.Coolify{},
		want:    onePassResult{Gone: true},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			clk := clocktesting.NewFakeClock(now)
			c := fakeapi.New(t, tt.funcs, tt.objs...)
			r := onePassSlots(c, c, clk, tt.coolify, memory.New(memory.WithClock(clk)))
			key := client.ObjectKey{Namespace: ns, Name: slotN}

			res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})

			got := onePassResult{Requeue: res.RequeueAfter, Err: err != nil, Calls: tt.coolify.Calls()}
			var stored v1.BotPoolSlot
			switch gerr := c.Get(ctx, key, &stored); {
			case apierrors.IsNotFound(gerr):
				got.Gone = true
			case gerr != nil:
				t.Fatal(gerr)
			default:
				got.Phase, got.Reason = stored.Status.Phase, stored.Status.Reason
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("one pass (-want +got):\n%s\nerror: %v, message: %q", diff, err, stored.Status.Message)
			}
		})
	}
}

// TestAStaleDeployIsFailedOnlyOnAFreshRead: a slot deploying past deployingTimeout without a
// heartbeat is failed (its bot ends with it), but only on what Coolify says at that moment.
// The pool's list of active deployments was read a few seconds before, while Coolify
// answered; since then every call fails. Before, the slot failed on the list in the bulk
// reader's cache: a bot ended during a Coolify outage (invariant 9; the random model check
// found it, seed 4071674691979109 on e945be3). Two passes on one reconciler, the fake clock.
func TestAStaleDeployIsFailedOnlyOnAFreshRead(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
	since := clk.Now().Add(-v1.DefaultDeployingTimeout + 2*time.Second)
	pool := bt.MakePool("ns", "pool").UID("pool-uid").MaxSlots(1).Image("bot", "1").Obj()
	bot := bt.MakeBot("ns", "bot").UID("bot-uid").PoolRef("pool").InPool("pool").Phase(v1.BotDeploying).Obj()
	slot := bt.MakeSlot("ns", "pool-zoom-001", "pool").UID("slot-uid").Finalizers(v1.FinalizerSlot).
		Token("0000000000000000000000000000000000000000000000000000000000000000").
		BoundTo("bot", "bot-uid").App("app-1").Phase(v1.SlotDeploying).Since(since).Deployment("dep-1", since).Obj()
	c := fakeapi.New(t, interceptor.Funcs{}, pool, bot, slot)
	down := false
	api := &bt.Coolify{
		ListActiveDeploymentsFn: func(context.Context) ([]coolify.Deployment, error) {
			if down {
				return nil, fmt.Errorf("list active deployments: %w", coolify.ErrServer)
			}
			return []coolify.Deployment{{DeploymentUUID: "dep-1", Status: coolify.DeploymentInProgress}}, nil
		},
		CancelDeploymentFn: func(context.Context, string) error { return nil },
		SetDescriptionFn:   func(context.Context, string, string) error { return nil },
	}
	r := onePassSlots(c, c, clk, api, memory.New(memory.WithClock(clk))) // no heartbeat, long past any restart
	key := client.ObjectKeyFromObject(slot)
	pass := func() v1.BotPoolSlot {
		t.Helper()
		_, _ = r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		var got v1.BotPoolSlot
		if err := c.Get(ctx, key, &got); err != nil {
			t.Fatal(err)
		}
		return got
	}

	if got := pass(); got.Status.Phase != v1.SlotDeploying {
		t.Fatalf("before deployingTimeout the slot is %s (%q), want Deploying", got.Status.Phase, got.Status.Message)
	}
	down = true
	clk.Step(4 * time.Second) // past deployingTimeout; the list read is younger than a poll
	if got := pass(); got.Status.Phase != v1.SlotDeploying {
		t.Fatalf("while every Coolify call fails the slot went %s (%s: %q), want Deploying until Coolify answers",
			got.Status.Phase, got.Status.Reason, got.Status.Message)
	}
	down = false
	clk.Step(v1.DefaultDeploymentPollInterval)
	if got := pass(); got.Status.Phase != v1.SlotError || got.Status.Reason != string(v1.ReasonDeployingTimeout) {
		t.Fatalf("with Coolify back the slot is %s (%s: %q), want Error (DeployingTimeout)", got.Status.Phase, got.Status.Reason, got.Status.Message)
	}
}

// TestAWaitClearsStalled: a slot that stalled on what a person had to fix, once fixed, shows
// no Stalled while it waits with nothing wrong (here Coolify's rate limit): a wait is not a
// stall, and kstatus would report the slot Failed until a pass ran clean.
func TestAWaitClearsStalled(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
	pool := bt.MakePool("ns", "pool").UID("pool-uid").MaxSlots(1).Image("bot", "1").Obj()
	slot := bt.MakeSlot("ns", "pool-zoom-001", "pool").UID("slot-uid").Finalizers(v1.FinalizerSlot).
		Token("0000000000000000000000000000000000000000000000000000000000000000").
		App("app-1").Phase(v1.SlotIdle).Since(clk.Now().Add(-time.Minute)).Obj()
	slot.Status.Conditions = []metav1.Condition{{Type: v1.ConditionStalled, Status: metav1.ConditionTrue,
		Reason: string(v1.ReasonRequestRefused), Message: "Coolify refused the request", LastTransitionTime: metav1.NewTime(clk.Now())}}
	c := fakeapi.New(t, interceptor.Funcs{}, pool, slot)
	api := &bt.Coolify{
		ListApplicationsFn: func(context.Context, string) ([]coolify.Application, error) {
			return nil, fmt.Errorf("list applications: %w", coolify.ErrServer)
		},
	}
	r := onePassSlots(c, c, clk, api, memory.New(memory.WithClock(clk)))
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(slot)})
	if err != nil || res.RequeueAfter <= 0 {
		t.Fatalf("a pass whose application check failed = %+v, %v; want a wait", res, err)
	}
	var got v1.BotPoolSlot
	if err := c.Get(ctx, client.ObjectKeyFromObject(slot), &got); err != nil {
		t.Fatal(err)
	}
	if st := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionStalled); st != nil {
		t.Fatalf("a slot waiting to check its application again still shows Stalled=%s (%s)", st.Status, st.Reason)
	}
}

// TestAStrandedSlotKeepsItsEnvUntilItTakesTheTemplate: a slot on an image its server does not
// hold, while the pool pulled another there, is given that image alone (strandedImage) and
// marked stranded; once the pool's template is pulled there, the slot takes it, env and all,
// and drops the variables the template lacks (a key removed from the pool's Secret must not
// reach later bots). Two passes on the fake client.
func TestAStrandedSlotKeepsItsEnvUntilItTakesTheTemplate(t *testing.T) {
	const ns, slotN, app = "ns", "pool-zoom-001", "app-1"
	ctx := context.Background()
	now := time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	base := bt.MakePool(ns, "pool").UID("pool-uid").MaxSlots(1).Image("bot", "3").Obj()
	server := base.Spec.Coolify.DefaultServer()
	hash := policy.PoolTemplate(base, "", "").Hash()
	pool := bt.MakePool(ns, "pool").UID("pool-uid").MaxSlots(1).Image("bot", "3").Template(hash, "bot:3").
		Cached(server, "bot:2", "", now.Add(-time.Hour)).Obj()
	slot := bt.MakeSlot(ns, slotN, "pool").UID("slot-uid").Finalizers(v1.FinalizerSlot).
		Token("0000000000000000000000000000000000000000000000000000000000000000").
		App(app).Template("t1-0000000000000001", "bot:1").Phase(v1.SlotIdle).Since(now.Add(-time.Minute)).Obj()
	c := fakeapi.New(t, interceptor.Funcs{}, pool, slot)
	var updates []coolify.AppUpdate
	var deleted []string
	api := &bt.Coolify{
		UpdateApplicationFn: func(_ context.Context, _ string, u coolify.AppUpdate) error { updates = append(updates, u); return nil },
		UpsertEnvsFn:        func(_ context.Context, _ string, e []coolify.EnvVar) ([]coolify.EnvVar, error) { return e, nil },
		ListEnvsFn: func(context.Context, string) ([]coolify.EnvVar, error) {
			return []coolify.EnvVar{{UUID: "env-old", Key: "OLD_KEY", Value: "from the template before"}}, nil
		},
		DeleteEnvFn: func(_ context.Context, _ string, uuid string) error { deleted = append(deleted, uuid); return nil },
		GetApplicationFn: func(context.Context, string) (*coolify.Application, error) {
			return &coolify.Application{UUID: app, Name: slotN, Status: "exited:unhealthy"}, nil
		},
		SetDescriptionFn: func(context.Context, string, string) error { return nil },
	}
	r := onePassSlots(c, c, clk, api, memory.New(memory.WithClock(clk)))
	key := client.ObjectKey{Namespace: ns, Name: slotN}
	pass := func() *v1.BotPoolSlot {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatalf("pass: %v (calls %v)", err, api.Calls())
		}
		var got v1.BotPoolSlot
		if err := c.Get(ctx, key, &got); err != nil {
			t.Fatal(err)
		}
		return &got
	}

	got := pass()
	if got.Status.TemplateHash != strandedTemplate || got.Status.Image != "bot:2" ||
		len(updates) != 1 || updates[0] != (coolify.AppUpdate{Image: "bot", Tag: "2"}) || len(deleted) != 0 {
		t.Fatalf("after the first pass: template %q, image %q, updates %+v, deleted %v; want stranded on bot:2 by one image-only update, nothing deleted",
			got.Status.TemplateHash, got.Status.Image, updates, deleted)
	}

	// The pool pulled its template there.
	p := &v1.BotPool{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pool), p); err != nil {
		t.Fatal(err)
	}
	p.Status.Servers[0].Cached = append([]v1.CachedImage{{Image: "bot:3", PulledAt: metav1.NewTime(now)}}, p.Status.Servers[0].Cached...)
	if err := c.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Minute)
	got = pass()
	if got.Status.TemplateHash != hash || got.Status.Image != "bot:3" || len(updates) != 2 || updates[1].Image != "bot" || updates[1].Tag != "3" {
		t.Fatalf("after the pull: template %q, image %q, updates %+v; want %s on bot:3", got.Status.TemplateHash, got.Status.Image, updates, hash)
	}
	if len(deleted) != 1 || deleted[0] != "env-old" {
		t.Fatalf("variables deleted on taking the template: %v, want the one it lacks (env-old)", deleted)
	}
}
