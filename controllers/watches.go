package controllers

// The wake-up graph: every change of one object that makes a controller look again, on one
// page. Anything not drawn here is seen only on the controller's own timers (RequeueAfter,
// from the injected clock) or on a retry after an error (errorBackoff).
//
//	change                                       wakes                          why
//	BotPool, any change                     ──▶  pool controller (For)          its spec is the supply rule
//	BotPoolSlot of the pool, any change     ──▶  pool controller (Owns)         counts, supply, shrink
//	Bot enters/leaves a queue or pool, or   ──▶  pool controller (botToPool,    demand changed: a waiting
//	is granted a reservation                     botQueueChanged)               bot or a reservation may
//	                                                                            need a new slot
//
//	BotPoolSlot, any change                 ──▶  slot controller (For)          the binding is its input
//	Bot ended or being deleted              ──▶  the slot bound to it           release the slot at once
//	                                             (slotOfBot, botLetGo)
//	Bot back in the queue (failed start)    ──▶  the failed slot bound to it    release the slot at once
//	                                             (slotOfBot, botLetGo)
//	Bot bound, or its first report or beat  ──▶  the slot bound to it           a standby slot turns Busy
//	                                             (slotOfBot, botLetGo)
//	the deploy gate freed room (a Done)     ──▶  the slots it refused for that  deploy now, not on the gate
//	                                             pool or server (Gate.Wake,     retry
//	                                             GateWake)
//
//	Bot, any change                         ──▶  bot controller (For)           the bot API writes its phases
//	BotPoolSlot, any change                 ──▶  the bot bound to it, before    mirror the binding, see the
//	                                             or after (slotToBot)           slot fail or release it
//	BotPoolSlot bound to a bot              ──▶  the other bots of the bot's    a duplicate that queued in
//	                                             deduplication key              the same instant ends
//	                                             (sameKeyAsBound, slotBound)
//	BotPool spec change                     ──▶  bots with no pool yet, and     a new pool may serve them;
//	                                             those of other namespaces      a shared one may admit
//	                                             routed to it (waitingBotsOf)   their namespace no longer
//	BotPool tenant reaches or leaves its    ──▶  that tenant's queued bots      they say TenantLimit while it
//	limit (status.tenants)                       (tenantsHeldChanged)           holds its limit
//	Namespace labels change                 ──▶  its bots that wait with no     a pool selecting namespaces
//	                                             pool or in another namespace's by label admits it now, or
//	                                             pool (botsOfNamespace)         no longer
//	the notifier finished a callback        ──▶  its bot (WakeOnCallback,       record the outcome now, not
//	                                             CallbackDone)                  on the recheck timer
//
//	BotPool spec change                     ──▶  dispatcher (For)               limits and queue order changed
//	BotPool server healthy again            ──▶  dispatcher (For, serverBackIn) its free slots are offered again
//	BotPoolSlot turns free (IsFree)         ──▶  its pool's dispatcher          a free slot takes the head of
//	                                             (slotToPool, slotFreed)        the queue
//	BotPoolSlot in Error lets go of a bot   ──▶  its pool's dispatcher          the requeued bot takes a free
//	                                             (slotToPool, slotFreed)        slot
//	Bot enters/leaves a queue or pool, or   ──▶  its pool's dispatcher          the queue changed
//	its parameters turn (not) ready              (botToPool, botQueueChanged)
//
// The filters keep the graph quiet where it would be loud: a running bot's status changes with
// every phase it reports and with its heartbeat condition, and without botQueueChanged and
// botLetGo each change would wake its pool, its pool's dispatcher and its slot for nothing. A slot's status changes wake the pool and the bound bot
// unfiltered: both read what the slot reports.

import (
	"context"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/callback"
	"botpool.dev/botpool/controllers/bot"
	"botpool.dev/botpool/controllers/dispatch"
	"botpool.dev/botpool/controllers/internal/index"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/controllers/internal/tenantshare"
	poolctrl "botpool.dev/botpool/controllers/pool"
	slotctrl "botpool.dev/botpool/controllers/slot"
)

