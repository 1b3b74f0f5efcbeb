// Package callback delivers a finished Bot's outcome to its spec.callbackURL.
//
// The bot controller calls [Notifier.Enqueue] on every pass over a bot in Done or Fatal. The call
// never blocks: the callback goes on a bounded in-memory queue and a few workers POST it, with
// retries scheduled on the injected clock (exponential backoff with full jitter, Retry-After
// honoured), so a slow or failing receiver costs neither the reconcile nor the other callbacks.
// Enqueueing a key that is queued, in flight or recently finished is a no-op, which makes the
// per-pass call cheap and keeps a receiver from being called once per reconcile.
//
// Delivery is at least once: the queue lives in memory, so a manager restart forgets what was
// sent, and the receiver gets an Idempotency-Key header to drop repeats. The Notifier is a
// controller-runtime Runnable that needs leader election, so only the leader sends.
package callback
