package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/callback"
	"botpool.dev/botpool/coolify/sim"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/internal/kubetest"
)

// waitBot waits until the bot satisfies cond and returns it.
func waitBot(t testing.TB, bot *v1.Bot, what string, cond func(*v1.Bot) bool) *v1.Bot {
	t.Helper()
	got := &v1.Bot{}
	kubetest.Eventually(t, 15*time.Second, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(bot), got); err != nil {
			return err
		}
		if !cond(got) {
			return fmt.Errorf("bot %s is %s (%s: %s, position %d), want %s", got.Name, got.Status.Phase, got.Status.Reason, got.Status.Message, got.Status.QueuePosition, what)
		}
		return nil
	})
	return got
}

// TestBotIsBoundAndMirrorsItsSlot: a bot is routed to its platform's pool, bound to a free
// slot, and its status follows the slot until its container runs.
func TestBotIsBoundAndMirrorsItsSlot(t *testing.T) {
	sc := newScenario(t, "mirror", sim.Config{})
	sc.warm()
	idle := sc.phase(v1.SlotIdle)
	// No poolRef: the bot finds the zoom pool of its namespace by the URL's platform.
	bot := bt.MakeBot(sc.ns, "standup").MeetingURL("https://us02web.zoom.us/j/1").Obj()
	if err := env.Client.Create(context.Background(), bot); err != nil {
		t.Fatal(err)
	}
	b := waitBot(t, bot, "Deploying in the slot", func(b *v1.Bot) bool {
		return b.Status.Phase == v1.BotDeploying && b.Status.SlotName == idle.Name && b.Status.ApplicationUUID == idle.Status.ApplicationUUID
	})
	if b.Status.Pool != sc.pool.Name || b.Status.Platform != v1.PlatformZoom || b.Status.QueuedAt == nil {
		t.Errorf("status %+v: want the pool, the platform and the queue time", b.Status)
	}
	if !meta.IsStatusConditionTrue(b.Status.Conditions, v1.ConditionBound) {
		t.Errorf("Bound condition: %+v", b.Status.Conditions)
	}
	step(10 * time.Second)
	sc.deployed()
	waitBot(t, bot, "started", func(b *v1.Bot) bool { return b.Status.StartedAt != nil })
}

// TestQueueServesPriorityThenFIFO: with one slot, waiting bots are served by priority, then in
// the order they came, each as soon as the slot is free again.
func TestQueueServesPriorityThenFIFO(t *testing.T) {
	sc := newScenario(t, "order", sim.Config{})
	sc.warm()
	first, _ := sc.bind("first")
	prio := map[string]int32{"low": 0, "high": 10, "mid": 5, "low-later": 0, "negative": -3}
	var waiting []*v1.Bot
	for _, name := range []string{"low", "high", "mid", "low-later", "negative"} {
		waiting = append(waiting, newBot(t, sc.ns, name, sc.pool.Name, func(b *v1.Bot) { b.Spec.Priority = prio[name] }))
		waitBot(t, waiting[len(waiting)-1], "Queued", func(b *v1.Bot) bool { return b.Status.Phase == v1.BotQueued })
		step(time.Second) // distinct queue times
	}
	positions := map[string]int32{"high": 1, "mid": 2, "low": 3, "low-later": 4, "negative": 5}
	for _, b := range waiting {
		waitBot(t, b, fmt.Sprintf("at position %d", positions[b.Name]), func(got *v1.Bot) bool { return got.Status.QueuePosition == positions[b.Name] })
	}

	running := first
	for i, want := range []string{"high", "mid", "low", "low-later", "negative"} {
		if i == 2 { // by now the pool has a drain rate: the waiters get an estimate
			waitBot(t, waiting[4], "an estimated wait", func(b *v1.Bot) bool { return b.Status.EstimatedWait != nil && b.Status.EstimatedWait.Duration > 0 })
		}
		step(30 * time.Second) // each bot stays 30s
		finish(t, running)
		var next *v1.Bot
		for _, b := range waiting {
			if b.Name == want {
				next = b
			}
		}
		slotOf(t, next)
		for _, b := range waiting { // nobody behind it overtook it
			got := &v1.Bot{}
			if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(b), got); err != nil {
				t.Fatal(err)
			}
			if got.Status.Phase != v1.BotQueued && positions[got.Name] > positions[want] {
				t.Fatalf("%s was served before %s", got.Name, want)
			}
		}
		running = next
		checkInvariants(t, sc.ns)
	}
}

