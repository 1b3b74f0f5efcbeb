package controllers

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/bot"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/policy"
	slotctrl "botpool.dev/botpool/controllers/slot"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/slottoken"
)

// soakObserver checks the invariants of docs/invariants.md on the soak's namespace while it
// runs, the pool's convergence once the faults stop, and every failed bot against what the
// soak did to it. A state the controllers leave within milliseconds (a bot just queued next
// to a slot just freed) is legal in passing: it counts as a violation only when it lasts grace.
//
// Where each invariant is checked: 1 and 2 every round, continuously (watchOneTwo) and on every
// slot write (oneTwoAsWritten); 3, 5 and 6 every round, as states that must not last; 4
// between rounds (queueOrder); 8, 9 and 10
// at the end, on every failed bot (explainFailures: failed for silence while it beat, failed
// deploying while it beat, or failed for a reason nothing injected). 7 (Alive again within
// one heartbeat) needs a bot that stops and resumes beating on purpose:
// TestHeartbeatLossAndReturn checks it. 12 as the containers run (given, freshContainer,
// reportsFor), on every binding of a standby slot as written (watchBindings), and every round
// against the claims the bots record (checkClaims). 13 and 14 every round (checkServers), 15
// whenever the pools must converge (serversBack), and the rules of retried starts every round
// (checkStarts) and on every failed bot (checkFailedStart): soak_servers_test.go.
type soakObserver struct {
	t    *testing.T
	ns   string
	pool *v1.BotPool
	sim  *sim.Server
	bots *soakBots
	// grace is real time: the controllers react in milliseconds, a loaded machine in seconds.
	grace time.Duration
	// lateness is simulated time a timer may fire late: the controllers requeue in real time
	// while the clock jumps, so the soak nudges waiting objects every few steps.
	lateness time.Duration

	suspects    map[string]*suspect
	queuedSince map[types.UID]time.Time // real time a bot was first seen waiting
	prevQueued  map[types.UID]bool
	startedWith map[types.UID]int // bots last seen with a slot: their start attempts then (checkStarts)
	findings    *soakFindings
	checks      int
	bindings    atomic.Int64 // bindings to standby slots checked (watchBindings)
}

// soakFindings are the violations of the whole run, from every pool's observer and from the
// binding watchers' goroutines.
type soakFindings struct {
	t    *testing.T
	mu   sync.Mutex
	list []string
	// errorf reports the first violations; nil is t.Errorf (a test of the checks themselves
	// logs them instead).
	errorf func(format string, args ...any)
}

func (f *soakFindings) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.list = append(f.list, msg)
	errorf := f.errorf
	if errorf == nil {
		errorf = f.t.Errorf
	}
	if len(f.list) <= 20 {
		errorf("at %s: %s", clk.Now().Format(time.TimeOnly), msg)
	}
}

func (f *soakFindings) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.list)
}

type suspect struct {
	since    time.Time
	reported bool
}

func newSoakObserver(t *testing.T, ns string, pool *v1.BotPool, s *sim.Server, bots *soakBots, findings *soakFindings, grace, lateness time.Duration) *soakObserver {
	return &soakObserver{t: t, ns: ns, pool: pool, sim: s, bots: bots, findings: findings, grace: grace, lateness: lateness,
		suspects: map[string]*suspect{}, queuedSince: map[types.UID]time.Time{}}
}

// violate records a broken invariant; the first ones fail the test at once, with context.
func (o *soakObserver) violate(format string, args ...any) {
	o.findings.violate("pool %s: "+format, append([]any{o.pool.Name}, args...)...)
}

// restarted forgets what was in passing: a new manager starts from empty caches.
func (o *soakObserver) restarted() {
	o.suspects = map[string]*suspect{}
	o.queuedSince = map[types.UID]time.Time{}
	o.prevQueued = nil
}

// soakSnapshot is one read of the namespace: bots first, then slots, so a binding the slot
// list shows may be newer than the bot list, never older.
type soakSnapshot struct {
	// pool is the pool as the snapshot read it (its servers' health decides which free
	// slots are offered); nil in the checks' own tests.
	pool    *v1.BotPool
	bots    []v1.Bot
	slots   []v1.BotPoolSlot
	byUID   map[types.UID]*v1.Bot
	boundTo map[types.UID]*v1.BotPoolSlot
}

