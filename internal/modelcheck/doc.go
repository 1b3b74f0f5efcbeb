// Package modelcheck is a randomized state-machine test of binding, release and recovery: it
// drives the real reconcilers of package controllers (pool, slot, bot and the dispatcher)
// directly, without a manager, through long random interleavings of bot arrivals, bot
// containers that report phases, beat, go silent, crash or finish, Coolify faults and outages,
// store outages, clock jumps, stale cache reads, hand deletions, resized pools, changes of a
// pool's template (rollouts) and operator restarts, and checks the invariants of the design
// after every step (see invariants_test.go for which invariant is checked where).
//
// The world it runs in:
//
//   - the API server is controller-runtime's fake client (optimistic locking, a status
//     subresource, a global resourceVersion counter), with what the real one adds that the
//     reconcilers rely on: a uid and creationTimestamp for new objects, and the CEL rules of
//     BotPoolSlot.spec (botRef only goes from empty to a bot or back);
//   - the reconcilers read through a cache that lags behind the API server by a random number
//     of writes per object, as the manager's informers do (each object only moves forward),
//     by no more than a second of model time (plus the latency of Coolify calls in flight);
//   - Coolify is the simulator of coolify/sim on the same fake clock, spoken to by the real
//     coolify.Client over an in-process transport (its retry waits pass instantly);
//   - the store is store/memory: lost at a restart in "embedded" epochs, kept (and subject to
//     outages, its writes buffered and replayed) in "postgres" epochs;
//   - bot containers are simulated from the simulator's container start and stop hooks and
//     speak only the bot API (botapi's real handlers, served in process);
//   - a restart builds new reconcilers, dispatcher, deploy gate, bulk reader, Coolify client,
//     connector and bot API server, wired by controllers.Setup as main.go does, on a manager
//     never started.
//
// Each step is one action chosen at random from a seed, so a failure replays from the seed
// it prints: the run is sequential (the dispatcher's concurrent binding writes are its only
// goroutines), and only the order of Go map iteration inside the controllers (say, two orphan
// applications deleted in one pass) can change which request a partial fault hits. Every settleEvery steps the faults stop and the reconcilers run until they
// write nothing, and the checks that hold only in a quiet state run; a run ends by playing
// every meeting out and deleting every bot.
//
// What it does not model: two reconciles running at once (a stale cache read stands for a
// concurrent writer), the manager's watches and predicates (reconciles are picked at random,
// which covers every order but not "this event triggers that reconcile"; the settle points
// cover progress), pools being deleted, and credentials going bad.
//
// Run it longer than make test does with
//
//	go test ./internal/modelcheck/ -run 'TestModelCheck$' -modelcheck.steps=1000000
//
// (or make modelcheck) and replay a failure with the seed it prints:
//
//	go test ./internal/modelcheck/ -run 'TestModelCheck$' -modelcheck.seed=N -modelcheck.runs=1 -modelcheck.steps=M
//
// The settings are also read from BOTPOOL_MODELCHECK_SEED, BOTPOOL_MODELCHECK_STEPS and
// BOTPOOL_MODELCHECK_RUNS.
package modelcheck
