package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify/sim"
)

// Start kinds: did the bot's deployment pull the image, or find it in the server's cache? Or
// did it have no deployment of its own: a standby container (pool standby Running) took it?
const (
	startWarm    = "warm"
	startCold    = "cold"
	startStandby = "standby"
)

// How a bot got its slot.
const (
	slotWasIdle  = "idle"  // free and Idle when the bot asked: a warm slot (minIdle)
	slotWasNew   = "new"   // created by the pool for the waiting bots
	slotWasFreed = "freed" // released by another bot while this one waited
)

// row is one bot of the summary.
type row struct {
	botRecord
	slotWas string
	start   string // startWarm, startCold, startStandby, or "" when it never started
	depUUID string // the bot's own deployment
	// deployment is how long Coolify took for the bot's deployment (pull and start), without
	// the wait at the deploy gate before it was requested; -1 when it did not finish.
	deployment time.Duration
}

// report is the summary's numbers, kept apart from the printing so the test can check them.
type report struct {
	rows         []row
	done, failed int
	reasons      map[v1.BotReason]int
	warm, cold   []time.Duration // Coolify's deployment durations, per start kind
	standby      string          // the pool's spec.standby
	// toRunning is creation (or leaving Scheduled) → first report, per start kind.
	toRunning map[string][]time.Duration
	// standbyDeploys are deployments with no bot of a standby pool: recycles (a fresh
	// container after a bot) and first containers (of a new slot, or replacing a lost one).
	recycles       []time.Duration // their deployment durations (-1: not finished)
	firstStandby   int
	readyAgain     []time.Duration // a bot's end → its slot's container Ready again
	notReadyYet    int             // slots of finished bots not Ready again by the summary
	standbyCrashed []string        // bots bound to a crashed standby container before it was noticed
	standbyCrashes int             // standby containers that crashed with no bot
	pullHitStandby bool            // the injected pull failure failed a deployment with no bot
	// requestsRun counts Coolify requests since the burst, requestsStarting those sent while
	// some bot waited to start (between its creation and its first report).
	requestsRun, requestsStarting int
	toBound                       []time.Duration
	queueWaits                    []time.Duration // of the bots that waited for a slot to be freed
	slotWas                       map[string]int
	inversions                    []string
	recoveries                    []string
	retired                       []string
	requests                      int
	serverErrors                  int
	tooMany                       int
	pullFailed                    []string // bots that failed on the injected pull failure
	// pullRetried are the bots whose start failed (without an outage: on the injected pull
	// failure) and was retried (status.startAttempts), unless their retries ran out.
	pullRetried   []string
	crashed       []string // bots whose container crashed
	containerErrs []error
	// servers is each server's share, outage what the server taken down did to the run
	// (pools on several servers only); down is when that server was down.
	servers []serverSummary
	outage  *outageSummary
	down    downWindow
	// operatorErrors and operatorPanics count the operator's error log lines and the panics
	// its reconcilers recovered from; both should be rare, panics never.
	operatorErrors, operatorPanics int
	took                           time.Duration
}