// TestQueueTimeout: a bot that waits longer than its queueTimeout ends Fatal/QueueTimeout; one
// with the pool's default keeps waiting.
func TestQueueTimeout(t *testing.T) {
	sc := newScenario(t, "timeout", sim.Config{})
	sc.bind("occupant")
	impatient := newBot(t, sc.ns, "impatient", sc.pool.Name, func(b *v1.Bot) { b.Spec.QueueTimeout = "1m" })
	patient := newBot(t, sc.ns, "patient", sc.pool.Name)
	waitBot(t, impatient, "Queued", func(b *v1.Bot) bool { return b.Status.Phase == v1.BotQueued })
	waitBot(t, patient, "Queued", func(b *v1.Bot) bool { return b.Status.Phase == v1.BotQueued })
	step(61 * time.Second)
	// The requeue at the deadline is real time; a touch makes the controller look now.
	touch(t, impatient)
	waitBot(t, impatient, "Fatal/bot.QueueTimeout", func(b *v1.Bot) bool {
		return b.Status.Phase == v1.BotFatal && b.Status.Reason == v1.ReasonQueueTimeout
	})
	touch(t, patient)
	time.Sleep(200 * time.Millisecond)
	waitBot(t, patient, "still Queued", func(b *v1.Bot) bool { return b.Status.Phase == v1.BotQueued })
}

