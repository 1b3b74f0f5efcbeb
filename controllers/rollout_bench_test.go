package controllers

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
	poolctrl "botpool.dev/botpool/controllers/pool"
	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/simbot"
	"botpool.dev/botpool/internal/stats"
)

// Rollout (issue 17, "Tests and benchmark"): a pool of 100 warm slots serving a steady stream
// of bots changes its imageTag to a tag just pushed, cold on every server, and rolls out, in
// simulated time with Coolify's timings, on the burst benchmarks' harness
// (standby_burst_bench_test.go: the fleet of simulated bots, settle, the clock stepped at most
// limiterStep at a time). What it measures, in the same run:
//
//   - the rollout: tag change → SlotsUpdated True with every slot on the new template, and
//     tag change → the image pre-pulled on each server (status.servers[].cached);
//   - the stream's bots: created → their container knows its bot, for the bots created during
//     the rollout against those created in the window before it (the promise: no bot
//     waits for a cold pull, so p99 during ≈ p99 before);
//   - the slot deployments that pulled cold (Hooks.OnPull; the pool's puller must, no slot
//     may), and the bots that failed: either fails the benchmark;
//   - the Coolify requests the rollout cost: what the window spent above the stream's own rate
//     measured before it, and the puller's exactly;
//   - in standby Running, the fewest ready free slots seen, before and during, against minIdle
//     (spec.updateStrategy at its defaults: maxUnavailable 0, maxSurge 25%).

// rolloutCase is one scenario of the benchmark.
type rolloutCase struct {
	standby v1.StandbyMode
	servers int
}

func (c rolloutCase) name() string {
	return fmt.Sprintf("%s-%dsrv", strings.ToLower(string(c.standby)), max(c.servers, 1))
}

// The scenario's shape.
const (
	// rolloutMinIdle is the pool's warm slots; rolloutMaxSlots leaves room above them for the
	// stream's busy slots and the surge of a standby pool's rollout (25% of minIdle).
	rolloutMinIdle  = 100
	rolloutMaxSlots = 150
	// The stream: a bot every 20–40 s (2 a minute on average), each meeting 2–4 minutes, drawn
	// from a fixed seed. One server deploys 4 bots a minute (2 builds of 30 s); a denser
	// stream would queue Stopped pools' starts before any rollout, and a standby pool's
	// recycles (one deployment per bot) would leave its rollout no build to run on.
	rolloutArrivalMin = 20 * time.Second
	rolloutArrivalMax = 40 * time.Second
	rolloutMeetingMin = 2 * time.Minute
	rolloutMeetingMax = 4 * time.Minute
	// rolloutRamp lets the stream reach its steady state (meetings ending as others begin);
	// rolloutBefore is the window whose bots are the baseline.
	rolloutRamp   = 5 * time.Minute
	rolloutBefore = 10 * time.Minute
	// rolloutClockStep is the clock's resolution throughout: a Stopped bot's start is a 30 s
	// deployment, measured to the second.
	rolloutClockStep = time.Second
	// rolloutLimit fails a rollout that has not finished in this much simulated time.
	rolloutLimit = 3 * time.Hour
	// rolloutTolerance is how much slower the stream's p99 start may be during the rollout
	// than before it for the target (a cold pull would make it minutes slower).
	rolloutTolerance = 1.25
)

// The tags: the pool runs rolloutOldTag (cached on every server), and moves to rolloutNewTag,
// pushed just before the change and so on no server.
const (
	rolloutOldTag = "1"
	rolloutNewTag = "2"
)

// rolloutBot is one bot of the stream.
type rolloutBot struct {
	name    string
	created time.Time     // simulated
	meeting time.Duration // how long its meeting lasts once it reported
	window  string        // "ramp", "before", "during" or "after"
}

