package slot

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/fakeapi"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/store/memory"
)

// TestServerFailing: a server where a pool's last starts failed in a row is Failing for that
// pool only, for FailingCooldown after the last failure; a start that finished there clears
// it; and it is never put on every server of the pool at once.
func TestServerFailing(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
	b := &coolifyview.BulkReader{Clock: clk}
	pool := bt.MakePool("ns", "pool").UID("pool-uid").Servers("a", "b").Obj()
	other := bt.MakePool("other-ns", "pool").UID("other-uid").Servers("a", "b").Obj()
	health := func(p *v1.BotPool) map[string]v1.ServerHealth {
		h := map[string]v1.ServerHealth{"a": v1.ServerHealthy, "b": v1.ServerHealthy}
		b.MarkFailing(p, h, clk.Now())
		return h
	}
	fail := func(p *v1.BotPool, server string, n int) {
		for range n {
			b.StartEnded(p.UID, server, true, clk.Now())
			clk.Step(time.Second)
		}
	}

	fail(pool, "b", policy.FailingAfter-1)
	if h := health(pool); h["b"] != v1.ServerHealthy {
		t.Fatalf("after %d failures b is %s, want Healthy (it takes %d)", policy.FailingAfter-1, h["b"], policy.FailingAfter)
	}
	fail(pool, "b", 1)
	if h := health(pool); h["b"] != v1.ServerFailing || h["a"] != v1.ServerHealthy {
		t.Fatalf("after %d failures on b: %v, want b Failing, a Healthy", policy.FailingAfter, h)
	}
	if h := health(other); h["b"] != v1.ServerHealthy {
		t.Fatalf("another tenant's pool sees b %s: one pool's failures must not take a server from another", h["b"])
	}

	// Every server failing: the pool's own image is the likelier cause; none is taken out.
	fail(pool, "a", policy.FailingAfter)
	if h := health(pool); h["a"] != v1.ServerHealthy || h["b"] != v1.ServerHealthy {
		t.Fatalf("both servers failing: %v, want neither taken out", h)
	}
	// Nor when the only other server is out for another reason.
	b.StartEnded(pool.UID, "a", false, clk.Now())
	h := map[string]v1.ServerHealth{"a": v1.ServerUnreachable, "b": v1.ServerHealthy}
	b.MarkFailing(pool, h, clk.Now())
	if h["b"] != v1.ServerHealthy {
		t.Fatalf("b Failing while a is Unreachable: the pool would have no server left (%v)", h)
	}

	// The mark lasts FailingCooldown after the last failure; one more failure renews it.
	if h := health(pool); h["b"] != v1.ServerFailing {
		t.Fatalf("b is %s, want Failing", h["b"])
	}
	clk.Step(policy.FailingCooldown)
	if h := health(pool); h["b"] != v1.ServerHealthy {
		t.Fatalf("b is %s %s after its last failure, want Healthy again", h["b"], policy.FailingCooldown)
	}
	fail(pool, "b", 1)
	if h := health(pool); h["b"] != v1.ServerFailing {
		t.Fatalf("one more failure after the cooldown: b is %s, want Failing at once", h["b"])
	}
	// A start that finished there ends the run.
	b.StartEnded(pool.UID, "b", false, clk.Now())
	if h := health(pool); h["b"] != v1.ServerHealthy {
		t.Fatalf("b is %s after a start finished there, want Healthy", h["b"])
	}
	// Failures while Coolify reports the server out are the outage's: once it is back, they
	// do not keep it out.
	fail(pool, "b", policy.FailingAfter)
	b.MarkFailing(pool, map[string]v1.ServerHealth{"a": v1.ServerHealthy, "b": v1.ServerUnreachable}, clk.Now())
	if h := health(pool); h["b"] != v1.ServerHealthy {
		t.Fatalf("b is %s once Coolify has it back, want Healthy: its failures were the outage's", h["b"])
	}
	// A run is forgotten FailingForget after its last failure.
	fail(pool, "b", policy.FailingAfter-1)
	clk.Step(policy.FailingForget + time.Second)
	fail(other, "a", 1) // any record sweeps
	fail(pool, "b", 1)
	if h := health(pool); h["b"] != v1.ServerHealthy {
		t.Fatalf("b is %s: failures older than %s still counted", h["b"], policy.FailingForget)
	}
}

