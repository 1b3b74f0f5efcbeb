package controllers

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// hold is a slot of a pool given away or promised over [from, until): a bound bot holds its
// slot from its binding for at most its maxDuration (then it is asked to leave), and a
// reservation holds one from its bot's startTime for that bot's maxDuration.
type hold struct {
	from, until time.Time
}

// peakHolds is the most holds that overlap at one instant of [from, until): a sweep over the
// moments holds begin and end inside it, O(n log n) in the pool's bots (a decision runs under
// the pool's lock, and a tenant may schedule thousands).
func peakHolds(holds []hold, from, until time.Time) int {
	type edge struct {
		at   time.Time
		step int
	}
	edges := make([]edge, 0, 2*len(holds))
	for _, h := range holds {
		if !h.until.After(from) || !h.from.Before(until) || !h.from.Before(h.until) {
			continue // outside [from, until), or empty
		}
		edges = append(edges, edge{at: later(h.from, from), step: 1}, edge{at: h.until, step: -1})
	}
	// A hold ending at the instant another begins does not overlap it: ends first.
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].step < edges[j].step
	})
	n, most := 0, 0
	for _, e := range edges {
		n += e.step
		most = max(most, n)
	}
	return most
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// roomFor reports whether one more hold over [from, until) keeps every instant of it within
// maxSlots, given what the pool has promised and given away (holds). It is both rules of a
// reservation: a reservation is granted only if its bot's meeting fits beside every other
// reservation and every bot bound now (each for its maxDuration), and an ad-hoc bot is bound
// only if its meeting, as long as it may last, leaves every reservation its slot.
func roomFor(holds []hold, from, until time.Time, maxSlots int) bool {
	return peakHolds(holds, from, until)+1 <= maxSlots
}

// waitsForSlot reports whether a bot in that phase holds no slot (a retried bot back in the
// queue keeps its last slotName).
func waitsForSlot(p v1.BotPhase) bool {
	return p == "" || p == v1.BotPending || p == v1.BotScheduled || p == v1.BotQueued
}

// reservationVerdict is what decideReservation says of a scheduled bot.
type reservationVerdict struct {
	granted bool
	reason  string // CapacityReserved, TooLate or PoolFull
	message string
	window  v1.BotReservation
}

// reservationWindow is the window a reservation of the bot in the pool holds: from its
// binding (its startTime on a standby Running pool, whose ready container takes it at once;
// scheduleLead before on a Stopped pool, whose start is a deployment) for its maxDuration.
func reservationWindow(bot *v1.Bot, pool *v1.BotPool, scheduleLead time.Duration) v1.BotReservation {
	from := bot.Spec.StartTime.Time
	if !pool.Spec.Standby.Running() {
		from = from.Add(-scheduleLead)
	}
	return v1.BotReservation{Pool: pool.Name, From: metav1.Time{Time: from},
		Until: metav1.Time{Time: from.Add(bot.Spec.MaxDuration.OrDefault(v1.DefaultMaxDuration))}}
}

// within reports whether window w lies inside the granted one g: a spec change that only
// shrinks what was promised keeps the grant.
func within(w, g v1.BotReservation) bool {
	return w.Pool == g.Pool && !w.From.Before(&g.From) && !g.Until.Time.Before(w.Until.Time)
}

