package policy

import (
	"fmt"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

const (
	// ReservationMargin is added to every lead: the creation of the slots' applications
	// (requests within Coolify's rate limit), status lag and a pass's delay.
	ReservationMargin = 2 * time.Minute
)

// Hold is a slot of a pool given away or promised over [from, until): a bound bot holds its
// slot from its binding for at most its maxDuration (then it is asked to leave), and a
// reservation holds one from its bot's startTime for that bot's maxDuration.
type Hold struct {
	From, Until time.Time
}

// PeakHolds is the most holds that overlap at one instant of [from, until): a sweep over the
// moments holds begin and end inside it, O(n log n) in the pool's bots (a decision runs under
// the pool's lock, and a tenant may schedule thousands).
func PeakHolds(holds []Hold, from, until time.Time) int {
	type edge struct {
		at   time.Time
		step int
	}
	edges := make([]edge, 0, 2*len(holds))
	for _, h := range holds {
		if !h.Until.After(from) || !h.From.Before(until) || !h.From.Before(h.Until) {
			continue // outside [from, until), or empty
		}
		edges = append(edges, edge{at: later(h.From, from), step: 1}, edge{at: h.Until, step: -1})
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

// RoomFor reports whether one more hold over [from, until) keeps every instant of it within
// maxSlots, given what the pool has promised and given away (holds). It is both rules of a
// reservation: a reservation is granted only if its bot's meeting fits beside every other
// reservation and every bot bound now (each for its maxDuration), and an ad-hoc bot is bound
// only if its meeting, as long as it may last, leaves every reservation its slot.
func RoomFor(holds []Hold, from, until time.Time, maxSlots int) bool {
	return PeakHolds(holds, from, until)+1 <= maxSlots
}

// WaitsForSlot reports whether a bot in that phase holds no slot (a retried bot back in the
// queue keeps its last slotName).
func WaitsForSlot(p v1.BotPhase) bool {
	return p == "" || p == v1.BotPending || p == v1.BotScheduled || p == v1.BotQueued
}

// reservationVerdict is what DecideReservation says of a scheduled bot.
type reservationVerdict struct {
	Granted bool
	Reason  string // CapacityReserved, BeyondHorizon, TooLate, PoolFull or TenantLimit
	Message string
	Window  v1.BotReservation
}

// ReservationWindow is the window a reservation of the bot in the pool holds: from its
// binding (its startTime on a standby Running pool, whose ready container takes it at once;
// scheduleLead before on a Stopped pool, whose start is a deployment) for its maxDuration.
func ReservationWindow(bot *v1.Bot, pool *v1.BotPool, scheduleLead time.Duration) v1.BotReservation {
	from := bot.Spec.StartTime.Time
	if !pool.Spec.Standby.Running() {
		from = from.Add(-scheduleLead)
	}
	return v1.BotReservation{Pool: pool.Name, From: metav1.Time{Time: from},
		Until: metav1.Time{Time: from.Add(bot.Spec.MaxDuration.OrDefault(v1.DefaultMaxDuration))}}
}

// Within reports whether window w lies inside the granted one g: a spec change that only
// shrinks what was promised keeps the grant.
func Within(w, g v1.BotReservation) bool {
	return w.Pool == g.Pool && !w.From.Before(&g.From) && !g.Until.Time.Before(w.Until.Time)
}

// HoldsOf is what the pool's bots other than except hold or were promised, each until its
// maxDuration and the time to leave are over: a bot running since startedAt; a bot bound and
// not started yet (by its phase, or by a slot's botRef the bot controller has not mirrored
// yet: bound) from now; a bot with a granted reservation not bound yet, its window. Ended and
// deleted bots, and bots waiting without a reservation, hold nothing.
func HoldsOf(bots []v1.Bot, bound map[types.UID]bool, except types.UID, now time.Time, leave time.Duration) []Hold {
	var out []Hold
	for i := range bots {
		b := &bots[i]
		if b.UID == except || b.Status.Phase.Terminal() || !b.DeletionTimestamp.IsZero() {
			continue
		}
		last := b.Spec.MaxDuration.OrDefault(v1.DefaultMaxDuration) + leave
		switch {
		case WaitsForSlot(b.Status.Phase) && !bound[b.UID]:
			// A bot back in the queue after a failed start keeps its startedAt: it holds nothing
			// until it is bound again, unless it holds a reservation.
			if Reserved(b) {
				w := b.Status.Reservation
				out = append(out, Hold{From: w.From.Time, Until: w.Until.Add(leave)})
			}
		case b.Status.StartedAt != nil && !WaitsForSlot(b.Status.Phase):
			out = append(out, Hold{From: b.Status.StartedAt.Time, Until: b.Status.StartedAt.Add(last)})
		default:
			out = append(out, Hold{From: now, Until: now.Add(last)}) // bound, not started yet
		}
	}
	return out
}

// DecideReservation grants a scheduled bot a reservation when it is decided at least lead
// before its start and within the pool's horizon (reservations.maxHorizon), and its window
// (ReservationWindow), with the pool's leaveGracePeriod, fits beside what the pool's other bots
// hold or were promised (HoldsOf) within maxSlots, and beside what its own tenant's hold within
// the tenant's limit (a pool with tenants).
func DecideReservation(bot *v1.Bot, pool *v1.BotPool, others []v1.Bot, bound map[types.UID]bool, now time.Time, lead, scheduleLead time.Duration) reservationVerdict {
	// Decided at the bot's first pass (or when its spec moved its window): now is then.
	start := bot.Spec.StartTime.Time
	if horizon := pool.Spec.Reservations.Horizon(); start.Sub(now) > horizon {
		return reservationVerdict{Reason: v1.ReasonBeyondHorizon, Message: fmt.Sprintf(
			"startTime is more than pool %s's reservation horizon of %s away: the reservation is decided at %s",
			pool.Name, horizon, start.Add(-horizon).UTC().Format(time.RFC3339))}
	}
	if ahead := start.Sub(now); ahead < lead {
		return reservationVerdict{Reason: v1.ReasonTooLate, Message: fmt.Sprintf(
			"startTime is %s away, less than the %s a reservation needs: the bot joins the queue shortly before its start like an ad-hoc bot",
			ahead.Round(time.Second), lead)}
	}
	leave := pool.Spec.Timing.LeaveGracePeriod.OrDefault(v1.DefaultLeaveGracePeriod)
	w := ReservationWindow(bot, pool, scheduleLead)
	holds := HoldsOf(others, bound, bot.UID, now, leave)
	if !RoomFor(holds, w.From.Time, w.Until.Add(leave), int(pool.Spec.MaxSlots)) {
		return reservationVerdict{Reason: v1.ReasonPoolFull, Message: fmt.Sprintf(
			"Pool %s's %d slots are all promised or taken at some moment between %s and %s: no slot is reserved; the bot joins the queue shortly before its start",
			pool.Name, pool.Spec.MaxSlots, w.From.UTC().Format(time.RFC3339), w.Until.Add(leave).UTC().Format(time.RFC3339))}
	}
	if Tenancy(pool) != nil {
		tenant := TenantOf(pool, bot)
		var mine []v1.Bot
		for i := range others {
			if TenantOf(pool, &others[i]) == tenant {
				mine = append(mine, others[i])
			}
		}
		limit := ShareOf(pool, tenant).Limit
		if !RoomFor(HoldsOf(mine, bound, bot.UID, now, leave), w.From.Time, w.Until.Add(leave), int(limit)) {
			return reservationVerdict{Reason: v1.ReasonTenantLimit, Message: fmt.Sprintf(
				"Tenant %q holds or was promised its limit of %d slot(s) of pool %s at some moment between %s and %s: no slot is reserved; the bot joins the queue shortly before its start",
				tenant, limit, pool.Name, w.From.UTC().Format(time.RFC3339), w.Until.Add(leave).UTC().Format(time.RFC3339))}
		}
	}
	return reservationVerdict{Granted: true, Reason: v1.ReasonCapacityReserved, Window: w, Message: fmt.Sprintf(
		"A slot of pool %s is held for this bot from %s", pool.Name, w.From.UTC().Format(time.RFC3339))}
}

// KeepsReservations reports whether one more meeting over [from, until) leaves every pending
// reservation its slot: wherever it overlaps one of them, what the pool holds then (holds,
// the reservations among them) and the meeting fit within maxSlots. Where it overlaps none,
// it takes nothing promised: a pool whose maxSlots was lowered below its bound bots serves its
// queue from the free slots it still has, as a pool without reservations does, until the
// meeting would reach into a reservation's window.
func KeepsReservations(holds []Hold, pending map[types.UID]Hold, from, until time.Time, maxSlots int) bool {
	for _, r := range pending {
		lo, hi := later(r.From, from), earlier(r.Until, until)
		if lo.Before(hi) && !RoomFor(holds, lo, hi, maxSlots) {
			return false
		}
	}
	return true
}
