package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/policy"
	poolctrl "botpool.dev/botpool/controllers/pool"
	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/internal/slottoken"
	"botpool.dev/botpool/store"
)

// scenario is one pool of one slot on a simulator of its own, so a test's faults and
// deployments touch nothing else.
type scenario struct {
	t    testing.TB
	ns   string
	pool *v1.BotPool
	sim  *sim.Server
	api  coolify.API
}

func newScenario(t testing.TB, name string, cfg sim.Config, mutate ...func(*v1.BotPool)) *scenario {
	t.Helper()
	return newScenarioOn(t, name, cfg, sim.ServerSpec{}, mutate...)
}

// newScenarioOn is newScenario with the pool on a server of its own shape.
func newScenarioOn(t testing.TB, name string, cfg sim.Config, server sim.ServerSpec, mutate ...func(*v1.BotPool)) *scenario {
	t.Helper()
	sc := &scenario{t: t, ns: env.Namespace(t), sim: newSim(cfg)}
	t.Cleanup(sc.sim.Close)
	sc.sim.SeedDefault()
	if server.UUID != "" {
		sc.sim.AddServer(server)
		mutate = append([]func(*v1.BotPool){func(p *v1.BotPool) { p.Spec.Coolify.ServerUUID = server.UUID }}, mutate...)
	}
	api, err := testRegistry.Client(sc.sim.URL, sim.DefaultToken)
	if err != nil {
		t.Fatal(err)
	}
	sc.api = api
	connector.use(name, api)
	sc.pool = newPool(sc.ns, name, append([]func(*v1.BotPool){func(p *v1.BotPool) { p.Spec.MaxSlots, p.Spec.MinIdle = 1, 1 }}, mutate...)...)
	if err := env.Client.Create(context.Background(), sc.pool); err != nil {
		t.Fatal(err)
	}
	// Registered after the simulator's Close, so it runs before it: the pool and its slots
	// are deleted (their finalizers clean this simulator) while it still answers.
	t.Cleanup(sc.teardown)
	return sc
}

func (sc *scenario) teardown() {
	ctx := context.Background()
	if err := env.Client.Delete(ctx, sc.pool); client.IgnoreNotFound(err) != nil {
		sc.t.Error(err)
		return
	}
	kubetest.Eventually(sc.t, 15*time.Second, func() error {
		// A running bot is given leaveGracePeriod (by the suite's clock) to leave first.
		clk.Step(time.Second)
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(sc.pool), &v1.BotPool{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("pool %s not deleted yet (%w)", sc.pool.Name, err)
		}
		return nil
	})
}

// slot waits until the pool's only slot satisfies cond and returns it.
func (sc *scenario) slot(what string, cond func(*v1.BotPoolSlot) bool) *v1.BotPoolSlot {
	sc.t.Helper()
	var got *v1.BotPoolSlot
	kubetest.Eventually(sc.t, 15*time.Second, func() error {
		slots := listSlots(sc.t, sc.ns)
		if len(slots) != 1 {
			return fmt.Errorf("%d slots, want 1", len(slots))
		}
		got = &slots[0]
		if !cond(got) {
			sc.pullTime()
			return fmt.Errorf("slot %s is %s (%s: %s), want %s", got.Name, got.Status.Phase, got.Status.Reason, got.Status.Message, what)
		}
		return nil
	})
	checkInvariants(sc.t, sc.ns)
	return got
}

// pullTime moves the clock on by five seconds while the pool's image pre-pull runs, and leaves it
// alone otherwise. The pull began when the pool was created and takes Coolify's time; until it
// ends, the deploy gate holds a bot's deployment behind it (the first deployment of an image
// new to a server runs alone), and a test waiting for that deployment on a clock that stands
// waited for ever.
func (sc *scenario) pullTime() {
	if pullRuns(sc.poolNow()) {
		step(5 * time.Second) // a cold pull is minutes: a second at a time took a minute
	}
}

func (sc *scenario) phase(p v1.SlotPhase) *v1.BotPoolSlot {
	sc.t.Helper()
	return sc.slot(string(p), func(s *v1.BotPoolSlot) bool { return s.Status.Phase == p })
}

// deployed waits until the slot is Busy after the test stepped the clock past its deployment.
func (sc *scenario) deployed() *v1.BotPoolSlot {
	sc.t.Helper()
	return sc.slot(string(v1.SlotBusy), func(s *v1.BotPoolSlot) bool {
		return s.Status.Phase == v1.SlotBusy || nextPoll()
	})
}

