package modelcheck

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify/sim"
)

// The invariants of docs/invariants.md, numbered as there, and where each is checked:
//
//	 1 one bot per slot, one slot per bot ............ every step (checkState); the CEL rule on
//	                                                   every slot write (apiServer.admit)
//	 2 unique names, at most maxSlots per pool ....... every step (a pool above a lowered
//	                                                   maxSlots never grows; also: one slot per
//	                                                   Coolify application, one application per
//	                                                   slot name); at settle points, no free slot
//	                                                   kept above maxSlots
//	 3 no bot Queued beside a free Idle slot ......... after every dispatch that read a synced
//	                                                   cache; at every settle point
//	 4 queue order ................................... on every binding a dispatch wrote
//	 5 running, queued with a deadline, or terminal .. every step; "with a timer" after every bot
//	                                                   reconcile
//	 6 a slot of a finished or deleted bot is released
//	   within one reconcile .......................... after every slot reconcile that saw it
//	 7 Alive again within one heartbeat .............. after every bot reconcile, and the bot
//	                                                   controller's timer at every heartbeat
//	 8 a heartbeating deployment is never failed ..... on every write that fails one
//	 9 a failed Coolify read deletes nothing, fails
//	   nobody ........................................ on every write while every Coolify call fails
//	10 a store outage fails nobody ................... on every write while the store is down
//	13–15 servers .................................... see servers_test.go
//	16 no slot deployment pulls cold ................. on every slot deployment's pull (the
//	                                                   simulator's OnPull hook); at settle
//	                                                   points, every rollout ends (rollout_test.go)
//
// and beyond the list: a slot turns Busy only once its container ran (writes), a bot never
// leaves Done or Fatal (writes), a bot fails with HeartbeatTimeout only after that long without
// a beat the bot API accepted (writes), the store's UNIQUE rules never refuse a projection
// (every step), bindings are mirrored both ways, every Coolify application belongs to a slot
// and an Idle slot's container is stopped (settle points and the end), every bot ends
// terminal or running, and with every bot deleted nothing stays bound or running (the end),
// and every slot transition audited, or tried, is one the slot controller's table allows
// (every step; every slot reconcile), and retried starts: a failed start is recorded only for
// a bot that never ran and whose binding no container took, and every bot sent back to the
// queue from a binding has its failed start recorded (writes).

func (w *world) violate(format string, args ...any) {
	w.violations = append(w.violations, fmt.Sprintf("step %d (%s): ", w.step, w.clk.Now().Format(time.RFC3339))+fmt.Sprintf(format, args...))
}

// checkState checks what must hold in the API server and Coolify after every step.
func (w *world) checkState() {
	bots, slots := w.liveBots(), w.liveSlots()

	w.checkTenantViews(bots, slots)

	// 1: no bot bound to two slots (a slot holds one botRef by construction).
	byBot := map[types.UID][]string{}
	byApp := map[string][]string{}
	perPool := map[string]int{}
	defer func() { w.perPool = perPool }()
	for _, s := range slots {
		if ref := s.Spec.BotRef; ref != nil {
			byBot[ref.UID] = append(byBot[ref.UID], s.Name)
		}
		if s.Status.ApplicationUUID != "" {
			byApp[s.Status.ApplicationUUID] = append(byApp[s.Status.ApplicationUUID], s.Name)
		}
		perPool[s.Spec.Pool]++
	}
	for uid, names := range byBot {
		if len(names) > 1 {
			w.violate("invariant 1: bot %s is bound to slots %v", uid, names)
		}
	}
	for app, names := range byApp {
		if len(names) > 1 {
			w.violate("invariant 1: application %s belongs to slots %v", app, names)
		}
	}
	// 2: never more than maxSlots slots per pool (a pool whose maxSlots was lowered below the
	// slots it had shrinks as they come free, and never grows meanwhile); one live
	// application per slot name.
	for _, p := range w.pools {
		n, ceiling := perPool[p.Name], w.ceiling[p.Name]
		if n > ceiling {
			w.violate("invariant 2: pool %s holds %d slots, maxSlots is %d (at most %d since it was lowered)", p.Name, n, p.Spec.MaxSlots, ceiling)
		}
		w.ceiling[p.Name] = max(int(p.Spec.MaxSlots), min(ceiling, n))
	}
	w.checkServers(slots)
	seen := map[string]string{}
	for _, a := range w.sim.Apps() {
		if a.Deleting {
			continue
		}
		k := strings.Join(a.Tags, ",") + "/" + a.Name
		if other, dup := seen[k]; dup {
			w.violate("invariant 2: Coolify holds two applications named %s in one pool (%s, %s)", a.Name, other, a.UUID)
		}
		seen[k] = a.UUID
	}

	// 5: every bot is terminal, waiting with a deadline, or bound.
	for i := range bots {
		b := &bots[i]
		st := b.Status
		switch {
		case st.Phase.Terminal() || !b.DeletionTimestamp.IsZero():
		case st.Phase == "" || st.Phase == v1.BotPending:
		case st.Phase == v1.BotScheduled:
			if b.Spec.StartTime == nil {
				w.violate("invariant 5: bot %s is Scheduled without a startTime", b.Name)
			}
		case st.Phase == v1.BotQueued:
			if st.QueuedAt == nil {
				w.violate("invariant 5: bot %s is Queued without queuedAt (no deadline)", b.Name)
			}
		default:
			if slotOf(slots, b.UID) == nil {
				w.violate("invariant 5: bot %s is %s but no slot is bound to it: neither running, queued nor terminal", b.Name, st.Phase)
			}
		}
	}

	w.store.mu.Lock()
	conflicts, illegal := w.store.conflicts, w.store.illegal
	w.store.conflicts, w.store.illegal = nil, nil
	w.store.mu.Unlock()
	for _, c := range conflicts {
		w.violate("store: the projection's UNIQUE rules refused a write (a second binding or a shared application): %s", c)
	}
	for _, t := range illegal {
		w.violate("audit: a slot transition the controller's table does not allow: %s", t)
	}
}