// classify finds, for each bot, the deployment that started it and whether the image was cached
// then. Each server has its own cache: the image is cached there from the first deployment
// that finished there (or from the start on a server in warm, seeded with it); the operator
// lets the first deployment of a cold image on a server run alone, so every deployment there
// requested before that moment is the pull, every later one a cache hit.
func classify(bots []botRecord, deps []sim.DeploymentInfo, warm map[string]bool) []row {
	cachedAt := map[string]time.Time{}
	for _, d := range deps {
		if at := cachedAt[d.ServerUUID]; d.Status == "finished" && (at.IsZero() || d.Finished.Before(at)) {
			cachedAt[d.ServerUUID] = d.Finished
		}
	}
	rows := make([]row, 0, len(bots))
	for _, b := range bots {
		r := row{botRecord: b, deployment: -1}
		if b.standby {
			r.start = startStandby // no deployment of its own: the slot's next one is a recycle
			rows = append(rows, r)
			continue
		}
		if b.app != "" && !b.bound.IsZero() {
			// The bot's deployment is the one of its application requested closest to its binding.
			var best *sim.DeploymentInfo
			for i := range deps {
				d := &deps[i]
				if d.AppUUID == b.app && (best == nil || absDur(d.Created.Sub(b.bound)) < absDur(best.Created.Sub(b.bound))) {
					best = d
				}
			}
			if best != nil {
				r.depUUID = best.UUID
				if best.Status == "finished" {
					r.deployment = best.Finished.Sub(best.Created)
				}
				r.start = startWarm
				if at := cachedAt[best.ServerUUID]; !warm[best.ServerUUID] && (at.IsZero() || best.Created.Before(at)) {
					r.start = startCold
				}
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// slotWas tells how the bot got its slot: another bot released it while this one waited; the
// pool created it once bots arrived and this bot is its first; else it was idle already (kept
// warm by minIdle, or left free by an earlier bot).
func slotWas(b botRecord, bots []botRecord, created map[string]time.Time, firstAsked time.Time) string {
	if b.bound.IsZero() {
		return ""
	}
	first := true
	for _, o := range bots {
		if o.name == b.name || o.slot != b.slot || o.bound.IsZero() || !o.bound.Before(b.bound) {
			continue
		}
		first = false
		if !o.finished.IsZero() && o.finished.After(b.asked) && !o.finished.After(b.bound) {
			return slotWasFreed
		}
	}
	if c, ok := created[b.slot]; ok && first && c.After(firstAsked) {
		return slotWasNew
	}
	return slotWasIdle
}

// pullRetried names a bot whose start the injected pull failure failed and the operator
// retried: any bot with a failed start when no server was taken down, whatever it met after
// (another fault may end it Fatal: the crash), except one whose retries ran out (pullFailed).
func pullRetried(b botRecord, down downWindow) (string, bool) {
	if b.attempts == 0 || down.server != "" || b.phase == v1.BotFatal && b.reason == v1.ReasonDeploymentFailed {
		return "", false
	}
	if b.phase == v1.BotFatal {
		return fmt.Sprintf("%s (which then ended Fatal/%s)", b.name, b.reason), true
	}
	return b.name, true
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// newReport computes the summary. warm names the servers seeded with the image; down is the
// demo's server outage (zero: none), whose failed deployments are not the injected pull failure.
func newReport(bots []botRecord, slots []slotRecord, f *faults, failures []error, burstAt time.Time, standby string,
	warm map[string]bool, down downWindow) report {
	deps := f.sim.Deployments()
	rp := report{rows: classify(bots, deps, warm), reasons: map[v1.BotReason]int{}, slotWas: map[string]int{}, down: down,
		containerErrs: failures, took: time.Since(burstAt), standby: standby, toRunning: map[string][]time.Duration{}}
	created := map[string]time.Time{}
	for _, s := range slots {
		created[s.name] = s.created
	}
	var firstAsked time.Time
	for _, b := range bots {
		if !b.asked.IsZero() && (firstAsked.IsZero() || b.asked.Before(firstAsked)) {
			firstAsked = b.asked
		}
	}
	for i := range rp.rows {
		rp.rows[i].slotWas = slotWas(rp.rows[i].botRecord, bots, created, firstAsked)
	}
	for _, r := range rp.rows {
		switch r.phase {
		case v1.BotDone:
			rp.done++
		case v1.BotFatal:
			rp.failed++
			rp.reasons[r.reason]++
			if r.reason == v1.ReasonDeploymentFailed && !down.failedIn(deps, r.depUUID) {
				rp.pullFailed = append(rp.pullFailed, r.name)
			}
		}
		if name, ok := pullRetried(r.botRecord, down); ok {
			rp.pullRetried = append(rp.pullRetried, name)
		}
		if !r.bound.IsZero() && !r.asked.IsZero() {
			rp.toBound = append(rp.toBound, r.bound.Sub(r.asked))
			rp.slotWas[r.slotWas]++
			if r.slotWas == slotWasFreed {
				rp.queueWaits = append(rp.queueWaits, r.bound.Sub(r.asked))
			}
		}
		if !r.running.IsZero() && !r.asked.IsZero() && r.start != "" {
			rp.toRunning[r.start] = append(rp.toRunning[r.start], r.running.Sub(r.asked))
		}
		if !r.running.IsZero() && r.deployment >= 0 {
			switch r.start {
			case startWarm:
				rp.warm = append(rp.warm, r.deployment)
			case startCold:
				rp.cold = append(rp.cold, r.deployment)
			}
		}
	}
	for _, c := range f.crashes() {
		if name := botOfApp(bots, c.app, c.at); name != "" {
			rp.crashed = append(rp.crashed, name)
			continue
		}
		rp.standbyCrashes++
		for _, b := range bots {
			if b.app == c.app && b.bound.After(c.at) && b.reason == v1.ReasonStandbyLost {
				rp.standbyCrashed = append(rp.standbyCrashed, b.name)
			}
		}
	}
	rp.standbyDeployments(rp.rows, slots, deps)
	rp.requestsRun, rp.requestsStarting = countRequests(f.sim.Requests(), bots, burstAt)
	rp.inversions = inversions(bots)
	for _, s := range slots {
		for i, reason := range s.errors {
			what := fmt.Sprintf("%s: Error (%s)", s.name, reason)
			if i < len(s.recovery) {
				what += fmt.Sprintf(" → Idle in %s", seconds(s.recovery[i]))
			}
			rp.recoveries = append(rp.recoveries, what)
		}
		if s.deleted {
			rp.retired = append(rp.retired, s.name)
		}
	}
	sort.Strings(rp.recoveries)
	rp.requests, rp.serverErrors, rp.tooMany = f.coolifyErrors()
	return rp
}

// standbyDeployments sorts the deployments no bot had (a standby pool's) into recycles, after
// a bot of the same application ended, and first containers; and measures how long after a
// bot's end its slot was Ready again.
func (rp *report) standbyDeployments(rows []row, slots []slotRecord, deps []sim.DeploymentInfo) {
	own := map[string]bool{}
	for _, r := range rows {
		if r.depUUID != "" {
			own[r.depUUID] = true
		}
	}
	for _, d := range deps {
		if own[d.UUID] {
			continue
		}
		if d.Status == "failed" && !rp.down.covers(d.ServerUUID, d.Finished) {
			rp.pullHitStandby = true
		}
		recycle := false
		for _, r := range rows {
			if r.app == d.AppUUID && !r.finished.IsZero() && r.finished.Before(d.Created) {
				recycle = true
				break
			}
		}
		switch {
		case !recycle:
			rp.firstStandby++
		case d.Status == "finished":
			rp.recycles = append(rp.recycles, d.Finished.Sub(d.Created))
		default:
			rp.recycles = append(rp.recycles, -1)
		}
	}
	if rp.standby != string(v1.StandbyRunning) {
		return
	}
	ready := map[string][]time.Time{}
	for _, s := range slots {
		ready[s.name] = s.readyAt
	}
	for _, r := range rows {
		if r.slot == "" || r.finished.IsZero() || r.running.IsZero() {
			continue
		}
		i := slices.IndexFunc(ready[r.slot], func(t time.Time) bool { return t.After(r.finished) })
		if i < 0 {
			rp.notReadyYet++
			continue
		}
		rp.readyAgain = append(rp.readyAgain, ready[r.slot][i].Sub(r.finished))
	}
}

// countRequests counts the Coolify requests sent since the burst, and those sent while some
// bot waited to start: between its creation (or leaving Scheduled) and its first report.
func countRequests(log []sim.Request, bots []botRecord, since time.Time) (run, starting int) {
	for _, req := range log {
		if req.At.Before(since) {
			continue
		}
		run++
		for _, b := range bots {
			if b.asked.IsZero() || req.At.Before(b.asked) {
				continue
			}
			end := b.running
			if end.IsZero() {
				end = b.finished // never ran: it waited until it failed
			}
			if end.IsZero() || req.At.Before(end) {
				starting++
				break
			}
		}
	}
	return run, starting
}

// inversions finds pairs served against the queue order: a bot bound while one of higher
// priority had been queued for more than a second (the margin absorbs the lag between a slot's
// binding and the bot's status that mirrors it).
func inversions(bots []botRecord) []string {
	var out []string
	for _, hi := range bots {
		if hi.queued.IsZero() {
			continue
		}
		for _, lo := range bots {
			if lo.priority >= hi.priority || lo.bound.IsZero() {
				continue
			}
			// hi was still waiting when lo got its slot.
			waiting := hi.bound.After(lo.bound) || hi.bound.IsZero() && (hi.finished.IsZero() || hi.finished.After(lo.bound))
			if waiting && hi.queued.Before(lo.bound.Add(-time.Second)) {
				out = append(out, fmt.Sprintf("%s (priority %d) before %s (priority %d)", lo.name, lo.priority, hi.name, hi.priority))
			}
		}
	}
	return out
}

func (rp report) print(out io.Writer) {
	w := printer{out}
	rows := slices.Clone(rp.rows)
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i].bound, rows[j].bound
		if a.IsZero() != b.IsZero() {
			return !a.IsZero()
		}
		return a.Before(b)
	})
	w.f("\nSummary: %d bots in %s — %d Done, %d Fatal\n\n", len(rows), rp.took.Round(time.Second), rp.done, rp.failed)
	w.f("%-22s %5s  %-22s %-5s %7s %8s %8s %8s %8s  %s\n", "BOT (in binding order)", "PRIO", "SLOT", "WAS", "START", "→BOUND", "DEPLOY", "→RUNNING", "RAN", "RESULT")
	for _, r := range rows {
		result := string(r.phase)
		if r.phase == v1.BotFatal {
			result += "/" + string(r.reason)
		}
		if r.scheduled {
			result += " (scheduled)"
		}
		w.f("%-22s %5d  %-22s %-5s %7s %8s %8s %8s %8s  %s\n", r.name, r.priority, orDash(r.slot), orDash(r.slotWas), orDash(r.start),
			seconds(since(r.asked, r.bound)), seconds(since(r.bound, r.running)), seconds(since(r.asked, r.running)),
			seconds(since(r.running, r.finished)), result)
	}
	w.f("\nWAS: the slot was idle when the bot asked (warm, kept by minIdle or left free), new (created by\n" +
		"the pool for the queue), or freed by another bot while this one waited. START: warm (image cached)\n" +
		"or cold (image pulled), or standby (a Ready standby container took it: no deployment of its own).\n" +
		"→BOUND and →RUNNING count from when the bot asked for a slot (its creation; for a scheduled bot,\n" +
		"the moment it left Scheduled), so →BOUND is its queue wait. DEPLOY is binding → running: a warm\n" +
		"start, a cold pull, a wait at the deploy gate behind one, or a standby container learning its\n" +
		"binding. RAN is its container's life until Done or Fatal.\n\n")

	w.f("Totals\n")
	w.f("  bots          %d Done, %d Fatal%s\n", rp.done, rp.failed, reasonList(rp.reasons))
	w.f("  time to bound median %s, max %s; %d found an idle slot, %d got a new slot, %d waited for a freed slot\n",
		seconds(median(rp.toBound)), seconds(maxOf(rp.toBound)), rp.slotWas[slotWasIdle], rp.slotWas[slotWasNew], rp.slotWas[slotWasFreed])
	w.f("  queue waits   for a freed slot: median %s, max %s", seconds(median(rp.queueWaits)), seconds(maxOf(rp.queueWaits)))
	if len(rp.inversions) == 0 {
		w.f("; served by priority, then arrival (no inversion seen)\n")
	} else {
		w.f("; %d served out of priority order: %s\n", len(rp.inversions), strings.Join(rp.inversions, "; "))
	}
	w.f("  starts        %d warm (image cached, deployment median %s), %d cold (image pulled: %s)",
		len(rp.warm), seconds(median(rp.warm)), len(rp.cold), durations(rp.cold))
	if n := len(rp.toRunning[startStandby]); n > 0 || rp.standby == string(v1.StandbyRunning) {
		w.f(", %d standby (no deployment of their own)", n)
	}
	w.f("\n")
	w.f("  start times   creation → running (first report), median / p90 / max:%s\n", rp.startTimes())
	if rp.standby == string(v1.StandbyRunning) {
		w.f("  recycles      %d fresh containers after a bot, off the start path (deployment median %s, max %s); "+
			"slot Ready again after its bot: median %s, max %s",
			len(rp.recycles), seconds(median(finished(rp.recycles))), seconds(maxOf(rp.recycles)),
			seconds(median(rp.readyAgain)), seconds(maxOf(rp.readyAgain)))
		if rp.notReadyYet > 0 {
			w.f(" (%d not yet)", rp.notReadyYet)
		}
		w.f("; %d first containers (warm-up, new or lost slots)\n", rp.firstStandby)
	}
	rp.printServers(w)
	if len(rp.recoveries) == 0 {
		w.f("  recoveries    none needed\n")
	} else {
		w.f("  recoveries    %s\n", strings.Join(rp.recoveries, "; "))
	}
	if len(rp.retired) > 0 {
		w.f("  retired slots %s\n", strings.Join(rp.retired, ", "))
	}
	w.f("  Coolify       %d requests since the burst, %d of them while a bot waited to start (%d in all, with the warm-up); "+
		"%d answered 5xx and %d answered 429 (injected or rate-limited), all retried\n",
		rp.requestsRun, rp.requestsStarting, rp.requests, rp.serverErrors, rp.tooMany)
	if len(rp.pullFailed) > 0 {
		w.f("  pull failure  the injected failed pull failed %s (DeploymentFailed); its slot went to Error and recovered\n", strings.Join(rp.pullFailed, ", "))
	}
	if len(rp.pullRetried) > 0 {
		w.f("  pull failure  the injected failed pull failed the start of %s (DeploymentFailed); the start was retried (status.startAttempts) and ran\n", strings.Join(rp.pullRetried, ", "))
	}
	if len(rp.pullFailed) == 0 && len(rp.pullRetried) == 0 && rp.pullHitStandby {
		if rp.standby == string(v1.StandbyRunning) {
			w.f("  pull failure  the injected failed pull hit a standby container's deployment, which no bot waited for; its slot went to Error and recovered\n")
		} else {
			// A failed deployment no bot's final one: a start that failed and was retried.
			w.f("  pull failure  the injected failed pull failed a bot's start, which was retried on another slot (status.startAttempts); its slot went to Error and recovered\n")
		}
	}
	if rp.standbyCrashes > 0 {
		w.f("  crash         a standby container crashed while it waited for a bot; its slot stopped being offered once it stopped asking for work")
		if len(rp.standbyCrashed) > 0 {
			w.f(", but %s was bound to it before and failed (StandbyLost)", strings.Join(rp.standbyCrashed, ", "))
		}
		w.f("\n")
	}
	if len(rp.crashed) > 0 {
		w.f("  crash         the container of %s crashed mid-meeting; without heartbeats the operator failed it (HeartbeatTimeout) and freed its slot\n", strings.Join(rp.crashed, ", "))
	}
	if rp.operatorPanics > 0 {
		w.f("  operator      %d error log lines, %d recovered panics: see its log\n", rp.operatorErrors, rp.operatorPanics)
	} else {
		w.f("  operator      %d error log lines (mostly the injected faults), no panic\n", rp.operatorErrors)
	}
	if len(rp.containerErrs) == 0 {
		w.f("  bot API       every simulated bot got the answers it expected\n")
	} else {
		w.f("  bot API       %d simulated bots met unexpected answers:\n", len(rp.containerErrs))
		for _, err := range rp.containerErrs {
			w.f("                  %v\n", err)
		}
	}
}

// countLog counts the error lines and recovered panics in the operator's JSON log.
func countLog(path string) (errors, panics int) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, `"level":"error"`) {
			errors++
		}
		if strings.Contains(line, `"msg":"Observed a panic"`) {
			panics++
		}
	}
	return errors, panics
}

