// Package dispatch binds queued bots to free slots: the Dispatcher runs one binding wave per
// pool (the head of the queue, in priority and queue-time order, takes the least recently used
// free slots, many at once), writes the queue positions and estimated waits, and keeps the
// reservation ledger it shares with the bot reconciler.
//
// The ledger is the one edge between reconcilers the layout allows (package bot imports
// dispatch, and no reconciler package imports another): the bot reconciler decides a
// scheduled bot's reservation under the same per-pool lock a wave runs under, so neither gives
// away the slot the other just took. It is a lock and two short-lived memories, rebuilt from
// the cache after a restart; the grants themselves live in the bots' status.
//
// # Where things are
//
//	dispatcher.go    Dispatcher: a pool's wave (Reconcile), the free slots it may offer, the queue in service order, PickSlots, queue positions and the drain rate
//	ledger.go        Ledger: the per-pool lock, the grants and bindings written that the cache may not show yet (WithPending, Remember, BoundIn)
//	reservations.go  how many bots at the head of the queue may be bound beside the reservations not yet bound (unreserved)
package dispatch
