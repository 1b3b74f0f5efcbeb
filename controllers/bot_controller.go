package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/callback"
)

// Condition reasons of a Bot.
const (
	reasonWaiting   = "Waiting"
	reasonScheduled = "Scheduled"
	reasonBound     = "Bound"
	reasonRunning   = "Running"
	reasonFinished  = "Finished"
)

// noPoolRetry: a bot without a matching pool looks again this often (pools are watched too).
const noPoolRetry = time.Minute

// BotReconciler follows one bot: it routes it to a pool, puts it in the queue (with its
// deadline), mirrors the slot the dispatcher bound it to, and ends it in Fatal when its queue
// time runs out. Binding itself is the Dispatcher's, once per pool for many bots.
type BotReconciler struct {
	Client   client.Client
	Clock    clock.PassiveClock
	Recorder events.EventRecorder
	// Callbacks delivers a finished bot's callbackURL; nil delivers none.
	Callbacks CallbackQueue
	// ScheduleLead is how long before its startTime a scheduled bot enters the queue, so that
	// its slot is warm when the meeting starts.
	ScheduleLead time.Duration
}

// CallbackQueue takes a finished bot's callback; it never blocks and ignores repeats, so a
// reconcile may hand it over on every pass.
type CallbackQueue interface {
	Enqueue(c callback.Callback) bool
}

// Reconcile implements reconcile.Reconciler.
func (r *BotReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	bot := &v1.Bot{}
	if err := r.Client.Get(ctx, req.NamespacedName, bot); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := bot.DeepCopy()
	defer func() {
		if !equality.Semantic.DeepEqual(before.Status, bot.Status) {
			bot.Status.ObservedGeneration = bot.Generation
			// Optimistic lock: the bot API patches phases the bot reports; never overwrite one.
			patch := client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
			if perr := r.Client.Status().Patch(ctx, bot, patch); client.IgnoreNotFound(perr) != nil {
				err = errors.Join(err, perr)
			}
		}
		if err != nil {
			res = ctrl.Result{}
		}
	}()

	st := &bot.Status
	now := r.Clock.Now()
	if st.Phase == "" {
		st.Phase = v1.BotPending
	}
	if st.Phase.Terminal() {
		r.setConditions(bot, nil)
		if cb, ok := callback.ForBot(bot); ok && r.Callbacks != nil {
			r.Callbacks.Enqueue(cb)
		}
		return ctrl.Result{}, nil // the slot controller releases a finished bot's slot
	}
	pool, err := r.resolvePool(ctx, bot)
	if err != nil {
		return ctrl.Result{}, err
	}
	if pool == nil {
		st.Phase = v1.BotPending
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse,
			Reason: string(v1.ReasonPoolNotFound), ObservedGeneration: bot.Generation,
			Message: fmt.Sprintf("No BotPool serves this bot: create a %s pool in namespace %s, or name one in spec.poolRef", platformOf(bot), bot.Namespace)})
		return ctrl.Result{RequeueAfter: noPoolRetry}, nil
	}
	st.Pool, st.Platform = pool.Name, pool.Spec.Platform

	slot, err := r.boundSlot(ctx, bot)
	if err != nil {
		return ctrl.Result{}, err
	}
	if slot != nil {
		r.mirror(bot, slot, now)
		r.setConditions(bot, slot)
		return ctrl.Result{}, nil
	}

	if start := bot.Spec.StartTime; start != nil && (st.Phase == v1.BotPending || st.Phase == v1.BotScheduled) {
		if wait := start.Add(-r.ScheduleLead).Sub(now); wait > 0 {
			st.Phase = v1.BotScheduled
			r.setConditions(bot, nil)
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	if st.Phase == v1.BotPending || st.Phase == v1.BotScheduled {
		st.Phase = v1.BotQueued
		st.QueuedAt = &metav1.Time{Time: now}
	}
	if st.Phase == v1.BotQueued {
		deadline := st.QueuedAt.Add(queueTimeout(bot, pool))
		if !now.Before(deadline) {
			r.fail(bot, v1.ReasonQueueTimeout, fmt.Sprintf("No slot of pool %s became free within %s", pool.Name, queueTimeout(bot, pool)))
			r.setConditions(bot, nil)
			return ctrl.Result{}, nil
		}
		r.setConditions(bot, nil)
		return ctrl.Result{RequeueAfter: deadline.Sub(now)}, nil
	}
	// Bound before and now without a slot: the slot was lost (the slot controller fails the
	// bot with its reason when it can; this covers a slot deleted outright).
	r.fail(bot, v1.ReasonSlotLost, "The bot's slot is gone")
	r.setConditions(bot, nil)
	return ctrl.Result{}, nil
}

func platformOf(bot *v1.Bot) v1.Platform {
	if bot.Spec.Platform != "" {
		return bot.Spec.Platform
	}
	p, _ := v1.PlatformForURL(bot.Spec.MeetingURL)
	return p
}

// resolvePool finds the bot's pool: spec.poolRef, else the pool of its platform in its
// namespace (with several, the one with the most free slots). A pool of another platform is
// never chosen. nil when there is none.
func (r *BotReconciler) resolvePool(ctx context.Context, bot *v1.Bot) (*v1.BotPool, error) {
	platform := platformOf(bot)
	name := bot.Status.Pool
	if ref := bot.Spec.PoolRef; ref != nil {
		name = ref.Name
	}
	if name != "" {
		pool := &v1.BotPool{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: bot.Namespace, Name: name}, pool)
		switch {
		case apierrors.IsNotFound(err):
			return nil, nil
		case err != nil:
			return nil, err
		case pool.Spec.Platform != platform || !pool.DeletionTimestamp.IsZero():
			return nil, nil
		}
		return pool, nil
	}
	var pools v1.BotPoolList
	if err := r.Client.List(ctx, &pools, client.InNamespace(bot.Namespace)); err != nil {
		return nil, err
	}
	var best *v1.BotPool
	bestFree := int32(-1)
	for i := range pools.Items {
		p := &pools.Items[i]
		if p.Spec.Platform != platform || !p.DeletionTimestamp.IsZero() {
			continue
		}
		free := int32(0)
		if c := p.Status.Slots; c != nil {
			free = c.Idle + p.Spec.MaxSlots - c.Total
		} else {
			free = p.Spec.MaxSlots
		}
		if free > bestFree || free == bestFree && p.Name < best.Name {
			best, bestFree = p, free
		}
	}
	return best, nil
}

