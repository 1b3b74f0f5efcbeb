package modelcheck

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

var (
	flagSeed   = flag.Uint64("modelcheck.seed", 0, "first seed (0: random); also BOTPOOL_MODELCHECK_SEED")
	flagSteps  = flag.Int("modelcheck.steps", 0, "steps in all, split over the runs (default 100000); also BOTPOOL_MODELCHECK_STEPS")
	flagRuns   = flag.Int("modelcheck.runs", 0, "runs with consecutive seeds, in parallel (default 4, 1 with a seed); also BOTPOOL_MODELCHECK_RUNS")
	flagBudget = flag.Duration("modelcheck.budget", 0, "keep starting new seeds (steps/runs each) until this much time has passed; also BOTPOOL_MODELCHECK_BUDGET")
)

const (
	defaultSteps = 100_000
	defaultRuns  = 4
	// fixedSeed is the first seed of the runs make test does.
	fixedSeed = 1
	// settleEvery is how many steps pass between two settle points.
	settleEvery = 5_000
)

// setting returns the flag, else the environment variable, else def.
func setting[T uint64 | int](flagValue T, env string, def T) T {
	if flagValue != 0 {
		return flagValue
	}
	if s := os.Getenv(env); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			panic(fmt.Sprintf("%s=%q: %v", env, s, err))
		}
		return T(n)
	}
	return def
}

// TestModelCheck runs the model: random steps against the real reconcilers, invariants
// checked after every one, settle points every settleEvery steps, and a drained end.
//
// With a budget (make modelcheck) each run, once its seed passed, goes on with the next
// seed nobody ran yet, until the budget is used: seeds seed, seed+1, … each of steps/runs
// steps, and a line per seed and one for the whole say which ran clean.
func TestModelCheck(t *testing.T) {
	steps := setting(*flagSteps, "BOTPOOL_MODELCHECK_STEPS", defaultSteps)
	seed := setting(*flagSeed, "BOTPOOL_MODELCHECK_SEED", 0)
	runs := setting(*flagRuns, "BOTPOOL_MODELCHECK_RUNS", 0)
	budget := *flagBudget
	if s := os.Getenv("BOTPOOL_MODELCHECK_BUDGET"); budget == 0 && s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("BOTPOOL_MODELCHECK_BUDGET=%q: %v", s, err)
		}
		budget = d
	}
	if runs == 0 {
		runs = defaultRuns
		if seed != 0 {
			runs = 1
		}
	}
	if seed == 0 {
		// make test runs fixed seeds, so CI fails only on a change, never on an unlucky draw;
		// make modelcheck explores new ones (BOTPOOL_MODELCHECK_RANDOM=1).
		seed = fixedSeed
		if os.Getenv("BOTPOOL_MODELCHECK_RANDOM") != "" {
			seed = rand.Uint64() >> 12 // short enough to type
		}
	}
	per := (steps + runs - 1) / runs
	t.Logf("%d steps in %d runs from seed %d (GOMAXPROCS %d, budget %s)", per*runs, runs, seed, runtime.GOMAXPROCS(0), budget)
	began := time.Now()
	var mu sync.Mutex
	next, clean := seed, []uint64{}
	// take is run i's next seed: without a budget its own one, seed+i; with one, the next
	// seed nobody ran while the budget lasts.
	take := func(i int, first bool) (uint64, bool) {
		if budget == 0 {
			return seed + uint64(i), first
		}
		mu.Lock()
		defer mu.Unlock()
		if !first && time.Since(began) >= budget {
			return 0, false
		}
		next++
		return next - 1, true
	}
	t.Cleanup(func() {
		t.Logf("ran clean: %d seeds × %d steps (%d steps) in %s: %v", len(clean), per, len(clean)*per, time.Since(began).Round(time.Second), clean)
	})
	for i := range runs {
		t.Run(fmt.Sprintf("run=%d", i), func(t *testing.T) {
			t.Parallel()
			for first := true; ; first = false {
				s, ok := take(i, first)
				if !ok {
					return
				}
				if !t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) { runSeed(t, s, per) }) {
					return
				}
				mu.Lock()
				clean = append(clean, s)
				mu.Unlock()
			}
		})
	}
}

// runSeed plays one seed for steps steps and fails with the replay line on a violation.
func runSeed(t *testing.T, seed uint64, steps int) {
	start := time.Now()
	w := newWorld(seed, nil)
	w.run(steps)
	if len(w.violations) > 0 {
		t.Fatal(w.report(steps))
	}
	t.Logf("seed %d: %d steps in %s, %s of model time, %d bots; %s", seed, steps, time.Since(start).Round(time.Millisecond),
		w.clk.Since(epoch).Round(time.Minute), w.bots, w.summary())
}

