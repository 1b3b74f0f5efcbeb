// Package callback delivers a finished Bot's outcome to its spec.callbackURL, and the signed
// webhook messages of the outbox relay (relay.go) through the same notifier.
//
// The bot controller calls [Notifier.Enqueue] on passes over a bot in Done or Fatal whose
// status does not record the callback yet. The call never blocks: the callback goes on its
// receiver's bounded in-memory queue, and workers POST it, with retries scheduled on the
// injected clock (exponential backoff with full jitter, Retry-After honoured). Workers and
// queue places are shared between namespaces first, then between a namespace's receivers
// (fair.go): a free worker goes to the namespace with the fewest requests in flight, a few
// requests at most are in flight to one receiver, and a namespace holds at most its share of
// the queue. A slow or black-holed receiver thus delays only its own callbacks, and one
// namespace's receivers, however many, delay another namespace's by one request timeout at
// most. Enqueue refuses a callback when a bound is reached; the controller tries again later.
//
// The client dials through an [egress.Policy]: loopback, link-local and (unless allowed)
// private addresses are refused at connect time, which fails the callback for good.
//
// The final outcome of each callback is reported through Options.OnResult and kept for an
// hour ([Notifier.Result]); the bot controller records it in the Bot's status.callback, the
// record that keeps it from being sent again after a restart. Delivery is at least once, and
// the receiver gets an Idempotency-Key header to drop repeats. The Notifier is a
// controller-runtime Runnable that needs leader election, so only the leader sends.
//
// [egress.Policy]: botpool.dev/botpool/internal/egress.Policy
package callback
