package slot

import (
	"context"
	"sync"
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
	"botpool.dev/botpool/store/memory"
)

// cutoffAPI is a Coolify whose deploy request reaches the server (a deployment is queued) but
// whose answer never comes back: the pass is cut off while it waits.
type cutoffAPI struct {
	coolify.API // the calls the test does not expect panic on the nil interface

	mu       sync.Mutex
	cut      context.CancelFunc // cuts the pass off during Deploy
	queued   []coolify.Deployment
	deploys  int
	clock    *clocktesting.FakeClock
	describe int
}

// UpsertEnvs takes the fresh credential a slot sets once its container is stopped.
func (a *cutoffAPI) UpsertEnvs(_ context.Context, _ string, env []coolify.EnvVar) ([]coolify.EnvVar, error) {
	return env, nil
}

func (a *cutoffAPI) SetDescription(context.Context, string, string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.describe++
	return nil
}

func (a *cutoffAPI) Deploy(ctx context.Context, _ string) (coolify.DeployResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.deploys++
	a.queued = append(a.queued, coolify.Deployment{DeploymentUUID: "dep-1", Status: coolify.DeploymentQueued,
		CreatedAt: a.clock.Now().UTC().Format(time.RFC3339)})
	a.cut() // the manager stops, or the reconcile timeout fires, with the answer on its way
	return coolify.DeployResult{}, ctx.Err()
}

func (a *cutoffAPI) ListApplicationDeployments(context.Context, string, int, int) (int, []coolify.Deployment, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.queued), append([]coolify.Deployment(nil), a.queued...), nil
}

// TestADeployCutOffIsRecordedAndNotSentAgain: a pass cut off (context cancelled) while its
// deploy request was out must still record that a deployment may be queued, so the next pass
// looks for it instead of deploying again, which would restart the bot's container mid-call.
// The status write at the end of the pass once shared the cancelled context and was lost, and a
// cancelled request did not count as one that may have reached Coolify. Single passes on a
// fake client and the fake clock.
func TestADeployCutOffIsRecordedAndNotSentAgain(t *testing.T) {
	fclk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))

	pool := bt.MakePool("ns", "pool").UID("pool-uid").MaxSlots(1).Image("bot", "1").Obj()
	bot := bt.MakeBot("ns", "bot").UID("bot-uid").MeetingURL("https://zoom.us/j/1").PoolRef("pool").Phase(v1.BotDeploying).Obj()
	slot := bt.MakeSlot("ns", "pool-zoom-001", "pool").UID("slot-uid").Finalizers(v1.FinalizerSlot).BoundTo(bot.Name, bot.UID).
		Phase(v1.SlotIdle).Since(fclk.Now().Add(-time.Minute)).App("app-uuid").
		Token("0000000000000000000000000000000000000000000000000000000000000000").Obj()
	c := fakeapi.New(t, interceptor.Funcs{}, pool, bot, slot)
	api := &cutoffAPI{clock: fclk}
	// This process bound the slot: no restart rule applies.
	r := onePassSlots(c, c, fclk, api, memory.New(memory.WithClock(fclk)))
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(slot)}

	ctx, cancel := context.WithCancel(context.Background())
	api.cut = cancel
	if _, err := r.Reconcile(ctx, req); err == nil {
		t.Fatal("the cut-off pass reported success")
	}
	got := &v1.BotPoolSlot{}
	if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.DeployingSince == nil {
		t.Fatalf("after a deploy request cut off, the slot records no deployingSince (phase %s, message %q): the next pass would deploy again",
			got.Status.Phase, got.Status.Message)
	}

	fclk.Step(5 * time.Second)
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if api.deploys != 1 || got.Status.Phase != v1.SlotDeploying || got.Status.DeploymentUUID != "dep-1" {
		t.Fatalf("the next pass sent %d deploy requests and left the slot %s with deployment %q; want 1 request and the queued deployment dep-1 followed",
			api.deploys, got.Status.Phase, got.Status.DeploymentUUID)
	}
}
