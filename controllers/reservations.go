package controllers

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

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
}

// holdsOf is what the pool's other bots hold or were promised: a bot that runs (or is bound)
// holds its slot from its start (or now) for its maxDuration and the time to leave; a bot
// with a granted reservation not yet bound holds one from its startTime. Ended and deleted
// bots, and bots in the queue without a reservation, hold nothing.
func holdsOf(bots []v1.Bot, except types.UID, now time.Time, leave time.Duration) []hold {
	var out []hold
	for i := range bots {
		b := &bots[i]
		if b.UID == except || b.Status.Phase.Terminal() || !b.DeletionTimestamp.IsZero() {
			continue
		}
		last := b.Spec.MaxDuration.OrDefault(v1.DefaultMaxDuration) + leave
		switch {
		case waitsForSlot(b.Status.Phase):
			// A bot back in the queue after a failed start keeps its startedAt: it holds nothing
			// until it is bound again, unless it holds a reservation.
			if reserved(b) {
				out = append(out, hold{from: b.Spec.StartTime.Time, until: b.Spec.StartTime.Add(last)})
			}
		case b.Status.StartedAt != nil:
			out = append(out, hold{from: b.Status.StartedAt.Time, until: b.Status.StartedAt.Add(last)})
		default:
			out = append(out, hold{from: now, until: now.Add(last)}) // bound, not started yet
		}
	}
	return out
}

// decideReservation grants a scheduled bot a reservation when it is decided at least lead
// before its start and its meeting, as long as it may last, fits beside what the pool's other
// bots hold or were promised (holdsOf) within maxSlots. A granted reservation stays granted
// (the ledger is the bots' own Reserved conditions): the caller asks only for bots without
// one.
func decideReservation(bot *v1.Bot, pool *v1.BotPool, others []v1.Bot, now time.Time, lead time.Duration) reservationVerdict {
	// Decided once, at the bot's first pass: now is its creation as the injected clock sees it.
	start := bot.Spec.StartTime.Time
	if ahead := start.Sub(now); ahead < lead {
		return reservationVerdict{reason: v1.ReasonTooLate, message: fmt.Sprintf(
			"startTime is %s away, less than the %s a reservation needs: the bot joins the queue shortly before its start like an ad-hoc bot",
			ahead.Round(time.Second), lead)}
	}
	leave := pool.Spec.Timing.LeaveGracePeriod.OrDefault(v1.DefaultLeaveGracePeriod)
	until := start.Add(bot.Spec.MaxDuration.OrDefault(v1.DefaultMaxDuration) + leave)
	holds := holdsOf(others, bot.UID, now, leave)
	if !roomFor(holds, start, until, int(pool.Spec.MaxSlots)) {
		return reservationVerdict{reason: v1.ReasonPoolFull, message: fmt.Sprintf(
			"Pool %s's %d slots are all promised or taken at some moment between %s and %s: no slot is reserved; the bot joins the queue shortly before its start",
			pool.Name, pool.Spec.MaxSlots, start.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339))}
	}
	return reservationVerdict{granted: true, reason: v1.ReasonCapacityReserved, message: fmt.Sprintf(
		"A slot of pool %s is held for this bot from %s", pool.Name, start.UTC().Format(time.RFC3339))}
}

// reservationLedger serializes this process's reservation decisions per pool (so that two
// bots decided at once cannot both take the last slot, and one tenant's thousands of decisions
// never wait on another's) and remembers the grants written that the cache may not show yet.
// The grants themselves live in the bots' Reserved conditions: a restart rebuilds the ledger
// from the cache.
type reservationLedger struct {
	mu      sync.Mutex // guards pools and pending
	pools   map[types.NamespacedName]*sync.Mutex
	pending map[types.UID]pendingGrant
}

