package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "botpool.dev/botpool/api/v1alpha1"
	botctrl "botpool.dev/botpool/controllers/bot"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/internal/simbot"
)

// oneStart gives a pool's bots a single start: tests of what a failure does to a bot.
func oneStart(p *v1.BotPool) { p.Spec.MaxStartAttempts = 1 }

// waitBot moves the fake clock on a little at a time (deployments, recoveries and the next
// binding follow it) until the bot satisfies cond, and returns it.
func (sc *scenario) waitBot(name, what string, cond func(*v1.Bot) bool) *v1.Bot {
	sc.t.Helper()
	var got *v1.Bot
	kubetest.Eventually(sc.t, 30*time.Second, func() error {
		got = sc.bot(name)
		if cond(got) {
			return nil
		}
		clk.Step(200 * time.Millisecond)
		return fmt.Errorf("bot %s is %s (%s: %s) after %d failed starts, want %s", name, got.Status.Phase, got.Status.Reason,
			got.Status.Message, len(got.Status.StartAttempts), what)
	})
	return got
}

// auditTypes lists the types of a bot's audit rows.
func auditTypes(t *testing.T, uid types.UID) []string {
	t.Helper()
	rows, err := liveStore.BotEvents(context.Background(), uid)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rows {
		if r.Type == botctrl.AuditStartRetried || r.Type == botctrl.AuditStartFailed {
			out = append(out, r.Type)
		}
	}
	return out
}

func runsOrEnded(b *v1.Bot) bool { return b.Status.StartedAt != nil || b.Status.Phase.Terminal() }

// TestStartRetriedAfterAFailedPull: the first deployment of a bot fails at the pull; the bot
// is not failed but goes back to the queue, gets the slot again once it recovered, and runs.
// The failed start is in its status and the audit log.
func TestStartRetriedAfterAFailedPull(t *testing.T) {
	sc := newScenario(t, "retried", sim.Config{})
	sc.warm() // the one failing pull is the bot's, not the pool's pre-pull
	sc.sim.FailPulls(sc.pool.Spec.Image, 1)
	bot, first := sc.bind("second-chance")
	b := sc.waitBot(bot.Name, "running after one failed start", runsOrEnded)
	if b.Status.Phase.Terminal() {
		t.Fatalf("bot ended %s/%s (%s), want it running after a retry", b.Status.Phase, b.Status.Reason, b.Status.Message)
	}
	got := b.Status.StartAttempts
	if len(got) != 1 || got[0].Reason != v1.ReasonDeploymentFailed || got[0].SlotName != first.Name || got[0].Server != fixture.ServerUUID ||
		!strings.Contains(got[0].Message, "failed") {
		t.Fatalf("startAttempts %+v, want the one failed pull in slot %s on %s", got, first.Name, fixture.ServerUUID)
	}
	sc.deployed()
	if types := auditTypes(t, b.UID); strings.Join(types, ",") != botctrl.AuditStartRetried {
		t.Errorf("audit rows %v, want one %s", types, botctrl.AuditStartRetried)
	}
	checkInvariants(t, sc.ns)
}

// TestStartFailsAfterMaxStartAttempts: every pull fails. A bot of the pool (3 starts) ends
// Fatal on its third failure with the slot's reason, the count in its message and every
// failure recorded; a Bot's own MaxStartAttempts (2) overrides the pool's.
func TestStartFailsAfterMaxStartAttempts(t *testing.T) {
	sc := newScenario(t, "hopeless", sim.Config{}, func(p *v1.BotPool) { p.Spec.MaxStartAttempts = 3 })
	sc.warm()
	sc.sim.FailPulls(sc.pool.Spec.Image, -1)
	for _, tc := range []struct {
		name  string
		own   int32
		limit int
	}{{"pool-limit", 0, 3}, {"own-limit", 2, 2}} {
		sc.phase(v1.SlotIdle)
		bot := newBot(t, sc.ns, tc.name, sc.pool.Name, func(b *v1.Bot) { b.Spec.MaxStartAttempts = tc.own })
		b := sc.waitBot(bot.Name, "Fatal", func(b *v1.Bot) bool { return b.Status.Phase.Terminal() })
		want := fmt.Sprintf("(start attempt %d of %d)", tc.limit, tc.limit)
		if b.Status.Phase != v1.BotFatal || b.Status.Reason != v1.ReasonDeploymentFailed || !strings.HasSuffix(b.Status.Message, want) {
			t.Fatalf("bot %s ended %s/%s %q, want Fatal/DeploymentFailed ending %q", tc.name, b.Status.Phase, b.Status.Reason, b.Status.Message, want)
		}
		if n := len(b.Status.StartAttempts); n != tc.limit || b.Status.SlotName == "" || b.Status.ApplicationUUID == "" {
			t.Fatalf("bot %s: %d failed starts recorded (slot %q, app %q), want %d and the last slot kept", tc.name, n, b.Status.SlotName, b.Status.ApplicationUUID, tc.limit)
		}
		// The audit row follows the status write the wait saw: wait for it too.
		wantRows := strings.TrimPrefix(strings.Repeat(","+botctrl.AuditStartRetried, tc.limit-1)+","+botctrl.AuditStartFailed, ",")
		kubetest.Eventually(t, 10*time.Second, func() error {
			if rows := strings.Join(auditTypes(t, b.UID), ","); rows != wantRows {
				return fmt.Errorf("bot %s audit rows %s, want %s", tc.name, rows, wantRows)
			}
			return nil
		})
	}
	checkInvariants(t, sc.ns)
}