func (o *soakObserver) snapshot() (*soakSnapshot, error) {
	ctx := context.Background()
	var bots v1.BotList
	if err := env.Client.List(ctx, &bots, client.InNamespace(o.ns)); err != nil {
		return nil, err
	}
	var slots v1.BotPoolSlotList
	if err := env.Client.List(ctx, &slots, client.InNamespace(o.ns)); err != nil {
		return nil, err
	}
	pool := &v1.BotPool{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o.pool), pool); err != nil {
		return nil, err
	}
	s := &soakSnapshot{pool: pool, bots: bots.Items, slots: slots.Items, byUID: map[types.UID]*v1.Bot{}, boundTo: map[types.UID]*v1.BotPoolSlot{}}
	for i := range s.bots {
		s.byUID[s.bots[i].UID] = &s.bots[i]
	}
	for i := range s.slots {
		if ref := s.slots[i].Spec.BotRef; ref != nil {
			s.boundTo[ref.UID] = &s.slots[i]
		}
	}
	return s, nil
}

// free lists the slots a waiting bot could take now: those the dispatcher offers (a free slot
// on a server Coolify reports out waits for it, whatever the length of the outage).
func (s *soakSnapshot) free() []*v1.BotPoolSlot {
	var out []*v1.BotPoolSlot
	for i := range s.slots {
		if s.pool != nil && policy.Offered(&s.slots[i], s.pool) || s.pool == nil && policy.IsFree(&s.slots[i]) {
			out = append(out, &s.slots[i])
		}
	}
	return out
}

// waiting reports whether b waits in its pool's queue: Queued, not bound, not being deleted.
func (s *soakSnapshot) waiting(b *v1.Bot) bool {
	return b.Status.Phase == v1.BotQueued && s.boundTo[b.UID] == nil && b.DeletionTimestamp.IsZero()
}

// running phases are those of a bot that holds a slot.
func running(p v1.BotPhase) bool {
	switch p {
	case v1.BotDeploying, v1.BotJoiningCall, v1.BotInWaitingRoom, v1.BotInCall, v1.BotLeaving, v1.BotCallEnded:
		return true
	}
	return false
}

// check runs one round of the invariants on a fresh snapshot.
func (o *soakObserver) check(snap *soakSnapshot) {
	o.checks++
	seen := map[string]bool{}
	flag := func(key, format string, args ...any) {
		seen[key] = true
		o.suspect(key, format, args...)
	}
	now := clk.Now()
	o.invariantsOneTwo(snap)
	free := snap.free()
	for i := range snap.bots {
		b := &snap.bots[i]
		if b.Status.Phase.Terminal() || !b.DeletionTimestamp.IsZero() {
			continue
		}
		key := string(b.UID)
		switch p := b.Status.Phase; {
		case p == "" || p == v1.BotPending:
			flag("5/pending/"+key, "invariant 5: bot %s stays Pending (pool %s exists)", b.Name, o.pool.Name)
		case snap.waiting(b):
			if b.Status.QueuedAt == nil {
				flag("5/timer/"+key, "invariant 5: bot %s is Queued without a queue time, so without a deadline", b.Name)
				continue
			}
			// A bot back in the queue after a failed start waits afresh from that attempt
			// (docs/api.md, "Retried starts"): QueueDeadline.
			if late := now.Sub(bot.QueueDeadline(b, o.pool)); late > o.lateness {
				flag("5/late/"+key, "invariant 5: bot %s is still Queued %s past its deadline", b.Name, late)
			}
			if len(free) > 0 {
				flag("3/"+key, "invariant 3: bot %s is Queued while slot %s is free", b.Name, free[0].Name)
			}
		case running(p) && snap.boundTo[b.UID] == nil:
			flag("5/unbound/"+key, "invariant 5: bot %s is %s without a slot", b.Name, p)
		}
	}
	for i := range snap.slots {
		s := &snap.slots[i]
		if ref := s.Spec.BotRef; ref != nil {
			if b := snap.byUID[ref.UID]; b == nil || b.Status.Phase.Terminal() {
				flag("6/"+s.Name+"/"+string(ref.UID), "invariant 6: slot %s stays bound to bot %s, which is finished or deleted", s.Name, ref.Name)
			}
		}
	}
	o.queueOrder(snap, now)
	for k := range o.suspects {
		if !seen[k] {
			delete(o.suspects, k)
		}
	}
}