// holdsOf is what the pool's bots other than except hold or were promised, each until its
// maxDuration and the time to leave are over: a bot running since startedAt; a bot bound and
// not started yet (by its phase, or by a slot's botRef the bot controller has not mirrored
// yet: bound) from now; a bot with a granted reservation not bound yet, its window. Ended and
// deleted bots, and bots waiting without a reservation, hold nothing.
func holdsOf(bots []v1.Bot, bound map[types.UID]bool, except types.UID, now time.Time, leave time.Duration) []hold {
	var out []hold
	for i := range bots {
		b := &bots[i]
		if b.UID == except || b.Status.Phase.Terminal() || !b.DeletionTimestamp.IsZero() {
			continue
		}
		last := b.Spec.MaxDuration.OrDefault(v1.DefaultMaxDuration) + leave
		switch {
		case waitsForSlot(b.Status.Phase) && !bound[b.UID]:
			// A bot back in the queue after a failed start keeps its startedAt: it holds nothing
			// until it is bound again, unless it holds a reservation.
			if reserved(b) {
				w := b.Status.Reservation
				out = append(out, hold{from: w.From.Time, until: w.Until.Add(leave)})
			}
		case b.Status.StartedAt != nil && !waitsForSlot(b.Status.Phase):
			out = append(out, hold{from: b.Status.StartedAt.Time, until: b.Status.StartedAt.Add(last)})
		default:
			out = append(out, hold{from: now, until: now.Add(last)}) // bound, not started yet
		}
	}
	return out
}

// decideReservation grants a scheduled bot a reservation when it is decided at least lead
// before its start and its window (reservationWindow), with the pool's leaveGracePeriod,
// fits beside what the pool's other bots hold or were promised (holdsOf) within maxSlots.
func decideReservation(bot *v1.Bot, pool *v1.BotPool, others []v1.Bot, bound map[types.UID]bool, now time.Time, lead, scheduleLead time.Duration) reservationVerdict {
	// Decided at the bot's first pass (or when its spec moved its window): now is then.
	start := bot.Spec.StartTime.Time
	if ahead := start.Sub(now); ahead < lead {
		return reservationVerdict{reason: v1.ReasonTooLate, message: fmt.Sprintf(
			"startTime is %s away, less than the %s a reservation needs: the bot joins the queue shortly before its start like an ad-hoc bot",
			ahead.Round(time.Second), lead)}
	}
	leave := pool.Spec.Timing.LeaveGracePeriod.OrDefault(v1.DefaultLeaveGracePeriod)
	w := reservationWindow(bot, pool, scheduleLead)
	holds := holdsOf(others, bound, bot.UID, now, leave)
	if !roomFor(holds, w.From.Time, w.Until.Add(leave), int(pool.Spec.MaxSlots)) {
		return reservationVerdict{reason: v1.ReasonPoolFull, message: fmt.Sprintf(
			"Pool %s's %d slots are all promised or taken at some moment between %s and %s: no slot is reserved; the bot joins the queue shortly before its start",
			pool.Name, pool.Spec.MaxSlots, w.From.UTC().Format(time.RFC3339), w.Until.Add(leave).UTC().Format(time.RFC3339))}
	}
	return reservationVerdict{granted: true, reason: v1.ReasonCapacityReserved, window: w, message: fmt.Sprintf(
		"A slot of pool %s is held for this bot from %s", pool.Name, w.From.UTC().Format(time.RFC3339))}
}

// reservationLedger is what the bot controller (deciding reservations) and the dispatcher
// (binding ad-hoc bots beside them) share about each pool: a lock per pool, under which a
// decision and a binding wave exclude each other (so neither takes the slot the other just
// gave away, and one tenant's thousands of decisions never wait on another's), the grants
// written that the cache may not show yet, and the bindings likewise. The grants themselves
// live in the bots' Reserved conditions and status.reservation, and bindings in the slots'
// botRefs: a restart rebuilds it all from the cache. A nil ledger shares nothing (tests that
// build one controller alone).
type reservationLedger struct {
	mu      sync.Mutex // guards the maps
	pools   map[types.NamespacedName]*sync.Mutex
	pending map[types.UID]pendingGrant
	binds   map[types.UID]waveBinding
}

// pendingGrant is a grant this process decided, kept until the cache shows it or until.
type pendingGrant struct {
	bot   v1.Bot
	until time.Time
}

// pendingGrantTTL bounds how long a grant the cache does not show is counted: a status write
// that failed left no grant, and the bot is decided again.
const pendingGrantTTL = time.Minute

// reservationRetry is how soon a decision that found its pool's lock taken tries again: the
// bot controller's workers are shared by every namespace, and none waits on one pool.
const reservationRetry = 50 * time.Millisecond

