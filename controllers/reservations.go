package controllers

import (
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// hold is a slot of a pool given away or promised over [from, until): a bound bot holds its
// slot from its binding for at most its maxDuration (then it is asked to leave), and a
// reservation holds one from its bot's startTime for that bot's maxDuration.
type hold struct {
	from, until time.Time
}

// peakHolds is the most holds that overlap at one instant of [from, until). Overlaps only
// grow where a hold begins, so the instants to look at are from and every start inside.
func peakHolds(holds []hold, from, until time.Time) int {
	instants := []time.Time{from}
	for _, h := range holds {
		if h.from.After(from) && h.from.Before(until) {
			instants = append(instants, h.from)
		}
	}
	sort.Slice(instants, func(i, j int) bool { return instants[i].Before(instants[j]) })
	most := 0
	for _, t := range instants {
		n := 0
		for _, h := range holds {
			if !t.Before(h.from) && t.Before(h.until) {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// roomFor reports whether one more hold over [from, until) keeps every instant of it within
// maxSlots, given what the pool has promised and given away (holds). It is both rules of a
// reservation: a reservation is granted only if its bot's meeting fits beside every other
// reservation and every bot bound now (each for its maxDuration), and an ad-hoc bot is bound
// only if its meeting, as long as it may last, leaves every reservation its slot.
func roomFor(holds []hold, from, until time.Time, maxSlots int) bool {
	return peakHolds(holds, from, until)+1 <= maxSlots
}

// defaultReservationLead is how far ahead of its start a scheduled bot must be created to be
// reserved: hosted services promise a bot scheduled ten minutes ahead joins on time.
const defaultReservationLead = 10 * time.Minute

// reservationVerdict is what decideReservation says of a scheduled bot.
type reservationVerdict struct {
	granted bool
	reason  string // CapacityReserved, TooLate or PoolFull
	message string
}

// holdsOf is what the pool's other bots hold or were promised: a bot that runs (or is bound)
// holds its slot from its start (or now) for its maxDuration and the time to leave; a bot
// with a granted reservation not yet bound holds one from its startTime. Ended and deleted
// bots hold nothing.
func holdsOf(bots []v1.Bot, except types.UID, now time.Time, leave time.Duration) []hold {
	var out []hold
	for i := range bots {
		b := &bots[i]
		if b.UID == except || b.Status.Phase.Terminal() || !b.DeletionTimestamp.IsZero() {
			continue
		}
		last := b.Spec.MaxDuration.OrDefault(v1.DefaultMaxDuration) + leave
		switch {
		case b.Status.StartedAt != nil:
			out = append(out, hold{from: b.Status.StartedAt.Time, until: b.Status.StartedAt.Add(last)})
		case b.Status.SlotName != "":
			out = append(out, hold{from: now, until: now.Add(last)})
		case b.Spec.StartTime != nil && meta.IsStatusConditionTrue(b.Status.Conditions, v1.ConditionReserved):
			out = append(out, hold{from: b.Spec.StartTime.Time, until: b.Spec.StartTime.Add(last)})
		}
	}
	return out
}

// decideReservation grants a scheduled bot a reservation when it was created at least lead
// before its start and its meeting, as long as it may last, fits beside what the pool's other
// bots hold or were promised (holdsOf) within maxSlots. A granted reservation stays granted
// (the ledger is the bots' own Reserved conditions): the caller asks only for bots without
// one.
func decideReservation(bot *v1.Bot, pool *v1.BotPool, others []v1.Bot, now time.Time, lead time.Duration) reservationVerdict {
	start := bot.Spec.StartTime.Time
	if ahead := start.Sub(bot.CreationTimestamp.Time); ahead < lead {
		return reservationVerdict{reason: v1.ReasonTooLate, message: fmt.Sprintf(
			"startTime is %s after the bot's creation, less than the %s a reservation needs: the bot joins the queue shortly before its start like an ad-hoc bot",
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