// nextPoll moves the fake clock on by one deployment poll and reports false, for a wait on
// what a deployment the test stepped past leads to. The slot reads the pool's active
// deployments through a list cached for a poll of the fake clock: a read taken after the step
// but before the simulator's workers moved the deployment on stays current while the fake clock
// stands still, and on a busy machine that read came first (the slot stayed Deploying for a
// minute; once on the way to Busy, once on the way to DeploymentFailed). So such a wait moves
// the clock on a poll at a time, as real time would.
func nextPoll() bool {
	clk.Step(20 * time.Millisecond) // the suite's DeploymentPollInterval
	return false
}

// bind creates a bot for the pool once its slot is Idle, and waits until it is bound.
func (sc *scenario) bind(name string) (*v1.Bot, *v1.BotPoolSlot) {
	sc.t.Helper()
	sc.phase(v1.SlotIdle)
	bot := newBot(sc.t, sc.ns, name, sc.pool.Name)
	return bot, slotOf(sc.t, bot)
}

// beat records a heartbeat of bot now, as the bot API does.
func (sc *scenario) beat(bot *v1.Bot) {
	sc.t.Helper()
	if err := liveStore.RecordHeartbeat(context.Background(), store.Heartbeat{BotUID: bot.UID, Namespace: bot.Namespace, Name: bot.Name, At: clk.Now()}); err != nil {
		sc.t.Fatal(err)
	}
}

// step moves the fake clock and gives the controllers (polling every 20ms) time to look.
func step(d time.Duration) {
	clk.Step(d)
	time.Sleep(60 * time.Millisecond)
}

func (sc *scenario) bot(name string) *v1.Bot {
	sc.t.Helper()
	b := &v1.Bot{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: sc.ns, Name: name}, b); err != nil {
		sc.t.Fatal(err)
	}
	return b
}

// botFails waits until the bot is Fatal with reason, after the test stepped the clock to
// where it fails; the clock moves on a poll per look (nextPoll).
func (sc *scenario) botFails(name string, reason string) {
	sc.t.Helper()
	kubetest.Eventually(sc.t, 10*time.Second, func() error {
		b := sc.bot(name)
		if b.Status.Phase != v1.BotFatal || string(b.Status.Reason) != reason {
			nextPoll()
			return fmt.Errorf("bot %s is %s/%s, want Fatal/%s", name, b.Status.Phase, b.Status.Reason, reason)
		}
		return nil
	})
}

// finish reports a bot Done, as the bot API does for its container.
func finish(t testing.TB, bot *v1.Bot) {
	t.Helper()
	kubetest.Eventually(t, 10*time.Second, func() error {
		b := &v1.Bot{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(bot), b); err != nil {
			return err
		}
		b.Status.Phase = v1.BotDone
		return env.Client.Status().Update(context.Background(), b)
	})
}

// slotGone waits until this slot (by uid: the pool may replace it under the same name) is gone.
func slotGone(t *testing.T, slot *v1.BotPoolSlot) {
	t.Helper()
	kubetest.Eventually(t, 10*time.Second, func() error {
		var now v1.BotPoolSlot
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(slot), &now)
		if err == nil && now.UID == slot.UID {
			return fmt.Errorf("slot %s still there", slot.Name)
		}
		return client.IgnoreNotFound(err)
	})
}

