package slot

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"botpool.dev/botpool/controllers/internal/fakeapi"
	"botpool.dev/botpool/coolify"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/internal/slottoken"
	"botpool.dev/botpool/store"
	"botpool.dev/botpool/store/memory"
	"botpool.dev/botpool/store/storetest"
)

// TestStandbyReadinessCountsAsksFromTheDeployRequest drives single passes of a free standby
// slot on a fake client and the fake clock: an ask made after its container's deploy request
// makes it Ready, and keeps it Ready within the ask window however late the slot looked (the
// ask came before the slot noticed it); an ask older than the deploy request, or made with
// another credential, never does; past the window the slot is Lost.
func TestStandbyReadinessCountsAsksFromTheDeployRequest(t *testing.T) {
	const ns, name, app = "ns", "pool-zoom-001", "app-1"
	token := slottoken.Hash([]byte("bpt_current"))
	deployed := time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)
	pass := func(t *testing.T, standby v1.StandbyState, ask store.SlotAsk, at time.Time) *v1.BotPoolSlot {
		t.Helper()
		fclk := clocktesting.NewFakeClock(at)
		pool := bt.MakePool(ns, "pool").UID("pool-uid").MaxSlots(1).Image("bot", "1").Standby(v1.StandbyRunning).Obj()
		slot := bt.MakeSlot(ns, name, "pool").UID("slot-uid").Finalizers(v1.FinalizerSlot).Token(token).App(app).
			Phase(v1.SlotIdle).Since(deployed.Add(8 * time.Second)).Obj()
		since := metav1.NewTime(deployed)
		slot.Status.Standby, slot.Status.StandbySince, slot.Status.DeploymentUUID = standby, &since, "dep-1"
		st := memory.New(memory.WithClock(fclk))
		if ask.SlotUID != "" {
			if err := st.RecordSlotAsk(context.Background(), ask); err != nil {
				t.Fatal(err)
			}
		}
		c := fakeapi.New(t, interceptor.Funcs{}, pool, slot)
		api := &bt.Coolify{
			ListApplicationsFn: func(context.Context, string) ([]coolify.Application, error) {
				return []coolify.Application{{UUID: app, Name: name}}, nil
			},
			SetDescriptionFn: func(context.Context, string, string) error { return nil },
		}
		r := onePassSlots(c, c, fclk, api, st)
		key := client.ObjectKeyFromObject(slot)
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
		var got v1.BotPoolSlot
		if err := c.Get(context.Background(), key, &got); err != nil {
			t.Fatal(err)
		}
		return &got
	}
	ask := func(at time.Time, hash string) store.SlotAsk {
		return store.SlotAsk{SlotUID: "slot-uid", Namespace: ns, Name: name, TokenSHA256: hash, At: at}
	}
	for _, tc := range []struct {
		name    string
		standby v1.StandbyState
		ask     store.SlotAsk
		at      time.Time
		want    v1.StandbyState
	}{
		{"the first ask, noticed late, makes it Ready", v1.StandbyStarting, ask(deployed.Add(9*time.Second), token), deployed.Add(20 * time.Second), v1.StandbyReady},
		{"a Ready slot stays Ready on an ask made before it turned Ready", v1.StandbyReady, ask(deployed.Add(9*time.Second), token), deployed.Add(70 * time.Second), v1.StandbyReady},
		{"an ask from before the deploy request is an earlier container's", v1.StandbyStarting, ask(deployed.Add(-5*time.Second), token), deployed.Add(20 * time.Second), v1.StandbyStarting},
		{"an ask with another credential is another container's", v1.StandbyStarting, ask(deployed.Add(9*time.Second), slottoken.Hash([]byte("bpt_old"))), deployed.Add(20 * time.Second), v1.StandbyStarting},
		{"past the ask window a Ready slot is Lost", v1.StandbyReady, ask(deployed.Add(9*time.Second), token), deployed.Add(9*time.Second + StandbyAskWindow + time.Second), v1.StandbyLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := pass(t, tc.standby, tc.ask, tc.at)
			if got.Status.Standby != tc.want || got.Status.Phase != v1.SlotIdle {
				t.Fatalf("standby %s (%s, %s), want %s", got.Status.Standby, got.Status.Phase, got.Status.Message, tc.want)
			}
			if tc.want == v1.StandbyReady && !got.Status.StandbySince.Time.Equal(deployed) {
				t.Errorf("standbySince %s, want the deploy request's %s", got.Status.StandbySince, deployed)
			}
		})
	}
}