// lock takes the pool's decision lock and returns its release.
func (l *reservationLedger) lock(pool types.NamespacedName) func() {
	l.mu.Lock()
	if l.pools == nil {
		l.pools = map[types.NamespacedName]*sync.Mutex{}
	}
	m := l.pools[pool]
	if m == nil {
		m = &sync.Mutex{}
		l.pools[pool] = m
	}
	l.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// pendingGrant is a grant this process decided, kept until the cache shows it or until.
type pendingGrant struct {
	bot   v1.Bot
	until time.Time
}

// pendingGrantTTL bounds how long a grant the cache does not show is counted: a status write
// that failed left no grant, and the bot is decided again.
const pendingGrantTTL = time.Minute

// withPending adds to the cached bots of a pool the grants decided but not shown yet.
func (l *reservationLedger) withPending(cached []v1.Bot, namespace, pool string, now time.Time) []v1.Bot {
	l.mu.Lock()
	defer l.mu.Unlock()
	shown := map[types.UID]bool{}
	for i := range cached {
		if meta.FindStatusCondition(cached[i].Status.Conditions, v1.ConditionReserved) != nil {
			shown[cached[i].UID] = true
		}
	}
	out := cached
	for uid, g := range l.pending {
		switch {
		case shown[uid] || now.After(g.until):
			delete(l.pending, uid)
		case g.bot.Namespace == namespace && g.bot.Status.Pool == pool:
			out = append(out, g.bot)
		}
	}
	return out
}

// remember keeps a grant until the cache shows it (or pendingGrantTTL).
func (l *reservationLedger) remember(bot *v1.Bot, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending == nil {
		l.pending = map[types.UID]pendingGrant{}
	}
	l.pending[bot.UID] = pendingGrant{bot: *bot.DeepCopy(), until: now.Add(pendingGrantTTL)}
}

// reserve decides a scheduled bot's reservation, once: its Reserved condition, True with the
// slot held or False with why not.
func (r *BotReconciler) reserve(ctx context.Context, bot *v1.Bot, pool *v1.BotPool, now time.Time) error {
	defer r.reservations.lock(types.NamespacedName{Namespace: pool.Namespace, Name: pool.Name})()
	var bots v1.BotList
	if err := r.Client.List(ctx, &bots, client.InNamespace(bot.Namespace), client.MatchingFields{indexBotPool: pool.Name}); err != nil {
		return fmt.Errorf("listing the pool's bots for a reservation: %w", err)
	}
	others := r.reservations.withPending(bots.Items, bot.Namespace, pool.Name, now)
	v := decideReservation(bot, pool, others, now, pool.Spec.Reservations.Lead())
	status := metav1.ConditionFalse
	if v.granted {
		status = metav1.ConditionTrue
	}
	v1.SetCondition(&bot.Status.Conditions, metav1.Condition{Type: v1.ConditionReserved, Status: status, Reason: v.reason,
		Message: v.message, ObservedGeneration: bot.Generation}, now)
	if v.granted {
		r.reservations.remember(bot, now)
	}
	return nil
}

// unreserved counts how many bots at the head of the queue may be bound now. A bot with a
// reservation takes the slot held for it. Any other takes a slot only if, as long as its
// meeting may last, every reservation not yet bound keeps its slot (roomFor), counting the
// bots bound before it in the wave: a meeting is never cut short, so this is how a granted
// reservation finds its slot at its start. The first bot that does not fit ends the wave, so
// the queue's order holds.
func (d *Dispatcher) unreserved(ctx context.Context, pool *v1.BotPool, head []*v1.Bot) (int, error) {
	var bots v1.BotList
	if err := d.Client.List(ctx, &bots, client.InNamespace(pool.Namespace), client.MatchingFields{indexBotPool: pool.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	promised := false
	for i := range bots.Items {
		if b := &bots.Items[i]; reserved(b) && waitsForSlot(b.Status.Phase) && !b.Status.Phase.Terminal() {
			promised = true
		}
	}
	if !promised {
		return len(head), nil // nothing promised: the queue takes what is free, as always
	}
	now := d.Clock.Now()
	leave := pool.Spec.Timing.LeaveGracePeriod.OrDefault(v1.DefaultLeaveGracePeriod)
	holds := holdsOf(bots.Items, "", now, leave)
	for i, b := range head {
		if reserved(b) {
			continue // its hold is among holds already
		}
		until := now.Add(b.Spec.MaxDuration.OrDefault(v1.DefaultMaxDuration) + leave)
		if !roomFor(holds, now, until, int(pool.Spec.MaxSlots)) {
			ctrl.LoggerFrom(ctx).V(1).Info("Queue held for reservations", "bot", b.Name, "until", until,
				"atOnce", peakHolds(holds, now, until), "maxSlots", pool.Spec.MaxSlots, "holds", len(holds))
			return i, nil
		}
		holds = append(holds, hold{from: now, until: until})
	}
	return len(head), nil
}