// botStream creates the stream's bots and ends their meetings.
type botStream struct {
	bs     *burstScenario
	rng    *rand.Rand
	next   time.Time // the next arrival
	bots   []*rolloutBot
	window string // the window new bots are counted in; "" stops the stream
}

func newBotStream(bs *burstScenario, seed uint64) *botStream {
	st := &botStream{bs: bs, rng: rand.New(rand.NewPCG(seed, 17))}
	st.next = clk.Now()
	return st
}

func (st *botStream) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(st.rng.Int64N(int64(hi-lo)+1))
}

// drive acts at the clock's present time: meetings that lasted long enough end, and the bots
// due arrive; then the operator settles on it.
func (st *botStream) drive() {
	var due []string
	for _, b := range st.bots {
		c, ok := st.bs.fleet.container(b.name)
		if ok && !c.ended && !c.reportedAt.IsZero() && clk.Since(c.reportedAt) >= b.meeting {
			due = append(due, b.name)
		}
	}
	st.bs.fleet.endMeetings(st.bs.tb, due)
	arrived := 0
	for st.window != "" && !clk.Now().Before(st.next) {
		b := &rolloutBot{name: fmt.Sprintf("rb%04d-000", len(st.bots)), created: clk.Now(), window: st.window,
			meeting: st.between(rolloutMeetingMin, rolloutMeetingMax)}
		st.bs.sc.newBots(strings.TrimSuffix(b.name, "-000"), 1)
		st.bots = append(st.bots, b)
		st.next = st.next.Add(st.between(rolloutArrivalMin, rolloutArrivalMax))
		arrived++
	}
	if len(due) > 0 || arrived > 0 {
		st.bs.settle()
	}
}

// started reports whether every bot of the windows has a container that knows it.
func (st *botStream) started(windows ...string) bool {
	for _, b := range st.bots {
		if !slices.Contains(windows, b.window) {
			continue
		}
		if c, ok := st.bs.fleet.container(b.name); !ok || c.knownAt.IsZero() {
			return false
		}
	}
	return true
}

// startTimes are created → the container knows its bot, of the window's bots, and how many
// of them started on each image.
func (st *botStream) startTimes(window string) (ds []time.Duration, images map[string]int) {
	images = map[string]int{}
	for _, b := range st.bots {
		if b.window != window {
			continue
		}
		c, _ := st.bs.fleet.container(b.name)
		ds = append(ds, c.knownAt.Sub(b.created))
		images[c.c.Image]++
	}
	return ds, images
}

// rolloutResult is one case's figures.
type rolloutResult struct {
	c           rolloutCase
	total       int           // slots when the rollout ended
	maxTotal    int           // the most slots seen during it (surge included)
	rollout     time.Duration // tag change → every slot on the new template, the pool says so
	rolloutWall time.Duration
	pulled      map[string]time.Duration // server → tag change → the image cached there
	pullStart   map[string]time.Duration // server → tag change → its pre-pull's pull began
	// before and during are the stream's start times (created → container knows its bot) in
	// the window before the rollout and during it; duringPull and afterPull split during by
	// whether the bot came before the image was cached on every server.
	before, during, duringPull, afterPull []time.Duration
	duringImages                          map[string]int
	coldSlots                             []string // slot deployments that pulled cold (whole run)
	prePulls                              int      // the pullers' pulls of the new image
	minReadyBefore                        int      // Running: fewest ready free slots in the window before
	minReadyDuring                        int      // Running: fewest during the rollout
	floor                                 int      // Running: what spec.updateStrategy keeps ready (minIdle - maxUnavailable)
	// Requests: the window before (the stream alone), and during the rollout those about the
	// pullers' applications and the others (slots, and the harness's shared reads).
	beforeOps, pullerOps, otherOps map[string]int
	beforeMinutes                  float64
	tooMany, maxPerMin             int
	steps, overruns                int
	wrongImage                     []string // slots whose application does not run the new image at the end
	conditions                     string   // Stalled or not Ready during the rollout, which a good image must not cause
}

