package botapi

import (
	"fmt"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// reportable are the phases a bot may report about itself, in lifecycle order. Fatal is not
// ranked: it is reachable from any phase that is not terminal.
var reportable = map[v1.BotPhase]int{
	v1.BotJoiningCall:   1,
	v1.BotInWaitingRoom: 2,
	v1.BotInCall:        3,
	v1.BotLeaving:       4,
	v1.BotCallEnded:     5,
	v1.BotDone:          6,
	v1.BotFatal:         7,
}

// rank orders the current phase; the operator's own phases before the container ran
// (Pending … Deploying) all rank 0.
func rank(p v1.BotPhase) int { return reportable[p] }

// nextPhase validates a phase reported by the bot against the Bot's current phase. It
// returns changed=false for a repeat (reports are idempotent) and an error for a move that
// goes backwards or leaves a terminal phase.
func nextPhase(current, reported v1.BotPhase) (changed bool, err error) {
	if _, ok := reportable[reported]; !ok {
		return false, fmt.Errorf("unknown phase %q: a bot reports JoiningCall, InWaitingRoom, InCall, Leaving, CallEnded, Done or Fatal", reported)
	}
	switch {
	case current == reported:
		return false, nil
	case current.Terminal():
		return false, fmt.Errorf("bot is %s; terminal phases are final", current)
	case reported == v1.BotFatal:
		return true, nil
	case rank(reported) < rank(current):
		return false, fmt.Errorf("cannot go back from %s to %s", current, reported)
	}
	return true, nil
}