// setupPoolController registers the pool controller: pools, the slots they own, and bots whose pool
// or phase changed (a bot starting to wait may need a new slot).
func setupPoolController(mgr ctrl.Manager, r *poolctrl.Reconciler) error {
	share := tenantshare.New(r, "botpool", tenantshare.WorkersOf(mgr), r.Metrics)
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1.BotPool{}).
		Owns(&v1.BotPoolSlot{}).
		Watches(&v1.Bot{}, handler.EnqueueRequestsFromMapFunc(botToPool),
			builder.WithPredicates(botQueueChanged)).
		WithOptions(share.Options(mgr, errorBackoff())).
		Complete(share)
}

func botToPool(_ context.Context, o client.Object) []reconcile.Request {
	pool := o.(*v1.Bot).PoolKey()
	if pool.Name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: pool}}
}

// botQueueChanged passes the bot events that can change a pool's demand: a bot that enters
// or leaves a pool's queue. The phases a running bot reports (JoiningCall … Done) change no
// pool's queue; passing them cost every pool and dispatcher a pass over all its bots per
// report.
var botQueueChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*v1.Bot), e.ObjectNew.(*v1.Bot)
		return (o.Status.Phase == v1.BotQueued) != (n.Status.Phase == v1.BotQueued) || o.PoolKey() != n.PoolKey() ||
			policy.Reserved(o) != policy.Reserved(n) || o.ParametersHeld() != n.ParametersHeld()
	},
}

// setupSlotController registers the slot controller: slots, and the bots bound to them (a bot that
// ends or goes away releases its slot at once).
func setupSlotController(mgr ctrl.Manager, r *slotctrl.Reconciler) error {
	r.Started = r.Clock.Now()
	share := tenantshare.New(r, "botpoolslot", tenantshare.WorkersOf(mgr), r.Metrics)
	b := ctrl.NewControllerManagedBy(mgr).
		For(&v1.BotPoolSlot{}).
		Watches(&v1.Bot{}, handler.EnqueueRequestsFromMapFunc(slotsOfBot(r)), builder.WithPredicates(botLetGo)).
		WithOptions(share.Options(mgr, errorBackoff()))
	if r.GateWake != nil {
		b = b.WatchesRawSource(source.Channel(r.GateWake, &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(share)
}

// botLetGo passes the bot events a slot acts on: a bot that ended, went back to the queue
// after a failed start (a new entry of status.startAttempts) or is going away, and one
// whose container first reported or beat (a standby slot turns Busy on it), or whose binding
// the bot controller recorded (a standby slot times its container's take from it). Every other
// change of a bot (its later phases, its heartbeat condition) is none of the slot's.
var botLetGo = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*v1.Bot), e.ObjectNew.(*v1.Bot)
		return n.Status.Phase.Terminal() && !o.Status.Phase.Terminal() ||
			!n.DeletionTimestamp.IsZero() && o.DeletionTimestamp.IsZero() ||
			len(n.Status.StartAttempts) != len(o.Status.StartAttempts) ||
			policy.BotStarted(n) && !policy.BotStarted(o) ||
			policy.BoundSince(n) != nil && policy.BoundSince(o) == nil
	},
	DeleteFunc: func(event.DeleteEvent) bool { return true },
}

// slotsOfBot maps a bot to the slots bound to it (by the slot index on spec.botRef.uid), of
// every namespace: a shared pool's slots live in the pool's.
func slotsOfBot(r *slotctrl.Reconciler) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var slots v1.BotPoolSlotList
		if err := r.Client.List(ctx, &slots, client.MatchingFields{index.SlotBotUID: string(o.GetUID())}); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(slots.Items))
		for i := range slots.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&slots.Items[i])})
		}
		return reqs
	}
}