// TestServerHealthOfARead: a server the read does not list is NotFound; before any read it is
// Unknown (treated as healthy).
func TestServerHealthOfARead(t *testing.T) {
	f := false
	for _, tc := range []struct {
		st           coolify.ServerSettings
		read, listed bool
		want         v1.ServerHealth
	}{
		{coolify.ServerSettings{}, false, false, v1.ServerHealthUnknown},
		{coolify.ServerSettings{}, true, false, v1.ServerNotFound},
		{coolify.ServerSettings{}, true, true, v1.ServerHealthy},
		{coolify.ServerSettings{IsReachable: &f}, true, true, v1.ServerUnreachable},
		{coolify.ServerSettings{IsUsable: &f}, true, true, v1.ServerUnusable},
	} {
		if got := coolifyview.ServerHealth(tc.st, tc.read, tc.listed); got != tc.want {
			t.Errorf("serverHealth(%+v, read %v, listed %v) = %s, want %s", tc.st, tc.read, tc.listed, got, tc.want)
		}
		if got := tc.want.Out(); got != (tc.want != v1.ServerHealthy && tc.want != v1.ServerHealthUnknown) {
			t.Errorf("%s.Out() = %v", tc.want, got)
		}
	}
	if !v1.ServerFailing.Out() {
		t.Error("Failing must be out")
	}
}

// TestSlotFailuresMarkTheirServer: the slot controller feeds the runs: a deployment that
// failed counts against the slot's server for its pool, one that finished ends the run. One
// pass each, on the fake client and clock; the pool's next read (markFailing) turns the
// server Failing after FailingAfter of them, while the pool's other server is in.
func TestSlotFailuresMarkTheirServer(t *testing.T) {
	const slotN, app, token = "pool-zoom-001", "app-1", "0000000000000000000000000000000000000000000000000000000000000000"
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
	pool := bt.MakePool("ns", "pool").UID("pool-uid").MaxSlots(2).Image("bot", "1").Servers("a", "b").Obj()
	reads := &coolifyview.BulkReader{Clock: clk}
	pass := func(status coolify.DeploymentStatus) v1.SlotPhase {
		t.Helper()
		since := clk.Now().Add(-time.Minute)
		bot := bt.MakeBot("ns", "bot").UID("bot-uid").PoolRef("pool").InPool("pool").Phase(v1.BotDeploying).Obj()
		slot := bt.MakeSlot("ns", slotN, "pool").UID("slot-uid").Finalizers(v1.FinalizerSlot).Token(token).Server("b").
			BoundTo("bot", "bot-uid").App(app).Phase(v1.SlotDeploying).Since(since).Deployment("dep-1", since).Obj()
		c := fakeapi.New(t, interceptor.Funcs{}, pool.DeepCopy(), bot, slot)
		api := &bt.Coolify{
			ListActiveDeploymentsFn: func(context.Context) ([]coolify.Deployment, error) { return nil, nil },
			GetDeploymentFn: func(context.Context, string) (*coolify.Deployment, error) {
				return &coolify.Deployment{DeploymentUUID: "dep-1", Status: status}, nil
			},
			CancelDeploymentFn: func(context.Context, string) error { return nil },
			SetDescriptionFn:   func(context.Context, string, string) error { return nil },
		}
		r := onePassSlots(c, c, clk, api, memory.New(memory.WithClock(clk)))
		r.Coolify = reads
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: slotN}}); err != nil {
			t.Fatal(err)
		}
		var stored v1.BotPoolSlot
		if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: slotN}, &stored); err != nil {
			t.Fatal(err)
		}
		clk.Step(time.Second)
		return stored.Status.Phase
	}
	healthB := func() v1.ServerHealth {
		h := map[string]v1.ServerHealth{"a": v1.ServerHealthy, "b": v1.ServerHealthy}
		reads.MarkFailing(pool, h, clk.Now())
		return h["b"]
	}

	for i := range policy.FailingAfter {
		if got := pass(coolify.DeploymentFailed); got != v1.SlotError {
			t.Fatalf("pass %d: slot %s, want Error", i, got)
		}
	}
	if got := healthB(); got != v1.ServerFailing {
		t.Fatalf("after %d failed deployments on b it is %s, want Failing", policy.FailingAfter, got)
	}
	if got := pass(coolify.DeploymentFinished); got != v1.SlotBusy {
		t.Fatalf("slot %s, want Busy", got)
	}
	if got := healthB(); got != v1.ServerHealthy {
		t.Fatalf("after a finished deployment on b it is %s, want Healthy", got)
	}
}