// suspect notes a state that is legal only in passing; it is a violation once it lasted grace.
func (o *soakObserver) suspect(key, format string, args ...any) {
	s := o.suspects[key]
	if s == nil {
		o.suspects[key] = &suspect{since: time.Now()}
		return
	}
	if !s.reported && time.Since(s.since) > o.grace {
		s.reported = true
		o.violate(format+" (for %s)", append(args, time.Since(s.since).Round(time.Millisecond))...)
	}
}

// invariantsOneTwo: a slot holds at most one bot and a bot at most one slot; the pool stays
// within maxSlots (slot names are unique by the API server's construction).
func (o *soakObserver) invariantsOneTwo(snap *soakSnapshot) {
	if n := len(snap.slots); n > int(o.pool.Spec.MaxSlots) {
		o.violate("invariant 2: the pool holds %d slots, maxSlots %d", n, o.pool.Spec.MaxSlots)
	}
	holder := map[types.UID]string{}
	for i := range snap.slots {
		if ref := snap.slots[i].Spec.BotRef; ref != nil {
			if other, dup := holder[ref.UID]; dup {
				o.violate("invariant 1: bot %s is bound to %s and %s", ref.Name, other, snap.slots[i].Name)
			}
			holder[ref.UID] = snap.slots[i].Name
		}
	}
}

// queueOrder checks invariant 4 between two rounds: a bot that waited at the last round and
// has been served since must not have overtaken a bot that still waits and was ahead of it
// (higher priority, or the same and queued earlier). Only waiters seen for grace count, so
// the dispatcher's cache has certainly seen them; waiters past their deadline may be skipped.
func (o *soakObserver) queueOrder(snap *soakSnapshot, now time.Time) {
	realNow := time.Now()
	waiting := map[types.UID]bool{}
	for i := range snap.bots {
		if b := &snap.bots[i]; snap.waiting(b) {
			waiting[b.UID] = true
			if _, ok := o.queuedSince[b.UID]; !ok {
				o.queuedSince[b.UID] = realNow
			}
		}
	}
	for uid := range o.prevQueued {
		b := snap.byUID[uid]
		if b == nil || waiting[uid] || !served(b, snap) {
			continue
		}
		for ouid := range waiting {
			ahead := snap.byUID[ouid]
			if realNow.Sub(o.queuedSince[ouid]) < o.grace || ahead.Status.QueuedAt == nil ||
				!now.Before(ahead.Status.QueuedAt.Add(bot.QueueTimeout(ahead, o.pool))) {
				continue
			}
			if policy.QueueLess(ahead, b) {
				o.violate("invariant 4: bot %s (priority %d, queued %s) was served while %s (priority %d, queued %s) waited ahead of it",
					b.Name, b.Spec.Priority, policy.QueuedAt(b).Format(time.TimeOnly), ahead.Name, ahead.Spec.Priority, policy.QueuedAt(ahead).Format(time.TimeOnly))
			}
		}
	}
	o.prevQueued = waiting
	for uid := range o.queuedSince {
		if !waiting[uid] {
			delete(o.queuedSince, uid)
		}
	}
}

// served reports whether a bot that waited got a slot: bound, past Queued, or ended other
// than by its queue timeout.
func served(b *v1.Bot, snap *soakSnapshot) bool {
	switch {
	case snap.boundTo[b.UID] != nil, running(b.Status.Phase), b.Status.Phase == v1.BotDone:
		return true
	case b.Status.Phase == v1.BotFatal:
		return b.Status.Reason != v1.ReasonQueueTimeout
	}
	return false
}

// poolApps are the simulator's applications that carry the pool's tag, by uuid.
func (o *soakObserver) poolApps() map[string]sim.AppInfo {
	tag := coolifyview.ClusterPoolTag(suiteCluster, o.pool.Namespace, o.pool.Name)
	out := map[string]sim.AppInfo{}
	for _, a := range o.sim.Apps() {
		for _, t := range a.Tags {
			if t == tag {
				out[a.UUID] = a
			}
		}
	}
	return out
}

