package controllers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/botapi/botclient"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/internal/simbot"
	"botpool.dev/botpool/internal/slottoken"
)

// containers runs a simulated bot in every container the simulator starts, stops it when the
// simulator stops the container, and remembers what each container was given and served.
type containers struct {
	t  *testing.T
	b  simbot.Behaviour
	mu sync.Mutex
	// all in start order
	all  []*container
	errs []error
	// coolify, when set, is the simulator whose request count each bot's first report
	// snapshots (firstReport, by bot name): what the start path cost Coolify.
	coolify     *sim.Server
	firstReport map[string]int
}

// RoundTrip snapshots the Coolify request count when a bot's first status report leaves its
// container, then sends the request.
func (cs *containers) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/status") {
		bot := path.Base(path.Dir(req.URL.Path))
		cs.mu.Lock()
		if _, seen := cs.firstReport[bot]; !seen && cs.coolify != nil {
			cs.firstReport[bot] = len(cs.coolify.Requests())
		}
		cs.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(req)
}

type container struct {
	sim.Container
	cancel context.CancelFunc
	done   chan struct{}
	res    simbot.Result
	err    error
}

func newContainers(t *testing.T, b simbot.Behaviour) *containers {
	cs := &containers{t: t, b: b, firstReport: map[string]int{}}
	cs.b.HTTPClient = &http.Client{Timeout: 10 * time.Second, Transport: cs}
	t.Cleanup(cs.stopAll)
	return cs
}

func (cs *containers) hooks() sim.Hooks {
	return sim.Hooks{OnStart: cs.start, OnStop: cs.stop}
}

func (cs *containers) start(c sim.Container) {
	if simbot.IsPrePull(c) {
		return // a pool's image pre-pull: no slot, no bot
	}
	ctx, cancel := context.WithCancel(context.Background())
	ct := &container{Container: c, cancel: cancel, done: make(chan struct{})}
	cs.mu.Lock()
	cs.all = append(cs.all, ct)
	cs.mu.Unlock()
	go func() {
		defer close(ct.done)
		res, err := simbot.Run(ctx, c, cs.b)
		cs.mu.Lock()
		defer cs.mu.Unlock()
		ct.res, ct.err = res, err
		// Stopped (cancelled), or told its bot is over (410) or its credential no longer holds
		// (401, 403 once the binding ended), or a report the operator moved past (409: the
		// bot was deleted and is Leaving):
		// what a container meets when the operator ends things; anything else is a defect.
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, botclient.ErrUnauthorized) &&
			!errors.Is(err, botclient.ErrForbidden) && !errors.Is(err, botclient.ErrGone) && !errors.Is(err, botclient.ErrConflict) {
			cs.errs = append(cs.errs, fmt.Errorf("container %d of %s: %w", c.Seq, c.AppName, err))
		}
	}()
}

// stop ends the simulated bot of every running container of the application: the simulator
// stopped or replaced it.
func (cs *containers) stop(c sim.Container) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, ct := range cs.all {
		if ct.AppUUID == c.AppUUID && ct.Seq < c.Seq {
			ct.cancel()
		}
	}
}

func (cs *containers) stopAll() {
	cs.mu.Lock()
	all := append([]*container(nil), cs.all...)
	cs.mu.Unlock()
	for _, ct := range all {
		ct.cancel()
		<-ct.done
	}
}

// check fails the test on an error a container met.
func (cs *containers) check() {
	cs.t.Helper()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, err := range cs.errs {
		cs.t.Fatal(err)
	}
}

// served returns the containers that ran bot, with the result of those that ended.
func (cs *containers) served(bot string) []*container {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var out []*container
	for _, ct := range cs.all {
		if ct.res.Bot == bot {
			out = append(out, ct)
		}
	}
	return out
}

func (cs *containers) list() []*container {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return append([]*container(nil), cs.all...)
}

// standbyReady waits until the pool's only slot is Idle with a Ready standby container,
// moving the fake clock a little at a time: its deployment finishes and its container asks.
func (sc *scenario) standbyReady() *v1.BotPoolSlot {
	sc.t.Helper()
	return sc.slot("Idle with a Ready standby container", func(s *v1.BotPoolSlot) bool {
		if s.Status.Phase == v1.SlotIdle && s.Status.Standby == v1.StandbyReady && s.Spec.BotRef == nil {
			return true
		}
		sc.advance()
		if debugStandby {
			sc.t.Logf("now %s slot %s/%s %q dep=%s deps=%+v", clk.Now().Format("15:04:05.000"), s.Status.Phase, s.Status.Standby, s.Status.Message, s.Status.DeploymentUUID, sc.sim.Deployments())
		}
		return false
	})
}

