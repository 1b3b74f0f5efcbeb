// Package bot holds the Bot reconciler. It follows one Bot from its creation to its end: it
// routes the bot to a pool; it decides a scheduled bot's reservation; it keeps the bot in the
// queue until its deadline; it mirrors the binding the dispatcher made (package dispatch
// binds, never this one); it applies the heartbeat rules from the store; it ends the bot when
// its time runs out or its slot failed or went away (a failed start of the infrastructure goes
// back to the queue instead, within maxStartAttempts); it lets a deleted bot leave its
// meeting; and it hands finished bots to the callback queue and each phase to the webhook
// outbox.
//
// It imports one other reconciler package, dispatch, for the reservation ledger: a
// reservation is decided under the same per-pool lock a binding wave runs under.
//
// # Where things are
//
//	controller.go  Reconciler: entry, routing to a pool, the queue, the binding mirrored, liveness, deletion; Liveness, what it reads of the store
//	queue.go       a queued bot's timeouts (QueueTimeout, QueueDeadline)
//	dedup.go       one bot per meeting: a bot whose deduplication key another bot of its pool holds ends Duplicate (endDuplicate)
//	parameters.go  the ParametersReady condition: a bot whose parameters or secret parameters cannot be handed out waits (checkParameters)
//	reserve.go     a scheduled bot's reservation decision (reserve, reservationMoved)
//	retry.go       retried starts: which failed start goes back to the queue (judgeStart), recording the attempt (AuditStartRetried, AuditStartFailed)
//	callback.go    handing a finished bot's callback to the notifier (CallbackQueue), recording its outcome
//	webhook.go     a webhook message per phase into the outbox, status.webhook, the signing Secret (WebhookSecrets)
package bot
