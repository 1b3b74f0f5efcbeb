package slot

import (
	"context"
	"fmt"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/fakeapi"
	"botpool.dev/botpool/coolify"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/internal/cachelag"
	"botpool.dev/botpool/store/memory"
)

// laggingCache is the manager's cache of single-pass tests: the API server's objects, except
// the slot, which it answers with slot while set (a version the watch has not moved past).
type laggingCache struct {
	client.Client
	slot *v1.BotPoolSlot
}

func (l *laggingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if s, ok := obj.(*v1.BotPoolSlot); ok && l.slot != nil && key.Name == l.slot.Name {
		l.slot.DeepCopyInto(s)
		return nil
	}
	return l.Client.Get(ctx, key, obj, opts...)
}

// TestNoSecondDeployOnAVersionAnotherWriterLeftBetween: a bound slot's deploy request is
// answered 500 after Coolify queued the deployment (a proxy timing out), and while the pass
// was out someone else wrote the slot (the soak's nudge, a label, kubectl): the pass's status
// write (deployingSince) lands on that version, and the cache-lag guard remembers only the
// version the pass read. A next pass that reads the other writer's version from a lagging
// cache (Idle, bound, no deployingSince) passed the guard, found no unanswered request to
// look for, and deployed again: a step later the first deployment's container had taken the
// bot's binding, and the second replaced it mid-call (TestSoak, 1 run in 8: "container 142
// of pool-zoom-004 ... over container 139 of bot bot-0088", both with the same credential).
// The deploy request is sent only on the version the API server holds.
func TestNoSecondDeployOnAVersionAnotherWriterLeftBetween(t *testing.T) {
	const (
		ns    = "ns"
		slotN = "pool-zoom-001"
		app   = "app-1"
		token = "0000000000000000000000000000000000000000000000000000000000000000"
	)
	now := time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	pool := bt.MakePool(ns, "pool").UID("pool-uid").MaxSlots(1).Image("bot", "1").Obj()
	bot := bt.MakeBot(ns, "bot").UID("bot-uid").PoolRef("pool").InPool("pool").Phase(v1.BotDeploying).Obj()
	slot := bt.MakeSlot(ns, slotN, "pool").UID("slot-uid").Finalizers(v1.FinalizerSlot).Token(token).
		BoundTo("bot", "bot-uid").App(app).Phase(v1.SlotIdle).Since(now.Add(-time.Minute)).Obj()
	c := fakeapi.New(t, interceptor.Funcs{}, pool, bot, slot)
	key := client.ObjectKeyFromObject(slot)

	var (
		deps  []coolify.Deployment // the application's deployments, oldest first
		other *v1.BotPoolSlot      // the version the other writer left
	)
	api := &bt.Coolify{
		SetDescriptionFn: func(context.Context, string, string) error { return nil },
		DeployFn: func(ctx context.Context, _ string) (coolify.DeployResult, error) {
			uuid := fmt.Sprintf("dep-%d", len(deps)+1)
			deps = append(deps, coolify.Deployment{DeploymentUUID: uuid, Status: coolify.DeploymentQueued,
				CreatedAt: clk.Now().UTC().Format(time.RFC3339)})
			if len(deps) > 1 {
				return coolify.DeployResult{DeploymentUUID: uuid}, nil
			}
			// Someone else writes the slot while the request is out.
			live := &v1.BotPoolSlot{}
			if err := c.Get(ctx, key, live); err != nil {
				return coolify.DeployResult{}, err
			}
			patch := client.MergeFrom(live.DeepCopy())
			live.Labels = map[string]string{"soak/tick": "1"}
			if err := c.Patch(ctx, live, patch); err != nil {
				return coolify.DeployResult{}, err
			}
			other = live.DeepCopy()
			return coolify.DeployResult{}, fmt.Errorf("deploy: %w", coolify.ErrServer) // after the work
		},
		ListApplicationDeploymentsFn: func(context.Context, string, int, int) (int, []coolify.Deployment, error) {
			if len(deps) == 0 {
				return 0, nil, nil
			}
			return len(deps), []coolify.Deployment{deps[len(deps)-1]}, nil
		},
	}
	cache := &laggingCache{Client: c}
	writes := &cachelag.Tracker{}
	r := onePassSlots(c, c, clk, api, memory.New(memory.WithClock(clk)))
	r.Client, r.Writes = cachelag.NewClient(cache, writes), writes
	req := ctrl.Request{NamespacedName: key}

	// The first pass deploys; Coolify queues dep-1 and answers 500.
	if _, err := r.Reconcile(context.Background(), req); err == nil {
		t.Fatal("the deploy answered 500: want the pass to fail")
	}
	stored := &v1.BotPoolSlot{}
	if err := c.Get(context.Background(), key, stored); err != nil {
		t.Fatal(err)
	}
	if stored.Status.Phase != v1.SlotIdle || stored.Status.DeployingSince == nil || other == nil {
		t.Fatalf("after the 500 the slot is %s with deployingSince %v: want Idle with the request recorded", stored.Status.Phase, stored.Status.DeployingSince)
	}

	// A step later dep-1 has finished (its container took the bot's binding). The cache still
	// shows the other writer's version: Idle, bound, no deployingSince.
	clk.Step(15 * time.Second)
	deps[0].Status = coolify.DeploymentFinished
	cache.slot = other
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Logf("second pass: %v", err)
	}
	if n := countCalls(api.Calls(), "Deploy "+app); n != 1 {
		t.Fatalf("a pass on version %s (another writer's, older than the slot's deployingSince) sent deploy request %d: "+
			"dep-1's container runs the bot and would be replaced; calls: %v", other.ResourceVersion, n, api.Calls())
	}

	// Once the cache shows the stored version, the slot follows dep-1.
	cache.slot = nil
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), key, stored); err != nil {
		t.Fatal(err)
	}
	if n := countCalls(api.Calls(), "Deploy "+app); n != 1 || stored.Status.Phase != v1.SlotDeploying || stored.Status.DeploymentUUID != "dep-1" {
		t.Fatalf("slot %s following %q after %d deploy requests: want Deploying dep-1 after one", stored.Status.Phase, stored.Status.DeploymentUUID, n)
	}
}

func countCalls(calls []string, call string) int {
	n := 0
	for _, c := range calls {
		if c == call {
			n++
		}
	}
	return n
}