// ownOps is the requests that are not the harness's shared reads (sharedReads).
func ownOps(ops map[string]int) map[string]int {
	out := map[string]int{}
	for op, n := range ops {
		if !sharedReads[op] {
			out[op] = n
		}
	}
	return out
}

// slotsExcess is what the rollout cost about the slots: the window's requests other than the
// pullers' and the shared reads, less the same routes' rate before it (the stream alone) over
// the rollout's duration, per route (never below 0).
func (r rolloutResult) slotsExcess() (map[string]int, int) {
	during, before := ownOps(r.otherOps), ownOps(r.beforeOps)
	out, sum := map[string]int{}, 0
	for op, n := range during {
		base := float64(before[op]) / r.beforeMinutes * r.rollout.Minutes()
		if e := n - int(base+0.5); e > 0 {
			out[op] = e
			sum += e
		}
	}
	return out, sum
}

// requests is the rollout's Coolify requests: the pullers' and the slots' excess.
func (r rolloutResult) requests() int {
	_, slots := r.slotsExcess()
	return sumOps(r.pullerOps) + slots
}

func (r rolloutResult) p99Ratio() float64 {
	b, d := stats.Percentile(r.before, 99), stats.Percentile(r.during, 99)
	return float64(max(d, rolloutClockStep)) / float64(max(b, rolloutClockStep))
}

func (r rolloutResult) prePulled() time.Duration {
	var last time.Duration
	for _, d := range r.pulled {
		last = max(last, d)
	}
	return last
}

func (r rolloutResult) String() string {
	var w strings.Builder
	fmt.Fprintf(&w, "  %s, %d server(s): minIdle %d (maxSlots %d), a bot every %s–%s, meetings of %s–%s; clock resolution %s (%d steps, %d settles cut short)\n",
		r.c.standby, max(r.c.servers, 1), rolloutMinIdle, rolloutMaxSlots, rolloutArrivalMin, rolloutArrivalMax, rolloutMeetingMin, rolloutMeetingMax,
		rolloutClockStep, r.steps, r.overruns)
	fmt.Fprintf(&w, "    tag change → SlotsUpdated True, every slot (%d) on the new template: %s simulated (%s real); at most %d slots during it\n",
		r.total, r.rollout.Round(time.Second), r.rolloutWall.Round(time.Second), r.maxTotal)
	servers := make([]string, 0, len(r.pulled))
	for s := range r.pulled {
		servers = append(servers, s)
	}
	sort.Strings(servers)
	var pulled []string
	for _, s := range servers {
		pulled = append(pulled, fmt.Sprintf("%s: pull began %s, cached %s", s, r.pullStart[s].Round(time.Second), r.pulled[s].Round(time.Second)))
	}
	fmt.Fprintf(&w, "    tag change → image pre-pulled on every server: %s (%s)\n", r.prePulled().Round(time.Second), strings.Join(pulled, "; "))
	fmt.Fprintf(&w, "    bot created → container knows its bot, before the rollout (%d bots): %s\n", len(r.before), spread(r.before, time.Second))
	fmt.Fprintf(&w, "      during it (%d bots): %s; p99 during/before %.2f×\n", len(r.during), spread(r.during, time.Second), r.p99Ratio())
	fmt.Fprintf(&w, "        created while the image was pulled (%d): %s; after (%d): %s\n",
		len(r.duringPull), spread(r.duringPull, time.Second), len(r.afterPull), spread(r.afterPull, time.Second))
	fmt.Fprintf(&w, "        started on: %s\n", imagesLine(r.duringImages))
	fmt.Fprintf(&w, "    slot deployments that pulled cold (whole run): %d; the pool's pre-pulls of the new image: %d\n", len(r.coldSlots), r.prePulls)
	if r.c.standby.Running() {
		fmt.Fprintf(&w, "    ready free slots: fewest before %d, fewest during the rollout %d; minIdle %d, floor of the update strategy %d\n",
			r.minReadyBefore, r.minReadyDuring, rolloutMinIdle, r.floor)
	}
	ex, sum := r.slotsExcess()
	own := ownOps(r.otherOps)
	fmt.Fprintf(&w, "    Coolify requests during the rollout: %d about the pullers, %d about the slots, %d shared reads (the harness's cadence)\n",
		sumOps(r.pullerOps), sumOps(own), sumOps(r.otherOps)-sumOps(own))
	fmt.Fprintf(&w, "      the pullers': %s (their deployment is polled at the pool's deploymentPollInterval, once a clock step here)\n", opsLine(r.pullerOps, 1))
	fmt.Fprintf(&w, "      the slots' above the stream's own rate before it (%.1f a minute: %s a minute): %d, %.1f a slot; by route: %s\n",
		float64(sumOps(ownOps(r.beforeOps)))/r.beforeMinutes, opsLine(ownOps(r.beforeOps), r.beforeMinutes), sum, float64(sum)/float64(max(r.total, 1)), opsLine(ex, 1))
	fmt.Fprintf(&w, "    whole run: %d answered 429, at most %d requests in any 60 s (limit %d)\n", r.tooMany, r.maxPerMin, coolify.DefaultRateLimit)
	fmt.Fprintf(&w, "    [target: no slot deployment pulls cold: %s; every slot on the new image: %s; p99 start during ≤ %.2f× before: %s",
		verdict(len(r.coldSlots) == 0), verdict(len(r.wrongImage) == 0), rolloutTolerance, verdict(r.p99Ratio() <= rolloutTolerance))
	if r.c.standby.Running() {
		fmt.Fprintf(&w, "; ready free slots during ≥ the fewer of before's fewest and the floor: %s", verdict(r.minReadyDuring >= min(r.minReadyBefore, r.floor)))
	}
	w.WriteString("]\n")
	if r.conditions != "" {
		fmt.Fprintf(&w, "    the pool showed during the rollout: %s\n", r.conditions)
	}
	return w.String()
}

