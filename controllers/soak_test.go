package controllers

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/bot"
	poolctrl "botpool.dev/botpool/controllers/pool"
	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/internal/pgtest"
	"botpool.dev/botpool/store/postgres"
)

var (
	soakBotsFlag     = flag.Int("soak.bots", 0, "bots in TestSoak (default 150; 1000 with BOTPOOL_SOAK=long)")
	soakDurationFlag = flag.Duration("soak.duration", 0, "simulated length of TestSoak's chaos phase (default 2h; 24h with BOTPOOL_SOAK=long)")
	soakSeedFlag     = flag.Uint64("soak.seed", 0, "seed of TestSoak's schedule (default random, printed; or BOTPOOL_SOAK_SEED)")
)

const (
	// soakInterval is what one step moves the clock: the design's deploymentPollInterval. The
	// pool must converge within two of them once the faults stop.
	soakInterval = v1.DefaultDeploymentPollInterval
	// soakPause is the real time the controllers get per step (they poll every 20ms).
	soakPause = 50 * time.Millisecond
	// Every soakRoundEvery steps the invariants are checked, and the objects whose timers are
	// due are touched: their timers are real-time requeues while the clock jumps (see nudge).
	soakRoundEvery = 4
	// soakGrace is how long a state legal only in passing may last (real time).
	soakGrace = 5 * time.Second
	// soakSettleWait is the real time the controllers get, with the clock still, once the
	// two intervals of convergence have passed: their timers (a retried stop, a recovery's
	// backoff) are real-time requeues of at most 30s.
	soakSettleWait = 45 * time.Second
	// soakProgressEvery steps (a simulated hour) the run logs where it stands.
	soakProgressEvery = int(time.Hour / soakInterval)
)

// soakConfig sizes a soak.
type soakConfig struct {
	bots              int
	chaos             time.Duration // simulated time of the chaos phase
	maxSlots, minIdle int32         // of the two pools together
	restarts          int           // manager restarts during the chaos
	seed              uint64
}

func soakConfigFor(t *testing.T) soakConfig {
	cfg := soakConfig{bots: 150, chaos: 2 * time.Hour, maxSlots: 10, minIdle: 2, restarts: 5}
	if os.Getenv("BOTPOOL_SOAK") == "long" {
		cfg = soakConfig{bots: 1000, chaos: 24 * time.Hour, maxSlots: 20, minIdle: 3, restarts: 30}
	}
	if *soakBotsFlag > 0 {
		cfg.bots = *soakBotsFlag
	}
	if *soakDurationFlag > 0 {
		cfg.chaos = *soakDurationFlag
	}
	cfg.seed = *soakSeedFlag
	if s := os.Getenv("BOTPOOL_SOAK_SEED"); s != "" && cfg.seed == 0 {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("BOTPOOL_SOAK_SEED=%q: %v", s, err)
		}
		cfg.seed = n
	}
	if cfg.seed == 0 {
		cfg.seed = rand.Uint64()
	}
	return cfg
}

