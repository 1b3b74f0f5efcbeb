package policy

import (
	"fmt"
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// SlotServer is the uuid of the Coolify server the slot's application lives on: the one the
// pool recorded when it created the slot, or, for a slot created before slots recorded it,
// the pool's default server (the pool writes it on such slots: see recordServers).
func SlotServer(slot *v1.BotPoolSlot, pool *v1.BotPool) string {
	if slot.Spec.Server != "" || pool == nil {
		return slot.Spec.Server
	}
	return pool.Spec.Coolify.DefaultServer()
}

// ServerState is how the pool treats the server uuid.
func ServerState(pool *v1.BotPool, uuid string) v1.ServerState {
	srv, listed := pool.Spec.Coolify.Server(uuid)
	switch {
	case !listed:
		return v1.ServerUnlisted
	case srv.Cordoned:
		return v1.ServerCordoned
	}
	return v1.ServerActive
}

// HealthOf is the server's health as the pool's status last recorded it (Unknown when it has
// none: never out).
func HealthOf(pool *v1.BotPool, uuid string) v1.ServerHealth {
	for _, st := range pool.Status.Servers {
		if st.UUID == uuid && st.Health != "" {
			return st.Health
		}
	}
	return v1.ServerHealthUnknown
}

// TakesBots reports whether the slot's server takes new bots: Active, and its health (as the
// pool's status last recorded it) not out.
func TakesBots(slot *v1.BotPoolSlot, pool *v1.BotPool) bool {
	uuid := SlotServer(slot, pool)
	return ServerState(pool, uuid) == v1.ServerActive && !HealthOf(pool, uuid).Out()
}

// OutBecause says why a server with that health is out.
func OutBecause(h v1.ServerHealth) string {
	switch h {
	case v1.ServerNotFound:
		return "is not among the servers the pool's Coolify token sees (NotFound: a wrong uuid, a server deleted in Coolify, or another team's)"
	case v1.ServerFailing:
		return fmt.Sprintf("failed the pool's last %d or more starts in a row while its other servers took bots (Failing, for %s after the last failure)",
			FailingAfter, FailingCooldown)
	}
	return "is " + string(h) + " (Coolify reports it so)"
}

const (
	FailingAfter = 3
)

const (
	FailingCooldown = 5 * time.Minute
)

const (
	FailingForget = 30 * time.Minute
)