func imagesLine(images map[string]int) string {
	refs := make([]string, 0, len(images))
	for ref := range images {
		refs = append(refs, ref)
	}
	sort.Strings(refs)
	parts := make([]string, 0, len(refs))
	for _, ref := range refs {
		parts = append(parts, fmt.Sprintf("%s %d", ref, images[ref]))
	}
	return strings.Join(parts, ", ")
}

// newRolloutScenario is a burst scenario (fleet, settle, stepping) on a pool of rolloutMinIdle
// warm slots on tag rolloutOldTag, whose pulls are logged.
func newRolloutScenario(tb testing.TB, name string, c rolloutCase, pulls *pullLog) *burstScenario {
	tb.Helper()
	fleet := newBenchFleet(simbot.Behaviour{
		// Meetings last until the stream ends them; beats and polls run in real time.
		MeetingLength: 24 * time.Hour, HeartbeatEvery: time.Second, PollEvery: 250 * time.Millisecond,
	})
	tb.Cleanup(fleet.stopAll)
	mode := burstMode{standby: c.standby, servers: c.servers, step: rolloutClockStep}
	bs := &burstScenario{tb: tb, mode: mode, fleet: fleet, minIdle: rolloutMinIdle}
	hooks := fleet.hooks()
	hooks.OnPull = pulls.add
	bs.sc = newTrafficScenario(tb, name, trafficSetup{
		sim:     sim.Config{RateLimit: sim.DefaultRateLimit, WarmPull: burstWarmPull, ComposeUp: burstComposeUp, Hooks: hooks},
		servers: c.servers,
		warm:    true,
		limit:   coolify.DefaultRateLimit,
		pool: func(p *v1.BotPool) {
			p.Spec.MaxSlots, p.Spec.MinIdle, p.Spec.Standby = rolloutMaxSlots, rolloutMinIdle, c.standby
			p.Spec.ImageTag = rolloutOldTag
			// As in the burst: nobody may fail for the stepping.
			p.Spec.Queue = v1.QueuePolicy{DefaultTimeout: "10m", MaxTimeout: "10m"}
			p.Spec.Timing.HeartbeatTimeout = "1h"
		},
	})
	bs.sc.stepWith = 5 * time.Second
	fleet.mu.Lock()
	fleet.mark = bs.sc.mark
	fleet.mu.Unlock()
	return bs
}