// TestStandbyHangUpInOnePass drives single passes of a Ready standby slot whose container's
// ask shows a hang-up: within StandbyRejoinGrace it stays Ready and looks again just after the
// grace; past it the slot is Lost, saying when its container hung up; an ask after the hang-up
// (which clears it) keeps it Ready.
func TestStandbyHangUpInOnePass(t *testing.T) {
	const ns, name, app = "ns", "pool-zoom-001", "app-1"
	const token = "bpt_current"
	deployed := time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)
	asked := deployed.Add(9 * time.Second)
	hungUp := asked.Add(20 * time.Second)
	pass := func(t *testing.T, at time.Time, record func(store.Store), bound ...*v1.Bot) (*v1.BotPoolSlot, time.Duration) {
		t.Helper()
		fclk := clocktesting.NewFakeClock(at)
		pool := bt.MakePool(ns, "pool").UID("pool-uid").MaxSlots(1).Image("bot", "1").Standby(v1.StandbyRunning).Obj()
		slot := bt.MakeSlot(ns, name, "pool").UID("slot-uid").Finalizers(v1.FinalizerSlot).Token(slottoken.Hash([]byte(token))).App(app).
			Phase(v1.SlotIdle).Since(deployed.Add(8 * time.Second)).Obj()
		since := metav1.NewTime(deployed)
		slot.Status.Standby, slot.Status.StandbySince, slot.Status.DeploymentUUID = v1.StandbyReady, &since, "dep-1"
		slot.Status.Message = "Standby container asks for work"
		st := memory.New(memory.WithClock(fclk))
		record(st)
		objs := []client.Object{pool, slot}
		for _, bot := range bound {
			slot.Spec.BotRef = &v1.BotReference{Name: bot.Name, UID: bot.UID}
			objs = append(objs, bot)
		}
		c := fakeapi.New(t, interceptor.Funcs{}, objs...)
		api := &bt.Coolify{
			ListApplicationsFn: func(context.Context, string) ([]coolify.Application, error) {
				return []coolify.Application{{UUID: app, Name: name}}, nil
			},
			SetDescriptionFn: func(context.Context, string, string) error { return nil },
		}
		r := onePassSlots(c, c, fclk, api, st)
		key := client.ObjectKeyFromObject(slot)
		res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
		if err != nil {
			t.Fatal(err)
		}
		var got v1.BotPoolSlot
		if err := c.Get(context.Background(), key, &got); err != nil {
			t.Fatal(err)
		}
		return &got, res.RequeueAfter
	}
	ask := storetest.Ask("slot-uid", ns, token, asked)
	ask.Name = name
	hangUp := func(st store.Store) {
		if err := st.RecordSlotAsk(context.Background(), ask); err != nil {
			t.Fatal(err)
		}
		if err := st.RecordSlotLeft(context.Background(), storetest.Left("slot-uid", token, asked, hungUp)); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("within the grace it stays Ready and looks again after it", func(t *testing.T) {
		got, requeue := pass(t, hungUp.Add(2*time.Second), hangUp)
		if got.Status.Standby != v1.StandbyReady || !strings.HasPrefix(got.Status.Message, HungUpMessage) {
			t.Fatalf("standby %s (%s), want Ready, saying its container hung up", got.Status.Standby, got.Status.Message)
		}
		if left := StandbyRejoinGrace - 2*time.Second; requeue <= 0 || requeue > left+time.Second {
			t.Errorf("looks again in %s, want just after the grace (%s)", requeue, left)
		}
	})
	t.Run("past the grace it is Lost", func(t *testing.T) {
		got, _ := pass(t, hungUp.Add(StandbyRejoinGrace+time.Second), hangUp)
		want := "hung up its wait for work at " + hungUp.Format(time.RFC3339)
		if got.Status.Standby != v1.StandbyLost || !strings.Contains(got.Status.Message, want) || got.Status.DeploymentUUID != "" {
			t.Fatalf("standby %s (%s), want Lost saying %q", got.Status.Standby, got.Status.Message, want)
		}
	})
	// A bot bound to the slot just after its container hung up (within the grace, while it
	// was still offered): past the grace, with no claim, it fails now instead of after the
	// 75 s ask window; a claim by the container keeps it.
	boundBot := func(claimed bool) *v1.Bot {
		bot := bt.MakeBot(ns, "bot").UID("bot-uid").PoolRef("pool").Obj()
		v1.SetCondition(&bot.Status.Conditions, metav1.Condition{Type: v1.ConditionBound, Status: metav1.ConditionTrue, Reason: v1.ReasonBound}, hungUp.Add(time.Second))
		if claimed {
			bot.Status.Binding = &v1.BindingClaim{SlotName: name, SlotUID: "slot-uid", ClaimedAt: metav1.NewTime(hungUp.Add(2 * time.Second)), CredentialSHA256: "x"}
		}
		return bot
	}
	t.Run("a bot bound to a container that hung up fails past the grace", func(t *testing.T) {
		got, _ := pass(t, hungUp.Add(StandbyRejoinGrace+time.Second), hangUp, boundBot(false))
		if got.Status.Phase != v1.SlotError || got.Status.Reason != string(v1.ReasonStandbyLost) || !strings.Contains(got.Status.Message, "it will not take bot bot") {
			t.Fatalf("slot %s %s (%s), want Error StandbyLost: the container will not take the bot", got.Status.Phase, got.Status.Reason, got.Status.Message)
		}
	})
	t.Run("a bot bound within the grace waits for it", func(t *testing.T) {
		got, requeue := pass(t, hungUp.Add(5*time.Second), hangUp, boundBot(false))
		if got.Status.Phase != v1.SlotIdle || requeue <= 0 || requeue > StandbyRejoinGrace {
			t.Fatalf("slot %s (%s), looks again in %s; want Idle, again just after the grace", got.Status.Phase, got.Status.Message, requeue)
		}
	})
	t.Run("a claimed bot is not failed for its container's hang-up", func(t *testing.T) {
		got, _ := pass(t, hungUp.Add(StandbyRejoinGrace+time.Second), hangUp, boundBot(true))
		if got.Status.Phase == v1.SlotError {
			t.Fatalf("slot failed (%s): the container claimed the bot", got.Status.Message)
		}
	})
	t.Run("an ask after the hang-up keeps it Ready", func(t *testing.T) {
		got, _ := pass(t, hungUp.Add(time.Minute), func(st store.Store) {
			hangUp(st)
			again := ask
			again.At = hungUp.Add(100 * time.Millisecond)
			if err := st.RecordSlotAsk(context.Background(), again); err != nil {
				t.Fatal(err)
			}
		})
		if got.Status.Standby != v1.StandbyReady {
			t.Fatalf("standby %s (%s), want Ready", got.Status.Standby, got.Status.Message)
		}
	})
}