func since(from, to time.Time) time.Duration {
	if from.IsZero() || to.IsZero() {
		return -1
	}
	return to.Sub(from)
}

func reasonList(m map[v1.BotReason]int) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for r, n := range m {
		parts = append(parts, fmt.Sprintf("%d %s", n, r))
	}
	sort.Strings(parts)
	return " (" + strings.Join(parts, ", ") + ")"
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return -1
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// p90 is the nearest-rank 90th percentile; -1 for none.
func p90(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return -1
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)*9+9)/10-1]
}

// finished drops the durations of deployments that did not finish (-1).
func finished(ds []time.Duration) []time.Duration {
	return slices.DeleteFunc(slices.Clone(ds), func(d time.Duration) bool { return d < 0 })
}

// startTimes is the comparison of creation → running by how the bots started.
func (rp report) startTimes() string {
	var b strings.Builder
	for _, kind := range []string{startStandby, startWarm, startCold} {
		ds := rp.toRunning[kind]
		if kind == startStandby && len(ds) == 0 && rp.standby != string(v1.StandbyRunning) {
			continue
		}
		if len(ds) == 0 {
			fmt.Fprintf(&b, " %s none;", kind)
			continue
		}
		fmt.Fprintf(&b, " %s %d: %s / %s / %s;", kind, len(ds), seconds(median(ds)), seconds(p90(ds)), seconds(maxOf(ds)))
	}
	all := slices.Concat(rp.toRunning[startStandby], rp.toRunning[startWarm], rp.toRunning[startCold])
	fmt.Fprintf(&b, " all %d: %s / %s / %s", len(all), seconds(median(all)), seconds(p90(all)), seconds(maxOf(all)))
	return b.String()
}

func maxOf(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return -1
	}
	return slices.Max(ds)
}

func durations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = seconds(d)
	}
	return strings.Join(parts, ", ")
}