// setupBotController registers the bot controller: bots, the slots bound to them, and pools (a new
// pool may serve bots that found none).
func setupBotController(mgr ctrl.Manager, r *bot.Reconciler) error {
	r.Started = r.Clock.Now()
	share := tenantshare.New(r, "bot", tenantshare.WorkersOf(mgr), r.Metrics)
	b := ctrl.NewControllerManagedBy(mgr).
		For(&v1.Bot{}).
		Watches(&v1.BotPoolSlot{}, handler.EnqueueRequestsFromMapFunc(slotToBot)).
		Watches(&v1.BotPoolSlot{}, handler.EnqueueRequestsFromMapFunc(sameKeyAsBound(r)), builder.WithPredicates(slotBound)).
		// A new or changed pool may serve bots that found none; its status updates cannot,
		// and each would list every bot of the namespace.
		Watches(&v1.BotPool{}, handler.EnqueueRequestsFromMapFunc(waitingBotsOf(r)), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// A tenant that reaches its limit, or falls below it: its waiting bots say so.
		Watches(&v1.BotPool{}, tenantsHeldChanged(r)).
		// A pool that selects namespaces by label admits one, or no longer, as its labels change.
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(botsOfNamespace(r)), builder.WithPredicates(labelsChanged)).
		WithOptions(share.Options(mgr, errorBackoff()))
	if r.CallbackDone != nil {
		b = b.WatchesRawSource(source.Channel(r.CallbackDone, &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(share)
}

func slotToBot(_ context.Context, o client.Object) []reconcile.Request {
	bot := o.(*v1.BotPoolSlot).BotKey()
	if bot.Name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: bot}}
}

// slotBound passes the slot events in which a bot is bound to the slot.
var slotBound = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return e.Object.(*v1.BotPoolSlot).Spec.BotRef != nil },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*v1.BotPoolSlot), e.ObjectNew.(*v1.BotPoolSlot)
		return n.Spec.BotRef != nil && (o.Spec.BotRef == nil || o.Spec.BotRef.UID != n.Spec.BotRef.UID)
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// sameKeyAsBound maps a slot just bound to a bot to the other bots that share the bot's
// deduplication key: a duplicate that joined the queue in the same instant as the bot, before
// either saw the other, ends as soon as the one bound holds the key (the dispatcher never
// binds it meanwhile).
func sameKeyAsBound(r *bot.Reconciler) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		slot := o.(*v1.BotPoolSlot)
		ref := slot.Spec.BotRef
		var bound v1.Bot
		if ref == nil || r.Client.Get(ctx, slot.BotKey(), &bound) != nil {
			return nil
		}
		key := policy.IndexedDeduplicationKey(&bound)
		if key == "" {
			return nil
		}
		var bots v1.BotList
		// Keys are a namespace's: two tenants' bots in one meeting are no duplicates.
		if err := r.Client.List(ctx, &bots, client.InNamespace(bound.Namespace), client.MatchingFields{index.BotDeduplication: key},
			client.UnsafeDisableDeepCopy); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		for i := range bots.Items {
			if b := &bots.Items[i]; b.UID != ref.UID {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(b)})
			}
		}
		return reqs
	}
}

// waitingBotsOf maps a pool to the bots it may now serve or refuse: those with no pool yet, of
// its namespace (of every namespace when it is shared), and those of other namespaces routed
// to it (it may admit their namespace no longer).
func waitingBotsOf(r *bot.Reconciler) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		pool := o.(*v1.BotPool)
		var reqs []reconcile.Request
		var bots v1.BotList
		opts := []client.ListOption{client.UnsafeDisableDeepCopy}
		if !policy.Shared(pool) {
			opts = append(opts, client.InNamespace(pool.Namespace))
		}
		if err := r.Client.List(ctx, &bots, opts...); err != nil {
			return nil
		}
		for i := range bots.Items {
			if b := &bots.Items[i]; b.Status.Pool == "" && !b.Status.Phase.Terminal() {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(b)})
			}
		}
		if err := r.Client.List(ctx, &bots, index.BotsOf(pool), client.UnsafeDisableDeepCopy); err != nil {
			return reqs
		}
		for i := range bots.Items {
			if b := &bots.Items[i]; b.Namespace != pool.Namespace && !b.Status.Phase.Terminal() {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(b)})
			}
		}
		return reqs
	}
}

// botsOfNamespace maps a namespace whose labels changed to its bots that wait, with no pool
// or in a pool of another namespace: a pool that selects namespaces by label may admit it now,
// or no longer.
func botsOfNamespace(r *bot.Reconciler) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var bots v1.BotList
		if err := r.Client.List(ctx, &bots, client.InNamespace(o.GetName()), client.UnsafeDisableDeepCopy); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		for i := range bots.Items {
			b := &bots.Items[i]
			if b.Status.Phase.Terminal() || b.Status.SlotName != "" || b.Status.Pool != "" && b.Status.PoolNamespace == "" {
				continue
			}
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(b)})
		}
		return reqs
	}
}