var debugStandby = false

// advance moves the fake clock on by a second, paced, while one of the scenario's slots waits
// for Coolify's time (a deployment), and leaves it alone otherwise. What standby containers do
// happens in real time — they ask, the bot API answers, they ask again when a long-poll ends —
// and a fake clock run ahead of them (Eventually looks every 10 ms) would age their asks past
// the ask window and make Ready slots Lost: the test would see its own haste. The pool's
// image pre-pull is Coolify's time too (pullTime).
func (sc *scenario) advance() {
	for _, s := range listSlots(sc.t, sc.ns) {
		if s.Status.Phase == v1.SlotDeploying {
			step(time.Second)
			return
		}
	}
	sc.pullTime()
}

// TestStandbySlotLifecycle: a free slot of a Running pool keeps a container that asks for
// work; a bot bound to it starts with no Coolify request between its creation and its first
// report; after the bot the slot gets a fresh container with a fresh credential, which never
// sees the earlier bot, and is Ready again once that container asks.
func TestStandbySlotLifecycle(t *testing.T) {
	cs := newContainers(t, simbot.Behaviour{MeetingLength: 50 * time.Millisecond, HeartbeatEvery: 10 * time.Millisecond, PollEvery: 20 * time.Millisecond})
	sc := newScenario(t, "standby", sim.Config{Hooks: cs.hooks()}, func(p *v1.BotPool) {
		p.Spec.Standby = v1.StandbyRunning
	})
	sc.warm()
	cs.mu.Lock()
	cs.coolify = sc.sim
	cs.mu.Unlock()

	first := sc.standbyReady()
	cs.check()
	if first.Status.StandbySince == nil || first.Status.DeploymentUUID == "" {
		t.Fatalf("a Ready standby slot records its container's deployment and since when: %+v", first.Status)
	}
	// Time passes within the ask window (the container asked once, and waits on its
	// long-poll): the slot stays Ready on that ask. (It once compared the ask with the time it
	// turned Ready, and every Ready slot was Lost a second later.)
	for range 3 {
		step(15 * time.Second)
	}
	if still := sc.slot("still Ready", func(*v1.BotPoolSlot) bool { return true }); still.Status.Standby != v1.StandbyReady ||
		still.Status.DeploymentUUID != first.Status.DeploymentUUID {
		t.Fatalf("a Ready slot whose container asked 45 s ago (the ask window is 75 s) became %s (%s)", still.Status.Standby, still.Status.Message)
	}

	// The start path: the fake clock stands still, so nothing but the binding itself can
	// make the operator call Coolify; it must not.
	before := len(sc.sim.Requests())
	bot := newBot(t, sc.ns, "standup", sc.pool.Name)
	kubetest.Eventually(t, 15*time.Second, func() error {
		cs.check()
		if b := sc.bot(bot.Name); b.Status.StartedAt == nil {
			sl := listSlots(t, sc.ns)[0]
			return fmt.Errorf("bot %s has not reported yet (%s); slot %s/%s bound %v: %s; %s; now %s", b.Name, b.Status.Phase, sl.Status.Phase, sl.Status.Standby, sl.Spec.BotRef != nil, sl.Status.Message, trail(t, sc.ns, sl.Name), clk.Now().Format("15:04:05.000"))
		}
		return nil
	})
	cs.mu.Lock()
	atReport, reported := cs.firstReport[bot.Name]
	cs.mu.Unlock()
	if !reported {
		t.Fatal("the bot's first report did not go through the containers' transport")
	}
	// The pool's read of its servers' capacity (GET /servers, once a minute of the clock per
	// user) is no part of the start: the pass the binding wakes may find it due.
	var reqs []sim.Request
	for _, r := range sc.sim.Requests()[before:atReport] {
		if r.Op != "list-servers" {
			reqs = append(reqs, r)
		}
	}
	if len(reqs) != 0 {
		t.Fatalf("the start on a standby slot sent Coolify %d requests before the bot's first report: %+v", len(reqs), reqs)
	}
	// The bot ends: the slot's credential is replaced and a fresh container deployed.
	kubetest.Eventually(t, 15*time.Second, func() error {
		cs.check()
		// A container records whom it served as its run returns, a moment after the bot's Done.
		if b := sc.bot(bot.Name); b.Status.Phase != v1.BotDone || len(cs.served(bot.Name)) == 0 {
			return fmt.Errorf("bot %s is %s, served by %d containers", b.Name, b.Status.Phase, len(cs.served(bot.Name)))
		}
		return nil
	})
	second := sc.standbyReady()
	cs.check()
	if second.Status.TokenSHA256 == first.Status.TokenSHA256 {
		t.Fatal("the fresh container got the credential of the container before it")
	}
	if second.Status.DeploymentUUID == first.Status.DeploymentUUID {
		t.Fatal("the slot is Ready again without a fresh deployment")
	}
	served := cs.served(bot.Name)
	if len(served) != 1 {
		t.Fatalf("bot %s was served by %d containers, want 1", bot.Name, len(served))
	}
	old := served[0]
	var fresh *container
	for _, ct := range cs.list() {
		if ct.Seq > old.Seq && ct.AppUUID == old.AppUUID {
			fresh = ct
		}
	}
	if fresh == nil {
		t.Fatal("no container started after the one that served the bot")
	}
	if fresh.Env["BOTPOOL_SLOT_TOKEN"] == old.Env["BOTPOOL_SLOT_TOKEN"] {
		t.Fatal("the fresh container's env holds the earlier container's credential")
	}
	if slottoken.Hash([]byte(fresh.Env["BOTPOOL_SLOT_TOKEN"])) != second.Status.TokenSHA256 {
		t.Fatal("the fresh container does not hold the credential the slot records")
	}
	// The earlier container's credential is refused: whatever a meeting left running in it
	// cannot claim the next bot or make the slot look Ready.
	cl := botclient.New(old.Env["BOTPOOL_API_URL"], old.AppUUID, old.Env["BOTPOOL_SLOT_TOKEN"], &http.Client{Timeout: 5 * time.Second})
	if _, err := cl.Config(context.Background()); !errors.Is(err, botclient.ErrUnauthorized) {
		t.Fatalf("the earlier container's credential on config: %v, want 401", err)
	}
	// The next bot starts on the fresh container, which never saw the first.
	next := newBot(t, sc.ns, "retro", sc.pool.Name)
	kubetest.Eventually(t, 15*time.Second, func() error {
		cs.check()
		if b := sc.bot(next.Name); b.Status.Phase != v1.BotDone || len(cs.served(next.Name)) == 0 {
			sl := listSlots(t, sc.ns)[0]
			return fmt.Errorf("bot %s is %s (%s); slot %s/%s rv %s bound %v: %s; %s", b.Name, b.Status.Phase, b.Status.Message, sl.Status.Phase, sl.Status.Standby, sl.ResourceVersion, sl.Spec.BotRef != nil, sl.Status.Message, trail(t, sc.ns, sl.Name))
		}
		return nil
	})
	if got := cs.served(next.Name); len(got) != 1 || got[0].Seq != fresh.Seq {
		t.Fatalf("bot %s was served by %d containers, want the fresh one alone", next.Name, len(got))
	}
	// The audit log shows the way each bot took: bound on a Ready slot, Busy on its first
	// report, no deployment in between; the fresh container deployed after the release.
	sc.standbyReady() // and the second recycle's moves are recorded
	trail, err := liveStore.Transitions(context.Background(), sc.ns, second.Name)
	if err != nil {
		t.Fatal(err)
	}
	var moves []string
	for _, tr := range trail {
		moves = append(moves, tr.From+">"+tr.To)
	}
	want := []string{">Creating", "Creating>Idle", "Idle>Deploying", "Deploying>Idle", "Idle>Busy", "Busy>Releasing", "Releasing>Idle",
		"Idle>Deploying", "Deploying>Idle", "Idle>Busy", "Busy>Releasing", "Releasing>Idle"}
	if fmt.Sprint(moves[:min(len(want), len(moves))]) != fmt.Sprint(want) {
		t.Fatalf("slot transitions %v, want %v", moves, want)
	}
}