// readyFree counts the slots a bot can start on now, as the dispatcher and the rollout count
// them (offered): free and, in a standby pool, with a Ready container.
func readyFree(slots []v1.BotPoolSlot, pool *v1.BotPool) int {
	n := 0
	for i := range slots {
		if policy.Offered(&slots[i], pool) {
			n++
		}
	}
	return n
}

// poolOf reads the scenario's pool.
func (bs *burstScenario) poolOf() *v1.BotPool {
	bs.tb.Helper()
	p := &v1.BotPool{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(bs.sc.pool), p); err != nil {
		bs.tb.Fatal(err)
	}
	return p
}

// rolledOut: the pool names a template other than old, every slot carries it, and the pool says
// so for its current generation.
func rolledOut(p *v1.BotPool, old string) bool {
	return p.Status.TemplateHash != old && p.Status.Slots != nil && p.Status.UpdatedSlots == p.Status.Slots.Total &&
		meta.IsStatusConditionTrue(p.Status.Conditions, v1.ConditionSlotsUpdated) && p.Status.ObservedGeneration == p.Generation
}

// rolloutTrace, when BOTPOOL_BENCH_TRACE is set, prints the rollout's progress every
// rolloutTraceEvery of simulated time to stderr, and each of its bots' start requests: what to
// read when a rollout stalls or a start is slow.
var rolloutTrace = os.Getenv("BOTPOOL_BENCH_TRACE") != ""

const rolloutTraceEvery = 10 * time.Second