// run plays steps random steps, with settle points, then drains the run.
func (w *world) run(steps int) {
	for w.step = 1; w.step <= steps; w.step++ {
		w.detail = ""
		name := w.randomStep()
		w.counts["action: "+name]++
		w.note(strings.TrimSpace(name + " " + w.detail))
		w.afterStep()
		if w.step%50 == 0 {
			w.cleanup()
		}
		w.checkState()
		if len(w.violations) > 0 {
			return
		}
		if w.step%settleEvery == 0 {
			w.settle(fmt.Sprintf("settle point at step %d", w.step))
			if len(w.violations) > 0 {
				return
			}
		}
	}
	w.drain()
}

func (w *world) note(s string) {
	w.history = append(w.history, fmt.Sprintf("%6d %s %s", w.step, w.clk.Now().Format("15:04:05.000"), s))
	if len(w.history) > 60 {
		w.history = w.history[1:]
	}
}

// settle turns every fault off and runs every reconciler round after round (bots beating,
// five seconds apart) until a round writes nothing, at least long enough for the pools'
// orphan checks to run, and until every pool on a tag the registry has finished its rollout
// (a cold pre-pull takes minutes, with nothing to write meanwhile) and Coolify has no
// deployment in flight; then checks what must hold in a quiet state.
func (w *world) settle(when string) {
	w.counts["settle"]++
	w.settling = true
	defer func() { w.settling = false }()
	w.clearFaults()
	// rolloutRounds bounds the wait for rollouts, rounds of rolloutStep: a pre-pull that failed
	// just before is tried again within 2 minutes, and a cold pull takes 7, on one server of a
	// pool after the other when it replaces an image (three servers: 21); then slots update,
	// standby ones a batch at a time. The step is the pools' deployment poll interval: the
	// wait is mostly for a pull, and shorter rounds would only cost the run time.
	const minRounds, maxRounds, rolloutRounds, rolloutStep = 16, 150, 200, 15 * time.Second
	rolled := 0 // rounds spent waiting for a rollout or Coolify: they do not count against maxRounds
	// backedOff counts the rounds a rollout waited while a pool waited out its pull back-off:
	// a pull that failed several times in a row (the fault, before the settle) is tried again
	// only up to 30 minutes later (docs/pools-and-slots.md, "Retry"), which is not the
	// rollout's time to count (seed 4367750540162643). They are bounded on their own.
	backedOff := 0
	noisy := 0 // rounds in a row that wrote, not counting those
	// calm counts the quiet rounds in a row: the operator is quiet once it wrote nothing for
	// longer than its deployment poll interval (15 s), which a slot that reads its
	// deployments from a list cached for one poll waits out before it sees one end (seed
	// 1955477100607418 settled one round after a standby container's deployment ended).
	calm := 0
	const calmRounds = 4
	start := w.clk.Now()
	for round := 0; ; round++ {
		before := w.writes
		w.roundWrites = w.roundWrites[:0]
		w.reconcileAll()
		w.beatAll()
		if len(w.violations) > 0 {
			return
		}
		quiet := w.writes == before
		// A quiet operator may still wait for Coolify: a deployment it started, one it holds
		// back at the deploy gate until a build frees (a standby container a reserved bot
		// waits for, behind a pull, say), or an application's deletion. The world is settled
		// once none is left. A
		// round that wrote nothing ends a run of rounds that did: only a run of maxRounds is
		// an operator that never stops writing (a pool whose every deployment times out
		// writes every few minutes for good, and is not one).
		rolling := round >= minRounds && rolled < rolloutRounds && (w.rolloutPending() || quiet && w.coolifyBusy())
		if quiet {
			noisy = 0
			calm++
		} else {
			calm = 0
			if !rolling {
				noisy++
			}
		}
		switch {
		case rolling:
			if backedOff < backoffRounds && w.pullBackingOff() {
				backedOff++
				w.counts["settle rounds waiting out a pull back-off"]++
			} else {
				rolled++
			}
			w.counts["settle rounds waiting for a rollout or a deployment"]++
			w.advance(rolloutStep)
			continue
		case calm >= calmRounds && round >= minRounds:
			w.checkSettled(when)
			w.checkRolloutSettled(when)
			return
		case noisy >= maxRounds:
			w.violate("%s: the operator still writes after %d rounds in a row (%d in all, %s of model time) without faults; the last round wrote %v",
				when, noisy, round, w.clk.Since(start), w.roundWrites)
			return
		}
		w.advance(5 * time.Second)
	}
}