// freeze stops the simulated bots of the application's running containers without the
// simulator knowing: the container hangs, or cannot reach the bot API any more.
func (cs *containers) freeze(app string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, ct := range cs.all {
		if ct.AppUUID == app {
			ct.cancel()
		}
	}
}

// TestStandbyContainerThatStopsAsking: a Ready slot whose container stopped asking for work
// (it hangs, or cannot reach the bot API) is not offered any more and gets a fresh container;
// no bot is involved, none fails.
func TestStandbyContainerThatStopsAsking(t *testing.T) {
	cs := newContainers(t, simbot.Behaviour{PollEvery: 20 * time.Millisecond})
	sc := newScenario(t, "standbycrash", sim.Config{Hooks: cs.hooks()}, func(p *v1.BotPool) {
		p.Spec.Standby = v1.StandbyRunning
	})
	sc.warm()
	first := sc.standbyReady()
	cs.freeze(first.Status.ApplicationUUID)
	lost := sc.slot("Lost", func(s *v1.BotPoolSlot) bool {
		if s.Status.Standby == v1.StandbyLost || s.Status.Phase == v1.SlotDeploying {
			return true
		}
		clk.Step(5 * time.Second)
		return false
	})
	if policy.IsFree(lost) {
		t.Fatalf("a slot whose container stopped asking is offered to bots: %+v", lost.Status)
	}
	again := sc.standbyReady()
	cs.check()
	if again.Status.DeploymentUUID == first.Status.DeploymentUUID {
		t.Fatal("Ready again without a fresh deployment")
	}
	if again.Status.TokenSHA256 != first.Status.TokenSHA256 {
		// A container that served no bot leaves nothing to hide: no new credential is needed.
		t.Log("credential replaced after a lost standby container")
	}
}