// converged says what keeps the pool from being settled, or nil: every slot Idle and free
// with its container stopped, or Deploying/Busy for a live bot; no slot bound to a finished
// or deleted bot; every slot's application in Coolify and every application of the pool a
// slot's; no bot waiting while a slot is free; minIdle free slots when nobody waits. With
// quiet, nothing may run any more: every bot ended and every slot is Idle.
//
// A slot Idle and bound is on its way while it waits for the deploy gate behind deployments in
// flight: the pool's limit of concurrent deployments (one for an image not yet pulled) holds it
// back until one of them ends, and they end on the simulated clock, which stands still while
// settle waits in real time.
func (o *soakObserver) converged(quiet bool) error {
	snap, err := o.snapshot()
	if err != nil {
		return err
	}
	deploying := 0
	for i := range snap.slots {
		if snap.slots[i].Status.Phase == v1.SlotDeploying {
			deploying++
		}
	}
	apps := o.poolApps()
	now := clk.Now()
	timeout := o.pool.Spec.Timing.HeartbeatTimeout.OrDefault(v1.DefaultHeartbeatTimeout)
	owned := map[string]bool{}
	// free: slots that take a bot now or once their recycle ends; ready: standby slots that
	// take one now (a Stopped pool's free slots all do).
	free, ready := 0, 0
	standby := o.pool.Spec.Standby.Running()
	for i := range snap.slots {
		s := &snap.slots[i]
		uuid := s.Status.ApplicationUUID
		app, ok := apps[uuid]
		switch {
		case !s.DeletionTimestamp.IsZero():
			return fmt.Errorf("slot %s is being deleted", s.Name)
		case !ok || app.Deleting:
			return fmt.Errorf("slot %s (%s) has no application %q in Coolify", s.Name, s.Status.Phase, uuid)
		}
		owned[uuid] = true
		var bot *v1.Bot
		if ref := s.Spec.BotRef; ref != nil {
			if bot = snap.byUID[ref.UID]; bot == nil || bot.Status.Phase.Terminal() {
				return fmt.Errorf("slot %s is still bound to bot %s, which is finished or deleted", s.Name, ref.Name)
			}
		}
		switch s.Status.Phase {
		case v1.SlotIdle:
			// A container stops a moment after the stop request (sim.DefaultStopDelay).
			stopping := s.Status.PhaseSince != nil && now.Sub(s.Status.PhaseSince.Time) <= sim.DefaultStopDelay
			switch {
			case bot != nil && !quiet && deploying > 0 && strings.HasSuffix(s.Status.Message, slotctrl.GateWaitMessage):
				continue
			case bot != nil:
				return fmt.Errorf("slot %s is Idle and bound to bot %s, with %d slots Deploying (%s)", s.Name, bot.Name, deploying, s.Status.Message)
			case standby:
				if err := o.standbySettled(s, app, quiet); err != nil {
					return err
				}
				if s.Status.Standby == v1.StandbyReady {
					ready++
				}
			case app.Running && !stopping:
				return fmt.Errorf("slot %s is Idle but its container runs (%s)", s.Name, app.TrueStatus)
			}
			free++
		case v1.SlotDeploying, v1.SlotBusy:
			if bot == nil && standby && s.Status.Phase == v1.SlotDeploying && s.Status.Standby == v1.StandbyStarting && !quiet {
				free++ // a fresh standby container on its way
				continue
			}
			if bot == nil {
				return fmt.Errorf("slot %s is %s without a bot", s.Name, s.Status.Phase)
			}
			if quiet {
				return fmt.Errorf("slot %s is still %s for bot %s", s.Name, s.Status.Phase, bot.Name)
			}
			if s.Status.Phase == v1.SlotDeploying {
				continue
			}
			if _, live := o.bots.live(uuid); !live {
				// A bot that crashed or gave up leaves a slot only its silence reveals: legal
				// until the heartbeat timeout (and a nudge) has passed.
				since, dead := o.bots.deadSince(uuid)
				if last := o.bots.lastBeat(bot.Name); last.After(since) {
					since = last
				}
				if !dead || now.Sub(since) > timeout+o.lateness {
					return fmt.Errorf("slot %s is Busy for bot %s, whose container runs no bot (dead %v since %s)", s.Name, bot.Name, dead, since.Format(time.TimeOnly))
				}
			}
		default:
			return fmt.Errorf("slot %s is %s (%s)", s.Name, s.Status.Phase, s.Status.Message)
		}
	}
	for uuid, app := range apps {
		switch {
		case isPullerApp(app.Name) && !app.Deleting:
			// The pool's image puller on a server: no slot's, and its container is stopped
			// once its pull is over.
			if quiet && app.Running {
				return fmt.Errorf("puller %s (%s) still runs its container", app.Name, uuid)
			}
		case !owned[uuid] && !app.Deleting:
			return fmt.Errorf("application %s (%s) belongs to no slot", app.Name, uuid)
		case quiet && app.Deleting:
			return fmt.Errorf("application %s (%s) is still being deleted", app.Name, uuid)
		}
	}
	if n := len(snap.slots); n > int(o.pool.Spec.MaxSlots) {
		return fmt.Errorf("%d slots, maxSlots %d", n, o.pool.Spec.MaxSlots)
	}
	// The pools converge only with every server in: the soak settles with none out.
	var pool v1.BotPool
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(o.pool), &pool); err != nil {
		return err
	}
	if err := serversBack(&pool); err != nil {
		return err
	}
	queued := 0
	for i := range snap.bots {
		b := &snap.bots[i]
		switch {
		case b.Status.Phase.Terminal():
		case quiet:
			return fmt.Errorf("bot %s is still %s", b.Name, b.Status.Phase)
		case snap.waiting(b):
			queued++
			if b.Status.QueuedAt == nil || now.Sub(b.Status.QueuedAt.Add(bot.QueueTimeout(b, o.pool))) > o.lateness {
				return fmt.Errorf("bot %s waits past its deadline", b.Name)
			}
		case !b.DeletionTimestamp.IsZero():
		case !running(b.Status.Phase) || snap.boundTo[b.UID] == nil:
			return fmt.Errorf("bot %s is %s and bound to %v", b.Name, b.Status.Phase, snap.boundTo[b.UID] != nil)
		}
	}
	if !standby {
		ready = free
	}
	switch {
	case queued > 0 && ready > 0:
		return fmt.Errorf("%d bots wait while %d slots are free", queued, ready)
	case queued == 0 && free < int(o.pool.Spec.MinIdle) && len(snap.slots) < int(o.pool.Spec.MaxSlots):
		return fmt.Errorf("%d free slots, minIdle %d", free, o.pool.Spec.MinIdle)
	}
	return nil
}