// poolLock is the pool's lock (nil for a nil ledger).
func (l *reservationLedger) poolLock(pool types.NamespacedName) *sync.Mutex {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pools == nil {
		l.pools = map[types.NamespacedName]*sync.Mutex{}
	}
	m := l.pools[pool]
	if m == nil {
		m = &sync.Mutex{}
		l.pools[pool] = m
	}
	return m
}

// withPending adds to the cached bots of a pool the grants decided but not shown yet.
//
// A grant whose bot the cache no longer holds, or holds as another object of that name, is
// dropped: the grant was decided on a bot the cache showed, and the cache never goes back, so
// that bot was deleted before its grant showed. Counted until pendingGrantTTL, it held the
// pool's queue beside a free slot for a meeting that will never come (the model check, seed
// 2295569671406997). c is the cache the grants were decided on; an error reading it keeps
// the grant.
func (l *reservationLedger) withPending(ctx context.Context, c client.Reader, cached []v1.Bot, namespace, pool string, now time.Time) []v1.Bot {
	if l == nil {
		return cached
	}
	shown := map[types.UID]bool{}
	for i := range cached {
		if meta.FindStatusCondition(cached[i].Status.Conditions, v1.ConditionReserved) != nil {
			shown[cached[i].UID] = true
		}
	}
	l.mu.Lock()
	var mine []pendingGrant // this pool's grants not shown yet
	for uid, g := range l.pending {
		switch {
		case shown[uid] || now.After(g.until):
			delete(l.pending, uid)
		case g.bot.Namespace == namespace && g.bot.Status.Pool == pool:
			mine = append(mine, g)
		}
	}
	l.mu.Unlock()
	out := cached
	for _, g := range mine {
		if botGone(ctx, c, &g.bot) {
			l.forget(g.bot.UID)
			continue
		}
		out = append(out, g.bot)
	}
	return out
}

// botGone reports whether the cache holds no bot of b's name, or another one.
func botGone(ctx context.Context, c client.Reader, b *v1.Bot) bool {
	live := &v1.Bot{}
	err := c.Get(ctx, client.ObjectKeyFromObject(b), live)
	return apierrors.IsNotFound(err) || err == nil && live.UID != b.UID
}

// forget drops a grant not shown yet.
func (l *reservationLedger) forget(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pending, uid)
}

// remember keeps a grant until the cache shows it (or pendingGrantTTL).
func (l *reservationLedger) remember(bot *v1.Bot, now time.Time) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending == nil {
		l.pending = map[types.UID]pendingGrant{}
	}
	l.pending[bot.UID] = pendingGrant{bot: *bot.DeepCopy(), until: now.Add(pendingGrantTTL)}
}

// bound records a binding a wave wrote (kept bindingTTL: the cache shows it by then).
func (l *reservationLedger) bound(bot types.UID, b waveBinding) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.binds == nil {
		l.binds = map[types.UID]waveBinding{}
	}
	l.binds[bot] = b
}