// touch changes a label so the object (a bot, a slot) is reconciled now (its timers are
// real-time requeues, while the test moves the fake clock).
func touch(t *testing.T, obj client.Object) {
	t.Helper()
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"test/touched":"`+fmt.Sprint(time.Now().UnixNano())+`"}}}`))
	kubetest.Eventually(t, 10*time.Second, func() error {
		return env.Client.Patch(context.Background(), obj.DeepCopyObject().(client.Object), patch)
	})
}

// TestBotWithoutAPoolOfItsPlatform: a Google Meet bot in a namespace with only a Zoom pool is
// told so and never lands on a Zoom slot; a Google Meet pool then serves it.
func TestBotWithoutAPoolOfItsPlatform(t *testing.T) {
	sc := newScenario(t, "zoomonly", sim.Config{})
	sc.phase(v1.SlotIdle)
	bot := bt.MakeBot(sc.ns, "meet").MeetingURL("https://meet.google.com/abc-defg-hij").Obj()
	if err := env.Client.Create(context.Background(), bot); err != nil {
		t.Fatal(err)
	}
	b := waitBot(t, bot, "Pending without a pool", func(b *v1.Bot) bool {
		c := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionReady)
		return b.Status.Phase == v1.BotPending && c != nil && c.Reason == string(v1.ReasonPoolNotFound)
	})
	if c := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionReady); c.Message == "" {
		t.Error("no message says what to do")
	}
	if s := sc.phase(v1.SlotIdle); s.Spec.BotRef != nil {
		t.Fatal("a Google Meet bot was bound to a Zoom slot")
	}
	meet := newPool(sc.ns, "meet", func(p *v1.BotPool) { p.Spec.Platform, p.Spec.MaxSlots, p.Spec.MinIdle = v1.PlatformGoogleMeet, 1, 1 })
	connector.use("meet", sc.api)
	if err := env.Client.Create(context.Background(), meet); err != nil {
		t.Fatal(err)
	}
	waitBot(t, bot, "bound in the Google Meet pool", func(b *v1.Bot) bool {
		return b.Status.Pool == "meet" && b.Status.SlotName == "pool-google-meet-001"
	})
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), meet) })
}

// TestScheduledBotEntersTheQueueAtItsTime: on a pool without reservations, a bot with a
// startTime waits in Scheduled and joins the queue the schedule lead before it.
// (TestReservedBotWaitsForItsStart holds a bot in Scheduled until then, in single passes.)
func TestScheduledBotEntersTheQueueAtItsTime(t *testing.T) {
	sc := newScenario(t, "scheduled", sim.Config{}, func(p *v1.BotPool) {
		p.Spec.Reservations = &v1.ReservationPolicy{Mode: v1.ReservationsNone}
	})
	sc.phase(v1.SlotIdle)
	start := metav1.NewTime(clk.Now().Add(10 * time.Minute))
	bot := newBot(t, sc.ns, "later", sc.pool.Name, func(b *v1.Bot) { b.Spec.StartTime = &start })
	waitBot(t, bot, "Scheduled, with no reservation", func(b *v1.Bot) bool {
		return b.Status.Phase == v1.BotScheduled && meta.FindStatusCondition(b.Status.Conditions, v1.ConditionReserved) == nil
	})
	step(9*time.Minute + 30*time.Second) // within the one-minute lead of its start
	touch(t, bot)
	waitBot(t, bot, "bound", func(b *v1.Bot) bool { return b.Status.Phase == v1.BotDeploying && b.Status.SlotName != "" })
}

// TestCallbackIsDeliveredDespiteAFailingReceiver: a finished bot's callbackURL gets
// {bot, phase, reason}; a receiver that fails at first gets it on a retry, once; the Bot
// records the delivery in status.callback.
func TestCallbackIsDeliveredDespiteAFailingReceiver(t *testing.T) {
	var mu sync.Mutex
	var got []callback.Payload
	calls := 0
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var p callback.Payload
		_ = json.NewDecoder(r.Body).Decode(&p)
		got = append(got, p)
	}))
	defer receiver.Close()

	sc := newScenario(t, "callback", sim.Config{})
	sc.phase(v1.SlotIdle)
	bot := newBot(t, sc.ns, "reporting", sc.pool.Name, func(b *v1.Bot) { b.Spec.CallbackURL = receiver.URL + "/hook" })
	slotOf(t, bot)
	finish(t, bot)
	kubetest.Eventually(t, 15*time.Second, func() error {
		step(2 * time.Second) // the retry backoff runs on the fake clock
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 1 {
			return fmt.Errorf("%d deliveries after %d calls", len(got), calls)
		}
		return nil
	})
	mu.Lock()
	first := got[0]
	mu.Unlock()
	if first.Bot != "reporting" || first.Phase != string(v1.BotDone) || first.Namespace != sc.ns {
		t.Errorf("payload %+v", first)
	}
	// The notifier's outcome reaches the Bot through the controller (the manager's wiring).
	waitBot(t, bot, "callback recorded", func(b *v1.Bot) bool {
		c := b.Status.Callback
		return c != nil && c.State == v1.CallbackDelivered && c.Phase == v1.BotDone && c.Attempts == 3
	})
}

// running is a bot whose container runs: bound, its slot Busy, started.
func (sc *scenario) running(name string, mutate ...func(*v1.Bot)) (*v1.Bot, *v1.BotPoolSlot) {
	sc.t.Helper()
	sc.warm()
	sc.phase(v1.SlotIdle)
	bot := newBot(sc.t, sc.ns, name, sc.pool.Name, mutate...)
	slotOf(sc.t, bot)
	sc.phase(v1.SlotDeploying)
	step(10 * time.Second)
	slot := sc.deployed()
	waitBot(sc.t, bot, "started", func(b *v1.Bot) bool { return b.Status.StartedAt != nil })
	return bot, slot
}

func gone(t *testing.T, bot *v1.Bot) {
	t.Helper()
	kubetest.Eventually(t, 10*time.Second, func() error {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(bot), &v1.Bot{})
		if err == nil {
			return fmt.Errorf("bot %s still exists", bot.Name)
		}
		return client.IgnoreNotFound(err)
	})
}

// TestDeletingARunningBotLetsItLeave: a bot deleted mid-call is told to leave (Leaving), keeps
// its slot for leaveGracePeriod, then the slot is stopped and released and the bot goes.
func TestDeletingARunningBotLetsItLeave(t *testing.T) {
	sc := newScenario(t, "midcall", sim.Config{})
	bot, slot := sc.running("leaver")
	if err := env.Client.Delete(context.Background(), bot); err != nil {
		t.Fatal(err)
	}
	waitBot(t, bot, "Leaving", func(b *v1.Bot) bool { return b.Status.Phase == v1.BotLeaving })
	if s := sc.phase(v1.SlotBusy); s.Spec.BotRef == nil {
		t.Fatal("the slot was released before the bot had time to leave")
	}
	step(16 * time.Second) // past leaveGracePeriod
	touch(t, slot)         // the slot releases a deleted bot
	gone(t, bot)
	sc.slot("released and stopped", func(s *v1.BotPoolSlot) bool { return s.Status.Phase == v1.SlotIdle && s.Spec.BotRef == nil })
	step(5 * time.Second)
	if app, _ := sc.sim.App(slot.Status.ApplicationUUID); app.Running {
		t.Error("the container still runs")
	}
}

// TestDeletingADeployingBot: deleted while its slot deploys, the bot goes at once and the
// deployment is cancelled.
func TestDeletingADeployingBot(t *testing.T) {
	sc := newScenario(t, "middeploy", sim.Config{})
	bot, _ := sc.bind("hasty")
	sc.phase(v1.SlotDeploying)
	if err := env.Client.Delete(context.Background(), bot); err != nil {
		t.Fatal(err)
	}
	gone(t, bot)
	sc.slot("released", func(s *v1.BotPoolSlot) bool { return s.Status.Phase == v1.SlotIdle && s.Spec.BotRef == nil })
	pullers := sc.pullerApps() // the pool's image pre-pull deploys on its own
	for _, d := range sc.sim.Deployments() {
		if (d.Status == "queued" || d.Status == "in_progress") && !pullers[d.AppUUID] {
			t.Errorf("deployment %s still %s", d.UUID, d.Status)
		}
	}
}

// TestHeartbeatLossAndReturn (invariant 7): silence turns Alive False, the next beat turns it
// True again; a bot silent past heartbeatTimeout fails and its slot is released.
func TestHeartbeatLossAndReturn(t *testing.T) {
	sc := newScenario(t, "liveness", sim.Config{})
	bot, _ := sc.running("beating")
	alive := func(want metav1.ConditionStatus) {
		t.Helper()
		touch(t, bot)
		waitBot(t, bot, "Alive="+string(want), func(b *v1.Bot) bool {
			c := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionAlive)
			return c != nil && c.Status == want
		})
	}
	sc.beat(bot)
	alive(metav1.ConditionTrue)
	step(40 * time.Second)
	alive(metav1.ConditionFalse)
	if b := sc.bot(bot.Name); b.Status.LastHeartbeat == nil || b.Status.Phase.Terminal() {
		t.Errorf("silent bot: lastHeartbeat %v, phase %s", b.Status.LastHeartbeat, b.Status.Phase)
	}
	sc.beat(bot)
	alive(metav1.ConditionTrue)
	timeouts := suiteMetrics.BotsFailed.WithLabelValues(string(v1.ReasonHeartbeatTimeout))
	before := testutil.ToFloat64(timeouts)
	step(6 * time.Minute)
	touch(t, bot)
	waitBot(t, bot, "Fatal/HeartbeatTimeout", func(b *v1.Bot) bool {
		return b.Status.Phase == v1.BotFatal && b.Status.Reason == v1.ReasonHeartbeatTimeout
	})
	// botpool_bots_failed_total, which the chart's alerts watch, counted it. The reconciler
	// counts once its write returned, which may be after the write shows: wait for it.
	kubetest.Eventually(t, 15*time.Second, func() error {
		if got := testutil.ToFloat64(timeouts); got < before+1 {
			return fmt.Errorf("botpool_bots_failed_total{reason=HeartbeatTimeout} went from %v to %v, want one more", before, got)
		}
		return nil
	})
	sc.slot("released", func(s *v1.BotPoolSlot) bool { return s.Status.Phase == v1.SlotIdle && s.Spec.BotRef == nil })
}

// TestMaxDurationAndTTL: a bot past maxDuration plus leaveGracePeriod is ended; a finished bot
// with ttlAfterFinished is deleted when it expires.
func TestMaxDurationAndTTL(t *testing.T) {
	sc := newScenario(t, "bounded", sim.Config{})
	bot, _ := sc.running("long", func(b *v1.Bot) { b.Spec.MaxDuration, b.Spec.TTLAfterFinished = "2m", "10m" })
	sc.beat(bot)
	step(2*time.Minute + 16*time.Second)
	sc.beat(bot)
	touch(t, bot)
	waitBot(t, bot, "Fatal/MaxDuration", func(b *v1.Bot) bool {
		return b.Status.Phase == v1.BotFatal && b.Status.Reason == v1.ReasonMaxDuration
	})
	step(9 * time.Minute)
	touch(t, bot)
	time.Sleep(200 * time.Millisecond)
	waitBot(t, bot, "kept before its ttl", func(*v1.Bot) bool { return true })
	step(2 * time.Minute)
	touch(t, bot)
	gone(t, bot)
}

// TestRestartInTheMiddleOfBinding: the operator stops while a burst is being bound and a new
// one takes over: no slot leaks, no bot is bound twice, and the queue is served on.
func TestRestartInTheMiddleOfBinding(t *testing.T) {
	const slots, bots = 10, 40
	sc := newScenario(t, "restart", sim.Config{}, func(p *v1.BotPool) { p.Spec.MaxSlots, p.Spec.MinIdle = slots, slots })
	sc.warm()
	waitPhases(t, sc.ns, map[v1.SlotPhase]int{v1.SlotIdle: slots})
	var created []*v1.Bot
	for i := range bots {
		created = append(created, newBot(t, sc.ns, fmt.Sprintf("bot-%02d", i), sc.pool.Name))
		if i == bots/4 {
			restartManager(t) // some bound, some queued, some not even seen yet
		}
	}
	boundCount := func() int {
		n := 0
		for _, s := range listSlots(t, sc.ns) {
			if s.Spec.BotRef != nil {
				n++
			}
		}
		return n
	}
	// Deadlines here are for liveness only: on a loaded machine binding 40 bots across a
	// restart takes a while, and nothing below waits on real time to decide anything.
	kubetest.Eventually(t, 60*time.Second, func() error {
		checkInvariants(t, sc.ns)
		if n, total := boundCount(), len(listSlots(t, sc.ns)); n != slots || total != slots {
			return fmt.Errorf("%d of %d slots bound, want all %d", n, total, slots)
		}
		return nil
	})
	if apps := len(sc.sim.Apps()) - len(sc.pullerApps()); apps != slots {
		t.Errorf("%d slot applications in Coolify, want %d: one leaked", apps, slots)
	}
	var first []*v1.Bot // the bound ones, by the slots' botRef: the binding's truth
	for _, s := range listSlots(t, sc.ns) {
		if s.Spec.BotRef == nil {
			t.Fatalf("slot %s let its bot go before any finished", s.Name)
		}
		first = append(first, &v1.Bot{ObjectMeta: metav1.ObjectMeta{Namespace: sc.ns, Name: s.Spec.BotRef.Name, UID: s.Spec.BotRef.UID}})
	}
	// Served on: the bound ones finish, the next ten take their slots. They are chosen by the
	// slots, not by the bots' status.slotName: the bot controller mirrors that a moment later,
	// and a bound bot not mirrored yet was left running, so only 7 of 10 ever finished.
	step(10 * time.Second)
	for _, b := range first {
		finish(t, b)
	}
	kubetest.Eventually(t, 60*time.Second, func() error {
		checkInvariants(t, sc.ns)
		done := 0
		for _, b := range created {
			if sc.bot(b.Name).Status.Phase == v1.BotDone {
				done++
			}
		}
		if n := boundCount(); done != slots || n != slots {
			return fmt.Errorf("%d done and %d bound, want %d and %d", done, n, slots, slots)
		}
		return nil
	})
}