// checkInvariants checks the design's invariants 1 and 2 on a namespace: no bot bound to two
// slots, and no pool above maxSlots.
func checkInvariants(t testing.TB, ns string) {
	t.Helper()
	if m := eventMisuse.Load(); m != nil {
		t.Fatalf("a reconciler would have crashed the event recorder: %s", m)
	}
	bound := map[string]string{}
	perPool := map[string]int{}
	for _, s := range listSlots(t, ns) {
		perPool[s.Spec.Pool]++
		if ref := s.Spec.BotRef; ref != nil {
			if other, dup := bound[string(ref.UID)]; dup {
				t.Fatalf("invariant 1: bot %s is bound to %s and %s", ref.Name, other, s.Name)
			}
			bound[string(ref.UID)] = s.Name
		}
	}
	var pools v1.BotPoolList
	if err := env.Client.List(context.Background(), &pools, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pools.Items {
		if perPool[p.Name] > int(p.Spec.MaxSlots) {
			t.Fatalf("invariant 2: pool %s holds %d slots, maxSlots %d", p.Name, perPool[p.Name], p.Spec.MaxSlots)
		}
	}
}

// TestSlotLifecycle: a slot is created with its application and env, serves a bot cold, is
// released, serves the next one warm; every transition is audited.
func TestSlotLifecycle(t *testing.T) {
	sc := newScenario(t, "lifecycle", sim.Config{})
	idle := sc.phase(v1.SlotIdle)
	app, ok := sc.sim.App(idle.Status.ApplicationUUID)
	if !ok {
		t.Fatalf("no application %s in Coolify", idle.Status.ApplicationUUID)
	}
	if app.Name != idle.Name || app.Env["POOL_SLOT_UUID"] != app.UUID || app.Env["BOTPOOL_API_URL"] == "" ||
		app.Env["BOTPOOL_SLOT_TOKEN"] == "" || len(app.Tags) != 1 || app.Tags[0] != sc.tag() {
		t.Errorf("application %+v: want the slot's name, tag and env", app)
	}
	if idle.Status.TokenSHA256 != slottoken.Hash([]byte(app.Env["BOTPOOL_SLOT_TOKEN"])) {
		t.Errorf("the slot records token hash %q, not the hash of the token in its env", idle.Status.TokenSHA256)
	}
	if app.Description != coolifyview.Marked("[IDLE] Available - never used", coolifyview.OwnerMark(sc.tag(), sc.pool, sc.pool.Spec.Coolify.ServerUUID)) {
		t.Errorf("description %q", app.Description)
	}

	// The pool pulled its image first, off the start path (7 minutes, cold: the wait steps
	// the clock through it), so the first bot starts warm too.
	bot, _ := sc.bind("first")
	deploying := sc.phase(v1.SlotDeploying)
	if deploying.Status.DeploymentUUID == "" {
		t.Error("no deployment uuid recorded")
	}
	step(10 * time.Second)
	busy := sc.deployed()
	if app, _ := sc.sim.App(busy.Status.ApplicationUUID); !app.Running || app.Description[:6] != "[BUSY]" {
		t.Errorf("busy slot's application: running %v, description %q", app.Running, app.Description)
	}

	// The bot finishes: the slot is released at once and stopped.
	finish(t, bot)
	idle = sc.slot("Idle, used", func(s *v1.BotPoolSlot) bool {
		return s.Status.Phase == v1.SlotIdle && s.Spec.BotRef == nil && s.Status.LastUsedAt != nil
	})
	step(5 * time.Second)
	if app, _ := sc.sim.App(idle.Status.ApplicationUUID); app.Running {
		t.Error("released slot's container still runs")
	}

	// The next bot starts warm: seconds, not minutes.
	sc.bind("second")
	sc.phase(v1.SlotDeploying)
	step(10 * time.Second)
	sc.deployed()

	rows, err := liveStore.Transitions(context.Background(), sc.ns, idle.Name)
	if err != nil {
		t.Fatal(err)
	}
	var path []string
	for _, r := range rows {
		path = append(path, r.To)
	}
	want := "[Creating Idle Deploying Busy Releasing Idle Deploying Busy]"
	if fmt.Sprint(path) != want {
		t.Errorf("audited transitions %v, want %s", path, want)
	}
}

// TestSlowButHeartbeatingDeployIsNeverFailed (invariant 8): a 20-minute pull, with the bot
// beating throughout, passes deployingTimeout with a skipped recovery and ends Busy. (Every
// pull takes 20 minutes: the pool's pre-pull before the bot's, and the bot's own check of the
// registry after it.)
func TestSlowButHeartbeatingDeployIsNeverFailed(t *testing.T) {
	sc := newScenario(t, "slow", sim.Config{ColdPull: 20 * time.Minute, WarmPull: 20 * time.Minute})
	bot, _ := sc.bind("patient")
	sc.phase(v1.SlotDeploying)
	for range 21 {
		step(time.Minute)
		sc.beat(bot)
		if s := listSlots(t, sc.ns)[0]; s.Status.Phase == v1.SlotError {
			t.Fatalf("a heartbeating deployment was failed: %s: %s", s.Status.Reason, s.Status.Message)
		}
	}
	busy := sc.phase(v1.SlotBusy)
	if busy.Status.SkippedRecoveries < 1 {
		t.Errorf("skipped recoveries %d, want at least 1 (the deploy outlived deployingTimeout)", busy.Status.SkippedRecoveries)
	}
	if b := sc.bot(bot.Name); b.Status.Phase.Terminal() {
		t.Errorf("bot failed: %s", b.Status.Reason)
	}
}

// TestStuckDeployWithoutHeartbeatIsRecovered: nothing happens for 15 minutes and the bot never
// beat: the bot fails with DeployingTimeout and the slot returns to Idle.
func TestStuckDeployWithoutHeartbeatIsRecovered(t *testing.T) {
	sc := newScenario(t, "stuck", sim.Config{ColdPull: 2 * time.Hour}, oneStart)
	sc.bind("lost")
	sc.phase(v1.SlotDeploying)
	step(14 * time.Minute)
	sc.phase(v1.SlotDeploying)
	step(2 * time.Minute)
	sc.botFails("lost", string(v1.ReasonDeployingTimeout))
	idle := sc.slot("Idle and free", func(s *v1.BotPoolSlot) bool { return s.Status.Phase == v1.SlotIdle && s.Spec.BotRef == nil })
	if idle.Status.RecoveryAttempts != 1 {
		t.Errorf("recovery attempts %d, want 1", idle.Status.RecoveryAttempts)
	}
}

// TestAliveBotOnStuckSlotTurnsBusy: the deployment record never finishes but the bot beats:
// after maxSkippedRecoveries skips the slot is declared Busy.
func TestAliveBotOnStuckSlotTurnsBusy(t *testing.T) {
	sc := newScenario(t, "alive", sim.Config{ColdPull: 3 * time.Hour})
	bot, _ := sc.bind("alive")
	sc.phase(v1.SlotDeploying)
	for i := 0; i < 70; i++ {
		step(time.Minute)
		sc.beat(bot)
		if s := listSlots(t, sc.ns)[0]; s.Status.Phase == v1.SlotError {
			t.Fatalf("minute %d: a heartbeating bot's slot was failed: %s", i+1, s.Status.Message)
		}
		if s := listSlots(t, sc.ns)[0]; s.Status.Phase == v1.SlotBusy {
			if s.Status.SkippedRecoveries != 3 || i < 59 {
				t.Fatalf("Busy at minute %d after %d skips, want after the 3rd skip (minute 60)", i+1, s.Status.SkippedRecoveries)
			}
			return
		}
	}
	t.Fatalf("still %s after 70 minutes", listSlots(t, sc.ns)[0].Status.Phase)
}

// TestBotCrashedAfterHeartbeatsIsRecovered: the bot beat for a while, then went silent: at
// deployingTimeout its last beat is older than heartbeatFreshness, so the slot recovers.
func TestBotCrashedAfterHeartbeatsIsRecovered(t *testing.T) {
	sc := newScenario(t, "crashed", sim.Config{ColdPull: 2 * time.Hour}, oneStart)
	bot, _ := sc.bind("crashed")
	sc.phase(v1.SlotDeploying)
	for range 4 {
		step(time.Minute)
		sc.beat(bot)
	}
	step(12 * time.Minute)
	sc.botFails("crashed", string(v1.ReasonDeployingTimeout))
	sc.slot("Idle and free", func(s *v1.BotPoolSlot) bool { return s.Status.Phase == v1.SlotIdle && s.Spec.BotRef == nil })
}

// TestFailedDeploymentsRecoverThenRetireTheSlot: a failed pull sends the slot to Error and
// recovers it at once (the bot fails with DeploymentFailed); after maxRecoveryAttempts
// failures in a row the slot and its application are deleted, and the pool makes a new one.
func TestFailedDeploymentsRecoverThenRetireTheSlot(t *testing.T) {
	sc := newScenario(t, "failing", sim.Config{}, oneStart)
	sc.sim.FailPulls(sc.pool.Spec.Image, -1)
	first := sc.phase(v1.SlotIdle)
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("unlucky-%d", i)
		sc.bind(name)
		sc.phase(v1.SlotDeploying)
		step(8 * time.Minute) // the pull fails when it would have finished
		sc.botFails(name, string(v1.ReasonDeploymentFailed))
		if i < 3 {
			s := sc.slot("recovered", func(s *v1.BotPoolSlot) bool {
				return s.Status.Phase == v1.SlotIdle && s.Spec.BotRef == nil && s.Status.RecoveryAttempts == int32(i)
			})
			if s.UID != first.UID {
				t.Fatalf("slot replaced after %d failures, want after 3", i)
			}
		}
	}
	// Retired: a new slot (the pool keeps minIdle 1) with a new application; the old one goes.
	sc.sim.FailPulls(sc.pool.Spec.Image, 0)
	fresh := sc.slot("a new Idle slot", func(s *v1.BotPoolSlot) bool { return s.UID != first.UID && s.Status.Phase == v1.SlotIdle })
	if fresh.Status.ApplicationUUID == first.Status.ApplicationUUID {
		t.Error("the new slot reuses the retired application")
	}
	step(11 * time.Second) // Coolify deletes asynchronously
	if _, ok := sc.sim.App(first.Status.ApplicationUUID); ok {
		t.Error("the retired slot's application still exists")
	}
}