// onWrite checks every write to the API server against what the model knows; it runs under
// the API server's write lock.
func (w *world) onWrite(wr write) {
	w.writes++
	if w.settling && len(w.roundWrites) < 20 {
		w.roundWrites = append(w.roundWrites, wr.op+" "+wr.key.kind+"/"+wr.key.Name+changed(wr.old, wr.new))
	}
	if wr.new == nil {
		w.deleted = append(w.deleted, wr.key)
		if len(w.deleted) > 50 {
			w.deleted = w.deleted[1:]
		}
	}
	switch wr.key.kind {
	case kindSlot:
		var o, n *v1.BotPoolSlot
		if wr.old != nil {
			o = wr.old.(*v1.BotPoolSlot)
		}
		if wr.new != nil {
			n = wr.new.(*v1.BotPoolSlot)
		}
		w.slotWritten(wr.op, o, n)
	case kindBot:
		var o, n *v1.Bot
		if wr.old != nil {
			o = wr.old.(*v1.Bot)
		}
		if wr.new != nil {
			n = wr.new.(*v1.Bot)
		}
		w.botWritten(o, n)
	case kindPool:
		var n *v1.BotPool
		if wr.new != nil {
			n = wr.new.(*v1.BotPool)
		}
		w.poolWritten(wr.key.Name, n)
	}
}

func (w *world) slotWritten(op string, o, n *v1.BotPoolSlot) {
	now := w.clk.Now()
	w.log.add(fmt.Sprintf("%s MODEL %s slot %s: %s", now.Format("15:04:05.000"), op, nameOf(o, n), describeSlot(n)))
	w.slotImageWritten(o, n)
	if n != nil && n.Spec.BotRef != nil && (o == nil || o.Spec.BotRef == nil) {
		w.checkStandbyBinding(n)
		w.checkServerBinding(n)
		w.bindAt[n.Name] = now
		w.binds = append(w.binds, bindEvent{slot: n.Name, pool: n.Spec.Pool, bot: n.Spec.BotRef.Name, uid: n.Spec.BotRef.UID, at: now})
		w.counts["write: bind"]++
	}
	if n != nil && o != nil && o.Spec.BotRef != nil && n.Spec.BotRef == nil {
		w.counts["write: release"]++
	}
	if op == "delete" && o != nil && o.DeletionTimestamp.IsZero() {
		w.counts["write: slot deleted"]++
		// A slot that failed maxRecoveryAttempts times is retired on its own record, without
		// reading Coolify; while every Coolify call fails, that record cannot grow (below).
		// A pool above a lowered maxSlots deletes free slots, also without reading Coolify, and
		// so does one draining a server (cordoned, unlisted, or above its maxSlots), one
		// scaling down a slot free for scaleDownDelay above its need, and a standby pool
		// ending its rollout, which removes the free slots it added above its size when the
		// rollout began (seed 3457702266237803: the model knew no such excuse).
		pool := w.pool(o.Spec.Pool)
		retired := o.Status.Phase == v1.SlotError && o.Status.RecoveryAttempts >= pool.Spec.Timing.MaxRecoveryAttempts
		shrunk := o.Status.Phase == v1.SlotIdle && o.Spec.BotRef == nil &&
			(w.perPool[o.Spec.Pool] > int(pool.Spec.MaxSlots) || w.drains(o, pool) || w.surplus(pool, o.Name) || w.surge(pool))
		if w.faults.coolifyDown() && !retired && !shrunk && !w.byHand {
			w.violate("invariant 9: slot %s (%s, %d recoveries) was deleted while every Coolify call fails (%s)",
				o.Name, o.Status.Phase, o.Status.RecoveryAttempts, w.faults.coolify)
		}
	}
	// A standby container that did not take its bot (StandbyLost) is judged on the bot API's
	// record of its asks, not on Coolify: an outage neither causes nor excuses it.
	standbyLost := n != nil && n.Status.Reason == string(v1.ReasonStandbyLost)
	if o != nil && n != nil && n.Status.RecoveryAttempts > o.Status.RecoveryAttempts && w.faults.coolifyDown() && !standbyLost {
		w.violate("invariant 9: slot %s counted a failed recovery (%d) while every Coolify call fails (%s): %s",
			n.Name, n.Status.RecoveryAttempts, w.faults.coolify, n.Status.Message)
	}
	if o != nil && n != nil && n.Status.SkippedRecoveries > o.Status.SkippedRecoveries {
		w.counts["slot recovery skipped (its bot beats)"]++
	}
	if o == nil || n == nil || o.Status.Phase == n.Status.Phase {
		return
	}
	w.counts["slot "+phaseName(string(o.Status.Phase))+"→"+string(n.Status.Phase)]++
	bot := ""
	if ref := n.Spec.BotRef; ref != nil {
		bot = ref.Name
	} else if ref := o.Spec.BotRef; ref != nil {
		bot = ref.Name
	}
	switch n.Status.Phase {
	case v1.SlotBusy:
		// A slot is never Busy before its container runs: the container runs now, or one
		// started since this bot was bound (it may have crashed since).
		// (A deployment in flight when a person deleted the application still reports
		// finished, without a container: the slot finds the application gone at its next check.)
		app := n.Status.ApplicationUUID
		w.cmu.Lock()
		started, ok := w.lastStart[app]
		byHand := w.deletedByHand[app]
		w.cmu.Unlock()
		w.cmu.Lock()
		_, taken := w.standby.servedBy[bot]
		w.cmu.Unlock()
		switch {
		case byHand:
			w.counts["slot Busy on an application deleted by hand"]++
		case o.Status.Standby == v1.StandbyReady:
			// A standby slot's container started before the binding and took it from the
			// bot API: the bot's binding reached a container (it may have crashed since).
			if !taken {
				w.violate("slot %s turned Busy (%q) on its standby container, but no container took bot %s's binding", n.Name, n.Status.Message, bot)
			}
		case !w.running(app) && (!ok || started.Before(w.bindAt[n.Name])):
			w.violate("slot %s turned Busy (%q) but no container of application %s ran since bot %s was bound at %s (last start %s; deployments %s)",
				n.Name, n.Status.Message, app, bot, w.bindAt[n.Name].Format(time.RFC3339), started.Format(time.RFC3339), w.deploymentsOf(app))
		}
	case v1.SlotError:
		if w.faults.coolifyDown() && !standbyLost {
			w.violate("invariant 9: slot %s went to Error (%s: %s) while every Coolify call fails (%s)",
				n.Name, n.Status.Reason, n.Status.Message, w.faults.coolify)
		}
		switch n.Status.Reason {
		case string(v1.ReasonDeployingTimeout), "DeploymentTimeout", "DeploymentLost":
			// A standby container's deployment has no bot, so no liveness to read.
			if w.postgres && w.store.isDown() && bot != "" {
				w.violate("invariant 10: slot %s failed bot %s's deployment (%s) on liveness while the store is down", n.Name, bot, n.Status.Reason)
			}
			w.checkNotFresh(bot, n.Spec.Pool, "slot "+n.Name+" failed its deployment ("+n.Status.Reason+")")
		}
	}
}