// workerLoad is, for the trace, each controller's busy workers and work queue depth (the
// suite's manager's controller-runtime metrics): workers held by requests waiting for
// Coolify's budget show here.
func workerLoad() string {
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return err.Error()
	}
	active, depth := map[string]float64{}, map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				switch {
				case f.GetName() == "controller_runtime_active_workers" && l.GetName() == "controller":
					active[l.GetValue()] = m.GetGauge().GetValue()
				case f.GetName() == "workqueue_depth" && l.GetName() == "name":
					depth[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	names := make([]string, 0, len(active))
	for n := range active {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %g busy/%g queued", n, active[n], depth[n]))
	}
	return "workers: " + strings.Join(parts, ", ")
}

// measureRollout runs one case: the pool gets ready and serves one bot, the stream runs its
// ramp and its baseline window, the tag changes, and the stream runs on until the rollout ended
// and every bot created during it started.
func measureRollout(tb testing.TB, name string, c rolloutCase, seed uint64) rolloutResult {
	tb.Helper()
	pulls := &pullLog{}
	bs := newRolloutScenario(tb, name, c, pulls)
	defer bs.sc.teardown()
	bs.warmUp("warmup")
	res := rolloutResult{c: c, pulled: map[string]time.Duration{}, pullStart: map[string]time.Duration{},
		minReadyBefore: rolloutMaxSlots, minReadyDuring: rolloutMaxSlots, floor: rolloutMinIdle}

	st := newBotStream(bs, seed)
	st.window = "ramp"
	began := clk.Now()
	bs.until("the stream's ramp", rolloutClockStep, time.Hour, func() bool {
		st.drive()
		return clk.Since(began) >= rolloutRamp
	})
	st.window = "before"
	mark, began := bs.sc.mark(), clk.Now()
	bs.until("the window before the rollout", rolloutClockStep, time.Hour, func() bool {
		st.drive()
		res.minReadyBefore = min(res.minReadyBefore, readyFree(bs.sc.slots(), bs.poolOf()))
		return clk.Since(began) >= rolloutBefore
	})
	res.beforeOps, res.beforeMinutes = byOp(bs.sc.since(mark)), clk.Since(began).Minutes()

	// The change: a tag just pushed, on no server.
	old := bs.poolOf()
	newRef := old.Spec.Image + ":" + rolloutNewTag
	bs.sc.sim.PushImage(old.Spec.Image, rolloutNewTag)
	if err := updatePoolSpec(bs.sc.pool, func(p *v1.BotPool) { p.Spec.ImageTag = rolloutNewTag }); err != nil {
		tb.Fatal(err)
	}
	st.window = "during"
	mark, t0, wall0 := bs.sc.mark(), clk.Now(), time.Now()
	steps, overruns := bs.steps, bs.overruns
	servers := old.Spec.Coolify.ServerList()
	var conditions []string
	traced := time.Duration(-1)
	bs.until("the rollout", rolloutClockStep, rolloutLimit, func() bool {
		st.drive()
		slots := bs.sc.slots()
		res.maxTotal = max(res.maxTotal, len(slots))
		p := bs.poolOf()
		res.minReadyDuring = min(res.minReadyDuring, readyFree(slots, p))
		for _, srv := range servers {
			if _, seen := res.pulled[srv.UUID]; !seen && policy.CachedOn(p, srv.UUID, newRef, "") {
				res.pulled[srv.UUID] = clk.Since(t0)
			}
		}
		// A rollout of a good image never stalls, and a warm pool stays Ready throughout.
		at := clk.Since(t0).Round(time.Second)
		if cs := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionStalled); cs != nil && cs.Status == metav1.ConditionTrue {
			conditions = append(conditions, fmt.Sprintf("at %s Stalled %s: %s", at, cs.Reason, cs.Message))
		}
		if cr := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionReady); cr != nil && cr.Status != metav1.ConditionTrue {
			conditions = append(conditions, fmt.Sprintf("at %s Ready %s %s: %s", at, cr.Status, cr.Reason, cr.Message))
		}
		if rolloutTrace && at/rolloutTraceEvery > traced {
			traced = at / rolloutTraceEvery
			fmt.Fprintf(os.Stderr, "%s +%s: %s; %s\n", name, at, rolloutProgress(p, slots), workerLoad())
		}
		return rolledOut(p, old.Status.TemplateHash)
	})
	res.rollout, res.rolloutWall = clk.Since(t0), time.Since(wall0)
	res.steps, res.overruns = bs.steps-steps, bs.overruns-overruns
	if len(conditions) > 0 {
		res.conditions = fmt.Sprintf("%d times, first %s", len(conditions), conditions[0])
	}
	res.total = len(bs.sc.slots())

	// Which requests were about the pullers, and when their pulls began.
	pullers := map[string]bool{}
	for _, app := range bs.sc.sim.Apps() {
		if strings.HasPrefix(app.Name, poolctrl.PullerPrefix) {
			pullers[app.UUID] = true
		}
	}
	res.pullerOps, res.otherOps = map[string]int{}, map[string]int{}
	for _, r := range bs.sc.since(mark) {
		if pullers[r.App] {
			res.pullerOps[r.Op]++
		} else {
			res.otherOps[r.Op]++
		}
	}
	pulls.mu.Lock()
	for _, p := range pulls.pulls {
		if strings.HasPrefix(p.AppName, poolctrl.PullerPrefix) && p.Ref == newRef && !p.At.Before(t0) {
			res.prePulls++
			if _, seen := res.pullStart[p.ServerUUID]; !seen {
				res.pullStart[p.ServerUUID] = p.At.Sub(t0)
			}
		}
	}
	pulls.mu.Unlock()

	// The stream stops; the bots created during the rollout all start.
	st.window = ""
	bs.until("the rollout's bots started", rolloutClockStep, time.Hour, func() bool {
		st.drive()
		return st.started("ramp", "before", "during")
	})
	for _, b := range bs.sc.bots() {
		if b.Status.Phase == v1.BotFatal {
			tb.Fatalf("%s: bot %s failed: %s (%s)", name, b.Name, b.Status.Reason, b.Status.Message)
		}
	}
	res.before, _ = st.startTimes("before")
	res.during, res.duringImages = st.startTimes("during")
	pulled := t0.Add(res.prePulled())
	for _, b := range st.bots {
		if b.window != "during" {
			continue
		}
		c, _ := bs.fleet.container(b.name)
		if rolloutTrace {
			fmt.Fprintf(os.Stderr, "%s bot %s created +%s, knew its bot after %s, on %s (%s): %s\n", name, b.name,
				b.created.Sub(t0).Round(time.Second), c.knownAt.Sub(b.created).Round(time.Second), c.c.AppName, c.c.Image,
				startRequests(bs.sc.sim.Requests(), c.c.AppUUID, b.created, c.knownAt))
		}
		if b.created.Before(pulled) {
			res.duringPull = append(res.duringPull, c.knownAt.Sub(b.created))
		} else {
			res.afterPull = append(res.afterPull, c.knownAt.Sub(b.created))
		}
	}
	res.coldSlots = pulls.coldStarts()
	for _, s := range bs.sc.slots() {
		if !s.DeletionTimestamp.IsZero() {
			continue // a surge slot removed as the rollout ended
		}
		app, ok := bs.sc.sim.App(s.Status.ApplicationUUID)
		if !ok || app.Image != newRef || s.Status.Image != newRef {
			res.wrongImage = append(res.wrongImage, fmt.Sprintf("%s (application %s, status %s)", s.Name, app.Image, s.Status.Image))
		}
	}
	res.tooMany = bs.sc.sim.CountCode(http.StatusTooManyRequests)
	res.maxPerMin = bs.sc.sim.MaxPerMinute("ops")
	return res
}

