package pass

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"botpool.dev/botpool/controllers/internal/policy"
)

// heartbeatStore is the part of the liveness store that tells when bots last beat.
type heartbeatStore interface {
	LastHeartbeats(ctx context.Context, bots []types.UID) (map[types.UID]time.Time, error)
}

// LivenessReader is how the slot and bot controllers read a bot's heartbeats, so that both
// apply the same rules to what the store says (invariant 10: nobody is failed for lack of
// data).
type LivenessReader struct {
	Store   heartbeatStore
	Clock   clock.PassiveClock
	Started time.Time // when this process set the controller up
}

// Read asks the store for bot's last heartbeat. A store that cannot answer makes it unknown.
// So does a missing beat within restartGrace of this process's start (a restart, a new
// leader): the in-memory store starts empty, so "no heartbeat" may only mean that it lost
// the beats. Each controller passes the window over which it judges silence, so a bot that
// did beat gets at least that long to beat again before its silence counts.
func (l LivenessReader) Read(ctx context.Context, bot types.UID, restartGrace time.Duration) policy.Liveness {
	beats, err := l.Store.LastHeartbeats(ctx, []types.UID{bot})
	if err != nil {
		return policy.Liveness{StoreDown: true}
	}
	if t, ok := beats[bot]; ok {
		return policy.Liveness{Known: true, LastBeat: &t}
	}
	if l.Clock.Since(l.Started) < restartGrace {
		return policy.Liveness{}
	}
	return policy.Liveness{Known: true}
}