// TestABotWhoseBindingWasTakenIsNotRetried: the container took the bot's binding (it has the
// meeting URL), then the deployment failed: the bot ends Fatal as before, never started again.
// (A bot that reported running has taken its binding too; one whose slot failed while Busy:
// TestErrorSlotIsRecoveredAtOnce.)
func TestABotWhoseBindingWasTakenIsNotRetried(t *testing.T) {
	sc := newScenario(t, "taken", sim.Config{})
	sc.warm()
	sc.sim.FailPulls(sc.pool.Spec.Image, -1)
	bot, slot := sc.bind("claimed")
	kubetest.Eventually(t, 10*time.Second, func() error { // as the bot API's config answer records it
		b := sc.bot(bot.Name)
		b.Status.Binding = &v1.BindingClaim{SlotName: slot.Name, SlotUID: slot.UID, ClaimedAt: metav1.NewTime(clk.Now()), CredentialSHA256: strings.Repeat("a", 64)}
		return env.Client.Status().Update(context.Background(), b)
	})
	b := sc.waitBot(bot.Name, "Fatal", func(b *v1.Bot) bool { return b.Status.Phase.Terminal() })
	if b.Status.Phase != v1.BotFatal || b.Status.Reason != v1.ReasonDeploymentFailed || len(b.Status.StartAttempts) != 0 {
		t.Fatalf("bot %s/%s %q with %d failed starts, want Fatal/DeploymentFailed and none recorded", b.Status.Phase, b.Status.Reason, b.Status.Message, len(b.Status.StartAttempts))
	}
	if rows := auditTypes(t, b.UID); len(rows) != 0 {
		t.Errorf("audit rows %v for a bot that was not retried", rows)
	}
}

// TestStartRetriedOnAnotherServer: a pool on two servers, whose first server's pulls fail:
// the bot's retry takes the free slot of the other server, though a free slot of the failed
// server comes first in the usual order (least recently used, then by name), and runs there.
func TestStartRetriedOnAnotherServer(t *testing.T) {
	sc := newScenario(t, "elsewhere", sim.Config{}, func(p *v1.BotPool) { p.Spec.MaxSlots, p.Spec.MinIdle = 3, 2 })
	home := sc.pool.Spec.Coolify.ServerUUID
	waitPhases(t, sc.ns, map[v1.SlotPhase]int{v1.SlotIdle: 2}) // pool-zoom-001 and -002 on home
	other := sc.sim.AddServer(sim.ServerSpec{Name: "other"})
	sc.updatePool(func(p *v1.BotPool) {
		p.Spec.MinIdle = 3
		onServers(v1.PoolServer{UUID: home}, v1.PoolServer{UUID: other})(p)
	})
	sc.waitServers(map[string]int{home: 2, other: 1})
	waitPhases(t, sc.ns, map[v1.SlotPhase]int{v1.SlotIdle: 3})
	for _, srv := range []string{home, other} {
		sc.sim.WarmImage(srv, sc.pool.Spec.Image, sc.pool.Spec.ImageTag)
	}
	sc.prePulled() // both servers' pulls, begun cold, end: the deploy gate holds no start behind them
	bot := newBot(t, sc.ns, "mover", sc.pool.Name)
	first := slotOf(t, bot)
	if first.Spec.Server != home {
		t.Fatalf("the first binding took %s on %s, want a slot of %s (the first in order)", first.Name, first.Spec.Server, home)
	}
	sc.sim.FailPullsOn(home, sc.pool.Spec.Image, -1) // before its deployment ends: the clock stands
	b := sc.waitBot(bot.Name, "running after one failed start", runsOrEnded)
	if b.Status.Phase.Terminal() || len(b.Status.StartAttempts) != 1 || b.Status.StartAttempts[0].Server != home {
		t.Fatalf("bot %s/%s with failed starts %+v, want running after one on %s", b.Status.Phase, b.Status.Reason, b.Status.StartAttempts, home)
	}
	if now := slotOf(t, b); now.Spec.Server != other {
		t.Fatalf("the retry took slot %s on %s, want the other server's (%s)", now.Name, now.Spec.Server, other)
	}
	checkInvariants(t, sc.ns)
}