// boundSlot is the slot whose spec.botRef names this bot (the single source of truth).
func (r *BotReconciler) boundSlot(ctx context.Context, bot *v1.Bot) (*v1.BotPoolSlot, error) {
	var slots v1.BotPoolSlotList
	if err := r.Client.List(ctx, &slots, client.InNamespace(bot.Namespace), client.MatchingFields{indexSlotBotUID: string(bot.UID)}); err != nil {
		return nil, err
	}
	if len(slots.Items) == 0 {
		return nil, nil
	}
	return &slots.Items[0], nil
}

// mirror copies the binding into the bot's status and follows the slot's phase until the bot
// reports its own phases through the bot API.
func (r *BotReconciler) mirror(bot *v1.Bot, slot *v1.BotPoolSlot, now time.Time) {
	st := &bot.Status
	if st.SlotName != slot.Name {
		r.Recorder.Eventf(bot, slot, corev1.EventTypeNormal, reasonBound, "Bind", "Bound to slot %s", slot.Name)
	}
	st.SlotName, st.QueuePosition, st.EstimatedWait = slot.Name, 0, nil
	if slot.Status.ApplicationUUID != "" {
		st.ApplicationUUID = slot.Status.ApplicationUUID
	}
	switch st.Phase {
	case v1.BotPending, v1.BotScheduled, v1.BotQueued:
		st.Phase = v1.BotDeploying
	}
	if slot.Status.Phase == v1.SlotBusy && st.StartedAt == nil {
		st.StartedAt = &metav1.Time{Time: now}
	}
}

func (r *BotReconciler) fail(bot *v1.Bot, reason v1.BotReason, msg string) {
	now := metav1.NewTime(r.Clock.Now())
	bot.Status.Phase, bot.Status.Reason, bot.Status.Message, bot.Status.FinishedAt = v1.BotFatal, reason, msg, &now
	bot.Status.QueuePosition, bot.Status.EstimatedWait = 0, nil
	r.Recorder.Eventf(bot, nil, corev1.EventTypeWarning, string(reason), "Fail", "%s", msg)
}

// setConditions derives Ready and Bound from the phase and the bound slot.
func (r *BotReconciler) setConditions(bot *v1.Bot, slot *v1.BotPoolSlot) {
	st := &bot.Status
	set := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason,
			Message: msg, ObservedGeneration: bot.Generation})
	}
	if slot != nil {
		set(v1.ConditionBound, metav1.ConditionTrue, reasonBound, "Bound to slot "+slot.Name)
	} else {
		set(v1.ConditionBound, metav1.ConditionFalse, reasonWaiting, "Not bound to a slot")
	}
	switch {
	case st.Phase.Terminal():
		status := metav1.ConditionTrue
		if st.Phase == v1.BotFatal {
			status = metav1.ConditionFalse
		}
		set(v1.ConditionReady, status, reasonFinished, fmt.Sprintf("The bot ended %s %s", st.Phase, st.Reason))
		set(v1.ConditionBound, metav1.ConditionFalse, reasonFinished, "Finished")
	case st.Phase == v1.BotScheduled:
		set(v1.ConditionReady, metav1.ConditionFalse, reasonScheduled, "Waiting for its start time")
	case slot == nil:
		set(v1.ConditionReady, metav1.ConditionFalse, reasonWaiting, "Waiting for a free slot of pool "+st.Pool)
	default:
		set(v1.ConditionReady, metav1.ConditionTrue, reasonRunning, "Running in slot "+slot.Name)
	}
}

// SetupWithManager registers the controller: bots, the slots bound to them, and pools (a new
// pool may serve bots that found none).
func (r *BotReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1.Bot{}).
		Watches(&v1.BotPoolSlot{}, handler.EnqueueRequestsFromMapFunc(slotToBot)).
		Watches(&v1.BotPool{}, handler.EnqueueRequestsFromMapFunc(r.poolToWaitingBots)).
		WithOptions(controller.Options{RateLimiter: errorBackoff()}).
		Complete(r)
}

func slotToBot(_ context.Context, o client.Object) []reconcile.Request {
	ref := o.(*v1.BotPoolSlot).Spec.BotRef
	if ref == nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: ref.Name}}}
}

// poolToWaitingBots wakes the bots of a namespace that have no pool yet.
func (r *BotReconciler) poolToWaitingBots(ctx context.Context, o client.Object) []reconcile.Request {
	var bots v1.BotList
	if err := r.Client.List(ctx, &bots, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for i := range bots.Items {
		if b := &bots.Items[i]; b.Status.Pool == "" && !b.Status.Phase.Terminal() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(b)})
		}
	}
	return reqs
}