// TestSoak is the soak and chaos test. Bots arrive at two pools, alone and in bursts, over
// hours of simulated time — one pool with standby Stopped (a bot's start is a deployment),
// one with standby Running (a free slot keeps a container that waits for its binding on the
// bot API's long-poll), both spread over two simulated Coolify servers — and are served by
// simulated bot containers that speak only the bot API, while the Coolify simulator answers 20%
// of requests with errors (some after doing the work), throws bursts of 429, latency spikes,
// outages, failed pulls and crashing or crash-looping containers, and takes one server out
// now and then (unreachable, unusable, or rebooted without its containers: the starts it
// catches must be retried on the other server, not failed; see soak_servers_test.go); the manager is stopped and started again at random moments, and the Postgres
// behind the liveness store is stopped for minutes once and started again. Users delete some
// bots mid-call. Throughout, the design's invariants are checked every few steps. Then the
// faults stop and the pool must converge within two intervals; the remaining bots are
// drained, every slot must end Idle with its container stopped (a standby pool's: Ready, on
// a container that waits for work), every application must
// belong to a slot, the Postgres projection must match, and every failed bot must have a
// cause the soak injected. The counts are logged; any violation fails the test.
//
// The schedule (arrivals, faults, restarts) follows the printed seed: BOTPOOL_SOAK_SEED (or
// -soak.seed) replays it, though not the interleaving of goroutines. BOTPOOL_SOAK=long (make
// soak), -soak.bots and -soak.duration make it longer.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("the soak takes a minute")
	}
	cfg := soakConfigFor(t)
	steps := int(cfg.chaos / soakInterval)
	// The slots are shared between two pools, one with standby Stopped and one with standby
	// Running: the operator, the simulator and the machine carry the load of one pool of
	// maxSlots, and both modes are soaked in every run.
	maxSlots, minIdle := cfg.maxSlots/2, max(1, cfg.minIdle/2)
	t.Logf("soak: seed %d (replay with BOTPOOL_SOAK_SEED=%d), %d bots over %s simulated (%d steps) on two pools (standby Stopped and Running) over two servers, maxSlots %d, minIdle %d each",
		cfg.seed, cfg.seed, cfg.bots, cfg.chaos, steps, maxSlots, minIdle)
	wallStart := time.Now()
	s := &soak{t: t, cfg: cfg, rng: rand.New(rand.NewPCG(cfg.seed, 0x50a4)), episodes: map[string]int{}, wall: map[string]time.Duration{},
		findings: &soakFindings{t: t}}
	s.startPostgres()

	meetingRNG := rand.New(rand.NewPCG(cfg.seed, 0xb075))
	var meetingMu sync.Mutex
	s.bots = newSoakBots(func() (time.Duration, time.Duration) {
		meetingMu.Lock()
		defer meetingMu.Unlock()
		// Real time: 0.3–2.5s is 5 to 40 steps, about 1 to 10 simulated minutes.
		return 300*time.Millisecond + time.Duration(meetingRNG.Int64N(int64(2200*time.Millisecond))),
			time.Duration(meetingRNG.Int64N(int64(100 * time.Millisecond)))
	})
	s.sc = newScenario(t, "soak", sim.Config{Hooks: s.bots.hooks()}, func(p *v1.BotPool) {
		p.Spec.MaxSlots, p.Spec.MinIdle = maxSlots, minIdle
	})
	t.Cleanup(s.bots.close)
	// Both pools spread over two servers (the chaos takes one out now and then: see
	// soak_servers_test.go); the Stopped pool's servers hold a bit more than half its slots
	// each (invariant 13), the standby pool's are unbounded.
	s.servers = []string{fixture.ServerUUID, s.sc.sim.AddServer(sim.ServerSpec{UUID: "srv-2", Name: "soak-2"})}
	s.sc.updatePool(func(p *v1.BotPool) {
		p.Spec.Coolify.ServerUUID, p.Spec.Coolify.Servers = "", soakServerSpecs(s.servers, maxSlots, true)
	})
	s.sc.pool = s.sc.poolNow()
	for _, srv := range s.servers {
		s.sc.sim.WarmImage(srv, s.sc.pool.Spec.Image, s.sc.pool.Spec.ImageTag)
	}
	// Retries and backoffs of the pool's Coolify client run on the fake clock too, so a retried
	// request costs simulated time, as it would cost real time in production.
	api, err := coolify.New(s.sc.sim.URL, sim.DefaultToken, coolify.WithClock(clk), coolify.WithLimiter(coolify.NewLimiter(0)))
	if err != nil {
		t.Fatal(err)
	}
	s.addLane(s.sc, api)
	// The second pool keeps standby containers (spec.standby Running), on the same simulated
	// Coolify servers: both pools share their deployment slots, faults, crashes and outages.
	s.addLane(s.poolOnSim("soak-standby", func(p *v1.BotPool) {
		p.Spec.MaxSlots, p.Spec.MinIdle = maxSlots, minIdle
		p.Spec.Coolify.ServerUUID, p.Spec.Coolify.Servers = "", soakServerSpecs(s.servers, maxSlots, false)
		p.Spec.Standby = v1.StandbyRunning
		// A Ready slot looks at its container's asks every poll: at the suite's 20ms, ten of
		// them would read the store 500 times a second of real time, for no more than what
		// every 100ms (1 to 2 steps, within the 75s ask window) tells.
		p.Spec.Timing.DeploymentPollInterval = "100ms"
	}), api)
	// At rest before the first bot: the Stopped pool's free slots have no container, the
	// standby pool's have Ready ones (deployed on the clock, which settle steps).
	if _, err := s.settle(soakRestBudget, true); err != nil {
		t.Fatalf("the pools did not come to rest before the first bot: %v", err)
	}
	watchCtx, stopWatching := context.WithCancel(context.Background())
	var watchers sync.WaitGroup
	for _, l := range s.lanes {
		watchers.Go(func() { l.obs.watchBindings(watchCtx) })
	}
	defer func() { stopWatching(); watchers.Wait() }()

	panicsBefore := reconcilePanics(t)
	stopOneTwo := s.watchOneTwo()
	s.plan(steps)
	before := s.sc.sim.Counts()
	chaosStart := clk.Now()
	for step := range steps {
		for _, event := range s.events[step] {
			event()
		}
		s.timed("arrivals", func() { s.arrive(s.arrivals[step]) })
		s.deleteBots(s.deletions[step])
		s.step(step)
		if (step+1)%soakProgressEvery == 0 {
			s.progress(step + 1)
		}
	}
	chaos := requestCounts(before, s.sc.sim.Counts())
	chaosLength := clk.Since(chaosStart)

	// The faults stop: the pool converges within two intervals.
	s.faultsOff()
	took, err := s.settle(2*soakInterval, false)
	if err != nil {
		s.findings.violate("the pools did not converge within two intervals (%s) of the faults' end: %v", 2*soakInterval, err)
	}

	// The last bots finish; then everything is at rest and the store has caught up.
	drainStart := clk.Now()
	s.drain()
	drained := clk.Since(drainStart)
	if _, err := s.settle(soakRestBudget, true); err != nil {
		s.findings.violate("the pools did not come to rest after the last bot: %v", err)
	}
	for _, l := range s.lanes {
		s.checkProjection(l)
	}
	if err := stopOneTwo(); err != nil {
		s.findings.violate("%v", err)
	}
	if n := reconcilePanics(t) - panicsBefore; n > 0 {
		s.findings.violate("%v reconciles panicked (controller-runtime recovered them; the logs have the stacks)", n)
	}
	s.takeBreaches()
	s.reportRetries()
	reasons := map[string]int{}
	for _, l := range s.lanes {
		for r, n := range l.obs.explainFailures(soakInterval, s.outages) {
			reasons[r] += n
		}
	}
	s.report(chaos, chaosLength, took, drained, reasons, time.Since(wallStart))
}