func phaseName(p string) string {
	if p == "" {
		return "(new)"
	}
	return p
}

// checkNotFresh: invariant 8, a slow but heartbeating deployment is never failed by the
// stale-deploying rules, judged on the heartbeats the bot API accepted.
func (w *world) checkNotFresh(bot, pool, what string) {
	p := w.pool(pool)
	if bot == "" || p == nil {
		return
	}
	fresh := p.Spec.Timing.HeartbeatFreshness.OrDefault(v1.DefaultHeartbeatFreshness)
	if last, ok := w.beats[bot]; ok && w.clk.Now().Sub(last) <= fresh {
		w.violate("invariant 8: %s although bot %s beat %s ago (freshness %s)", what, bot, w.clk.Now().Sub(last), fresh)
	}
}

func (w *world) botWritten(o, n *v1.Bot) {
	if n == nil || o == nil || o.Status.Phase != n.Status.Phase {
		w.log.add(fmt.Sprintf("%s MODEL bot %s: %s", w.clk.Now().Format("15:04:05.000"), nameOf(o, n), describeBot(n)))
	}
	if o != nil && n != nil {
		w.checkRetry(o, n)
	}
	if o == nil || n == nil || o.Status.Phase == n.Status.Phase {
		return
	}
	w.counts["bot "+phaseName(string(o.Status.Phase))+"→"+string(n.Status.Phase)]++
	if o.Status.Phase.Terminal() {
		w.violate("bot %s left terminal phase %s for %s", n.Name, o.Status.Phase, n.Status.Phase)
	}
	if n.Status.Phase != v1.BotFatal {
		return
	}
	reason := n.Status.Reason
	w.counts["bot Fatal/"+string(reason)]++
	if reason == v1.ReasonHeartbeatTimeout {
		pool := w.pool(n.Status.Pool)
		if w.postgres && w.store.isDown() {
			w.violate("invariant 10: bot %s failed with HeartbeatTimeout while the store is down", n.Name)
		}
		timeout := pool.Spec.Timing.HeartbeatTimeout.OrDefault(v1.DefaultHeartbeatTimeout)
		since, ok := w.beats[n.Name]
		if !ok && o.Status.StartedAt != nil {
			since, ok = o.Status.StartedAt.Time, true
		}
		if ok && w.clk.Now().Sub(since) < timeout {
			w.violate("bot %s failed with HeartbeatTimeout after only %s of silence (timeout %s)", n.Name, w.clk.Now().Sub(since), timeout)
		}
	}
	// Deployment failures are judged where the slot decides them (slotWritten): the bot fails
	// later, when the slot recovers, with the slot's reason.
}

// checkRetry: retried starts. A failed start is recorded only for a bot that never ran and
// whose binding no container took, and a bot goes back to the queue from a binding only with
// that start recorded: never a second start of a bot that reported running (it could join its
// meeting twice), and every retried start recorded.
func (w *world) checkRetry(o, n *v1.Bot) {
	grew := len(n.Status.StartAttempts) - len(o.Status.StartAttempts)
	if grew > 0 {
		w.counts["bot failed start recorded"]++
		if o.Status.StartedAt != nil || o.Status.Binding != nil {
			w.violate("retried starts: bot %s had a failed start recorded though it ran (startedAt %v) or its binding was taken (%v)",
				n.Name, o.Status.StartedAt, o.Status.Binding)
		}
	}
	if n.Status.Phase == v1.BotQueued && o.Status.Phase != v1.BotQueued && !o.Status.Phase.Terminal() &&
		o.Status.Phase != "" && o.Status.Phase != v1.BotPending && o.Status.Phase != v1.BotScheduled {
		w.counts["bot retried"]++
		if grew != 1 {
			w.violate("retried starts: bot %s went back to the queue from %s with %d failed starts recorded, had %d",
				n.Name, o.Status.Phase, len(n.Status.StartAttempts), len(o.Status.StartAttempts))
		}
	}
}

// Checks around one reconcile.

