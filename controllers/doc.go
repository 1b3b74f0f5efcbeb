// Package controllers wires the operator's reconcilers: Setup builds the pool, slot and bot
// reconcilers and the dispatcher over what they share (the deploy gate, the Coolify reads,
// the reservation ledger, the cache-lag record) and registers them with the manager; the
// wake-up graph (watches.go) says on one page what wakes which reconcile. Each reconciler
// lives in a package of its own:
//
//   - pool (controllers/pool): the BotPool reconciler keeps a pool's supply of BotPoolSlots (a
//     slot for every waiting bot, minIdle free ones, never more than maxSlots), places new
//     slots over the pool's servers, pre-pulls its image on each of them, rolls templates out,
//     deletes Coolify applications of the pool's tag that no slot owns and reports the pool's
//     counts and health. It never binds bots and never touches a slot's application.
//   - slot (controllers/slot): the BotPoolSlot reconciler drives one slot's Coolify
//     application through its lifecycle (Creating → Idle ⇄ (Deploying → Busy) → Releasing →
//     Idle, Error when it fails): it issues the slot's bot API token, deploys the bound bot
//     through the deploy gate, keeps a standby container, and releases the slot (clears
//     spec.botRef) once its bot ended, is gone, or was deleted and had its leaveGracePeriod.
//   - dispatch (controllers/dispatch): the Dispatcher binds: per pool, one wave at a time, it
//     gives the head of the queue the free slots by writing each slot's spec.botRef under the
//     slot's resourceVersion, and keeps the waiting bots' queuePosition and estimatedWait.
//   - bot (controllers/bot): the Bot reconciler routes a bot to a pool, decides its
//     reservation, keeps it in the queue until its deadline, mirrors the binding the
//     dispatcher made, applies the heartbeat rules from the store, ends it when its time runs
//     out or its slot failed or went away, lets a deleted bot leave, and hands finished bots
//     to the callback queue and each phase to the webhook outbox.
//
// They coordinate only through the objects: each writes its own fields and reacts to what the
// others wrote, as the bot API (package botapi) does for the phases a bot reports. docs/bots.md
// ("Who writes what") names the writer of every field of a Bot's status and of a slot's
// spec.botRef. No reconciler package imports another, except bot, which imports dispatch for
// the reservation ledger (a reservation is decided under the lock a binding wave runs under);
// the tests of controllers/internal/layout keep that true.
//
// Under controllers/internal, importable only from here, is what two or more reconcilers
// share: policy (pure decisions, no I/O), coolifyview (their Coolify access and bulk reads),
// deploygate, pass (how a reconcile pass ends), index (the cache indexes), metrics and
// tenantshare (each namespace's share of a controller's workers); fakeapi is the single-pass
// tests' API server. Every package's doc.go has its own file map.
//
// # Where things are
//
//	setup.go    Setup: the one wiring of the four reconcilers and what they share (main, tests, model check), and the names the callers use (CoolifyAPI, SlotTransitionAllowed…)
//	watches.go  the wake-up graph: the four setup functions, every map func and predicate, drawn on top; WakeOnCallback
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
// Namespaces: get, list and watch, for their labels: a pool with allowedNamespaces from:
// Selector admits the namespaces they match (controllers/internal/tenancy).
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
package controllers
