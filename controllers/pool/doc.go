// Package pool holds the BotPool reconciler. It keeps a pool's supply of BotPoolSlots: a slot
// for every waiting bot, minIdle free ones (or what spec.warmSchedule asks for now), never
// more than maxSlots, shrinking by free slots when it is lowered; it places new slots over the
// pool's servers and drains a server that leaves; it pre-pulls the pool's image on each
// server (a puller application per server) and rolls a new template out; it deletes the
// Coolify applications of the pool's tag that no slot owns; and it reports the pool's counts,
// servers and health. It never binds bots and never touches a slot's application: binding is
// package dispatch's, a slot's application the slot reconciler's.
//
// Placement is decided here (servers.go): where a new slot goes, over the servers the pool's
// spec lists and their state in its status.
//
// # Where things are
//
//	controller.go     Reconciler: entry, observe, connect, deletion (Forget)
//	supply.go         supply, scaleDown, shrink and newSlot, with the arithmetic (slotsToCreate, countSlots)
//	naming.go         slot names pool-<platform>-NNN, which the pool gives its new slots (SlotName, lowestFree)
//	warm_schedule.go  spec.warmSchedule read at a moment: the minIdle in force, the open windows, the next change (warmAt)
//	reservations.go   how many free slots the pool warms for its reservations now, from the lead its servers were observed to need (observedLead, warming)
//	servers.go        a pool over several servers: placement of new slots, drain, status.servers, the servers' limits read (readServerLimits)
//	orphans.go        deleting Coolify applications of the pool's tag that no slot owns
//	template.go       the template the pool asks for now (readTemplate) and the env digests it hashes
//	pull.go           the image pre-pull: a puller application per server (PullerPrefix, PrePullEnv), status.servers[].cached and .pull
//	rollout.go        a rollout's bookkeeping (status.rollout, updatedSlots, SlotsUpdated) and a standby pool's admissions and surge
//	tenants.go        status.tenants and tenantCount of a pool with a tenancy: each tenant's bound and waiting bots (tenantStatuses)
//	status.go         the pool's status and conditions, computed from one pass, DeploymentsCapped among them (setServerCondition)
package pool