// botReconciled: invariant 5's timer and invariant 7 after a bot reconcile that read the
// bot's current version and returned without error.
func (w *world) botReconciled(name string, synced bool, requeue time.Duration) {
	b := w.liveBot(name)
	if !synced || b == nil || !b.DeletionTimestamp.IsZero() || b.Status.Phase.Terminal() {
		delete(w.botTimers, name)
		return
	}
	now := w.clk.Now()
	if requeue > 0 {
		w.botTimers[name] = now.Add(requeue)
	} else {
		delete(w.botTimers, name)
	}
	slots := w.liveSlots()
	slot := slotOf(slots, b.UID)
	switch b.Status.Phase {
	case v1.BotPending, v1.BotScheduled:
		if requeue <= 0 {
			w.violate("invariant 5: bot %s is %s and its reconcile set no timer", b.Name, b.Status.Phase)
		}
	case v1.BotQueued:
		if slot != nil {
			return
		}
		pool := w.pool(b.Status.Pool)
		// The API server keeps queuedAt to the second; the reconcile that set it computed the
		// timer from the exact time, so its timer may end up to a second past the deadline.
		// A bot back in the queue after a failed start waits afresh from that attempt.
		from := b.Status.QueuedAt.Time
		if n := len(b.Status.StartAttempts); n > 0 && b.Status.StartAttempts[n-1].At.After(from) {
			from = b.Status.StartAttempts[n-1].At.Time
		}
		deadline := from.Add(queueTimeout(b, pool))
		if requeue <= 0 || now.Add(requeue).After(deadline.Add(time.Second)) {
			w.violate("invariant 5: bot %s waits in the queue until %s but its reconcile asked to run again in %s",
				b.Name, deadline.Format(time.RFC3339), requeue)
		}
		w.checkLateSaysWhy(b, now, requeue)
	}
	if slot == nil || slot.Status.Phase != v1.SlotBusy || b.Status.StartedAt == nil || w.store.isDown() {
		return
	}
	// 7: a bot whose beat is recent is Alive after a reconcile.
	beats, err := w.store.LastHeartbeats(w.ctx, []types.UID{b.UID})
	pool := w.pool(b.Status.Pool)
	grace := pool.Spec.Timing.HeartbeatGracePeriod.OrDefault(v1.DefaultHeartbeatGracePeriod)
	if last, ok := beats[b.UID]; err == nil && ok && now.Sub(last) <= grace {
		if c := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionAlive); c == nil || c.Status != metav1.ConditionTrue {
			w.violate("invariant 7: bot %s beat %s ago but is not Alive after its reconcile (%v)", b.Name, now.Sub(last), c)
		}
	}
}

// checkLateSaysWhy: invariant 17's "and then the bot says why", after a reconcile of a reserved
// bot that waits in the queue with no slot: past the grace after its start it says
// ReservationLate, with what the pool said went wrong; within the grace it looks again when the
// grace ends.
func (w *world) checkLateSaysWhy(b *v1.Bot, now time.Time, requeue time.Duration) {
	if !isReserved(b) {
		return
	}
	const grace = 30 * time.Second
	ready := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionReady)
	late := now.Sub(b.Status.Reservation.From.Time)
	switch {
	case late >= grace && (ready == nil || ready.Reason != v1.ReasonReservationLate || !strings.Contains(ready.Message, "pool "+b.Status.Pool)):
		w.violate("invariant 17: reserved bot %s waits for a slot %s after its start and does not say why (Ready %v)", b.Name, late, ready)
	case late >= grace:
		w.counts["late reservation says why"]++
	case requeue <= 0 || requeue > grace-late:
		w.violate("invariant 17: reserved bot %s waits for a slot %s after its start and looks again in %s, after the grace (%s)", b.Name, late, requeue, grace)
	}
}

// checkAliveTimer: invariant 7's "within one heartbeat". When a running bot that is not
// Alive beats again, the bot controller must look at it within one heartbeat interval: it
// learns of beats only from its own timer (heartbeats go to the store, not to the API server).
func (w *world) checkAliveTimer(name string) {
	due, ok := w.botTimers[name]
	now := w.clk.Now()
	if !ok || due.Before(now) || w.store.isDown() {
		return // no pending timer known to the model (a past one already fired)
	}
	b := w.liveBot(name)
	if b == nil || b.Status.StartedAt == nil || b.Status.Phase.Terminal() {
		return
	}
	c := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionAlive)
	if c == nil || c.Status == metav1.ConditionTrue {
		return
	}
	if due.Sub(now) > heartbeatInterval {
		w.violate("invariant 7: bot %s beats again while %s (%s), but the bot controller looks at it next in %s: it stays not Alive for more than one heartbeat (%s)",
			name, c.Reason, c.Status, due.Sub(now), heartbeatInterval)
	}
}

// queueTimeout is the design's rule: the bot's own queueTimeout, else the pool's default,
// capped by the pool's maximum.
func queueTimeout(b *v1.Bot, p *v1.BotPool) time.Duration {
	q := p.Spec.Queue
	return min(b.Spec.QueueTimeout.OrDefault(q.DefaultTimeout.OrDefault(v1.DefaultQueueTimeout)), q.MaxTimeout.OrDefault(v1.DefaultMaxQueueTimeout))
}

// slotOrphaned reports whether a slot is bound to a bot that is finished or gone (in the API
// server), for invariant 6.
func (w *world) slotOrphaned(s *v1.BotPoolSlot) bool {
	ref := s.Spec.BotRef
	if ref == nil {
		return false
	}
	b := w.liveBot(ref.Name)
	return b == nil || b.UID != ref.UID || b.Status.Phase.Terminal()
}

// queued lists a pool's waiting bots (Queued, not bound, not being deleted) as slots show them.
func queued(bots []v1.Bot, slots []v1.BotPoolSlot, pool string) []v1.Bot {
	var out []v1.Bot
	for _, b := range bots {
		if b.Status.Pool == pool && b.Status.Phase == v1.BotQueued && b.DeletionTimestamp.IsZero() && slotOf(slots, b.UID) == nil {
			out = append(out, b)
		}
	}
	return out
}

// freeSlots names a pool's free slots: Idle, unbound, not going away, and not holding a
// deploy request of an earlier binding that Coolify may have taken without answering
// (status.deployingSince): the slot must cancel that before another bot can have it; on a
// server that takes bots (servesBots).
func (w *world) freeSlots(slots []v1.BotPoolSlot, pool string) []string {
	var out []string
	for i := range slots {
		if s := &slots[i]; s.Spec.Pool == pool && isFreeSlot(s) && w.servesBots(s) {
			out = append(out, s.Name)
		}
	}
	return out
}

