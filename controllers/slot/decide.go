package slot

import (
	"fmt"
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
)

// staleAction is what to do with a slot that has been Deploying longer than deployingTimeout.
type staleAction int

const (
	staleWait    staleAction = iota // not stale yet, or no data to judge: look again later
	staleRecover                    // no proof of life: fail the bot, recover the slot
	staleSkip                       // the bot beats: give it more time, restart the clock
	staleBusy                       // the bot has beaten through every skip: it runs
)

// decideStale is the heartbeat-aware stale-deploying table of the design:
//
//	bot heartbeat | age          | skipped so far | action
//	none          | –            | –              | recover
//	exists        | > freshness  | –              | recover
//	exists        | ≤ freshness  | < max          | skip, restart the clock
//	exists        | ≤ freshness  | ≥ max          | the bot is alive: Busy
//
// A store that cannot answer never fails a bot (invariant 10).
func decideStale(now, since time.Time, t v1.Timing, live policy.Liveness, skipped int32) staleAction {
	if now.Sub(since) <= t.DeployingTimeout.OrDefault(v1.DefaultDeployingTimeout) || !live.Known {
		return staleWait
	}
	if !live.BeatWithin(now, t.HeartbeatFreshness.OrDefault(v1.DefaultHeartbeatFreshness)) {
		return staleRecover
	}
	if skipped < t.SkipLimit() {
		return staleSkip
	}
	return staleBusy
}

// deployVerdict is what a Deploying slot learned from Coolify in one poll.
type deployVerdict struct {
	phase   v1.SlotPhase // Busy or Error; empty: keep waiting
	reason  string
	message string
}

// judgeDeployment reads a deployment's status, or, when no deployment can be found, the
// container's. During deployGracePeriod an exited container is no failure: Coolify's status
// lags the container and stays "exited" during a first deployment.
func judgeDeployment(dep *coolify.Deployment, app *coolify.Application, inPhase time.Duration, t v1.Timing, fresh bool) deployVerdict {
	if dep != nil {
		switch dep.Status {
		case coolify.DeploymentFinished:
			return deployVerdict{phase: v1.SlotBusy, message: "Deployment " + dep.DeploymentUUID + " finished"}
		case coolify.DeploymentFailed, coolify.DeploymentCancelled:
			return deployVerdict{phase: v1.SlotError, reason: string(v1.ReasonDeploymentFailed),
				message: fmt.Sprintf("Deployment %s ended %s", dep.DeploymentUUID, dep.Status)}
		}
		if inPhase > t.DeploymentTimeout.OrDefault(v1.DefaultDeploymentTimeout) {
			if fresh {
				// The bot beats while the record says otherwise: never fail it (invariant 8);
				// the stale-deploying rules turn the slot Busy after their skips.
				return deployVerdict{}
			}
			return deployVerdict{phase: v1.SlotError, reason: string(v1.ReasonDeploymentTimeout),
				message: fmt.Sprintf("Deployment %s still %s after %s", dep.DeploymentUUID, dep.Status, inPhase.Round(time.Second))}
		}
		return deployVerdict{}
	}
	if app != nil && app.State() == coolify.StateRunning {
		return deployVerdict{phase: v1.SlotBusy, message: "The container runs (no deployment record found)"}
	}
	if inPhase <= t.DeployGracePeriod.OrDefault(v1.DefaultDeployGracePeriod) || fresh {
		return deployVerdict{}
	}
	return deployVerdict{phase: v1.SlotError, reason: string(v1.ReasonDeploymentLost),
		message: "No deployment of the application can be found and its container does not run"}
}

// description is the application's description for a slot phase, within Coolify's 255
// characters (a longer one makes the server answer 500).
func description(phase v1.SlotPhase, bot string, at time.Time, msg string) string {
	var d string
	switch phase {
	case v1.SlotIdle:
		if at.IsZero() {
			d = "[IDLE] Available - never used"
		} else {
			d = "[IDLE] Available - Last used: " + at.UTC().Format(time.RFC3339)
		}
	case v1.SlotDeploying:
		if bot == "" {
			d = "[STANDBY] Starting a fresh container since " + at.UTC().Format(time.RFC3339)
			break
		}
		d = "[DEPLOYING] Bot " + bot + " since " + at.UTC().Format(time.RFC3339)
	case v1.SlotBusy:
		d = "[BUSY] Bot " + bot + " since " + at.UTC().Format(time.RFC3339)
	case v1.SlotError:
		d = "[ERROR] " + msg
	default:
		d = "[" + string(phase) + "]"
	}
	if len(d) > 255 {
		d = d[:252] + "..."
	}
	return d
}