// coolifyBusy reports whether Coolify has a deployment queued or in progress, or an
// application it is deleting (a slot keeps its name, and its place under maxSlots, until
// then: seed 538685351090594 checked a reservation 5 s into its pool's only slot's deletion).
func (w *world) coolifyBusy() bool {
	for _, d := range w.sim.Deployments() {
		if d.Status == "queued" || d.Status == "in_progress" {
			return true
		}
	}
	for _, a := range w.sim.Apps() {
		if a.Deleting {
			return true
		}
	}
	return false
}

// drain ends a run: no new bots, no faults; bots play their meetings to the end. Every bot
// must end finished or running; then every bot is deleted, and nothing may be left bound,
// running or leaked in Coolify.
func (w *world) drain() {
	w.note("drain")
	w.clearFaults()
	if w.tenant.shared && !w.tenant.admitted {
		w.setAdmitted(true) // its bots wait for admission, not for their end: let them in
	}
	w.revertBadTags()
	limit := w.drainRounds()
	for round := 0; ; round++ {
		w.reconcileAll()
		w.progressAll()
		if len(w.violations) > 0 {
			return
		}
		if w.allEnded() {
			break
		}
		if round == limit {
			w.checkEnd()
			return
		}
		w.advance(5 * time.Second)
	}
	w.settle("end of the run")
	if len(w.violations) > 0 {
		return
	}
	w.checkEnd()
	w.note("delete every bot")
	for _, b := range w.liveBots() {
		must(w.api.Delete(w.ctx, &b))
	}
	for round := 0; len(w.liveBots()) > 0; round++ {
		if round == 200 {
			w.violate("end: bots still not gone after deletion: %d", len(w.liveBots()))
			return
		}
		w.reconcileAll()
		w.beatAll()
		w.advance(5 * time.Second)
	}
	w.settle("after deleting every bot")
	standby := map[string]bool{} // applications of free standby slots: their containers wait
	for _, s := range w.liveSlots() {
		if s.Status.Standby != "" && s.Spec.BotRef == nil {
			standby[s.Status.ApplicationUUID] = true
			if s.Status.Phase == v1.SlotDeploying {
				continue // a fresh standby container on its way
			}
		}
		if s.Spec.BotRef != nil || s.Status.Phase == v1.SlotBusy || s.Status.Phase == v1.SlotDeploying {
			w.violate("end: with no bot left, slot %s is %s and bound to %v", s.Name, s.Status.Phase, s.Spec.BotRef)
		}
	}
	// Coolify deletes the application of a server it cannot reach and forgets its container,
	// which nothing the API offers can reach again (sim.Orphans). The operator holds a
	// deletion while it knows the server is out; one in the minute before it knew is
	// Coolify's leak, counted, not the operator's.
	orphans := map[string]bool{}
	for _, a := range w.sim.Orphans() {
		orphans[a.UUID] = true
		w.counts["containers orphaned by a deletion during an outage"]++
	}
	for _, c := range w.runningContainers() {
		if standby[c.app] || orphans[c.app] {
			continue
		}
		app, _ := w.sim.App(c.app)
		w.violate("end: with no bot left, the container of %s (application %s, %s, deleting %v) still runs", c.slot, c.app, app.Status, app.Deleting)
	}
}

// drainRounds bounds the drain's rounds (5 s each): by then every bot has ended or runs. A
// start ends within its pool's deploymentTimeout (a poll and the slot's recovery added), a bot
// gets maxStartAttempts of them, and a pool runs maxConcurrentDeployments at once (at most
// the simulator's two builds of a server). A pool whose every start times out — an image its
// server lost since the pool pulled it, or a tag pushed again, on a deploymentTimeout shorter
// than the cold pull — ends its bots only after all their attempts, one batch after the
// other: seed 881256409367164 drained three such bots in just over the fixed 50 minutes the
// drain allowed before. 50 minutes at least, as before.
func (w *world) drainRounds() int {
	var need time.Duration
	slots := w.liveSlots()
	left := map[string]int{} // pool → its bots neither ended nor running
	for _, b := range w.liveBots() {
		if !ended(&b, slots) {
			left[b.Status.Pool]++
		}
	}
	for _, p := range w.pools {
		live := w.livePool(p.Name)
		n := left[p.Name]
		attempts := int(live.Spec.MaxStartAttempts)
		if attempts == 0 {
			attempts = v1.DefaultMaxStartAttempts
		}
		at := max(1, min(int(live.Spec.MaxConcurrentDeployments), 2))
		per := live.Spec.Timing.DeploymentTimeout.OrDefault(v1.DefaultDeploymentTimeout) + 2*time.Minute
		need += time.Duration((n*attempts+at-1)/at) * per
	}
	return max(600, int(need/(5*time.Second)))
}