// standbySettled says what keeps a free Idle slot of a standby pool from being settled, or
// nil. Settled is Ready — its current container runs and asks for work — or, while bots still
// come and go, Starting: a fresh container is on its way (the recycle after a bot, or the
// replacement of one that stopped asking), which the soak's steps of the clock carry through.
// Lost is a moment of the operator's (the next pass deploys a fresh container) and never
// settled. At rest (quiet) every free slot must be Ready on a container that asks.
func (o *soakObserver) standbySettled(s *v1.BotPoolSlot, app sim.AppInfo, quiet bool) error {
	switch st := s.Status.Standby; {
	case st == v1.StandbyStarting && !quiet:
		return nil
	case st != v1.StandbyReady:
		return fmt.Errorf("slot %s is Idle and free with its standby container %q (%s): %s", s.Name, st, s.Status.Message, o.lastContainer(s))
	case !app.Running:
		return fmt.Errorf("slot %s is Ready but its container does not run (%s)", s.Name, app.TrueStatus)
	}
	if !quiet {
		return nil
	}
	run, ok := o.bots.latestRun(s.Status.ApplicationUUID)
	if _, live := o.bots.live(s.Status.ApplicationUUID); !ok || !live || run.asked.IsZero() || run.given != "" {
		return fmt.Errorf("slot %s is Ready at rest, but its container does not wait for work (running %v, asked %v, received %q): %s",
			s.Name, live, ok && !run.asked.IsZero(), run.given, o.lastContainer(s))
	}
	return nil
}

// lastContainer describes the last container started for the slot's application, for a
// violation: when it started and last asked, whether its credential is the one the slot
// records, and why its bot process died, if it did.
func (o *soakObserver) lastContainer(s *v1.BotPoolSlot) string {
	run, ok := o.bots.latestRun(s.Status.ApplicationUUID)
	if !ok {
		return "no container started"
	}
	since := "-"
	if st := s.Status.StandbySince; st != nil {
		since = st.UTC().Format(time.TimeOnly)
	}
	return fmt.Sprintf("container %d started %s, last asked %s, its token the slot's %v, died %q at %s; the slot standby since %s, deployment %q",
		run.seq, run.started.UTC().Format(time.TimeOnly), run.asked.UTC().Format(time.TimeOnly),
		run.token != "" && slottoken.Hash([]byte(run.token)) == s.Status.TokenSHA256, run.died,
		run.diedAt.UTC().Format(time.TimeOnly), since, s.Status.DeploymentUUID)
}