// TestApplicationDeletedBehindOurBackIsRecreated: someone deletes the slot's application in
// Coolify; the slot notices, confirms with a GET and creates it again under the same name.
func TestApplicationDeletedBehindOurBackIsRecreated(t *testing.T) {
	sc := newScenario(t, "recreate", sim.Config{})
	old := sc.phase(v1.SlotIdle)
	if err := sc.api.DeleteApplication(context.Background(), old.Status.ApplicationUUID, coolify.AppLeftovers); err != nil {
		t.Fatal(err)
	}
	step(11 * time.Second)
	fresh := sc.slot("Idle with a new application", func(s *v1.BotPoolSlot) bool {
		return s.Status.Phase == v1.SlotIdle && s.Status.ApplicationUUID != "" && s.Status.ApplicationUUID != old.Status.ApplicationUUID
	})
	if fresh.UID != old.UID {
		t.Error("the slot was replaced; want the same slot with a new application")
	}
	if app, ok := sc.sim.App(fresh.Status.ApplicationUUID); !ok || app.Name != old.Name {
		t.Errorf("new application %+v, want one named %s", app, old.Name)
	}
}

// TestOrphanedSlotIsReleased: the bound bot disappears while its container runs.
func TestOrphanedSlotIsReleased(t *testing.T) {
	sc := newScenario(t, "orphan", sim.Config{})
	sc.warm()
	bot, _ := sc.bind("vanishing")
	sc.phase(v1.SlotDeploying)
	step(10 * time.Second)
	busy := sc.deployed()
	// The bot vanishes at once, as when someone strips its finalizer: no graceful leave.
	if err := env.Client.Delete(context.Background(), bot); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 10*time.Second, func() error {
		b := &v1.Bot{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(bot), b); err != nil {
			return client.IgnoreNotFound(err)
		}
		b.Finalizers = nil
		return env.Client.Update(context.Background(), b)
	})
	sc.slot("released", func(s *v1.BotPoolSlot) bool { return s.Status.Phase == v1.SlotIdle && s.Spec.BotRef == nil })
	step(5 * time.Second)
	if app, _ := sc.sim.App(busy.Status.ApplicationUUID); app.Running {
		t.Error("the orphaned container still runs")
	}
}