// TestRetriedBotKeepsItsPlace: a retried bot goes back to the head of its queue: the slot,
// once recovered, is bound to it, not to a bot that arrived after it.
func TestRetriedBotKeepsItsPlace(t *testing.T) {
	sc := newScenario(t, "place", sim.Config{})
	sc.warm() // the one failing pull is the bot's, not the pool's pre-pull
	sc.sim.FailPulls(sc.pool.Spec.Image, 1)
	early, slot := sc.bind("early")
	step(time.Second) // a later queuedAt
	late := newBot(t, sc.ns, "late", sc.pool.Name)
	var next string
	kubetest.Eventually(t, 30*time.Second, func() error {
		e := sc.bot(early.Name)
		s := listSlots(t, sc.ns)[0]
		if len(e.Status.StartAttempts) == 1 && s.Spec.BotRef != nil && s.Status.Phase != v1.SlotError {
			next = s.Spec.BotRef.Name
			return nil
		}
		clk.Step(200 * time.Millisecond)
		return fmt.Errorf("bot early %s with %d failed starts; slot %s %s bound to %v", e.Status.Phase, len(e.Status.StartAttempts), s.Name, s.Status.Phase, s.Spec.BotRef)
	})
	if next != early.Name {
		t.Fatalf("slot %s went to %s after early's failed start, want early (it arrived first)", slot.Name, next)
	}
	if l := sc.bot(late.Name); l.Status.Phase != v1.BotQueued {
		t.Fatalf("late is %s, want still Queued behind early", l.Status.Phase)
	}
	checkInvariants(t, sc.ns)
}

// TestStartRetriedOnAStandbyPool: a bot bound to a Ready slot whose container hangs before
// taking it (StandbyLost) goes back to the queue; the slot's fresh container takes it and it
// runs to Done.
func TestStartRetriedOnAStandbyPool(t *testing.T) {
	cs := newContainers(t, simbot.Behaviour{PollEvery: 20 * time.Millisecond})
	sc := newScenario(t, "standbyretry", sim.Config{Hooks: cs.hooks()}, func(p *v1.BotPool) {
		p.Spec.Standby = v1.StandbyRunning
	})
	sc.warm()
	first := sc.standbyReady()
	cs.freeze(first.Status.ApplicationUUID)
	bot := newBot(t, sc.ns, "rescued", sc.pool.Name)
	slotOf(t, bot)
	kubetest.Eventually(t, 30*time.Second, func() error {
		b := sc.bot(bot.Name)
		if b.Status.Phase.Terminal() && (b.Status.Phase != v1.BotDone || len(cs.served(bot.Name)) > 0) {
			return nil // a container that served the bot records it as its run returns, a moment after Done
		}
		// Fast while the frozen container's hang-up grace runs out; then at the pace of a
		// deployment poll while the fresh container deploys, and not at all once it is Ready:
		// it takes the binding in real time, and a clock racing ahead of a busy machine
		// would close the binding's window before it could.
		switch slot := listSlots(t, sc.ns)[0]; {
		case len(b.Status.StartAttempts) == 0:
			clk.Step(5 * time.Second)
		case slot.Status.Standby != v1.StandbyReady:
			clk.Step(200 * time.Millisecond)
		}
		return fmt.Errorf("bot %s is %s after %d failed starts", b.Name, b.Status.Phase, len(b.Status.StartAttempts))
	})
	// Should the fresh container still be too slow for its binding's window, that start is
	// retried too: the test holds that every failed start is the standby container's, and
	// the bot runs in the end.
	b := sc.bot(bot.Name)
	if b.Status.Phase != v1.BotDone || len(b.Status.StartAttempts) == 0 {
		t.Fatalf("bot %s/%s with failed starts %+v, want Done after a StandbyLost", b.Status.Phase, b.Status.Reason, b.Status.StartAttempts)
	}
	for _, a := range b.Status.StartAttempts {
		if a.Reason != v1.ReasonStandbyLost {
			t.Fatalf("failed start %+v, want every one StandbyLost", a)
		}
	}
	if served := cs.served(bot.Name); len(served) != 1 {
		t.Fatalf("%d containers took bot %s, want one", len(served), bot.Name)
	}
	cs.check()
}
