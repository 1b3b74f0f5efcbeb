package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/deploygate"
	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/coolify/sim"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/internal/kubetest"
)

func gatePool(ns, name, server string) *v1.BotPool {
	return bt.MakePool(ns, name).UID(types.UID(ns+"/"+name)).Image("bot", "1").MaxConcurrentDeployments(5).
		Placement("", server, "").Obj()
}

// TestDeployGatePauseIsPerInstanceAndCapped: a full queue on one Coolify instance's server
// pauses that server only, not a server of the same uuid on another instance (another
// tenant's), and a Retry-After of a year pauses it for MaxPause at most.
func TestDeployGatePauseIsPerInstanceAndCapped(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	g := &deploygate.Gate{Clock: fc}
	a := gatePool("tenant-a", "pool", "srv-0")
	b := gatePool("tenant-b", "pool", "srv-0") // the same uuid, on another instance
	const instA, instB = "https://coolify-a.example/api/v1", "https://coolify-b.example/api/v1"

	g.Pause(coolifyview.CoolifyServer{Instance: instA}, true, fc.Now().Add(365*24*time.Hour))
	if g.Admit(a, coolifyview.CoolifyServer{Instance: instA}, deploygate.DeployAsk{Slot: "slot-a", Warm: true}) {
		t.Fatal("the paused server admitted a deployment")
	}
	if !g.Admit(b, coolifyview.CoolifyServer{Instance: instB}, deploygate.DeployAsk{Slot: "slot-b", Warm: true}) {
		t.Fatal("another instance's server with the same uuid was paused too")
	}
	fc.Step(coolify.MaxPause - time.Second)
	if g.Admit(a, coolifyview.CoolifyServer{Instance: instA}, deploygate.DeployAsk{Slot: "slot-a", Warm: true}) {
		t.Fatal("admitted before the pause ended")
	}
	fc.Step(time.Second)
	if !g.Admit(a, coolifyview.CoolifyServer{Instance: instA}, deploygate.DeployAsk{Slot: "slot-a", Warm: true}) {
		t.Fatal("still paused after MaxPause: the year-long Retry-After was not capped")
	}
}

// TestDeployGateForgets: admissions go with their slots, ended pauses and images not seen for
// WarmTTL are pruned: the gate holds live state only.
func TestDeployGateForgets(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	g := &deploygate.Gate{Clock: fc}
	for i := range 50 {
		p := gatePool("ns", fmt.Sprintf("pool-%d", i), "srv")
		g.Pause(coolifyview.CoolifyServer{Instance: fmt.Sprintf("https://c%d.example/api/v1", i)}, true, fc.Now().Add(time.Minute))
		if !g.Admit(p, coolifyview.CoolifyServer{}, deploygate.DeployAsk{Slot: "slot", Warm: true}) {
			t.Fatalf("pool %d not admitted", i)
		}
		g.Done(p, "slot", true)
	}
	if adm, warm, paused := g.Size(); adm != 0 || warm != 50 || paused != 50 {
		t.Fatalf("after 50 pools: %d admitted, %d warm, %d paused; want 0, 50, 50", adm, warm, paused)
	}
	fc.Step(deploygate.WarmTTL + time.Minute)
	live := gatePool("ns", "live", "srv")
	g.Admit(live, coolifyview.CoolifyServer{}, deploygate.DeployAsk{Slot: "slot", Warm: false})
	if adm, warm, paused := g.Size(); adm != 1 || warm != 0 || paused != 0 {
		t.Fatalf("after warmTTL: %d admitted, %d warm, %d paused; want 1, 0, 0", adm, warm, paused)
	}
}

// TestMalformedCredentialsURLIsRedacted: a credentials Secret whose url carries a password and
// does not parse is reported as invalid without the password (the error reaches the pool's
// condition, an Event and the log).
func TestMalformedCredentialsURLIsRedacted(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "coolify",
		Labels: map[string]string{v1.LabelAllowPoolUse: "true"}},
		Data: map[string][]byte{"url": []byte("https://admin:hunter2-secret@coolify.example:port"), "token": []byte("t")}}
	c := &coolifyview.SecretConnector{Reader: fake.NewClientBuilder().WithObjects(secret).Build(), Registry: coolify.NewRegistry(0),
		Clock: clocktesting.NewFakeClock(time.Now()), RefreshAfter: time.Minute}
	pool := gatePool("ns", "pool", "srv")
	pool.Spec.Coolify.CredentialsSecretRef.Name = "coolify"
	_, err := c.ForPool(context.Background(), pool)
	if !errors.Is(err, coolifyview.ErrCredentialsInvalid) {
		t.Fatalf("err = %v, want errCredentialsInvalid", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("the error shows the password: %v", err)
	}
}

// TestOneTenantsThrottledCoolifyDoesNotStallAnother: tenant A's Coolify answers every request
// with 429 and a Retry-After of a year while A's twelve slots (more than the controller's
// eight workers) keep checking their applications. Tenant B, on another Coolify, still gets
// its bot deployed: A's calls come back at once as waits instead of sleeping in A's
// reconciles, and A's instance is asked again only after the capped pause.
func TestOneTenantsThrottledCoolifyDoesNotStallAnother(t *testing.T) {
	const slotsA = 12
	a := newScenario(t, "tenant-a-throttled", sim.Config{}, func(p *v1.BotPool) { p.Spec.MaxSlots, p.Spec.MinIdle = slotsA, slotsA })
	waitPhases(t, a.ns, map[v1.SlotPhase]int{v1.SlotIdle: slotsA})
	a.sim.SetFault("*", sim.Fault{Burst: 1 << 30, BurstCode: http.StatusTooManyRequests, RetryAfter: 365 * 24 * time.Hour})
	t.Cleanup(func() {
		// Before the pool's teardown: A's Coolify answers again, and A's pool gets a client
		// without the pause, so its slots can delete their applications.
		a.sim.SetFault("*", sim.Fault{})
		fresh, err := coolify.NewRegistry(1_000_000, coolify.WithEgress(loopbackOnly)).Client(a.sim.URL, sim.DefaultToken)
		if err != nil {
			t.Fatal(err)
		}
		connector.use(a.pool.Name, fresh)
	})
	kubetest.Eventually(t, 15*time.Second, func() error {
		step(time.Second) // the slots' shared list of applications expires: they ask Coolify
		if a.sim.CountCode(http.StatusTooManyRequests) == 0 {
			return errors.New("tenant A's Coolify has refused nothing yet")
		}
		return nil
	})

	b := newScenario(t, "tenant-b-healthy", sim.Config{})
	bot, _ := b.bind("b-bot")
	b.phase(v1.SlotDeploying)
	step(8 * time.Minute)
	b.phase(v1.SlotBusy)
	if got := b.bot(bot.Name); got.Status.Phase.Terminal() {
		t.Fatalf("tenant B's bot failed: %s", got.Status.Reason)
	}

	// A is waiting, not failing, and not hammering its Coolify: the pause was honoured.
	for _, s := range listSlots(t, a.ns) {
		if s.Status.Phase == v1.SlotError {
			t.Errorf("tenant A's slot %s went to Error on throttling: %s", s.Name, s.Status.Message)
		}
	}
	if n := a.sim.CountCode(http.StatusTooManyRequests); n > 3 {
		t.Errorf("tenant A's Coolify got %d requests during its pause, want the pause honoured", n)
	}
}