func (w *world) allEnded() bool {
	slots := w.liveSlots()
	for _, b := range w.liveBots() {
		if !ended(&b, slots) {
			return false
		}
	}
	return true
}

// report is the failure message: the violations, how to replay, the last steps and logs.
func (w *world) report(steps int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "model check failed with seed %d at step %d of %d:\n", w.seed, w.step, steps)
	for _, v := range w.violations {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	fmt.Fprintf(&b, "replay: go test ./internal/modelcheck/ -run 'TestModelCheck$' -modelcheck.seed=%d -modelcheck.runs=1 -modelcheck.steps=%d\n", w.seed, steps)
	fmt.Fprintf(&b, "faults now: %+v, store down: %v (postgres: %v), refused by the CEL rules: %v\n",
		w.faults, w.store.isDown(), w.postgres, w.api.refused)
	fmt.Fprintf(&b, "last steps:\n%s\n", strings.Join(w.history, "\n"))
	fmt.Fprintf(&b, "bots:\n")
	for _, bot := range w.liveBots() {
		fmt.Fprintf(&b, "  %s uid=%s phase=%s pool=%s slot=%s queuedAt=%v reason=%s deleting=%v priority=%d claimed=%v starts=%d%s\n", bot.Name, bot.UID, bot.Status.Phase,
			bot.Status.Pool, bot.Status.SlotName, bot.Status.QueuedAt, bot.Status.Reason, !bot.DeletionTimestamp.IsZero(), bot.Spec.Priority,
			bot.Status.Binding != nil, len(bot.Status.StartAttempts), reservationOf(&bot))
	}
	fmt.Fprintf(&b, "slots:\n")
	for _, s := range w.liveSlots() {
		inCoolify := "none"
		if app, ok := w.sim.App(s.Status.ApplicationUUID); ok {
			inCoolify = fmt.Sprintf("%s deleting=%v", app.Status, app.Deleting)
		}
		fmt.Fprintf(&b, "  %s pool=%s phase=%s botRef=%v app=%s (Coolify: %s) deleting=%v msg=%q\n", s.Name, s.Spec.Pool, s.Status.Phase, s.Spec.BotRef,
			s.Status.ApplicationUUID, inCoolify, !s.DeletionTimestamp.IsZero(), s.Status.Message)
	}
	fmt.Fprintf(&b, "pools:\n")
	for _, p := range w.pools {
		live := w.livePool(p.Name)
		var conds []string
		for _, c := range live.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
		}
		fmt.Fprintf(&b, "  %s maxSlots=%d minIdle=%d standby=%q servers=%d deploymentTimeout=%s queued=%d reservations=%+v conditions=%v\n",
			p.Name, live.Spec.MaxSlots, live.Spec.MinIdle, live.Spec.Standby, len(live.Spec.Coolify.ServerList()),
			live.Spec.Timing.DeploymentTimeout, live.Status.Queued, live.Status.Reservations, conds)
	}
	fmt.Fprintf(&b, "Coolify's deployments in flight:\n")
	names := map[string]string{}
	for _, a := range w.sim.Apps() {
		names[a.UUID] = a.Name
	}
	for _, d := range w.sim.Deployments() {
		if d.Status == "queued" || d.Status == "in_progress" {
			fmt.Fprintf(&b, "  %s %s (%s) on %s: %s since %s, worker %v, %s cold %v\n", d.UUID, names[d.AppUUID], d.AppUUID, d.ServerUUID,
				d.Status, d.Created.Format("15:04:05"), d.HasWorker, d.Ref, d.Cold)
		}
	}
	fmt.Fprintf(&b, "controller log (last lines):\n%s\n", w.log.dump())
	return b.String()
}

// summary lists what the run did, for the log: actions, transitions, faults.
func (w *world) summary() string {
	keys := make([]string, 0, len(w.counts))
	for k := range w.counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, w.counts[k])
	}
	return strings.Join(parts, ", ")
}

// reservationOf describes a scheduled bot's start, reservation and maxDuration for a report.
func reservationOf(b *v1.Bot) string {
	if b.Spec.StartTime == nil {
		return ""
	}
	r := "undecided"
	if c := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionReserved); c != nil {
		r = c.Reason
	}
	return fmt.Sprintf(" start=%s reserved=%s maxDuration=%s", b.Spec.StartTime.Format("15:04:05"), r, b.Spec.MaxDuration)
}
