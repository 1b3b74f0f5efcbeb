package controllers

import (
	"sort"
	"time"
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