// isFreeSlot is the model's own reading of a free slot: Idle, unbound, not being deleted and
// no deployment of its own in flight.
func isFreeSlot(s *v1.BotPoolSlot) bool {
	return s.Status.Phase == v1.SlotIdle && s.Spec.BotRef == nil && s.DeletionTimestamp.IsZero() && s.Status.DeployingSince == nil &&
		(s.Status.Standby == "" || s.Status.Standby == v1.StandbyReady) // a standby slot is free while its container asks
}

// checkQueueServed: invariant 3 in the API server.
func (w *world) checkQueueServed(pool, when string) {
	bots, slots := w.liveBots(), w.liveSlots()
	q, free := w.servable(queued(bots, slots, pool), bots, slots, pool), w.freeSlots(slots, pool)
	if len(q) > 0 && len(free) > 0 && w.heldForReservationsAnyHead(bots, q, slots, free, w.livePool(pool)) {
		// The free slots are kept for reservations that start within the head's meeting: the
		// queue waits for them (issue 18). A reserved bot due now is never kept waiting.
		w.counts["queue kept off slots held for reservations"]++
		return
	}
	if len(q) > 0 && len(free) > 0 {
		names := make([]string, len(q))
		for i := range q {
			names[i] = q[i].Name
		}
		w.violate("invariant 3: %s, bots %v of pool %s are Queued while slots %v are free and Idle", when, names, pool, free)
	}
}

// heldForReservations reports whether the queue may wait beside free slots for the pool's
// reservations: none of the queued bots holds one, a granted reservation not yet bound is due
// before the head of the queue's meeting (maxDuration and the pool's leaveGracePeriod) would
// end, and either the bots bound in the pool's slots with those reservations leave the head no
// room within maxSlots, or the free slots are no more than those the pool warms for
// reservations (status.reservations.warming).
func heldForReservations(bots, q []v1.Bot, slots []v1.BotPoolSlot, free []string, p *v1.BotPool, now time.Time) bool {
	head := &q[0] // the dispatcher's head: the first in service order
	for i := range q {
		if servedBefore(&q[i], head) {
			head = &q[i]
		}
	}
	return heldForReservationsOf(head, bots, q, slots, free, p, now)
}

// heldForReservationsAnyHead is heldForReservations in a pool whose tenants take turns (a
// tenancy, or shared): the dispatcher's head is the first of the tenants' fair order
// (policy.FairOrder, tested on its own), which the model does not compute; the queue may wait
// when the reservations hold it for any of its bots as the head.
func (w *world) heldForReservationsAnyHead(bots, q []v1.Bot, slots []v1.BotPoolSlot, free []string, p *v1.BotPool) bool {
	now := w.clk.Now()
	if p.Spec.Tenancy == nil && (p.Spec.AllowedNamespaces == nil || p.Spec.AllowedNamespaces.From == v1.NamespacesSame) {
		return heldForReservations(bots, q, slots, free, p, now)
	}
	for i := range q {
		if heldForReservationsOf(&q[i], bots, q, slots, free, p, now) {
			return true
		}
	}
	return false
}

// heldForReservationsOf is heldForReservations with head as the queue's head.
func heldForReservationsOf(head *v1.Bot, bots, q []v1.Bot, slots []v1.BotPoolSlot, free []string, p *v1.BotPool, now time.Time) bool {
	for i := range q {
		if isReserved(&q[i]) {
			return false
		}
	}
	leave := p.Spec.Timing.LeaveGracePeriod.OrDefault(v1.DefaultLeaveGracePeriod)
	end := now.Add(head.Spec.MaxDuration.OrDefault(v1.DefaultMaxDuration) + leave)
	promised, warmedFor := 0, false
	for i := range bots {
		b := &bots[i]
		if b.Status.Pool == p.Name && isReserved(b) && !b.Status.Phase.Terminal() && slotOf(slots, b.UID) == nil {
			from := b.Status.Reservation.From.Time
			if from.Before(end) {
				promised++
			}
			// A warmed slot must be ready again, two minutes after the meeting, for it.
			warmedFor = warmedFor || from.Before(end.Add(2*time.Minute))
		}
	}
	if !warmedFor {
		return false
	}
	occupied := 0
	for i := range slots {
		if slots[i].Spec.Pool == p.Name && slots[i].Spec.BotRef != nil {
			occupied++
		}
	}
	warming := 0
	if p.Status.Reservations != nil {
		warming = int(p.Status.Reservations.Warming)
	}
	return promised > 0 && occupied+promised+1 > int(p.Spec.MaxSlots) || len(free) <= warming
}

// livePool is the pool as the API server holds it now (its status too).
func (w *world) livePool(name string) *v1.BotPool {
	return w.api.live(objKey{kind: kindPool, NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}}).(*v1.BotPool)
}

func isReserved(b *v1.Bot) bool {
	return b.Spec.StartTime != nil && b.Status.Reservation != nil && meta.IsStatusConditionTrue(b.Status.Conditions, v1.ConditionReserved)
}

// servedBefore reports whether a must be served before b: a bot with a reservation first (it
// takes the slot held for it), then higher priority, or the same priority and queued earlier.
func servedBefore(a, b *v1.Bot) bool {
	if ra, rb := isReserved(a), isReserved(b); ra != rb {
		return ra
	}
	if a.Spec.Priority != b.Spec.Priority {
		return a.Spec.Priority > b.Spec.Priority
	}
	return queuedAt(a).Before(queuedAt(b))
}

func queuedAt(b *v1.Bot) time.Time {
	if b.Status.QueuedAt != nil {
		return b.Status.QueuedAt.Time
	}
	return b.CreationTimestamp.Time
}