// TestStandbyContainerGoneAfterItsBinding: a bot bound to a Ready slot whose container hangs
// before taking it fails with StandbyLost after the ask window (it was never started: it may
// be created again), and the slot gets a fresh container with a fresh credential.
func TestStandbyContainerGoneAfterItsBinding(t *testing.T) {
	cs := newContainers(t, simbot.Behaviour{PollEvery: 20 * time.Millisecond})
	sc := newScenario(t, "standbyhang", sim.Config{Hooks: cs.hooks()}, func(p *v1.BotPool) {
		p.Spec.Standby = v1.StandbyRunning
		p.Spec.MaxStartAttempts = 1 // the failure itself; its retry: TestStartRetriedOnAStandbyPool
	})
	sc.warm()
	first := sc.standbyReady()
	cs.freeze(first.Status.ApplicationUUID)
	bot := newBot(t, sc.ns, "orphaned", sc.pool.Name)
	slotOf(t, bot)
	kubetest.Eventually(t, 30*time.Second, func() error {
		b := sc.bot(bot.Name)
		if b.Status.Phase == v1.BotFatal {
			return nil
		}
		clk.Step(5 * time.Second)
		sl := listSlots(t, sc.ns)[0]
		return fmt.Errorf("bot %s is %s; slot %s/%s: %s", b.Name, b.Status.Phase, sl.Status.Phase, sl.Status.Standby, sl.Status.Message)
	})
	sc.botFails(bot.Name, string(v1.ReasonStandbyLost))
	if got := sc.bot(bot.Name); got.Status.StartedAt != nil {
		t.Fatalf("a bot its container never took has a startedAt: %+v", got.Status)
	}
	again := sc.standbyReady()
	if again.Status.TokenSHA256 == first.Status.TokenSHA256 {
		t.Fatal("the slot's credential survived a binding that failed")
	}
}