// startRequests lists, for the trace, the requests about app between from and to (simulated),
// each with its time after from and how many requests of any kind Coolify answered in the
// 10 s before it.
func startRequests(reqs []sim.Request, app string, from, to time.Time) string {
	var parts []string
	for i, r := range reqs {
		if r.App != app || r.At.Before(from) || r.At.After(to) {
			continue
		}
		busy := 0
		for j := i - 1; j >= 0 && r.At.Sub(reqs[j].At) < 10*time.Second; j-- {
			busy++
		}
		parts = append(parts, fmt.Sprintf("%s +%s (%d in 10 s)", r.Op, r.At.Sub(from).Round(time.Second), busy))
	}
	return strings.Join(parts, ", ")
}

// rolloutProgress is one line of the trace: the pool's rollout condition and counts, and the
// slots by phase, standby state and template.
func rolloutProgress(p *v1.BotPool, slots []v1.BotPoolSlot) string {
	reason := ""
	if c := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionSlotsUpdated); c != nil {
		reason = c.Reason
	}
	seen := map[string]int{}
	admitted := 0
	for i := range slots {
		s := &slots[i]
		current := "old"
		if s.Status.TemplateHash == p.Status.TemplateHash {
			current = "new"
		}
		bound := ""
		if s.Spec.BotRef != nil {
			bound = "+bot"
		}
		seen[fmt.Sprintf("%s/%s%s/%s", s.Status.Phase, s.Status.Standby, bound, current)]++
		if s.Annotations[v1.AnnotationUpdate] == p.Status.TemplateHash && current == "old" {
			admitted++
		}
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, seen[k]))
	}
	return fmt.Sprintf("SlotsUpdated %s, updated %d of %d, admitted %d, ready free %d; %s",
		reason, p.Status.UpdatedSlots, len(slots), admitted, readyFree(slots, p), strings.Join(parts, ", "))
}