// checkQueueOrder: invariant 4 for the bindings one dispatch wrote. waiting is the pool's
// queue as the dispatcher could see it (its cache) before the wave.
func (w *world) checkQueueOrder(pool string, waiting []v1.Bot, binds []bindEvent) {
	var tenancy *v1.BotPool // the pool, when it serves tenants: a tenancy, or shared without one
	if p := w.livePool(pool); p.Spec.Tenancy != nil || p.Spec.AllowedNamespaces != nil && p.Spec.AllowedNamespaces.From != v1.NamespacesSame {
		tenancy = p
	}
	served := map[types.UID]bool{}
	for _, e := range binds {
		served[e.uid] = true
	}
	slots := w.liveSlots()
	for _, e := range binds {
		var x *v1.Bot
		for i := range waiting {
			if waiting[i].UID == e.uid {
				x = &waiting[i]
			}
		}
		if x == nil {
			continue // bound from outside what the model saw queued: the bot checks cover it
		}
		for i := range waiting {
			y := &waiting[i]
			if served[y.UID] || !servedBefore(y, x) || tenancy != nil && tenantOf(tenancy, y) != tenantOf(tenancy, x) {
				continue // of another tenant: the tenants take turns by their shares (checkGuarantees)
			}
			if w.mayBeRefused(y.Namespace) {
				continue // of a namespace the pool does not admit (invariant 19)
			}
			live := w.liveBot(y.Name)
			if live == nil || live.UID != y.UID || live.Status.Phase != v1.BotQueued || !live.DeletionTimestamp.IsZero() || slotOf(slots, y.UID) != nil {
				continue
			}
			w.violate("invariant 4: in pool %s bot %s (priority %d, queued %s) got slot %s before bot %s (priority %d, queued %s), which still waits",
				pool, x.Name, x.Spec.Priority, queuedAt(x).Format(time.RFC3339), e.slot, y.Name, y.Spec.Priority, queuedAt(y).Format(time.RFC3339))
		}
	}
}

// checkSettled checks what holds once the operator is quiet (faults off, nothing left to
// write): bindings mirrored both ways, no queued bot beside a free slot, no Coolify
// application without its slot, no container running for an Idle slot.
func (w *world) checkSettled(when string) {
	bots, slots := w.liveBots(), w.liveSlots()
	byName := map[string]*v1.Bot{}
	for i := range bots {
		byName[bots[i].Name] = &bots[i]
	}
	appSlot := map[string]string{}
	for _, s := range slots {
		if s.Status.ApplicationUUID != "" {
			appSlot[s.Status.ApplicationUUID] = s.Name
		}
		if ref := s.Spec.BotRef; ref != nil {
			b := byName[ref.Name]
			switch {
			case b == nil || b.UID != ref.UID || b.Status.Phase.Terminal():
				w.violate("invariant 6 (%s): slot %s is still bound to bot %s, which is finished or gone", when, s.Name, ref.Name)
			case b.Status.SlotName != s.Name:
				w.violate("mirror (%s): slot %s is bound to bot %s, whose status.slotName is %q", when, s.Name, b.Name, b.Status.SlotName)
			}
		}
		if s.Status.Phase == v1.SlotIdle && s.Status.Standby == "" && s.Status.ApplicationUUID != "" && w.running(s.Status.ApplicationUUID) {
			w.violate("settled (%s): slot %s is Idle but its container runs", when, s.Name)
		}
	}
	for i := range bots {
		b := &bots[i]
		if b.Status.Phase.Terminal() || b.Status.SlotName == "" || !b.DeletionTimestamp.IsZero() {
			continue
		}
		if s := slotOf(slots, b.UID); s == nil || s.Name != b.Status.SlotName {
			w.violate("mirror (%s): bot %s (%s) says slot %s, which is not bound to it", when, b.Name, b.Status.Phase, b.Status.SlotName)
		}
	}
	for _, p := range w.pools {
		w.checkQueueServed(p.Name, when)
		var n int
		var free []string
		for _, s := range slots {
			// A slot being deleted is not kept: it may wait a while for Coolify to finish
			// deleting its application (the finalizer holds until a 404), and the pool has
			// already let it go.
			if s.Spec.Pool == p.Name && s.DeletionTimestamp.IsZero() {
				n++
				if s.Spec.BotRef == nil && s.Status.Phase == v1.SlotIdle {
					free = append(free, s.Name)
				}
			}
		}
		if n > int(p.Spec.MaxSlots) && len(free) > 0 {
			w.violate("invariant 2 (%s): pool %s holds %d slots, maxSlots is %d, and keeps the free ones %v", when, p.Name, n, p.Spec.MaxSlots, free)
		}
	}
	w.checkReservationsServed(bots, slots, when)
	w.checkServersSettled(when)
	for _, a := range w.sim.Apps() {
		if !a.Deleting && appSlot[a.UUID] == "" && !w.pullerOfAPool(a.Name) {
			w.violate("leak (%s): Coolify application %s (%s) belongs to no slot", when, a.Name, a.UUID)
		}
	}
}