// TestStandbyPoolSwitchedToStopped: a pool switched from Running to Stopped stops its free
// slots' containers at once and lets a running bot finish; switched back, its free slots get
// standby containers again.
func TestStandbyPoolSwitchedToStopped(t *testing.T) {
	cs := newContainers(t, simbot.Behaviour{MeetingLength: time.Hour, HeartbeatEvery: 10 * time.Millisecond, PollEvery: 20 * time.Millisecond})
	sc := newScenario(t, "standbyswitch", sim.Config{Hooks: cs.hooks()}, func(p *v1.BotPool) {
		p.Spec.Standby = v1.StandbyRunning
		p.Spec.MaxSlots, p.Spec.MinIdle = 2, 1
	})
	sc.warm()
	ready := func(n int) {
		t.Helper()
		kubetest.Eventually(t, 30*time.Second, func() error {
			got := 0
			for _, s := range listSlots(t, sc.ns) {
				if s.Status.Standby == v1.StandbyReady && s.Spec.BotRef == nil {
					got++
				}
			}
			if got < n {
				sc.advance()
				return fmt.Errorf("%d free slots Ready, want %d", got, n)
			}
			return nil
		})
	}
	ready(1)
	bot := newBot(t, sc.ns, "longcall", sc.pool.Name)
	kubetest.Eventually(t, 15*time.Second, func() error {
		if b := sc.bot(bot.Name); b.Status.Phase != v1.BotInCall {
			return fmt.Errorf("bot %s is %s", b.Name, b.Status.Phase)
		}
		return nil
	})
	ready(1) // minIdle: a second slot is created and warmed

	setStandby := func(m v1.StandbyMode) {
		t.Helper()
		kubetest.Eventually(t, 10*time.Second, func() error {
			p := &v1.BotPool{}
			if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(sc.pool), p); err != nil {
				return err
			}
			p.Spec.Standby = m
			return env.Client.Update(context.Background(), p)
		})
	}
	setStandby(v1.StandbyStopped)
	kubetest.Eventually(t, 30*time.Second, func() error {
		for _, s := range listSlots(t, sc.ns) {
			if s.Spec.BotRef != nil {
				continue
			}
			app, ok := sc.sim.App(s.Status.ApplicationUUID)
			if s.Status.Standby != "" || !ok || app.Running {
				step(250 * time.Millisecond) // the stop takes a moment of Coolify's time
				return fmt.Errorf("free slot %s: standby %q, container running %v", s.Name, s.Status.Standby, app.Running)
			}
		}
		return nil
	})
	if b := sc.bot(bot.Name); b.Status.Phase != v1.BotInCall {
		t.Fatalf("the running bot was disturbed by the switch: %s", b.Status.Phase)
	}
	if err := env.Client.Delete(context.Background(), bot); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 30*time.Second, func() error {
		for _, s := range listSlots(t, sc.ns) {
			if s.Spec.BotRef != nil || s.Status.Phase != v1.SlotIdle || s.Status.Standby != "" {
				step(250 * time.Millisecond) // the bot's leave and the stop take Coolify's time
				return fmt.Errorf("slot %s is %s, standby %q, bound %v", s.Name, s.Status.Phase, s.Status.Standby, s.Spec.BotRef != nil)
			}
		}
		return nil
	})
	setStandby(v1.StandbyRunning)
	ready(2)
	cs.check()
}

// TestStandbyRecycleThatFails: the deployment of a fresh container after a bot fails (its
// pull); the bot, already Done, is not affected, and the slot recovers to a Ready container
// with yet another credential.
func TestStandbyRecycleThatFails(t *testing.T) {
	cs := newContainers(t, simbot.Behaviour{MeetingLength: 20 * time.Millisecond, HeartbeatEvery: 10 * time.Millisecond, PollEvery: 20 * time.Millisecond})
	sc := newScenario(t, "standbyfail", sim.Config{Hooks: cs.hooks()}, func(p *v1.BotPool) {
		p.Spec.Standby = v1.StandbyRunning
	})
	sc.warm()
	first := sc.standbyReady()
	sc.sim.FailPulls(sc.pool.Spec.Image, 1)
	bot := newBot(t, sc.ns, "brief", sc.pool.Name)
	failed := sc.slot("Error after the recycle's failed pull", func(s *v1.BotPoolSlot) bool {
		if s.Status.Phase == v1.SlotError || s.Status.RecoveryAttempts > 0 {
			return true
		}
		sc.advance()
		return false
	})
	if failed.Status.Reason != "" && failed.Status.Reason != string(v1.ReasonDeploymentFailed) {
		t.Errorf("the failed recycle's reason is %q, want %s", failed.Status.Reason, v1.ReasonDeploymentFailed)
	}
	if b := sc.bot(bot.Name); b.Status.Phase != v1.BotDone {
		t.Fatalf("a failed recycle touched the bot before it: %s (%s)", b.Status.Phase, b.Status.Reason)
	}
	again := sc.standbyReady()
	cs.check()
	if again.Status.TokenSHA256 == first.Status.TokenSHA256 {
		t.Fatal("the container after the failed recycle got the bot's container's credential")
	}
}