// TestFailedReadsActOnNothing (invariant 9): while Coolify's reads fail, no slot is failed,
// recreated or deleted; when they return, the deployment is followed to Busy.
func TestFailedReadsActOnNothing(t *testing.T) {
	sc := newScenario(t, "blind", sim.Config{})
	idle := sc.phase(v1.SlotIdle)
	sc.prePulled() // blind, the pool could not see its pull end, and the gate would hold the bot
	for _, op := range []string{"list-applications", "get-application-by-uuid", "get-deployment-by-uuid", "list-deployments-by-app-uuid", "list-deployments"} {
		sc.sim.SetFault(op, sim.Fault{ErrorRate: 1})
	}
	bot, _ := sc.bind("patient")
	// The deployment starts before the clock moves: a slot that deployed only after the steps
	// (a loaded suite) would be "just deployed" when the reads return, and wait a poll.
	sc.phase(v1.SlotDeploying)
	for range 10 {
		step(time.Minute) // past the cold pull and deployGracePeriod, short of deployingTimeout
		s := listSlots(t, sc.ns)[0]
		if s.Status.Phase == v1.SlotError || s.Status.ApplicationUUID != idle.Status.ApplicationUUID || s.UID != idle.UID {
			t.Fatalf("a failed read acted: slot %s %s app %s", s.Status.Phase, s.Status.Reason, s.Status.ApplicationUUID)
		}
	}
	for _, op := range []string{"list-applications", "get-application-by-uuid", "get-deployment-by-uuid", "list-deployments-by-app-uuid", "list-deployments"} {
		sc.sim.SetFault(op, sim.Fault{})
	}
	// Failed reads are retried after transientRetry of real time (with the error backoff up to
	// 30 s): look now rather than wait for that timer.
	sc.nudge()
	sc.phase(v1.SlotBusy)
	if b := sc.bot(bot.Name); b.Status.Phase.Terminal() {
		t.Errorf("bot failed: %s", b.Status.Reason)
	}
}

// TestRateLimitsAndServerErrorsAreSurvived: Coolify answers a burst of 429s and 500s to the
// deploy and its polls; the bot still starts.
func TestRateLimitsAndServerErrorsAreSurvived(t *testing.T) {
	sc := newScenario(t, "throttled", sim.Config{})
	sc.phase(v1.SlotIdle)
	sc.sim.SetFault("deploy-by-tag-or-uuid", sim.Fault{Burst: 3, BurstCode: 429})
	sc.sim.SetFault("get-deployment-by-uuid", sim.Fault{Burst: 5, BurstCode: 500})
	bot, _ := sc.bind("persistent")
	sc.phase(v1.SlotDeploying)
	step(8 * time.Minute)
	sc.deployed()
	if b := sc.bot(bot.Name); b.Status.Phase.Terminal() {
		t.Errorf("bot failed: %s", b.Status.Reason)
	}
}

