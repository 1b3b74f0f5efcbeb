// Package pass holds how a reconcile pass ends, for every reconciler: a body returns an
// error, and Settle says what it means: a wait ("nothing is wrong: look again then", WaitFor),
// a stall a person must fix (Stall, NeedsPerson: the pool or slot says Stalled with a reason),
// or a failure the error backoff retries. Beside it are the requeue intervals the reconcilers
// share, Coolify asking to wait (a rate limit, a full queue), the finalizer helpers, and the
// reading of a bot's heartbeats from the store with the restart-grace rule (LivenessReader).
//
// # Where things are
//
//	requeue.go           the skeleton's errors: WaitFor/Settle/Outcome, Earliest, AddFinalizer; the requeue intervals the controllers share
//	stalled.go           "a person must act": Stall, NeedsPerson, UnreachableReason, and the errors they map
//	coolify_wait.go      Coolify asking to wait: CoolifyWait, ThrottledMessage
//	liveness_reader.go   the heartbeat reader (LivenessReader): a bot's beats from the store, the restart-grace rule
package pass