// boundIn is the bots of the pool bound to a slot by its botRef (the cache) or by a wave the
// cache may not show yet: what holdsOf counts as bound whatever the bot's own phase says.
//
// A wave's binding that ended since is not one (waveBinding.ended): a bot whose start failed
// after it was bound, or whose slot let it go, is back in the queue, and holds nothing until
// bound again. Counted for the rest of bindingTTL, it held a slot it did not have, and the
// queue, that very bot at its head, waited beside a free slot (the model check, seeds
// 881256409367164 and 1579723300654347). bots are the pool's bots as the caller read them.
func (l *reservationLedger) boundIn(ctx context.Context, c client.Reader, pool *v1.BotPool, bots []v1.Bot, now time.Time) (map[types.UID]bool, error) {
	var slots v1.BotPoolSlotList
	if err := c.List(ctx, &slots, client.InNamespace(pool.Namespace), client.MatchingFields{indexSlotPool: pool.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the pool's slots: %w", err)
	}
	out := map[types.UID]bool{}
	for i := range slots.Items {
		if ref := slots.Items[i].Spec.BotRef; ref != nil {
			out[ref.UID] = true
		}
	}
	if l == nil {
		return out, nil
	}
	byUID := slotsByUID(slots.Items)
	l.mu.Lock()
	defer l.mu.Unlock()
	for uid, b := range l.binds {
		if now.Sub(b.at) > bindingTTL {
			delete(l.binds, uid)
		}
	}
	for i := range bots {
		if b, ok := l.binds[bots[i].UID]; ok {
			if b.ended(&bots[i], byUID) {
				delete(l.binds, bots[i].UID)
			} else {
				out[bots[i].UID] = true
			}
		}
	}
	return out, nil
}

// reserve decides a scheduled bot's reservation: its Reserved condition, True with the window
// held (status.reservation) or False with why not. It is decided at the bot's first pass, and
// again when a spec change moved the window outside the one granted.
func (r *BotReconciler) reserve(ctx context.Context, bot *v1.Bot, pool *v1.BotPool, now time.Time) error {
	if m := r.reservations.poolLock(types.NamespacedName{Namespace: pool.Namespace, Name: pool.Name}); m != nil {
		if !m.TryLock() {
			return waitFor(reservationRetry, "", "")
		}
		defer m.Unlock()
	}
	var bots v1.BotList
	if err := r.Client.List(ctx, &bots, client.InNamespace(bot.Namespace), client.MatchingFields{indexBotPool: pool.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing the pool's bots for a reservation: %w", err)
	}
	bound, err := r.reservations.boundIn(ctx, r.Client, pool, bots.Items, now)
	if err != nil {
		return err
	}
	others := r.reservations.withPending(ctx, r.Client, bots.Items, bot.Namespace, pool.Name, now)
	v := decideReservation(bot, pool, others, bound, now, pool.Spec.Reservations.Lead(), r.ScheduleLead)
	if st := pool.Status.Reservations; v.granted && st != nil && st.Lead.Duration > v.window.From.Sub(now) {
		v.message += fmt.Sprintf("; the pool's lead is %s, more than the %s left: its slot may be late", st.Lead.Round(time.Second),
			v.window.From.Sub(now).Round(time.Second))
	}
	status := metav1.ConditionFalse
	bot.Status.Reservation = nil
	if v.granted {
		status = metav1.ConditionTrue
		bot.Status.Reservation = &v.window
	}
	v1.SetCondition(&bot.Status.Conditions, metav1.Condition{Type: v1.ConditionReserved, Status: status, Reason: v.reason,
		Message: v.message, ObservedGeneration: bot.Generation}, now)
	if v.granted {
		r.reservations.remember(bot, now)
	}
	return nil
}

// reservationMoved reports whether a granted reservation must be decided again: the bot's
// spec now asks for a window outside the one granted (a shrunk one is kept, and recorded).
func (r *BotReconciler) reservationMoved(bot *v1.Bot, pool *v1.BotPool) bool {
	if !meta.IsStatusConditionTrue(bot.Status.Conditions, v1.ConditionReserved) || bot.Spec.StartTime == nil {
		return false
	}
	w := reservationWindow(bot, pool, r.ScheduleLead)
	if g := bot.Status.Reservation; g != nil && within(w, *g) {
		bot.Status.Reservation = &w
		return false
	}
	return true
}

// unreserved counts how many bots at the head of the queue may be bound now, and is called
// under the pool's reservation lock. A bot with a reservation takes the slot held for it. Any
// other takes a slot only if the free slots the pool warms for reservations due soon stay
// free (status.reservations.warming) unless its meeting ends well before the next of them is
// bound, and if, as long as its meeting may last, every reservation not yet bound keeps its
// slot (keepsReservations), counting the bots bound before it in the wave: a meeting is never
// cut short, so this is how a granted reservation finds its slot at its start. The first bot
// that does not fit ends the wave, so the queue's order holds.
//
// A reservation whose bot a slot's botRef already names is bound, whatever the bot's status
// still says: it holds its slot as any bound bot does, and promises nothing more (the model
// check found a queue held for a reserved bot bound a moment before, seed 3457702266237806).
func (d *Dispatcher) unreserved(ctx context.Context, pool *v1.BotPool, head []*v1.Bot, free int) (int, error) {
	var list v1.BotList
	if err := d.Client.List(ctx, &list, client.InNamespace(pool.Namespace), client.MatchingFields{indexBotPool: pool.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	now := d.Clock.Now()
	bots := d.reservations.withPending(ctx, d.Client, list.Items, pool.Namespace, pool.Name, now)
	waiting := func(b *v1.Bot) bool { return reserved(b) && waitsForSlot(b.Status.Phase) && !b.Status.Phase.Terminal() }
	promised := false
	for i := range bots {
		promised = promised || waiting(&bots[i])
	}
	if !promised {
		return len(head), nil // nothing promised: the queue takes what is free, as always
	}
	bound, err := d.reservations.boundIn(ctx, d.Client, pool, list.Items, now)
	if err != nil {
		return 0, err
	}
	leave := pool.Spec.Timing.LeaveGracePeriod.OrDefault(v1.DefaultLeaveGracePeriod)
	pending := map[types.UID]hold{} // the reservations not yet bound
	var promises []string           // their bots, for the log
	ahead := 0                      // those of them not yet at their binding time
	var next time.Time              // the earliest of those
	for i := range bots {
		b := &bots[i]
		if !waiting(b) || bound[b.UID] {
			continue
		}
		w := b.Status.Reservation
		pending[b.UID] = hold{from: w.From.Time, until: w.Until.Add(leave)}
		promises = append(promises, b.Name)
		if b.Status.Phase != v1.BotQueued {
			ahead++
			if next.IsZero() || w.From.Time.Before(next) {
				next = w.From.Time
			}
		}
	}
	if len(pending) == 0 {
		return len(head), nil
	}
	spare := free
	if st := pool.Status.Reservations; st != nil {
		// The pool's count may predate a reservation's bot joining the queue (it then takes
		// its slot as a reserved bot): never more than are still ahead.
		spare -= min(int(st.Warming), ahead)
	}
	holds := holdsOf(bots, bound, "", now, leave)
	for i, b := range head {
		if reserved(b) {
			// It takes a free slot in this wave; its hold is among holds already, and it
			// promises nothing more to the bots behind it (seed 3457702266237803).
			spare--
			delete(pending, b.UID)
			continue
		}
		until := now.Add(b.Spec.MaxDuration.OrDefault(v1.DefaultMaxDuration) + leave)
		// A warmed slot may serve a meeting that ends, with the margin to make the slot ready
		// again, before the next reservation is bound.
		warmedFor := !next.IsZero() && until.Add(reservationMargin).After(next)
		if warmedFor && spare <= 0 || !keepsReservations(holds, pending, now, until, int(pool.Spec.MaxSlots)) {
			ctrl.LoggerFrom(ctx).V(1).Info("Queue held for reservations", "bot", b.Name, "until", until, "spare", spare,
				"atOnce", peakHolds(holds, now, until), "maxSlots", pool.Spec.MaxSlots, "holds", len(holds), "pending", abbreviate(promises))
			return i, nil
		}
		spare--
		holds = append(holds, hold{from: now, until: until})
	}
	return len(head), nil
}

// keepsReservations reports whether one more meeting over [from, until) leaves every pending
// reservation its slot: wherever it overlaps one of them, what the pool holds then (holds,
// the reservations among them) and the meeting fit within maxSlots. Where it overlaps none,
// it takes nothing promised: a pool whose maxSlots was lowered below its bound bots serves its
// queue from the free slots it still has, as a pool without reservations does, until the
// meeting would reach into a reservation's window.
func keepsReservations(holds []hold, pending map[types.UID]hold, from, until time.Time, maxSlots int) bool {
	for _, r := range pending {
		lo, hi := later(r.from, from), earlier(r.until, until)
		if lo.Before(hi) && !roomFor(holds, lo, hi, maxSlots) {
			return false
		}
	}
	return true
}