// updatePoolSpec changes a pool's spec, retrying conflicts.
func updatePoolSpec(pool *v1.BotPool, change func(*v1.BotPool)) error {
	ctx := context.Background()
	var err error
	for range 20 {
		p := &v1.BotPool{}
		if err = env.Client.Get(ctx, client.ObjectKeyFromObject(pool), p); err != nil {
			return err
		}
		change(p)
		if err = env.Client.Update(ctx, p); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// rolloutCases are the benchmark's scenarios, each a sub-benchmark (select with
// -bench 'Rollout/stopped-1srv').
var rolloutCases = []rolloutCase{
	{standby: v1.StandbyStopped, servers: 1},
	{standby: v1.StandbyRunning, servers: 1},
	{standby: v1.StandbyStopped, servers: 3},
	{standby: v1.StandbyRunning, servers: 3},
}

// BenchmarkRollout measures issue 17's headline: a pool of 100 warm slots under a steady stream
// of bots moves to an image tag just pushed. The image is pre-pulled on each server off the
// start path, then the slots follow (Stopped: free slots PATCHed in place; Running: admitted
// within spec.updateStrategy's defaults). It fails when a slot's deployment pulled cold or a
// bot failed: the promises. The figures are printed per case; the target on the bots'
// start times (p99 during ≤ rolloutTolerance × before) is reported, not failed.
//
//	go test -run '^$' -bench Rollout -benchtime 1x ./controllers/
func BenchmarkRollout(b *testing.B) {
	for i, c := range rolloutCases {
		b.Run(c.name(), func(b *testing.B) {
			var r rolloutResult
			for n := 0; n < b.N; n++ {
				r = measureRollout(b, fmt.Sprintf("bench-roll-%s-%d", c.name(), n), c, uint64(i+1))
			}
			var w strings.Builder
			fmt.Fprintf(&w, "\nRollout (go test -run '^$' -bench 'Rollout/%s' -benchtime 1x ./controllers/), simulated time: warm deployment %s, "+
				"cold pull %s, %d builds per server, %d workers, %d requests a minute\n",
				c.name(), burstWarmPull+burstComposeUp, sim.DefaultColdPull, sim.DefaultConcurrent, sim.DefaultWorkers, coolify.DefaultRateLimit)
			fmt.Fprintf(&w, "  load average at the end: %s\n", loadAverage())
			w.WriteString(r.String())
			fmt.Print(w.String())
			b.ReportMetric(r.rollout.Seconds(), "rollout-s")
			b.ReportMetric(r.prePulled().Seconds(), "prepull-s")
			b.ReportMetric(stats.Percentile(r.before, 99).Seconds(), "p99-start-before-s")
			b.ReportMetric(stats.Percentile(r.during, 99).Seconds(), "p99-start-during-s")
			b.ReportMetric(stats.Percentile(r.during, 100).Seconds(), "max-start-during-s")
			b.ReportMetric(r.p99Ratio(), "p99-during/before")
			b.ReportMetric(float64(len(r.coldSlots)), "cold-slot-pulls")
			b.ReportMetric(float64(r.requests()), "rollout-requests")
			if c.standby.Running() {
				b.ReportMetric(float64(r.minReadyDuring), "min-ready-during")
				b.ReportMetric(float64(r.minReadyBefore), "min-ready-before")
			}
			// The promises: no slot waits for a cold pull, every slot ends on the image.
			if len(r.coldSlots) > 0 {
				b.Errorf("%d slot deployments pulled cold: %v", len(r.coldSlots), r.coldSlots)
			}
			if len(r.wrongImage) > 0 {
				b.Errorf("%d slots not on %s after the rollout: %v", len(r.wrongImage), rolloutNewTag, r.wrongImage)
			}
		})
	}
}
