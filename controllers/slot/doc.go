// Package slot holds the BotPoolSlot reconciler. It drives one slot's Coolify application
// through its lifecycle, Creating → Idle ⇄ (Deploying → Busy) → Releasing → Idle, and Error →
// recovered or deleted: it creates (or adopts) the application and issues the slot's bot API
// token; it deploys the bot bound to it through the deploy gate and watches the deployment;
// on a standby pool it keeps a container running that asks for work, so a binding starts a
// bot without a Coolify request; it moves the slot to the pool's template; and it releases
// the slot (clears spec.botRef) once its bot ended, is gone, or was deleted and had its
// leaveGracePeriod to leave.
//
// A slot is judged free by package policy (IsFree, shared with the dispatcher); a binding is
// the dispatcher's (package dispatch); this package starts what a binding asks for.
//
// # Where things are
//
//	controller.go   Reconciler: entry, run/advance/finish, binding and release helpers; Store, what it reads and writes of the store
//	projection.go   the store's copy of each slot (bot_pool_slots), written when it differs from the last one handed
//	phases.go       one handler per slot phase (create, idle, busy, releasing, recover), the moves to Busy and Error, the application's description
//	deployments.go  a deployment: requested (deploy, through the gate), found, judged, polled and cancelled
//	credentials.go  tokens: the slot's bot API token (issued, rotated for each fresh container, backfilled) and the env every container gets; setEnv
//	deletion.go     a deleted slot: its bot leaves, its application goes, its finalizer last
//	transitions.go  the allowed phase moves (a table: TransitionAllowed), moveTo, and the loop that runs the phase entered
//	decide.go       pure decisions of the phases: decideStale, judgeDeployment, description
//	standby.go      standby slots (spec.standby Running): fresh containers, observed readiness, lost ones
//	update.go       a slot taking the pool's template: syncTemplate, the in-place update of a free slot, claimForUpdate
//	servers.go      the slot's server as its Coolify user sees it (serverOf) and whether it is out (serverOut)
//	priority.go     which of a slot pass's Coolify requests are the start path and which housekeeping (slotPriority)
package slot