// checkReservationsServed checks invariant 17 once the operator is quiet: a bot with a
// granted reservation whose binding time (status.reservation.from: its start, or the schedule
// lead before it on a Stopped pool) has come, and the grace the dispatcher has to bind it, is
// bound.
func (w *world) checkReservationsServed(bots []v1.Bot, slots []v1.BotPoolSlot, when string) {
	now := w.clk.Now()
	for i := range bots {
		b := &bots[i]
		if !isReserved(b) || b.Status.Phase.Terminal() || !b.DeletionTimestamp.IsZero() || now.Sub(b.Status.Reservation.From.Time) < 30*time.Second ||
			w.mayBeRefused(b.Namespace) {
			continue
		}
		if slotOf(slots, b.UID) != nil {
			w.counts["reservation served"]++
			continue
		}
		ready := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionReady)
		// The world's own doing: the pool can place no slot, every server being cordoned or at
		// its maxSlots by a person's change (changeServer), and the bot says so. A reservation
		// is granted against maxSlots, not against what the servers allow at its start.
		if full := meta.FindStatusCondition(w.livePool(b.Status.Pool).Status.Conditions, v1.ConditionReconciling); full != nil &&
			full.Status == metav1.ConditionTrue && (full.Reason == v1.ReasonServersFull || full.Reason == v1.ReasonNoUsableServer) &&
			ready != nil && ready.Reason == v1.ReasonReservationLate && strings.Contains(ready.Message, full.Reason) {
			w.counts["reservation late: no server to place a slot on"]++
			continue
		}
		// The world's doing as well: its faults failed a server's starts until the pool took it
		// out for a while (ServerOut, ServerNotFunctional), and the pool's slots are there with
		// no room under maxSlots for one elsewhere; the bot says so, and is served when the
		// server is back (seed 4474694933379789: maxSlots 1, its one slot on the failing server).
		if out := meta.FindStatusCondition(w.livePool(b.Status.Pool).Status.Conditions, v1.ConditionServerOut); out != nil &&
			out.Status == metav1.ConditionTrue && out.Reason == v1.ReasonServerNotFunctional &&
			ready != nil && ready.Reason == v1.ReasonReservationLate && strings.Contains(ready.Message, out.Reason) {
			w.counts["reservation late: the pool took a failing server out"]++
			continue
		}
		// A person's doing too: the pool's template names an image its registry lacks (a
		// missing tag), so no slot of it can start until someone fixes the spec, and the bot
		// says so (seed 1579723300654357: the reservation came due after the template moved to
		// a missing tag, with no server holding a container of the old one).
		if st := meta.FindStatusCondition(w.livePool(b.Status.Pool).Status.Conditions, v1.ConditionStalled); st != nil &&
			st.Status == metav1.ConditionTrue && st.Reason == v1.ReasonImagePullFailed &&
			ready != nil && ready.Reason == v1.ReasonReservationLate && strings.Contains(ready.Message, st.Reason) {
			w.counts["reservation late: the pool's image cannot be pulled"]++
			continue
		}
		// A bot bound in the pool holds its slot longer than the decisions counted on (its
		// window, or its maxDuration from its binding): a start that took long (a cold pull,
		// or a reservation served late) runs its whole maxDuration from its start, and a
		// settle plays no meeting to its end (its containers only beat). The promise was kept
		// as far as the pool could see ahead.
		// A person lowered the pool's maxSlots since the reservation was granted, below what
		// it holds: the promise was made against the old one.
		if at, ok := w.lowered[b.Status.Pool]; ok && at.After(b.CreationTimestamp.Time) && w.full(b.Status.Pool, slots) {
			w.counts["reservation late: maxSlots lowered below what the pool holds"]++
			continue
		}
		if w.overstayed(b.Status.Pool, slots) {
			w.counts["reservation late: a bound bot held its slot past what was counted on"]++
			continue
		}
		w.violate("invariant 17 (%s): bot %s's reservation of pool %s for %s is not served %s after its start (%s; Ready %v)", when, b.Name, b.Status.Pool,
			b.Status.Reservation.From.Format("15:04:05"), now.Sub(b.Status.Reservation.From.Time).Round(time.Second), describeBot(b), ready)
	}
}

// full reports whether the pool's bound slots fill its maxSlots as the API server holds it.
func (w *world) full(pool string, slots []v1.BotPoolSlot) bool {
	bound := 0
	for i := range slots {
		if slots[i].Spec.Pool == pool && slots[i].Spec.BotRef != nil {
			bound++
		}
	}
	return bound >= int(w.livePool(pool).Spec.MaxSlots)
}

// overstayed reports whether a bot bound in one of the pool's slots holds it past what the
// reservation decisions counted on: a reserved bot past its window (and the pool's
// leaveGracePeriod), another past its maxDuration from its binding. A reserved bot served
// late (faults before the settle) runs its whole maxDuration from its start, past the window
// the next reservation was granted beside.
func (w *world) overstayed(pool string, slots []v1.BotPoolSlot) bool {
	p := w.livePool(pool)
	leave := p.Spec.Timing.LeaveGracePeriod.OrDefault(v1.DefaultLeaveGracePeriod)
	for i := range slots {
		ref := slots[i].Spec.BotRef
		if slots[i].Spec.Pool != pool || ref == nil {
			continue
		}
		bot, at := w.liveBot(ref.Name), w.bindAt[slots[i].Name]
		if bot == nil {
			continue
		}
		end := at.Add(bot.Spec.MaxDuration.OrDefault(v1.DefaultMaxDuration) + leave)
		if isReserved(bot) {
			end = bot.Status.Reservation.Until.Add(leave)
		} else if at.IsZero() {
			continue
		}
		if w.clk.Now().After(end) {
			return true
		}
	}
	return false
}

// ended reports whether a bot is finished or running in its slot (bots of a platform no pool
// serves wait, with a timer, for a pool that never comes).
func ended(b *v1.Bot, slots []v1.BotPoolSlot) bool {
	if b.Status.Phase.Terminal() {
		return true
	}
	if c := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionReady); b.Status.Phase == v1.BotPending &&
		c != nil && c.Reason == string(v1.ReasonPoolNotFound) {
		return true
	}
	s := slotOf(slots, b.UID)
	return s != nil && s.Status.Phase == v1.SlotBusy
}

// checkEnd checks the end of a drained run: every bot finished or running in its slot.
func (w *world) checkEnd() {
	slots := w.liveSlots()
	var stuck []string
	for _, b := range w.liveBots() {
		if !ended(&b, slots) {
			stuck = append(stuck, b.Name+"="+string(b.Status.Phase))
		}
	}
	sort.Strings(stuck)
	if len(stuck) > 0 {
		w.violate("end: bots neither finished nor running: %v", stuck)
	}
}

// deploymentsOf describes an application's deployments in the simulator, for a report.
func (w *world) deploymentsOf(app string) string {
	var out []string
	for _, d := range w.sim.Deployments() {
		if d.AppUUID == app {
			out = append(out, fmt.Sprintf("%s %s created %s finished %s", d.UUID, d.Status,
				d.Created.Format("15:04:05"), d.Finished.Format("15:04:05")))
		}
	}
	return strings.Join(out, "; ")
}

func nameOf[T interface{ GetName() string }](o, n T) string {
	var zero T
	if any(n) != any(zero) {
		return n.GetName()
	}
	return o.GetName()
}