// soakRestBudget is the simulated time the pools get to come to rest (every slot free, every
// standby slot Ready): two intervals, and the recycles of the standby pool's slots, which
// take a deployment each, two at a time on the simulated server.
const soakRestBudget = 2*soakInterval + 2*time.Minute

// soakLane is one pool of the soak, in a namespace of its own, on the shared simulator.
type soakLane struct {
	pool    *v1.BotPool
	ns      string
	obs     *soakObserver
	planned int // bots planned for it
}

// addLane adds a pool to the soak: its Coolify client and observer.
func (s *soak) addLane(sc *scenario, api coolify.API) {
	connector.use(sc.pool.Name, api)
	obs := newSoakObserver(s.t, sc.ns, sc.pool, sc.sim, s.bots, s.findings, soakGrace, soakRoundEvery*soakInterval+time.Minute)
	s.lanes = append(s.lanes, &soakLane{pool: sc.pool, ns: sc.ns, obs: obs})
}

// poolOnSim creates another pool, in a namespace of its own, on the soak's simulator.
func (s *soak) poolOnSim(name string, mutate func(*v1.BotPool)) *scenario {
	sc := &scenario{t: s.t, ns: env.Namespace(s.t), sim: s.sc.sim, api: s.sc.api}
	sc.pool = newPool(sc.ns, name, mutate)
	if err := env.Client.Create(context.Background(), sc.pool); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(sc.teardown)
	return sc
}

// takeBreaches reports what the containers saw of invariant 12 since the last call.
func (s *soak) takeBreaches() {
	for _, msg := range s.bots.takeBreaches() {
		s.findings.violate("%s", msg)
	}
}