// TestStandbySlotWaitsForItsServer: a free standby slot without a container, on a server the
// pool has out, deploys nothing (Coolify would fail it, and the slot would fail, recover and
// fail until retired) and says why; on a healthy server it deploys.
func TestStandbySlotWaitsForItsServer(t *testing.T) {
	const slotN, app = "pool-zoom-001", "app-1"
	for _, tc := range []struct {
		health     v1.ServerHealth
		wantDeploy bool
	}{
		{v1.ServerHealthy, true},
		{v1.ServerUnreachable, false},
		{v1.ServerFailing, false},
	} {
		t.Run(string(tc.health), func(t *testing.T) {
			ctx := context.Background()
			clk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
			pool := bt.MakePool("ns", "pool").UID("pool-uid").MaxSlots(2).Image("bot", "1").Servers("a", "b").
				Standby(v1.StandbyRunning).Obj()
			pool.Status.Servers = []v1.ServerStatus{{UUID: "a", State: v1.ServerActive, Health: v1.ServerHealthy},
				{UUID: "b", State: v1.ServerActive, Health: tc.health}}
			slot := bt.MakeSlot("ns", slotN, "pool").UID("slot-uid").Finalizers(v1.FinalizerSlot).Server("b").
				Token("0000000000000000000000000000000000000000000000000000000000000000").App(app).
				Phase(v1.SlotIdle).Since(clk.Now().Add(-time.Minute)).Obj()
			slot.Status.Standby = v1.StandbyStarting
			c := fakeapi.New(t, interceptor.Funcs{}, pool, slot)
			api := &bt.Coolify{
				SetDescriptionFn: func(context.Context, string, string) error { return nil },
				DeployFn: func(context.Context, string) (coolify.DeployResult, error) {
					return coolify.DeployResult{DeploymentUUID: "dep-1"}, nil
				},
			}
			r := onePassSlots(c, c, clk, api, memory.New(memory.WithClock(clk)))
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(slot)}); err != nil {
				t.Fatal(err)
			}
			var got v1.BotPoolSlot
			if err := c.Get(ctx, client.ObjectKeyFromObject(slot), &got); err != nil {
				t.Fatal(err)
			}
			deployed := slices.Contains(api.Calls(), "Deploy "+app)
			if deployed != tc.wantDeploy {
				t.Fatalf("on a server %s: deployed %v (calls %v), want %v; message %q", tc.health, deployed, api.Calls(), tc.wantDeploy, got.Status.Message)
			}
			if !tc.wantDeploy && !strings.Contains(got.Status.Message, "once server b is back ("+string(tc.health)+")") {
				t.Fatalf("message %q does not say the slot waits for server b", got.Status.Message)
			}
		})
	}
}

// userCoolify is a fake Coolify that acts as one user.
type userCoolify struct{ *bt.Coolify }

func (userCoolify) UserKey() string { return "user" }

// TestServerMissingLooksTwice: a read of the servers that lacks one the pool names is
// followed by a second read at once; only when that one lacks it too is the server NotFound,
// and a later read that lists it ends the verdict.
func TestServerMissingLooksTwice(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
	b := &coolifyview.BulkReader{Clock: clk}
	servers := []coolify.Server{{UUID: "a"}}
	api := userCoolify{&bt.Coolify{ListServersFn: func(context.Context) ([]coolify.Server, error) { return servers, nil }}}
	b.RefreshServers(ctx, api)

	servers = append(servers, coolify.Server{UUID: "b"}) // added to Coolify after that read
	if b.ServerMissing(ctx, api, "b") {
		t.Fatal("b is missing, though a second read lists it")
	}
	if n := len(api.Calls()); n != 2 {
		t.Fatalf("%d reads of the servers, want 2 (the second at once)", n)
	}
	if !b.ServerMissing(ctx, api, "ghost") || len(api.Calls()) != 3 {
		t.Fatalf("ghost: want missing after one more read (%d reads)", len(api.Calls()))
	}
	if !b.ServerMissing(ctx, api, "ghost") || len(api.Calls()) != 3 {
		t.Fatalf("ghost asked again: want missing without another read until the minute's (%d reads)", len(api.Calls()))
	}
	servers = append(servers, coolify.Server{UUID: "ghost"})
	clk.Step(coolifyview.ServersRefresh)
	b.RefreshServers(ctx, api)
	if b.ServerMissing(ctx, api, "ghost") {
		t.Fatal("ghost still missing after a read that lists it")
	}
}