func describeSlot(s *v1.BotPoolSlot) string {
	if s == nil {
		return "gone"
	}
	ref := "-"
	if s.Spec.BotRef != nil {
		ref = s.Spec.BotRef.Name
	}
	return fmt.Sprintf("phase=%s bot=%s app=%s dep=%s image=%s template=%s attempts=%d deleting=%v msg=%q", s.Status.Phase, ref,
		s.Status.ApplicationUUID, s.Status.DeploymentUUID, s.Status.Image, s.Status.TemplateHash, s.Status.RecoveryAttempts, !s.DeletionTimestamp.IsZero(), s.Status.Message)
}

func describeBot(b *v1.Bot) string {
	if b == nil {
		return "gone"
	}
	return fmt.Sprintf("phase=%s reason=%s slot=%s deleting=%v", b.Status.Phase, b.Status.Reason, b.Status.SlotName, !b.DeletionTimestamp.IsZero())
}

// pullerOfAPool reports whether an application is the image puller of a pool on one of the
// servers it lists (botpool-pull-<server uuid>): the pool's pre-pull, no slot's. A puller of a
// server no pool lists any more is a leak like any other application.
func (w *world) pullerOfAPool(name string) bool {
	server, ok := strings.CutPrefix(name, "botpool-pull-")
	if !ok {
		return false
	}
	for _, p := range w.pools {
		if _, listed := p.Spec.Coolify.Server(server); listed {
			return true
		}
	}
	return false
}

// slotDeployments are the simulator's deployments of applications that are no pool's puller.
func (w *world) slotDeployments() []sim.DeploymentInfo {
	pullers := map[string]bool{}
	for _, a := range w.sim.Apps() {
		if strings.HasPrefix(a.Name, "botpool-pull-") {
			pullers[a.UUID] = true
		}
	}
	var out []sim.DeploymentInfo
	for _, d := range w.sim.Deployments() {
		if !pullers[d.AppUUID] {
			out = append(out, d)
		}
	}
	return out
}

// surge reports whether a standby pool's rollout, as its stored status records it, holds
// more slots than the pool had when it began (BaseSlots): at its end, the pool removes free
// slots down to that (endRollout). It runs in onWrite, under the API server's lock.
func (w *world) surge(pool *v1.BotPool) bool {
	live, ok := w.api.truth.get(w.api.keyOf(pool)).(*v1.BotPool)
	return ok && live.Spec.Standby.Running() && live.Status.Rollout != nil && w.perPool[pool.Name] > int(live.Status.Rollout.BaseSlots)
}

// surplus reports whether the pool, without the slot named, still holds free slots for its
// need: its minIdle (the model's pools have no warm windows) and its waiting bots. A scale-down
// removes only such a slot. It runs in onWrite, under the API server's lock: it reads the
// stored objects directly.
//
// A free standby slot whose container is being deployed (Deploying, no bot) is free capacity
// on its way, as the pool counts it (available): a pool with minIdle 1, one standby container
// deploying and two more slots waiting for the deploy gate holds two above its need (seed
// 881256409367165).
func (w *world) surplus(pool *v1.BotPool, without string) bool {
	free, waiting := 0, 0
	for _, o := range w.api.truth.list(kindSlot) {
		sl := o.(*v1.BotPoolSlot)
		if sl.Spec.Pool != pool.Name || sl.Name == without || !sl.DeletionTimestamp.IsZero() || sl.Spec.BotRef != nil {
			continue
		}
		switch sl.Status.Phase {
		case v1.SlotIdle, v1.SlotCreating, "", v1.SlotReleasing:
			free++
		case v1.SlotDeploying:
			if sl.Status.Standby != "" {
				free++
			}
		}
	}
	perTenant := map[string]int32{}
	for _, o := range w.api.truth.list(kindBot) {
		if b := o.(*v1.Bot); b.Status.Pool == pool.Name && b.Status.Phase == v1.BotQueued {
			waiting++
			perTenant[tenantOf(pool, b)]++
		}
	}
	if pool.Spec.Tenancy != nil {
		// The pool warms no slot for a bot its tenant's limit keeps waiting (docs/tenancy.md).
		// The API server's lock is held here (a write's check): its truth is read directly.
		var bots []v1.Bot
		var slots []v1.BotPoolSlot
		for _, o := range w.api.truth.list(kindBot) {
			bots = append(bots, *o.(*v1.Bot))
		}
		for _, o := range w.api.truth.list(kindSlot) {
			slots = append(slots, *o.(*v1.BotPoolSlot))
		}
		held := heldBy(pool, bots, slots)
		waiting = 0
		for t, n := range perTenant {
			waiting += int(min(n, max(0, limitOf(pool, t)-held[t])))
		}
	}
	return free >= max(int(pool.Spec.MinIdle), waiting)
}

// changed names the fields a write changed, with their values, for a settle's report: what
// keeps the operator writing.
func changed(old, new client.Object) string {
	if old == nil || new == nil {
		return ""
	}
	var a, b map[string]any
	for _, x := range []struct {
		o client.Object
		m *map[string]any
	}{{old, &a}, {new, &b}} {
		raw, err := json.Marshal(x.o)
		must(err)
		must(json.Unmarshal(raw, x.m))
		delete(*x.m, "metadata")
	}
	var out []string
	var walk func(path string, x, y any)
	walk = func(path string, x, y any) {
		xm, xok := x.(map[string]any)
		ym, yok := y.(map[string]any)
		if xok && yok {
			for k := range xm {
				walk(path+"."+k, xm[k], ym[k])
			}
			for k := range ym {
				if _, ok := xm[k]; !ok {
					walk(path+"."+k, nil, ym[k])
				}
			}
			return
		}
		xs, _ := json.Marshal(x)
		ys, _ := json.Marshal(y)
		if string(xs) != string(ys) {
			out = append(out, fmt.Sprintf("%s %.120s→%.120s", path, xs, ys))
		}
	}
	walk("", a, b)
	sort.Strings(out)
	return " {" + strings.Join(out, "; ") + "}"
}