// explainFailures checks every failed bot against what the soak did to it, and counts the
// reasons. A bot failed for silence must have been silent (its acknowledged heartbeats say so:
// invariants 8 and 10); a failed deployment must be one the simulator failed; anything else
// (a slot lost, an application lost, a stop that failed…) has no cause in the soak's faults,
// only in a failed read or a bug (invariant 9), and is a violation.
//
// A server outage explains what a start met on that server (a deployment lost or timed out,
// an application gone, a container that did not come up); a failed start of the
// infrastructure ends a bot only at its last attempt (checkFailedStart).
func (o *soakObserver) explainFailures(step time.Duration, outages []*soakOutage) map[string]int {
	snap, err := o.snapshot()
	if err != nil {
		o.t.Fatal(err)
	}
	t := o.pool.Spec.Timing
	timeout := t.HeartbeatTimeout.OrDefault(v1.DefaultHeartbeatTimeout)
	fresh := t.HeartbeatFreshness.OrDefault(v1.DefaultHeartbeatFreshness)
	failedDeploys := map[string][]sim.DeploymentInfo{}
	for _, d := range o.sim.Deployments() {
		if d.Status == "failed" {
			failedDeploys[d.AppUUID] = append(failedDeploys[d.AppUUID], d)
		}
	}
	reasons := map[string]int{}
	for i := range snap.bots {
		b := &snap.bots[i]
		if b.Status.Phase != v1.BotFatal {
			continue
		}
		reason := string(b.Status.Reason)
		reasons[reason]++
		o.checkFailedStart(b)
		if b.Status.Reason != v1.ReasonQueueTimeout && (b.Status.SlotName == "" || b.Status.ApplicationUUID == "") {
			o.violate("bot %s failed %s on a slot, but its status does not say which (slot %q, application %q)",
				b.Name, reason, b.Status.SlotName, b.Status.ApplicationUUID)
		}
		end := b.Status.FinishedAt.Time
		last := o.bots.lastBeat(b.Name)
		// The store stamps a beat before the soak sees it acknowledged; the clock may have
		// moved a step or two in between.
		beatBefore := func(d time.Duration) bool { return !last.IsZero() && end.Sub(last) < d-2*step }
		switch b.Status.Reason {
		case v1.ReasonQueueTimeout:
		case v1.ReasonHeartbeatTimeout:
			if beatBefore(timeout) {
				o.violate("bot %s failed %s at %s, yet its last heartbeat was acknowledged at %s: a live bot failed for silence (invariant 10 when the store was down)",
					b.Name, reason, end.Format(time.TimeOnly), last.Format(time.TimeOnly))
			}
		case v1.ReasonStandbyLost:
			// Bound to a Ready slot whose container did not take it: legal only when that
			// container died (a crash the soak injected) or the clock outran it.
			if !o.bots.lostBetween(b.Status.ApplicationUUID, policy.QueuedAt(b).Add(-slotctrl.StandbyAskWindow), end) {
				o.violate("bot %s failed %s (%s), but the container of its application %s neither crashed nor fell behind the clock",
					b.Name, reason, b.Status.Message, b.Status.ApplicationUUID)
			}
		case v1.ReasonDeploymentFailed:
			if !deployFailedFor(failedDeploys[b.Status.ApplicationUUID], policy.QueuedAt(b), end) {
				o.violate("bot %s failed %s (%s), but no deployment of its application %s failed in Coolify",
					b.Name, reason, b.Status.Message, b.Status.ApplicationUUID)
			}
		case v1.ReasonDeploymentLost, v1.ReasonDeploymentTimeout, v1.ReasonApplicationLost:
			if !o.outageExplains(b, outages) {
				o.violate("bot %s failed %s (%s): nothing the soak injected explains it", b.Name, reason, b.Status.Message)
			}
		default:
			if reason == string(v1.ReasonDeployingTimeout) && beatBefore(fresh) {
				o.violate("bot %s failed %s while it beat (invariant 8)", b.Name, reason)
				continue
			}
			if reason == string(v1.ReasonDeployingTimeout) && o.outageExplains(b, outages) {
				continue
			}
			o.violate("bot %s failed %s (%s): nothing the soak injected explains it", b.Name, reason, b.Status.Message)
		}
	}
	return reasons
}