// TestDeletingASlotCleansCoolify: the finalizer stops and deletes the application and fails a
// bot that was still bound with SlotLost.
func TestDeletingASlotCleansCoolify(t *testing.T) {
	sc := newScenario(t, "cleanup", sim.Config{})
	sc.bind("evicted")
	slot := sc.phase(v1.SlotDeploying)
	if err := env.Client.Delete(context.Background(), slot); err != nil {
		t.Fatal(err)
	}
	sc.botFails("evicted", string(v1.ReasonSlotLost))
	slotGone(t, slot)
	step(11 * time.Second)
	if _, ok := sc.sim.App(slot.Status.ApplicationUUID); ok {
		t.Error("the deleted slot's application still exists in Coolify")
	}
}

// TestDeploymentsAreGated: the first deployment of a cold image runs alone — the pool's own
// pre-pull of it — so bots bound meanwhile wait; once the image is cached, at most
// maxConcurrentDeployments of theirs run at once.
func TestDeploymentsAreGated(t *testing.T) {
	sc := newScenario(t, "gated", sim.Config{}, func(p *v1.BotPool) {
		p.Spec.MaxSlots, p.Spec.MinIdle, p.Spec.MaxConcurrentDeployments = 3, 3, 2
	})
	waitPhases(t, sc.ns, map[v1.SlotPhase]int{v1.SlotIdle: 3})
	for i := range 3 {
		newBot(t, sc.ns, fmt.Sprintf("gated-%d", i), sc.pool.Name)
	}
	kubetest.Eventually(t, 15*time.Second, func() error {
		bound, deploying := 0, 0
		for _, s := range listSlots(t, sc.ns) {
			if s.Spec.BotRef != nil {
				bound++
			}
			if s.Status.Phase == v1.SlotDeploying {
				deploying++
			}
		}
		if bound != 3 || deploying != 0 {
			return fmt.Errorf("%d slots bound, %d deploying; want 3 bound and none deploying while the pool pulls its cold image", bound, deploying)
		}
		for _, st := range sc.poolNow().Status.Servers {
			if st.Pull == nil || st.Pull.State != v1.ImagePulling {
				return fmt.Errorf("server %s: pull %+v, want the pool's pre-pull running", st.UUID, st.Pull)
			}
		}
		return nil
	})
	step(8 * time.Minute) // the pull completes; the image is cached
	waitPhases(t, sc.ns, map[v1.SlotPhase]int{v1.SlotDeploying: 2, v1.SlotIdle: 1})
	step(10 * time.Second)
	waitPhasesPolling(t, sc.ns, map[v1.SlotPhase]int{v1.SlotBusy: 2, v1.SlotDeploying: 1})
	step(10 * time.Second)
	waitPhasesPolling(t, sc.ns, map[v1.SlotPhase]int{v1.SlotBusy: 3})
}

