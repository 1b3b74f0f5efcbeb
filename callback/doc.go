// Package callback delivers a finished Bot's outcome to its spec.callbackURL.
//
// The bot controller calls [Notifier.Enqueue] on passes over a bot in Done or Fatal whose
// status does not record the callback yet. The call never blocks: the callback goes on its
// receiver's bounded in-memory queue, and workers shared round-robin between receivers (a few
// requests in flight per receiver at most) POST it, with retries scheduled on the injected
// clock (exponential backoff with full jitter, Retry-After honoured). A slow or black-holed
// receiver thus delays only its own callbacks. Enqueue refuses a callback when the queue is
// full; the controller tries again later.
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
