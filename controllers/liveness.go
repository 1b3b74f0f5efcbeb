package controllers

import (
	"time"
)

// liveness is what the store said about one bot's heartbeats, the restart rule applied.
type liveness struct {
	// known is false when nothing may be concluded from it: the store could not answer, or
	// it knows no beat of the bot while this process is within its restart grace.
	known bool
	// storeDown: the store could not answer (an outage), as opposed to a restart.
	storeDown bool
	lastBeat  *time.Time // nil: no beat the store knows of
}

// beatWithin reports whether the bot beat within d before now.
func (l liveness) beatWithin(now time.Time, d time.Duration) bool {
	return l.lastBeat != nil && now.Sub(*l.lastBeat) <= d
}