func deployFailedFor(deps []sim.DeploymentInfo, from, to time.Time) bool {
	for _, d := range deps {
		if !d.Created.Before(from) && !d.Finished.After(to) {
			return true
		}
	}
	return false
}

// countsString prints a map sorted by key.
func countsString[V any](m map[string]V) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		name := k
		if name == "" {
			name = "(none)"
		}
		parts = append(parts, fmt.Sprintf("%s %v", name, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Invariant 12 (docs/invariants.md), as the soak sees it: no container serves two bots; a
// fresh container never receives an earlier bot's configuration or credential; a bot is bound
// to a standby slot only while its current container asks for work. The containers' side is
// checked as they run (freshContainer, given, reportsFor: what simbot sent and received), the
// binding side on every write of a standby pool's slots (watchBindings), and the two are
// compared with the claims the bot API records in the bots' status.binding every round
// (checkClaims). internal/modelcheck (standby_test.go) states the same invariant over its model.

// breach records a broken invariant seen by a container; the next round reports it. Callers
// hold b.mu.
func (b *soakBots) breach(format string, args ...any) {
	b.breaches = append(b.breaches, fmt.Sprintf(format, args...))
}

// takeBreaches returns the breaches recorded since the last call.
func (b *soakBots) takeBreaches() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.breaches
	b.breaches = nil
	return out
}

// freshContainer checks a container as it starts: its slot credential must be one no earlier
// container of its application used to receive a bot. Callers hold b.mu.
func (b *soakBots) freshContainer(run *botRun) {
	if bot, ok := b.spent[run.app][run.token]; ok {
		b.breach("invariant 12: container %d of application %s started with the slot credential of an earlier container, which received bot %s",
			run.seq, run.app, bot)
	}
}

// given checks a configuration a container received: its first bot (or the same again), a bot
// no other container received, and a binding credential never handed out before. Callers
// must not hold b.mu.
func (b *soakBots) given(run *botRun, bot, cred string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if run.given != "" && run.given != bot {
		b.breach("invariant 12: container %d of application %s received bot %s, then bot %s", run.seq, run.app, run.given, bot)
	}
	if other := b.servedBy[bot]; other != nil && other != run {
		b.breach("invariant 12: bot %s was handed to container %d of application %s after container %d of application %s",
			bot, run.seq, run.app, other.seq, other.app)
	}
	if cred != "" {
		if earlier, ok := b.creds[cred]; ok && (earlier != bot || b.servedBy[bot] != run) {
			b.breach("invariant 12: container %d of application %s received bot %s with the credential handed out before for bot %s",
				run.seq, run.app, bot, earlier)
		}
		b.creds[cred] = bot
	}
	if run.given == "" {
		run.given, run.cred = bot, cred
	}
	if b.servedBy[bot] == nil {
		b.servedBy[bot] = run
	}
	if b.spent[run.app] == nil {
		b.spent[run.app] = map[string]string{}
	}
	b.spent[run.app][run.token] = bot
}

// reportsFor checks that a container reports or beats only for the bot it received. Callers
// hold b.mu.
func (b *soakBots) reportsFor(run *botRun, bot string) {
	if run.given != "" && run.given != bot {
		b.breach("invariant 12: container %d of application %s received bot %s but reports for bot %s", run.seq, run.app, run.given, bot)
	}
}

// watchBindings follows every write of the namespace's slots (a watch sees each, in order; a
// poll could miss the moment of a binding) and checks each new binding of a standby pool's
// slot: the slot was Ready when bound, and its current container — the last the simulator
// started for its application — holds the slot's current credential and asked for work before
// the binding was seen. It runs until ctx ends.
func (o *soakObserver) watchBindings(ctx context.Context) {
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		o.t.Fatal(err)
	}
	bound := map[string]types.UID{}
	slots := map[string]bool{} // the namespace's slots, as of the last event
	rv := ""
	for ctx.Err() == nil {
		if rv == "" {
			// A watch from the current state begins with an Added event per slot.
			bound, slots = map[string]types.UID{}, map[string]bool{}
		}
		var list v1.BotPoolSlotList
		var w watch.Interface
		// A failed watch proves nothing: start over from the current state, with a backoff,
		// until one is open (or the soak ends).
		if err := wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 10 * time.Millisecond, Factor: 2, Cap: time.Second, Steps: math.MaxInt32},
			func(ctx context.Context) (bool, error) {
				var err error
				w, err = wc.Watch(ctx, &list, client.InNamespace(o.ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
				if err != nil {
					rv = ""
					bound, slots = map[string]types.UID{}, map[string]bool{}
				}
				return err == nil, nil
			}); err != nil {
			return // the soak ended
		}
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*v1.BotPoolSlot)
			if !ok {
				if st, isStatus := ev.Object.(*metav1.Status); isStatus && st.Code == http.StatusGone {
					rv = "" // too old: start over
				}
				continue
			}
			rv = s.ResourceVersion
			if ev.Type == watch.Bookmark {
				continue
			}
			if ev.Type == watch.Deleted {
				delete(slots, s.Name)
			} else {
				slots[s.Name] = true
			}
			ref := s.Spec.BotRef
			switch {
			case ev.Type == watch.Deleted || ref == nil:
				delete(bound, s.Name)
			case bound[s.Name] != ref.UID:
				bound[s.Name] = ref.UID
				// A slot is created unbound: an Added one that is bound was bound before
				// this watch began (its status may have moved on since), so only a
				// Modified event shows a binding as it was written.
				if ev.Type == watch.Modified {
					o.checkBinding(s, time.Now())
				}
			}
			o.oneTwoAsWritten(s, ev.Type, bound, len(slots))
		}
		w.Stop()
	}
}