// soak is one run: its plan, its world and what it counted.
type soak struct {
	t        *testing.T
	cfg      soakConfig
	rng      *rand.Rand
	sc       *scenario // the first pool's, with the simulator all pools share
	lanes    []*soakLane
	bots     *soakBots
	findings *soakFindings

	arrivals  map[int][]soakArrival
	deletions map[int][]soakArrival
	events    map[int][]func()

	pg         *pgtest.Server
	dsn        string
	store      *postgres.Store
	pgDown     bool
	pgDownAt   time.Time
	pgOutage   time.Duration
	pgRestarts int
	pgSawDown  bool
	pgBuffer   int

	servers []string      // the simulated Coolify servers both pools spread over
	outages []*soakOutage // the server outages planned, in order

	latency  time.Duration
	episodes map[string]int // faults injected, by kind
	restarts int
	deleted  int
	nudged   int
	wall     map[string]time.Duration // real time by activity
	created  int
}

type soakArrival struct {
	name         string
	lane         int // index in soak.lanes
	priority     int32
	queueTimeout string
}

// step moves the clock one interval once every live bot has beaten recently, gives the
// controllers their pause, and checks the invariants every few steps.
func (s *soak) step(n int) {
	s.timed("holding the clock for bots", func() { s.bots.hold(3*soakInterval, 2*time.Second) })
	clk.Step(soakInterval)
	time.Sleep(soakPause)
	if s.pgDown {
		st := s.store.Status()
		s.pgSawDown = s.pgSawDown || !st.Available
		s.pgBuffer = max(s.pgBuffer, st.Buffered)
	}
	if n%soakRoundEvery == 0 {
		s.timed("invariant rounds and nudges", func() {
			// The pools' rounds run side by side: each waits mostly on the API server.
			var wg sync.WaitGroup
			nudged := make([]int, len(s.lanes))
			for i, l := range s.lanes {
				wg.Go(func() {
					if snap, err := l.obs.snapshot(); err == nil { // a failed read proves nothing
						l.obs.check(snap)
						l.obs.checkClaims(snap)
						l.obs.checkServers(snap)
						l.obs.checkStarts(snap)
						nudged[i] = s.nudge(l, snap)
					}
				})
			}
			wg.Wait()
			for _, n := range nudged {
				s.nudged += n
			}
			s.takeBreaches()
		})
	}
}

// timed runs f and adds its real time to the run's account of where the time went.
func (s *soak) timed(what string, f func()) {
	start := time.Now()
	f()
	s.wall[what] += time.Since(start)
}

// progress logs where a long run stands, every simulated hour.
func (s *soak) progress(steps int) {
	phases := map[string]int{}
	ended := 0
	for _, l := range s.lanes {
		snap, err := l.obs.snapshot()
		if err != nil {
			return
		}
		for i := range snap.slots {
			st := &snap.slots[i].Status
			phases[l.pool.Name+" "+string(st.Phase)+standbySuffix(st.Standby)]++
		}
		for i := range snap.bots {
			if snap.bots[i].Status.Phase.Terminal() {
				ended++
			}
		}
	}
	s.t.Logf("%s simulated: %d bots created, %d ended; slots %s; %d restarts; %d violations",
		time.Duration(steps)*soakInterval, s.created, ended, countsString(phases), s.restarts, s.findings.count())
}

func standbySuffix(st v1.StandbyState) string {
	if st == "" {
		return ""
	}
	return "/" + string(st)
}

// arrive creates the step's bots, as users would, concurrently.
func (s *soak) arrive(bots []soakArrival) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, a := range bots {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			l := s.lanes[a.lane]
			newBot(s.t, l.ns, a.name, l.pool.Name, func(b *v1.Bot) {
				b.Spec.Priority = a.priority
				b.Spec.QueueTimeout = v1.Duration(a.queueTimeout)
			})
		}()
	}
	wg.Wait()
	s.created += len(bots)
}

// deleteBots deletes bots that have not ended: a user calling one back mid-call or mid-queue.
func (s *soak) deleteBots(bots []soakArrival) {
	ctx := context.Background()
	for _, a := range bots {
		b := &v1.Bot{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: s.lanes[a.lane].ns, Name: a.name}, b); err != nil || b.Status.Phase.Terminal() {
			continue
		}
		if err := env.Client.Delete(ctx, b); client.IgnoreNotFound(err) != nil {
			s.t.Fatal(err)
		}
		s.deleted++
	}
}

