// Package controllers holds the operator's reconcilers, one per kind, and the dispatcher:
//
//   - pool.Reconciler keeps a pool's supply of BotPoolSlots: a slot for every waiting bot,
//     minIdle free ones, never more than maxSlots (shrinking by free slots when it is lowered);
//     it pre-pulls its image on each of its servers (a puller application per server), deletes
//     Coolify applications of the pool's tag that no slot owns and reports the pool's counts
//     and health. It never binds bots and never touches a slot's application.
//   - BotPoolSlotReconciler drives one slot's Coolify application through its lifecycle
//     (Creating → Idle ⇄ (Deploying → Busy) → Releasing → Idle, Error when it fails): it issues
//     the slot's bot API token (package slottoken), deploys the bound bot through the DeployGate,
//     and releases the slot — clears spec.botRef — once its bot ended, is gone, or was deleted
//     and had its leaveGracePeriod to leave.
//   - Dispatcher binds: per pool, one wave at a time, it gives the head of the queue the free
//     slots by writing each slot's spec.botRef under the slot's resourceVersion, and keeps the
//     waiting bots' queuePosition and estimatedWait.
//   - bot.Reconciler follows one Bot: it routes it to a pool, keeps it in the queue until its
//     deadline, mirrors the binding the dispatcher made, applies the heartbeat rules from the
//     store, ends it (Bot.Fail) when its time runs out or its slot failed or went away, lets a
//     deleted bot leave, and hands finished bots to the callback queue.
//
// They coordinate only through the objects: each writes its own fields and reacts to what the
// others wrote, as the bot API (package botapi) does for the phases a bot reports. docs/bots.md
// ("Who writes what") names the writer of every field of a Bot's status and of a slot's
// spec.botRef.
//
// # Where things are
//
// Grouped by the package each file moves to (issue 31; layout_test.go holds the same table and
// the rules between the groups).
//
// Root: the public face.
//
//	setup.go             Setup: the one wiring of the four reconcilers and what they share (main, tests, model check)
//	watches.go           the wake-up graph: the four setup functions, every map func and predicate, drawn on top
//
// Pure decisions two or more controllers read live in package policy
// (controllers/internal/policy: no I/O), with their own file map.
//
// How a pass ends (a wait, a stall a person must fix, a failure to retry) is package pass
// (controllers/internal/pass), shared by every reconciler.
//
// The controllers' Coolify access is package coolifyview (controllers/internal/coolifyview);
// setup.go names its CoolifyAPI, Connector and SecretConnector for the callers.
//
// The pool reconciler is package pool (controllers/pool), the bot reconciler package bot
// (controllers/bot). The dispatcher, which binds queued
// bots to free slots, and the reservation ledger it shares with the bot reconciler (the one
// declared edge between reconcilers) are package dispatch (controllers/dispatch).
//
// The deploy gate (package deploygate), the cache indexes (index), the Prometheus series
// (metrics) and each namespace's share of a controller's workers (tenantshare) are packages
// of their own under controllers/internal.
//
// The slot reconciler (slot).
//
//	slot_controller.go   BotPoolSlotReconciler: entry, run/advance/finish, binding and release helpers
//	slot_phases.go       one handler per slot phase (create, idle, deploying, busy, releasing, recover, delete)
//	slot_transitions.go  the allowed phase moves (a table), moveTo, and the loop that runs the phase entered
//	slot_decide.go       pure decisions of the phases: decideStale, judgeDeployment, description
//	slot_standby.go      standby slots (spec.standby Running): fresh containers, observed readiness, credential rotation
//	slot_update.go       a slot taking the pool's template: syncTemplate, the in-place update of a free slot, claimForUpdate
//	slot_servers.go      the slot's server as its Coolify user sees it (serverOf) and whether it is out (serverOut)
//	slot_priority.go     which of a slot pass's Coolify requests are the start path and which housekeeping (slotPriority)
//
// The RBAC markers below are the manager's whole contract with the API server; controller-gen
// turns them into config/rbac/role.yaml and the Helm chart's ClusterRole.
//
// +kubebuilder:rbac:groups=botpool.dev,resources=bots;botpoolslots;botpools,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=botpool.dev,resources=bots/status;botpoolslots/status;botpools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=botpool.dev,resources=bots/finalizers;botpoolslots/finalizers;botpools/finalizers,verbs=update
// Secrets: get (credentials, slotEnvFrom and the slots' own token Secrets, each read past the
// cache: the manager caches no Secrets, so needs no list or watch), create and delete (a
// slot's token Secret; a token is replaced, never updated).
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
package controllers