// tenantsHeldChanged maps a pool status update in which tenants reached their limit, or fell
// below it (status.tenants), to those tenants' waiting bots: their Ready reason is
// TenantLimit while their tenant holds its limit, and a pool status change wakes no bot else.
func tenantsHeldChanged(r *bot.Reconciler) handler.EventHandler {
	return handler.Funcs{UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		old, cur := e.ObjectOld.(*v1.BotPool), e.ObjectNew.(*v1.BotPool)
		changed := map[string]bool{}
		for _, p := range []*v1.BotPool{old, cur} {
			for _, t := range p.Status.Tenants {
				_, heldOld := policy.TenantHeld(old, t.Name)
				_, heldCur := policy.TenantHeld(cur, t.Name)
				if heldOld != heldCur {
					changed[t.Name] = true
				}
			}
		}
		if len(changed) == 0 {
			return
		}
		var bots v1.BotList
		if err := r.Client.List(ctx, &bots, index.BotsOf(cur), client.UnsafeDisableDeepCopy); err != nil {
			return
		}
		for i := range bots.Items {
			if b := &bots.Items[i]; b.Status.Phase == v1.BotQueued && changed[b.Status.Tenant] {
				q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(b)})
			}
		}
	}}
}

// labelsChanged passes the updates of an object whose labels changed.
var labelsChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// setupDispatcher registers the dispatcher: a wave runs when a pool's slot turns free or a
// bot of the pool starts to wait.
func setupDispatcher(mgr ctrl.Manager, d *dispatch.Dispatcher) error {
	share := tenantshare.New(d, "dispatcher", tenantshare.WorkersOf(mgr), d.Metrics)
	return ctrl.NewControllerManagedBy(mgr).
		Named("dispatcher").
		For(&v1.BotPool{}, builder.WithPredicates(predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, serverBackIn))).
		Watches(&v1.BotPoolSlot{}, handler.EnqueueRequestsFromMapFunc(slotToPool), builder.WithPredicates(slotFreed)).
		Watches(&v1.Bot{}, handler.EnqueueRequestsFromMapFunc(botToPool), builder.WithPredicates(botQueueChanged)).
		WithOptions(share.Options(mgr, errorBackoff())).
		Complete(share)
}

func slotToPool(_ context.Context, o client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: o.(*v1.BotPoolSlot).Spec.Pool}}}
}

// slotFreed passes the slot events that can make a slot free for the queue, and those of a
// failed slot letting go of its bot: a bot that went back to the queue after a failed start
// is offered from then on, and another slot may be free for it already.
var slotFreed = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return policy.IsFree(e.Object.(*v1.BotPoolSlot)) },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*v1.BotPoolSlot), e.ObjectNew.(*v1.BotPoolSlot)
		return policy.IsFree(n) && !policy.IsFree(o) ||
			n.Status.Phase == v1.SlotError && o.Spec.BotRef != nil && n.Spec.BotRef == nil
	},
	DeleteFunc: func(event.DeleteEvent) bool { return false },
}

// serverBackIn passes the pool status updates in which a server whose health was out came
// back: its free slots take the head of the queue again.
var serverBackIn = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, cur := e.ObjectOld.(*v1.BotPool), e.ObjectNew.(*v1.BotPool)
		for _, st := range old.Status.Servers {
			if st.Health.Out() && !policy.HealthOf(cur, st.UUID).Out() {
				return true
			}
		}
		return false
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// errorBackoff retries failed reconciles from 50ms up to 30s: a bot waits on them, so the
// default ceiling of controller-runtime (about 16 minutes) is far too long.
func errorBackoff() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](50*time.Millisecond, 30*time.Second)
}

// WakeOnCallback returns the notifier's OnResult for the manager: it wakes the reconcile of the
// callback's bot through ch (the bot reconciler's CallbackDone), so the outcome is recorded at
// once. It never blocks a notifier worker: when ch is full the wake-up is skipped, and the
// bot's callbackRecheck requeue records the outcome instead.
func WakeOnCallback(ch chan<- event.GenericEvent) func(callback.Result) {
	return func(res callback.Result) {
		bot := &v1.Bot{ObjectMeta: metav1.ObjectMeta{Namespace: res.Callback.Body.Namespace, Name: res.Callback.Body.Bot}}
		select {
		case ch <- event.GenericEvent{Object: bot}:
		default:
		}
	}
}