// TestStandbyAcrossAManagerRestart: Ready standby slots stay Ready across a restart of the
// manager (no redeploy), and bots start on them after it without a deployment.
func TestStandbyAcrossAManagerRestart(t *testing.T) {
	const slots = 3
	cs := newContainers(t, simbot.Behaviour{MeetingLength: 20 * time.Millisecond, HeartbeatEvery: 10 * time.Millisecond, PollEvery: 20 * time.Millisecond})
	sc := newScenario(t, "standbyrestart", sim.Config{Hooks: cs.hooks()}, func(p *v1.BotPool) {
		p.Spec.Standby = v1.StandbyRunning
		p.Spec.MaxSlots, p.Spec.MinIdle = slots, slots
	})
	sc.warm()
	readySlots := func() map[string]string {
		t.Helper()
		deployed := map[string]string{}
		kubetest.Eventually(t, 30*time.Second, func() error {
			clear(deployed)
			for _, s := range listSlots(t, sc.ns) {
				if s.Status.Standby == v1.StandbyReady && s.Spec.BotRef == nil {
					deployed[s.Name] = s.Status.DeploymentUUID
				}
			}
			if len(deployed) < slots {
				sc.advance()
				return fmt.Errorf("%d free slots Ready, want %d", len(deployed), slots)
			}
			return nil
		})
		return deployed
	}
	before := readySlots()
	deploys := len(sc.sim.Deployments())
	restartManager(t)
	after := readySlots()
	if fmt.Sprint(after) != fmt.Sprint(before) || len(sc.sim.Deployments()) != deploys {
		for name := range before {
			t.Logf("slot %s: %s", name, trail(t, sc.ns, name))
		}
		t.Fatalf("a restart redeployed Ready standby slots: %v, then %v (%d deployments, then %d)", before, after, deploys, len(sc.sim.Deployments()))
	}
	var bots []*v1.Bot
	for i := range slots {
		bots = append(bots, newBot(t, sc.ns, fmt.Sprintf("after-restart-%d", i), sc.pool.Name))
	}
	kubetest.Eventually(t, 30*time.Second, func() error {
		cs.check()
		for _, b := range bots {
			if got := sc.bot(b.Name); got.Status.Phase != v1.BotDone || len(cs.served(b.Name)) == 0 {
				return fmt.Errorf("bot %s is %s", b.Name, got.Status.Phase)
			}
		}
		return nil
	})
	for _, b := range bots {
		if n := len(cs.served(b.Name)); n != 1 {
			t.Errorf("bot %s was served by %d containers, want 1", b.Name, n)
		}
	}
}

// TestStandbyBotDeletedWhileItsContainerClaims: a bot deleted right after its binding, while
// its standby container takes it, ends; its slot gets a fresh container with a fresh
// credential (the bot's container, told to leave, cannot take the next bot).
func TestStandbyBotDeletedWhileItsContainerClaims(t *testing.T) {
	cs := newContainers(t, simbot.Behaviour{MeetingLength: time.Hour, HeartbeatEvery: 10 * time.Millisecond, PollEvery: 20 * time.Millisecond})
	sc := newScenario(t, "standbydelete", sim.Config{Hooks: cs.hooks()}, func(p *v1.BotPool) {
		p.Spec.Standby = v1.StandbyRunning
	})
	sc.warm()
	first := sc.standbyReady()
	bot := newBot(t, sc.ns, "cancelled", sc.pool.Name)
	slotOf(t, bot)
	if err := env.Client.Delete(context.Background(), bot); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 30*time.Second, func() error {
		b := &v1.Bot{}
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(bot), b)
		if err == nil {
			step(250 * time.Millisecond) // its leave grace runs on the fake clock
			return fmt.Errorf("bot %s still there (%s)", b.Name, b.Status.Phase)
		}
		return client.IgnoreNotFound(err)
	})
	again := sc.standbyReady()
	cs.check()
	if again.Status.TokenSHA256 == first.Status.TokenSHA256 {
		t.Fatal("the slot kept the credential of the container that took the deleted bot")
	}
	if n := len(cs.served(bot.Name)); n > 1 {
		t.Fatalf("the deleted bot was served by %d containers", n)
	}
}

// trail is a slot's audit log in one line, for failure messages.
func trail(t *testing.T, ns, slot string) string {
	trs, err := liveStore.Transitions(context.Background(), ns, slot)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, tr := range trs {
		fmt.Fprintf(&b, "%s>%s(%s)@%s ", tr.From, tr.To, tr.Reason, tr.At.Format("15:04:05.000"))
	}
	return b.String()
}