// TestFullDeploymentQueueIsSurvived: Coolify's queue is full (429 with Retry-After from
// /deploy): the slot waits with the bot bound and deploys once there is room.
func TestFullDeploymentQueueIsSurvived(t *testing.T) {
	sc := newScenarioOn(t, "queuefull", sim.Config{}, sim.ServerSpec{UUID: "srv-small", Name: "small", ConcurrentBuilds: 1, DeploymentQueueLimit: 1})
	sc.sim.WarmImage("srv-small", sc.pool.Spec.Image, sc.pool.Spec.ImageTag)
	sc.phase(v1.SlotIdle)
	sc.prePulled() // the pool's own deployment leaves the queue to the fillers
	ctx := context.Background()
	for i := range 2 { // one building, one queued: the queue is full
		uuid, err := sc.api.CreateDockerImageApplication(ctx, coolify.CreateApplicationRequest{
			ProjectUUID: fixture.ProjectUUID, ServerUUID: "srv-small", EnvironmentName: fixture.EnvironmentName,
			Image: "ghcr.io/example/other", Name: fmt.Sprintf("filler-%d", i),
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sc.api.Deploy(ctx, uuid); err != nil {
			t.Fatal(err)
		}
	}
	bot, _ := sc.bind("waiting")
	waiting := sc.slot("Idle, bound, waiting for Coolify", func(s *v1.BotPoolSlot) bool {
		return s.Status.Phase == v1.SlotIdle && s.Spec.BotRef != nil && strings.Contains(s.Status.Message, "Coolify is busy")
	})
	if b := sc.bot(bot.Name); b.Status.Phase.Terminal() {
		t.Fatalf("bot failed on a full queue: %s", b.Status.Reason)
	}
	step(8 * time.Minute) // the fillers' cold pulls finish, the queue drains
	sc.phase(v1.SlotDeploying)
	step(10 * time.Second)
	if busy := sc.deployed(); busy.UID != waiting.UID {
		t.Error("another slot took the bot")
	}
}

// TestOrphanedApplicationsAreDeleted: an application with the pool's tag and a slot's name but
// no slot is deleted, only once a list succeeds; other tagged applications are left alone.
func TestOrphanedApplicationsAreDeleted(t *testing.T) {
	sc := newScenario(t, "orphanapps", sim.Config{})
	sc.phase(v1.SlotIdle)
	ctx := context.Background()
	sc.sim.SetFault("list-applications", sim.Fault{ErrorRate: 1})
	create := func(name string) string {
		uuid, err := sc.api.CreateDockerImageApplication(ctx, coolify.CreateApplicationRequest{
			ProjectUUID: fixture.ProjectUUID, ServerUUID: fixture.ServerUUID, EnvironmentName: fixture.EnvironmentName,
			Image: sc.pool.Spec.Image, Name: name, Tags: []string{sc.tag()},
			Description: coolifyview.Marked("[IDLE]", coolifyview.OwnerMark(sc.tag(), sc.pool, sc.pool.Spec.Coolify.ServerUUID)),
		})
		if err != nil {
			t.Fatal(err)
		}
		return uuid
	}
	orphan, manual := create(poolctrl.SlotName(v1.PlatformZoom, 9)), create("manual-app")
	for range 5 {
		step(time.Second)
		if app, _ := sc.sim.App(orphan); app.Deleting {
			t.Fatal("an orphan was deleted while the list failed")
		}
	}
	sc.sim.SetFault("list-applications", sim.Fault{})
	kubetest.Eventually(t, 10*time.Second, func() error {
		step(time.Second)
		if app, ok := sc.sim.App(orphan); ok && !app.Deleting {
			var ops []string
			for _, r := range sc.sim.Requests() {
				ops = append(ops, fmt.Sprintf("%s:%d", r.Op, r.Code))
			}
			return fmt.Errorf("orphan %s still there; requests %v", orphan, ops[max(0, len(ops)-30):])
		}
		return nil
	})
	if app, ok := sc.sim.App(manual); !ok || app.Deleting {
		t.Error("an application without a slot-style name was deleted")
	}
	if s := sc.phase(v1.SlotIdle); s.Status.ApplicationUUID == orphan {
		t.Error("the slot adopted the orphan")
	}
}

// TestErrorSlotIsRecoveredAtOnce: a slot found in Error (say, after a restart) is recovered
// on the spot, without waiting for any timer: its bot fails with the slot's reason and the
// slot is free again.
func TestErrorSlotIsRecoveredAtOnce(t *testing.T) {
	sc := newScenario(t, "errored", sim.Config{})
	sc.warm()
	bot, _ := sc.bind("unlucky")
	sc.phase(v1.SlotDeploying)
	step(10 * time.Second)
	busy := sc.deployed()
	kubetest.Eventually(t, 10*time.Second, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(busy), busy); err != nil {
			return err
		}
		busy.Status.Phase, busy.Status.Reason, busy.Status.Message = v1.SlotError, string(v1.ReasonApplicationLost), "set by the test"
		return env.Client.Status().Update(context.Background(), busy)
	})
	sc.botFails(bot.Name, string(v1.ReasonApplicationLost))
	sc.slot("recovered", func(s *v1.BotPoolSlot) bool { return s.Status.Phase == v1.SlotIdle && s.Spec.BotRef == nil })
	step(5 * time.Second)
	if app, _ := sc.sim.App(busy.Status.ApplicationUUID); app.Running {
		t.Error("the recovered slot's container still runs")
	}
}

// TestSlotDeletionWithoutCredentials: the credentials Secret went first (a namespace being
// deleted). A slot still cleans Coolify with the last client its pool used; with none known, it
// waits until a person annotates it, then lets go.
func TestSlotDeletionWithoutCredentials(t *testing.T) {
	sc := newScenario(t, "nocreds", sim.Config{})
	slot := sc.phase(v1.SlotIdle)
	connector.fail(sc.pool.Name, fmt.Errorf("%w: coolify", coolifyview.ErrCredentialsNotFound))
	t.Cleanup(func() { connector.fail(sc.pool.Name, nil) })
	if err := env.Client.Delete(context.Background(), slot); err != nil {
		t.Fatal(err)
	}
	slotGone(t, slot)
	step(11 * time.Second)
	if _, ok := sc.sim.App(slot.Status.ApplicationUUID); ok {
		t.Error("the application was not deleted with the last known client")
	}
}

