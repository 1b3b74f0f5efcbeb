package slot

import (
	"context"

	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/policy"
)

// serverOf is the slot's server, with what its last read settings say it runs.
func (r *Reconciler) serverOf(s *slotScope) coolifyview.CoolifyServer {
	return coolifyview.ServerFor(s.api, r.Coolify, policy.SlotServer(s.slot, s.pool))
}

// serverOut reads the servers of the slot's Coolify user again if due and says how the slot's
// server is out ("Unreachable", "Unusable"), or "" when Coolify reports it functional or
// does not say. A server the user does not see is not out here: no container of the slot can
// run there, and deleting the slot must not wait for a server that will never be back.
func (r *Reconciler) serverOut(ctx context.Context, s *slotScope) string {
	if s.pool == nil {
		return ""
	}
	r.Coolify.RefreshServers(ctx, s.api)
	st, ok := r.Coolify.ServerSettings(coolifyview.CoolifyUser(s.api), policy.SlotServer(s.slot, s.pool))
	if h := coolifyview.ServerHealth(st, ok, ok); h.Out() {
		return string(h)
	}
	return ""
}
