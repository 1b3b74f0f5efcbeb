package policy

import (
	"time"
)

// Liveness is what the store said about one bot's heartbeats, the restart rule applied.
type Liveness struct {
	// Known is false when nothing may be concluded from it: the store could not answer, or
	// it knows no beat of the bot while this process is within its restart grace.
	Known bool
	// StoreDown: the store could not answer (an outage), as opposed to a restart.
	StoreDown bool
	LastBeat  *time.Time // nil: no beat the store knows of
}

// BeatWithin reports whether the bot beat within d before now.
func (l Liveness) BeatWithin(now time.Time, d time.Duration) bool {
	return l.LastBeat != nil && now.Sub(*l.LastBeat) <= d
}