func TestSlotDeletionBlockedUntilAnnotated(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	pool := newPool(ns, "unknowncreds", func(p *v1.BotPool) { p.Spec.MaxSlots, p.Spec.MinIdle = 1, 1 })
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	waitPhases(t, ns, map[v1.SlotPhase]int{v1.SlotIdle: 1})
	slot := listSlots(t, ns)[0]
	connector.fail(pool.Name, fmt.Errorf("%w: coolify", coolifyview.ErrCredentialsNotFound))
	t.Cleanup(func() { connector.fail(pool.Name, nil) })
	if err := env.Client.Delete(ctx, &slot); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	var held v1.BotPoolSlot
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(&slot), &held); err != nil || held.UID != slot.UID {
		t.Fatalf("the slot went without cleaning Coolify and without a person's word (%v)", err)
	}
	kubetest.Eventually(t, 10*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(&slot), &held); err != nil {
			return err
		}
		held.Annotations = map[string]string{v1.AnnotationOrphanApplication: "true"}
		return env.Client.Update(ctx, &held)
	})
	slotGone(t, &slot)
}

// TestSlotStallsOnWhatOnlyAPersonCanFix: a missing slotEnvFrom Secret and a token Coolify
// refuses stop the slot with Stalled and the reason, retried slowly instead of in a loop; once
// the cause is fixed the slot goes on by itself.
func TestSlotStallsOnWhatOnlyAPersonCanFix(t *testing.T) {
	ctx := context.Background()
	sc := newScenario(t, "stalls", sim.Config{}, func(p *v1.BotPool) {
		p.Spec.SlotEnvFrom = &v1.SecretReference{Name: "bot-env"}
	})
	stalledFor := func(reason string) func(*v1.BotPoolSlot) bool {
		return func(s *v1.BotPoolSlot) bool {
			c := meta.FindStatusCondition(s.Status.Conditions, v1.ConditionStalled)
			return c != nil && c.Status == metav1.ConditionTrue && c.Reason == reason
		}
	}
	sc.slot("Stalled "+v1.ReasonSlotEnvNotFound, stalledFor(v1.ReasonSlotEnvNotFound))
	// Without the opt-in label the Secret is refused, and the slot says how to opt in.
	botEnv := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: sc.ns, Name: "bot-env"},
		StringData: map[string]string{"LOG_LEVEL": "debug"},
	}
	if err := env.Client.Create(ctx, botEnv); err != nil {
		t.Fatal(err)
	}
	sc.nudge() // a stalled slot looks again every StalledRetry of real time: do not wait for it
	refused := sc.slot("Stalled "+v1.ReasonSlotEnvNotAllowed, stalledFor(v1.ReasonSlotEnvNotAllowed))
	if c := meta.FindStatusCondition(refused.Status.Conditions, v1.ConditionStalled); !strings.Contains(c.Message, policy.AllowCommand(sc.ns, "bot-env")) {
		t.Errorf("Stalled message %q does not say the command that opts in", c.Message)
	}
	botEnv.Labels = map[string]string{v1.LabelAllowPoolUse: "true"}
	if err := env.Client.Update(ctx, botEnv); err != nil {
		t.Fatal(err)
	}
	sc.nudge()
	idle := sc.phase(v1.SlotIdle)
	if meta.FindStatusCondition(idle.Status.Conditions, v1.ConditionStalled) != nil {
		t.Errorf("an Idle slot still says Stalled: %+v", idle.Status.Conditions)
	}
	app, _ := sc.sim.App(idle.Status.ApplicationUUID)
	if app.Env["LOG_LEVEL"] != "debug" {
		t.Errorf("the application's env lacks the Secret's keys: %v", app.Env)
	}

	// A token without the deploy ability: Coolify answers 403 to every deploy.
	sc.sim.SetFault("deploy-by-tag-or-uuid", sim.Fault{Burst: 1 << 20, BurstCode: 403})
	bot := newBot(t, sc.ns, "refused", sc.pool.Name)
	sc.slot("Stalled "+v1.ReasonPermissionDenied, stalledFor(v1.ReasonPermissionDenied))
	// That a stalled pass looks again only after StalledRetry, not on the error backoff, is
	// TestSettle's ("a person must fix it, classified"), in one pass: here the slot recovers
	// once a person fixes the token.
	sc.sim.SetFault("deploy-by-tag-or-uuid", sim.Fault{})
	sc.nudge()
	sc.phase(v1.SlotDeploying)
	if b := sc.bot(bot.Name); b.Status.Phase.Terminal() {
		t.Errorf("the bot failed while its slot waited for a person: %s", b.Status.Reason)
	}
}

// nudge makes the slot controller look at the scenario's slot now, as any change to it would.
func (sc *scenario) nudge() {
	sc.t.Helper()
	for _, slot := range listSlots(sc.t, sc.ns) {
		patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{"test.botpool.dev/nudge":%q}}}`, clk.Now().String()+time.Now().String())))
		// A slot listed a moment ago may be gone now (its deletion finished): nothing to nudge.
		if err := env.Client.Patch(context.Background(), &slot, patch); client.IgnoreNotFound(err) != nil {
			sc.t.Fatal(err)
		}
	}
}