// TestStandbyDeploysOnlyOnARecordedCredential: a standby slot whose container stopped asking
// gets a fresh credential, and the fresh container is deployed only in the next pass, once
// the slot's status records the credential's hash: the bot API knows a token only from there,
// and a container that asked before would be refused and exit (the soak found one). The
// container then starts with the very token whose hash the slot records.
func TestStandbyDeploysOnlyOnARecordedCredential(t *testing.T) {
	const ns, name, app = "ns", "pool-zoom-001", "app-1"
	old := slottoken.Hash([]byte("bpt_lost-container"))
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
	pool := bt.MakePool(ns, "pool").UID("pool-uid").MaxSlots(1).Image("bot", "1").Standby(v1.StandbyRunning).Obj()
	slot := bt.MakeSlot(ns, name, "pool").UID("slot-uid").Finalizers(v1.FinalizerSlot).Token(old).App(app).
		Phase(v1.SlotIdle).Since(clk.Now().Add(-time.Hour)).Standby(v1.StandbyLost, clk.Now().Add(-time.Minute)).Obj()
	c := fakeapi.New(t, interceptor.Funcs{}, pool, slot)
	var envToken string
	deploys := 0
	api := &bt.Coolify{
		ListApplicationsFn: func(context.Context, string) ([]coolify.Application, error) {
			return []coolify.Application{{UUID: app, Name: name, Status: "running:healthy"}}, nil
		},
		SetDescriptionFn: func(context.Context, string, string) error { return nil },
		UpsertEnvsFn: func(_ context.Context, _ string, env []coolify.EnvVar) ([]coolify.EnvVar, error) {
			for _, e := range env {
				if e.Key == "BOTPOOL_SLOT_TOKEN" {
					envToken = e.Value
				}
			}
			return env, nil
		},
		ListEnvsFn: func(context.Context, string) ([]coolify.EnvVar, error) { return nil, nil },
		DeployFn: func(context.Context, string) (coolify.DeployResult, error) {
			deploys++
			return coolify.DeployResult{DeploymentUUID: "dep-2"}, nil
		},
	}
	r := onePassSlots(c, c, clk, api, memory.New(memory.WithClock(clk)))
	key := client.ObjectKeyFromObject(slot)
	pass := func() *v1.BotPoolSlot {
		t.Helper()
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatalf("pass: %v (calls %v)", err, api.Calls())
		}
		var got v1.BotPoolSlot
		if err := c.Get(context.Background(), key, &got); err != nil {
			t.Fatal(err)
		}
		return &got
	}

	got := pass()
	if envToken == "" || got.Status.TokenSHA256 == old || got.Status.TokenSHA256 != slottoken.Hash([]byte(envToken)) {
		t.Fatalf("after the first pass: env token %q, recorded hash %s (old %s): want a fresh credential in the env and its hash recorded", envToken, got.Status.TokenSHA256, old)
	}
	if deploys != 0 || got.Status.Standby != v1.StandbyStarting || got.Status.DeploymentUUID != "" {
		t.Fatalf("the first pass deployed %d time(s) (standby %s, deployment %q, %s): want no deployment before the credential is recorded",
			deploys, got.Status.Standby, got.Status.DeploymentUUID, got.Status.Message)
	}
	issued := envToken

	got = pass()
	if deploys != 1 || got.Status.DeploymentUUID != "dep-2" {
		t.Fatalf("the second pass deployed %d time(s) (deployment %q, %s), want one", deploys, got.Status.DeploymentUUID, got.Status.Message)
	}
	if envToken != issued || got.Status.TokenSHA256 != slottoken.Hash([]byte(issued)) {
		t.Fatalf("the container starts with token %q, the slot records %s: want the credential recorded in the first pass", envToken, got.Status.TokenSHA256)
	}
}
