package coolify

import "strings"

// State is the container part of an application's status, before the colon.
type State string

// Health is the part after the colon.
type Health string

// The complete set of states and healths for a single-container image app (docs/coolify.md).
// Values outside it are preserved as they came, so a newer server cannot break parsing.
const (
	StateRunning    State = "running"
	StateExited     State = "exited"
	StateStarting   State = "starting"
	StateRestarting State = "restarting"
	StateDegraded   State = "degraded"
	StatePaused     State = "paused"

	HealthHealthy   Health = "healthy"
	HealthUnhealthy Health = "unhealthy"
	HealthUnknown   Health = "unknown"
)

// ParseStatus splits "running:healthy" into its state and health. A status without a colon is
// all state with unknown health. Callers should branch on the state only: health changes lag by
// minutes on the server.
func ParseStatus(s string) (State, Health) {
	state, health, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok || health == "" {
		return State(state), HealthUnknown
	}
	// Multi-container apps report e.g. "running:healthy,exited:unhealthy"... keep the first.
	health, _, _ = strings.Cut(health, ",")
	return State(state), Health(health)
}

// DeploymentStatus is a deployment's status; the set below is complete.
type DeploymentStatus string

// Deployment statuses. There is no "error" or "cancelled".
const (
	DeploymentQueued     DeploymentStatus = "queued"
	DeploymentInProgress DeploymentStatus = "in_progress"
	DeploymentFinished   DeploymentStatus = "finished"
	DeploymentFailed     DeploymentStatus = "failed"
	DeploymentCancelled  DeploymentStatus = "cancelled-by-user"
)

// Terminal reports whether no further change will happen to the deployment.
func (s DeploymentStatus) Terminal() bool {
	return s == DeploymentFinished || s == DeploymentFailed || s == DeploymentCancelled
}

// Known reports whether s is one of the five documented values.
func (s DeploymentStatus) Known() bool {
	switch s {
	case DeploymentQueued, DeploymentInProgress, DeploymentFinished, DeploymentFailed, DeploymentCancelled:
		return true
	}
	return false
}