// nudge touches what waits on a timer that is due, as touch does in the other tests: the
// controllers' timers are real-time requeues while the clock moves an interval per step, so
// without it a queue timeout would fire minutes late in simulated time. Due are: a queued bot
// past its deadline, a running bot silent for a heartbeat grace period, a deleted bot (its
// leave grace), and a slot between states (its retries).
func (s *soak) nudge(l *soakLane, snap *soakSnapshot) int {
	now := clk.Now()
	grace := l.pool.Spec.Timing.HeartbeatGracePeriod.OrDefault(v1.DefaultHeartbeatGracePeriod)
	var objs []client.Object
	for i := range snap.bots {
		b := &snap.bots[i]
		slot := snap.boundTo[b.UID]
		switch {
		case b.Status.Phase.Terminal():
		case !b.DeletionTimestamp.IsZero():
			objs = append(objs, b)
		case snap.waiting(b):
			if b.Status.QueuedAt == nil || !now.Before(b.Status.QueuedAt.Add(bot.QueueTimeout(b, l.pool))) {
				objs = append(objs, b)
			}
		case slot != nil && slot.Status.Phase == v1.SlotBusy && b.Status.StartedAt != nil:
			last := b.Status.StartedAt.Time
			if t := s.bots.lastBeat(b.Name); t.After(last) {
				last = t
			}
			if now.Sub(last) > grace {
				objs = append(objs, b)
			}
		}
	}
	for i := range snap.slots {
		switch snap.slots[i].Status.Phase {
		case v1.SlotIdle, v1.SlotDeploying, v1.SlotBusy: // they poll on their own
		default:
			objs = append(objs, &snap.slots[i])
		}
	}
	ctx := context.Background()
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"soak/tick":"`+strconv.FormatInt(now.Unix(), 10)+`"}}}`))
	for _, o := range objs {
		_ = env.Client.Patch(ctx, o, patch) // gone meanwhile: nothing to nudge
	}
	return len(objs)
}

// nudgeNow nudges what is due on a fresh snapshot.
func (s *soak) nudgeNow() {
	for _, l := range s.lanes {
		if snap, err := l.obs.snapshot(); err == nil {
			s.nudged += s.nudge(l, snap)
		}
	}
}

// converged says what keeps one of the pools from being settled (see soakObserver.converged),
// or nil.
func (s *soak) converged(quiet bool) error {
	for _, l := range s.lanes {
		if err := l.obs.converged(quiet); err != nil {
			return fmt.Errorf("pool %s: %w", l.pool.Name, err)
		}
	}
	return nil
}

// settle gives the pool up to budget of simulated time, in one-second ticks, to satisfy
// converged, then soakSettleWait of real time with the clock still. It returns the simulated
// time it took.
func (s *soak) settle(budget time.Duration, quiet bool) (time.Duration, error) {
	start := clk.Now()
	for tick := 0; ; tick++ {
		if err := s.converged(quiet); err == nil {
			return clk.Since(start), nil
		}
		if clk.Since(start) >= budget {
			break
		}
		if tick%5 == 0 {
			s.nudgeNow()
		}
		s.bots.hold(3*soakInterval, 2*time.Second)
		clk.Step(time.Second)
		time.Sleep(soakPause)
	}
	var err error
	deadline := time.Now().Add(soakSettleWait)
	for n := 0; time.Now().Before(deadline); n++ {
		if err = s.converged(quiet); err == nil {
			return clk.Since(start), nil
		}
		if n%10 == 0 {
			s.nudgeNow()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return clk.Since(start), err
}

// drain steps until every bot has ended (or, deleted, is gone).
func (s *soak) drain() {
	const limit = time.Hour
	start := clk.Now()
	for n := 0; ; n++ {
		ended := true
		for _, l := range s.lanes {
			snap, err := l.obs.snapshot()
			ended = ended && err == nil && allEnded(snap)
		}
		if ended {
			return
		}
		if clk.Since(start) > limit {
			s.findings.violate("bots still running %s after the last arrival", limit)
			return
		}
		s.step(n)
	}
}

func allEnded(snap *soakSnapshot) bool {
	for i := range snap.bots {
		if !snap.bots[i].Status.Phase.Terminal() {
			return false
		}
	}
	return true
}

// watchOneTwo checks invariants 1 and 2 continuously, between the steps' rounds too; the
// returned func stops it and says what it saw. It lists one pool's slots every 25ms, in turn
// (the binding watchers check both invariants on every write as well).
func (s *soak) watchOneTwo() func() error {
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		ctx := context.Background()
		for n := 0; ; n++ {
			select {
			case <-stop:
				done <- nil
				return
			case <-time.After(25 * time.Millisecond):
			}
			l := s.lanes[n%len(s.lanes)]
			if err := invariantsOneTwo(ctx, l.ns, int(l.pool.Spec.MaxSlots)); err != nil {
				<-stop
				done <- fmt.Errorf("pool %s: %w", l.pool.Name, err)
				return
			}
		}
	}()
	return func() error {
		close(stop)
		return <-done
	}
}

// checkProjection waits until Postgres shows what the API server holds: every slot with its
// phase, application and no bot, no row for a slot that is gone, every bot with its final
// phase; and the store has replayed and dropped nothing.
func (s *soak) checkProjection(l *soakLane) {
	ctx := context.Background()
	kubetest.Eventually(s.t, 30*time.Second, func() error {
		if st := s.store.Status(); !st.Available || st.Buffered > 0 || st.Dropped > 0 {
			return fmt.Errorf("store %+v, want available, nothing buffered or dropped", st)
		}
		snap, err := l.obs.snapshot()
		if err != nil {
			return err
		}
		exists := map[string]bool{}
		for i := range snap.slots {
			sl := &snap.slots[i]
			exists[sl.Name] = true
			rec, ok, err := s.store.Slot(ctx, sl.Namespace, sl.Name)
			if err != nil {
				return err
			}
			if !ok || rec.Phase != string(sl.Status.Phase) || rec.ApplicationUUID != sl.Status.ApplicationUUID || rec.BotUID != "" {
				return fmt.Errorf("slot %s is %s/%s in the API, projected %+v (found %v)", sl.Name, sl.Status.Phase, sl.Status.ApplicationUUID, rec, ok)
			}
		}
		for n := 1; n <= int(l.pool.Spec.MaxSlots); n++ {
			name := poolctrl.SlotName(l.pool.Spec.Platform, n)
			_, ok, err := s.store.Slot(ctx, l.ns, name)
			if err != nil {
				return err
			}
			if !exists[name] && ok {
				return fmt.Errorf("slot %s is gone but still projected", name)
			}
		}
		for i := range snap.bots {
			b := &snap.bots[i]
			rec, ok, err := s.store.Bot(ctx, b.UID)
			if err != nil {
				return err
			}
			if !ok || rec.Phase != string(b.Status.Phase) {
				return fmt.Errorf("bot %s is %s in the API, projected %q (found %v)", b.Name, b.Status.Phase, rec.Phase, ok)
			}
		}
		return nil
	})
}

// report logs the counts: bots served and failed and why, faults injected, restarts,
// violations; and fails the test on any violation.
func (s *soak) report(chaos map[int]int, chaosLength, converge, drained time.Duration, reasons map[string]int, wall time.Duration) {
	phases := map[string]int{}
	left := 0 // bots that still exist
	// Bindings the bot API claimed (status.binding) whose configuration no container
	// received: the answer was lost (a request cancelled while its claim was written), and a
	// binding is handed out once, so the bot never starts.
	var burned []string
	for _, l := range s.lanes {
		snap, err := l.obs.snapshot()
		if err != nil {
			s.t.Fatal(err)
		}
		lane := map[string]int{}
		for i := range snap.bots {
			phases[string(snap.bots[i].Status.Phase)]++
			lane[string(snap.bots[i].Status.Phase)]++
		}
		left += len(snap.bots)
		for i := range snap.bots {
			if b := &snap.bots[i]; b.Status.Binding != nil {
				if _, ok := s.bots.servedRun(b.Name); !ok {
					burned = append(burned, fmt.Sprintf("%s (%s, %s)", b.Name, b.Status.Phase, b.Status.Reason))
				}
			}
		}
		s.t.Logf("pool %s (standby %s): %d bots planned, %s; %d invariant rounds, %d bindings to standby slots checked as written",
			l.pool.Name, orStopped(l.pool.Spec.Standby), l.planned, countsString(lane), l.obs.checks, l.obs.bindings.Load())
	}
	total := 0
	for _, n := range chaos {
		total += n
	}
	injected := chaos[500] + chaos[503] + chaos[429]
	all := requestCounts(nil, s.sc.sim.Counts())
	failed := phases[string(v1.BotFatal)]
	s.t.Logf("bots: %d created, %d served (Done), %d failed (%s), %d deleted by their user mid-way (gone: %d)",
		s.created, phases[string(v1.BotDone)], failed, countsString(reasons), s.deleted, s.created-left)
	s.t.Logf("%s", s.bots.summary())
	if len(burned) > 0 {
		s.t.Logf("bindings claimed that no container received (their bots could not start): %d: %s", len(burned), strings.Join(burned, ", "))
	}
	s.t.Logf("coolify: %d requests during the chaos, %d faults injected (500: %d, 503: %d, 429: %d) = %.1f%%; all codes over the run: %s",
		total, injected, chaos[500], chaos[503], chaos[429], 100*float64(injected)/float64(max(total, 1)), countsString(codeKeys(all)))
	s.t.Logf("chaos episodes: %s; containers left running by applications deleted during a server outage: %d", countsString(s.episodes), len(s.sc.sim.Orphans()))
	s.t.Logf("restarts: manager %d, postgres %d (down %s simulated, store buffered up to %d writes, saw the outage: %v)",
		s.restarts, s.pgRestarts, s.pgOutage, s.pgBuffer, s.pgSawDown)
	s.t.Logf("time: %s of chaos, converged in %s, drained in %s (simulated); %s wall, of which %s; %d nudges",
		chaosLength, converge, drained.Round(time.Second), wall.Round(time.Second), countsString(rounded(s.wall)), s.nudged)
	if n := s.bots.redeployed(); n > 0 {
		s.findings.violate("%d containers were deployed again while their bot ran: each restart killed a bot mid-call: %s", n, s.bots.restartsSeen(s.sc.sim.Deployments()))
	}
	if !s.pgSawDown {
		s.findings.violate("the store never noticed the Postgres outage: the restart tested nothing")
	}
	if s.created != s.cfg.bots || phases[string(v1.BotDone)]+failed != left || s.created-left != s.deleted {
		s.findings.violate("%d bots planned, %d created, %d deleted, %d left of which %d ended", s.cfg.bots, s.created, s.deleted, left, phases[string(v1.BotDone)]+failed)
	}
	fmt.Printf("soak summary: seed=%d bots=%d served=%d failed=%d deleted=%d faults=%d (%.1f%% of %d requests) restarts=%d postgres_restarts=%d violations=%d\n",
		s.cfg.seed, s.created, phases[string(v1.BotDone)], failed, s.deleted, injected, 100*float64(injected)/float64(max(total, 1)), total,
		s.restarts, s.pgRestarts, s.findings.count())
	if n := s.findings.count(); n > 0 {
		s.t.Errorf("%d violations (the first 20 are above)", n)
	}
}

func orStopped(m v1.StandbyMode) v1.StandbyMode {
	if m == "" {
		return v1.StandbyStopped
	}
	return m
}

// reconcilePanics is how many reconciles of any controller panicked so far in this process.
func reconcilePanics(t *testing.T) float64 {
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() == "controller_runtime_reconcile_panics_total" {
			for _, m := range f.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// requestCounts sums the simulator's answers by status code, less those in before.
func requestCounts(before, after map[string]map[int]int) map[int]int {
	out := map[int]int{}
	for op, codes := range after {
		for code, n := range codes {
			out[code] += n - before[op][code]
		}
	}
	return out
}

func rounded(m map[string]time.Duration) map[string]time.Duration {
	out := make(map[string]time.Duration, len(m))
	for k, d := range m {
		out[k] = d.Round(time.Millisecond)
	}
	return out
}

func codeKeys(m map[int]int) map[string]int {
	out := make(map[string]int, len(m))
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	for _, k := range keys {
		out[strconv.Itoa(k)] = m[k]
	}
	return out
}