// oneTwoAsWritten checks invariants 1 and 2 after one write of the namespace's slots: no bot
// bound to two slots, no more slots than maxSlots. Written states are never merged, so one a
// poll would see only by luck is seen here.
func (o *soakObserver) oneTwoAsWritten(s *v1.BotPoolSlot, typ watch.EventType, bound map[string]types.UID, slots int) {
	if typ == watch.Added && s.Spec.BotRef == nil && slots <= int(o.pool.Spec.MaxSlots) {
		return
	}
	if slots > int(o.pool.Spec.MaxSlots) {
		o.violate("invariant 2: the pool holds %d slots, maxSlots %d (as written, at slot %s)", slots, o.pool.Spec.MaxSlots, s.Name)
	}
	if ref := s.Spec.BotRef; ref != nil && typ != watch.Deleted {
		for name, uid := range bound {
			if uid == ref.UID && name != s.Name {
				o.violate("invariant 1: bot %s is bound to %s and %s (as written)", ref.Name, name, s.Name)
			}
		}
	}
}

// checkBinding checks a binding seen at seen (real time) on the slot as it was written.
func (o *soakObserver) checkBinding(s *v1.BotPoolSlot, seen time.Time) {
	if !o.pool.Spec.Standby.Running() {
		return
	}
	o.bindings.Add(1)
	ref, st := s.Spec.BotRef, &s.Status
	if st.Standby != v1.StandbyReady {
		o.violate("invariant 12: bot %s was bound to standby slot %s while its container was %q (%s)", ref.Name, s.Name, st.Standby, st.Message)
		return
	}
	run, ok := o.bots.latestRun(st.ApplicationUUID)
	switch {
	case !ok:
		o.violate("invariant 12: bot %s was bound to standby slot %s, whose application %s never ran a container", ref.Name, s.Name, st.ApplicationUUID)
	case slottoken.Hash([]byte(run.token)) != st.TokenSHA256:
		o.violate("invariant 12: bot %s was bound to standby slot %s, whose current container %d holds another credential than the slot's", ref.Name, s.Name, run.seq)
	case run.askedReal.IsZero() || run.askedReal.After(seen):
		o.violate("invariant 12: bot %s was bound to standby slot %s before its current container %d asked for work", ref.Name, s.Name, run.seq)
	}
}

// checkClaims compares the claims the bot API recorded (status.binding) with what the
// containers received: the container that got a bot's configuration got the credential whose
// hash the claim holds (a second claim handed out would differ).
func (o *soakObserver) checkClaims(snap *soakSnapshot) {
	for i := range snap.bots {
		b := &snap.bots[i]
		c := b.Status.Binding
		if c == nil {
			continue
		}
		run, ok := o.bots.servedRun(b.Name)
		if !ok {
			continue // the answer did not reach a container (it was stopped meanwhile)
		}
		if run.cred != "" && slottoken.Hash([]byte(run.cred)) != c.CredentialSHA256 {
			o.violate("invariant 12: bot %s's claim records another credential than the one container %d of application %s received", b.Name, run.seq, run.app)
		}
	}
}
