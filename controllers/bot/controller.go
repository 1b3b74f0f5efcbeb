package bot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/callback"
	"botpool.dev/botpool/controllers/dispatch"
	"botpool.dev/botpool/controllers/internal/index"
	"botpool.dev/botpool/controllers/internal/metrics"
	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/controllers/internal/tenancy"
	"botpool.dev/botpool/internal/cachelag"
	"botpool.dev/botpool/store"
)

// releaseWait: a deleted bot whose slot is due to let it go looks again this often, in case
// the release (which brings it back) was missed.
const releaseWait = 5 * time.Second

// noPoolRetry: a bot without a matching pool looks again this often (pools are watched too).
const noPoolRetry = time.Minute

// aliveRecheck: a running bot that is not Alive is looked at this often, one heartbeat
// interval of the bot API, so its next beat makes it Alive within one beat (beats reach the
// store, never the API server: nothing else brings the bot back here).
const aliveRecheck = 10 * time.Second

// Liveness is what the bot controller reads from the store.
type Liveness interface {
	LastHeartbeats(ctx context.Context, bots []types.UID) (map[types.UID]time.Time, error)
	UpsertBot(ctx context.Context, bot store.BotRecord) error
	// AppendBotEvents takes the audit rows of failed starts (AuditStartRetried…).
	AppendBotEvents(ctx context.Context, events []store.BotEvent) error
}

// Reconciler follows one bot: it routes it to a pool, puts it in the queue (with its
// deadline), mirrors the slot the dispatcher bound it to, and ends it in Fatal when its queue
// time runs out. Binding itself is the Dispatcher's, once per pool for many bots.
type Reconciler struct {
	Client   client.Client
	Clock    clock.PassiveClock
	Recorder events.EventRecorder
	// Metrics counts the bots this controller fails; nil counts nothing.
	Metrics *metrics.Metrics
	// Callbacks delivers a finished bot's callbackURL; nil delivers none.
	Callbacks CallbackQueue
	// CallbackDone wakes the bot whose callback the notifier finished (WakeOnCallback), so its
	// outcome reaches status.callback at once; nil relies on the periodic recheck.
	CallbackDone <-chan event.GenericEvent
	// Admission says whether a pool admits the bot's namespace (spec.allowedNamespaces).
	Admission tenancy.Admission
	// Store holds heartbeats and the bots' projection.
	Store Liveness
	// Webhooks is the outbox of webhook messages (spec.webhook, the pool's webhookDefaults);
	// nil makes none. Secrets reads Secrets past the cache: the webhooks' signing keys and the
	// bots' secret parameters (checkParameters). Without it no webhook key is checked (the
	// relay still refuses to send unsigned what should be signed) and no bot with secret
	// parameters is bound.
	Webhooks WebhookOutbox
	Secrets  client.Reader
	// ScheduleLead is how long before its startTime a scheduled bot enters the queue, so that
	// its slot is warm when the meeting starts.
	ScheduleLead time.Duration

	// Writes remembers the bot versions this process's writes replaced: Client records them
	// (cachelag.NewClient with this Tracker), the dispatcher's position writes included, and
	// the bot API records its own. A pass waits for the cache instead of acting on one. nil
	// remembers nothing.
	Writes *cachelag.Tracker

	Started time.Time // when this controller was set up: see LivenessReader
	// projected holds, per bot uid, the record last handed to the store: each pass writes the
	// projection when it differs, not only when the pass changed the status, so a write lost
	// (a crash or a cancelled request between the status patch and the store, a patch whose
	// answer was lost) is made by the next pass: the projection catches up.
	projected sync.Map
	// callbackRefusals counts, per bot, the passes whose callback the notifier refused for a
	// full queue (queueRefusals); see notify.
	callbackRefusals sync.Map
	// Reservations is what the bot controller and the dispatcher share of each pool's
	// reservations (reserve, unreserved).
	Reservations *dispatch.Ledger
}

// CallbackQueue takes a finished bot's callback; it never blocks and ignores repeats, so a
// reconcile may hand it over on every pass.
type CallbackQueue interface {
	// Enqueue accepts c, or returns false when the queue, c's namespace's share of it or its
	// receiver's queue is full (try again later).
	Enqueue(c callback.Callback) bool
	// Result is the final outcome of the callback with key, while the notifier remembers it.
	Result(key string) (callback.Result, bool)
}

// botScope is what one reconcile of a bot observed and decided.
type botScope struct {
	bot  *v1.Bot
	slot *v1.BotPoolSlot // the slot bound to the bot, when there is one
	// newSlot is the slot bound since the last write: its Event follows the write.
	newSlot *v1.BotPoolSlot
	// callbackEvent is the recorded callback outcome's Event, after the write too.
	callbackEvent func()
	// events are emitted after the write (the webhook's).
	events []func()
	// attempt is the failed start this pass recorded, retried when the bot went back to the
	// queue: its Event and audit row follow the write.
	attempt *v1.StartAttempt
	retried bool
	// late says why a reserved bot found no slot ready at its start (lateReservation), or "".
	late string
	// limited says why a queued bot's tenant gets no slot now (it holds its limit), or "".
	limited string
	// leftSlot says the bot is back in the queue from a failed slot that still holds it
	// (Bot.LeftSlot): it stays Queued until the slot lets go, whatever its pool says of it.
	leftSlot bool
	requeue  time.Duration
}

func (s *botScope) after(d time.Duration) { s.requeue = pass.Earliest(s.requeue, d) }

// Reconcile implements reconcile.Reconciler: load, the body (delete or normal), and one
// deferred status write computed from what the pass observed and how it ended.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	bot := &v1.Bot{}
	if err := r.Client.Get(ctx, req.NamespacedName, bot); err != nil {
		if apierrors.IsNotFound(err) {
			r.callbackRefusals.Delete(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.Writes.Stale(bot.UID, bot.ResourceVersion) {
		// A write of ours (or of the bot API's) replaced this version: a pass on it would
		// judge the past, and its patch could only conflict.
		return ctrl.Result{RequeueAfter: pass.CacheWait}, nil
	}
	s := &botScope{bot: bot}
	before := bot.DeepCopy()
	defer func() { res, err = r.finish(ctx, s, before, pass.Settle(err, false)) }()
	// The webhook's message of the phase stored before this pass, whatever the pass does: a
	// pass that fails still writes the phase it decided (and the next pass reads that one), and
	// a deleted bot's last phase goes out before its finalizer does.
	r.webhook(ctx, s, before)
	if !bot.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, s)
	}
	return ctrl.Result{}, r.run(ctx, s)
}

// run is the body of a pass over a live bot: a finished bot waits for its callback and its
// time to live; a bound one follows its slot; any other waits in its pool's queue.
func (r *Reconciler) run(ctx context.Context, s *botScope) error {
	st := &s.bot.Status
	now := r.Clock.Now()
	if st.Phase == "" {
		st.Phase = v1.BotPending
	}
	if st.Phase.Terminal() {
		again, event := r.notify(s.bot, now)
		s.callbackEvent = event
		s.after(again)
		// The slot controller releases a finished bot's slot; here only its time to live.
		return r.expire(ctx, s, now)
	}
	slot, err := r.boundSlot(ctx, s.bot)
	if err != nil {
		return err
	}
	if slot != nil && s.bot.LeftSlot(slot) {
		// Back in the queue from this failed slot, which has not let go yet: waiting, and the
		// dispatcher does not offer it until the slot let go.
		slot, s.leftSlot = nil, true
	}
	if slot != nil {
		return r.running(ctx, s, slot, now)
	}
	if boundBefore(st.Phase) {
		// Bound before and now without a slot: the slot was deleted outright (its finalizer
		// removed by hand); a slot deleted the usual way keeps the bot until it ended.
		r.fail(s.bot, v1.ReasonSlotLost, "The bot's slot is gone")
		return nil
	}
	return r.queue(ctx, s, now)
}

// running follows the slot a bot is bound to: it mirrors the binding, ends the bot when the
// slot failed or its drain is over, and applies the heartbeat rules.
func (r *Reconciler) running(ctx context.Context, s *botScope, slot *v1.BotPoolSlot, now time.Time) error {
	bot, st := s.bot, &s.bot.Status
	// The slot's pool, even while it is deleted (its slots drain): the bot runs there.
	pool := &v1.BotPool{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: slot.Namespace, Name: slot.Spec.Pool}, pool); client.IgnoreNotFound(err) != nil {
		return err
	}
	bot.SetPool(&v1.BotPool{ObjectMeta: metav1.ObjectMeta{Namespace: slot.Namespace, Name: slot.Spec.Pool}})
	if pool.Spec.Platform != "" {
		st.Platform = pool.Spec.Platform
	}
	if slot.Status.Phase == v1.SlotError && r.failedStart(s, slot, pool, now) {
		// The slot failed the bot's start before it ran: back to the queue (its timer is the
		// new deadline), and the slot lets go of it once it sees that.
		s.leftSlot = true
		return r.queue(ctx, s, now)
	}
	s.slot = slot
	if st.SlotName != slot.Name {
		s.newSlot = slot
	}
	r.mirror(bot, slot, now)
	if slot.Status.Phase == v1.SlotError {
		// The slot failed under the bot: the bot ends with the slot's reason (saying which
		// start it was, when it was a failed start), and its end lets the slot release it and
		// recover.
		msg := policy.SlotMessage(bot, slot)
		if s.attempt != nil {
			msg = startMessage(bot, pool, msg)
		}
		r.fail(bot, v1.BotReason(slot.Status.Reason), msg)
		return nil
	}
	if !slot.DeletionTimestamp.IsZero() {
		// The slot was deleted: the bot ends once the slot's drain is over, and its end
		// lets the slot release it and delete the application.
		if at, known := policy.DrainDeadline(slot, bot, pool); known {
			left := at.Sub(now)
			if left <= 0 {
				r.fail(bot, v1.ReasonSlotLost, policy.DrainedMessage(slot, bot))
				return nil
			}
			s.after(left)
		}
	}
	r.watchLiveness(ctx, s, pool, slot, now)
	return nil
}

// queue routes a bot that is not bound yet to its pool and keeps its place in the queue
// until its queue time runs out; binding is the dispatcher's.
func (r *Reconciler) queue(ctx context.Context, s *botScope, now time.Time) error {
	bot, st := s.bot, &s.bot.Status
	pool, refused, err := r.resolvePool(ctx, bot)
	if err != nil {
		return err
	}
	if pool == nil && s.leftSlot {
		// Its failed slot still holds it, and lets go of a bot it left only while the bot is
		// Queued (Bot.LeftSlot): it leaves the queue once the slot let go, which wakes it.
		reason, msg := string(v1.ReasonPoolNotFound), "No BotPool serves this bot any more; it leaves the queue once its failed slot lets go of it"
		if refused != "" {
			reason, msg = string(v1.ReasonPoolNotAllowed), refused
		}
		return pass.WaitFor(noPoolRetry, reason, msg)
	}
	if pool == nil {
		// Out of the queue until a pool serves it: a bot its pool stopped admitting leaves
		// its place, and takes a new one at the back when a pool admits it again.
		st.Phase, st.QueuePosition, st.EstimatedWait = v1.BotPending, 0, nil
		bot.ClearPool()
		// A reservation is a pool's promise: without a pool the bot holds none (it is decided
		// again when a pool serves it), and no pool keeps a slot for a bot it may not bind.
		meta.RemoveStatusCondition(&st.Conditions, v1.ConditionReserved)
		st.Reservation = nil
		r.Reservations.Drop(bot.UID) // a grant the cache does not show yet holds nothing either
		if refused != "" {
			return pass.WaitFor(noPoolRetry, string(v1.ReasonPoolNotAllowed), refused)
		}
		return pass.WaitFor(noPoolRetry, string(v1.ReasonPoolNotFound),
			fmt.Sprintf("No BotPool serves this bot: create a %s pool in namespace %s, or name one in spec.poolRef", platformOf(bot), bot.Namespace))
	}
	if prev := bot.PoolKey(); prev.Name != "" && (prev.Namespace != pool.Namespace || prev.Name != pool.Name) {
		// Routed to another pool: the old one's reservation promises nothing here.
		meta.RemoveStatusCondition(&st.Conditions, v1.ConditionReserved)
		st.Reservation = nil
		r.Reservations.Drop(bot.UID)
	}
	bot.SetPool(pool)
	st.Platform, st.Tenant = pool.Spec.Platform, policy.TenantOf(pool, bot)
	if err := r.checkParameters(ctx, s, pool); err != nil {
		return err
	}

	if start := bot.Spec.StartTime; start != nil && (st.Phase == v1.BotPending || st.Phase == v1.BotScheduled) {
		if pool.Spec.Reservations.Reserves() {
			if r.reservationMoved(bot, pool) {
				meta.RemoveStatusCondition(&st.Conditions, v1.ConditionReserved) // decided again
				st.Reservation = nil
			}
			decideAt := start.Add(-pool.Spec.Reservations.Horizon()) // within the horizon from then
			c := meta.FindStatusCondition(st.Conditions, v1.ConditionReserved)
			if c == nil || c.Reason == v1.ReasonBeyondHorizon && !now.Before(decideAt) {
				if err := r.reserve(ctx, bot, pool, now); err != nil {
					return err
				}
			}
			if c := meta.FindStatusCondition(st.Conditions, v1.ConditionReserved); c != nil && c.Reason == v1.ReasonBeyondHorizon {
				s.after(decideAt.Sub(now)) // decided then
			}
		}
		joins := start.Add(-r.ScheduleLead)
		if policy.Reserved(bot) {
			joins = st.Reservation.From.Time // bound then, from the slot held for it
		}
		if wait := joins.Sub(now); wait > 0 {
			st.Phase = v1.BotScheduled
			return pass.WaitFor(wait, "", "")
		}
	}
	if st.Phase == v1.BotPending || st.Phase == v1.BotScheduled {
		st.Phase = v1.BotQueued
		st.QueuedAt = &metav1.Time{Time: now}
	}
	if st.Phase == v1.BotQueued && st.QueuedAt == nil {
		// A status written by hand (or restored from a backup) says Queued without queuedAt:
		// the wait starts now instead of the reconcile panicking on it, for good.
		st.QueuedAt = &metav1.Time{Time: now}
	}
	// One bot per meeting, judged as the bot joins the queue (a scheduled bot holds no key
	// until then): the dispatcher never binds a duplicate, and this ends it.
	if ended, err := r.endDuplicate(ctx, bot, pool); err != nil || ended {
		return err
	}
	if st.Phase == v1.BotQueued && st.Binding != nil {
		if ended := r.claimedWhileQueued(s, now); ended {
			return nil
		}
	}
	if st.Phase == v1.BotQueued {
		deadline := QueueDeadline(bot, pool)
		if !now.Before(deadline) {
			r.fail(bot, v1.ReasonQueueTimeout, fmt.Sprintf("No slot of pool %s became free within %s", pool.Name, QueueTimeout(bot, pool)))
			return nil
		}
		s.after(deadline.Sub(now))
		if policy.Reserved(bot) && s.slot == nil {
			s.late = r.lateReservation(s, pool, now)
		}
		if limit, held := policy.TenantHeld(pool, st.Tenant); held {
			// No count of the place in it: the dispatcher writes that (queuePosition), and
			// a message that moved with it would cost a second write for each.
			s.limited = fmt.Sprintf("Tenant %q has more bots in pool %s than its limit of %d slot(s) lets run at once: they are bound as its meetings end, in its own order (queuePosition is the bot's place among the tenant's waiting bots)",
				st.Tenant, pool.Name, limit)
		}
	}
	return nil
}

// reservationGrace is how long after its start a reserved bot may wait for its slot before it
// says why it has none: the dispatcher binds it within a pass of its start when the pool kept
// its promise.
const reservationGrace = 30 * time.Second

// lateReservation is why a reserved bot still waits reservationGrace after its start (the
// pool's conditions that say what went wrong), or "" while the grace lasts.
func (r *Reconciler) lateReservation(s *botScope, pool *v1.BotPool, now time.Time) string {
	late := now.Sub(s.bot.Status.Reservation.From.Time)
	if late < reservationGrace {
		s.after(reservationGrace - late)
		return ""
	}
	why := "no Coolify problem is known: its slot is still on its way"
	if troubles := poolTroubles(pool); len(troubles) > 0 {
		parts := make([]string, len(troubles))
		for i, c := range troubles {
			parts[i] = fmt.Sprintf("%s %s, %s: %s", c.Type, c.Status, c.Reason, c.Message)
			if s.bot.ForeignTo(pool.Namespace) {
				// The messages quote the pool's Coolify, servers and Secrets: a tenant's
				// bot says only what kind of trouble it is.
				parts[i] = fmt.Sprintf("%s %s, %s", c.Type, c.Status, c.Reason)
			}
		}
		why = strings.Join(parts, "; ")
	}
	// No count of the time since the start: the message must stay the same from one pass to the
	// next, or every pass writes the status (the model check's settle found it, seed
	// 3457702266237806, a bot writing every heartbeat while its pool could not pull).
	return fmt.Sprintf("Reserved for %s, but no slot of pool %s was ready %s after that (the pool says %s); it is bound before any bot without a reservation as soon as one is",
		s.bot.Status.Reservation.From.UTC().Format(time.RFC3339), pool.Name, reservationGrace, why)
}

// finish ends a pass: the conditions follow from what a pass that went well observed (none
// after a failure, which saw too little to judge), the status is written once if it changed
// (observedGeneration only after a pass that handled the generation), and the Events of what
// the write recorded follow it.
func (r *Reconciler) finish(ctx context.Context, s *botScope, before *v1.Bot, o pass.Outcome) (ctrl.Result, error) {
	bot := s.bot
	if o.Err == nil && bot.DeletionTimestamp.IsZero() {
		r.setConditions(s, o.Wait)
	}
	if o.Handled() {
		bot.Status.ObservedGeneration = bot.Generation
	}
	bot.Status.TruncateTexts()
	if !equality.Semantic.DeepEqual(before.Status, bot.Status) {
		// Optimistic lock: the bot API patches phases the bot reports; never overwrite one.
		patch := client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
		switch perr := r.Client.Status().Patch(ctx, bot, patch); {
		case perr == nil:
			if bot.Status.Phase == v1.BotFatal && before.Status.Phase != v1.BotFatal && r.Metrics != nil {
				r.Metrics.BotFailed(bot.Status.Reason) // once: the write that made it Fatal
			}
			if s.newSlot != nil {
				var related runtime.Object = s.newSlot
				if bot.ForeignTo(s.newSlot.Namespace) {
					related = nil // an Event of the bot's namespace names nothing of the pool's
				}
				r.Recorder.Eventf(bot, related, corev1.EventTypeNormal, v1.ReasonBound, "Bind", "Bound to slot %s", s.newSlot.Name)
			}
			if s.callbackEvent != nil {
				s.callbackEvent()
			}
			for _, ev := range s.events {
				ev()
			}
			if s.attempt != nil {
				r.recordAttempt(ctx, s)
			}
			if c := meta.FindStatusCondition(bot.Status.Conditions, v1.ConditionReserved); c != nil &&
				meta.FindStatusCondition(before.Status.Conditions, v1.ConditionReserved) == nil {
				typ := corev1.EventTypeNormal
				if c.Reason == v1.ReasonPoolFull || c.Reason == v1.ReasonTenantLimit {
					typ = corev1.EventTypeWarning // asked for and refused: the caller must act
				}
				r.Recorder.Eventf(bot, nil, typ, c.Reason, "Reserve", "%s", c.Message)
			}
			if c := meta.FindStatusCondition(bot.Status.Conditions, v1.ConditionReady); c != nil && c.Reason == v1.ReasonReservationLate &&
				!lateBefore(before) {
				r.Recorder.Eventf(bot, nil, corev1.EventTypeWarning, v1.ReasonReservationLate, "Queue", "%s", c.Message)
			}
			r.project(ctx, bot)
		case !apierrors.IsNotFound(perr):
			o.Err = errors.Join(o.Err, perr)
		}
	} else if bot.DeletionTimestamp.IsZero() {
		r.project(ctx, bot)
	}
	// The finalizer keeps a deleted bot for its graceful leave and the release of its slot; a
	// bot that ended needs neither. It is added after the pass's status write, not before: a
	// new bot is in the queue (and can be bound) after one write instead of two, and the write
	// answered with the version this update builds on. A bot deleted in between needs no
	// leave: it was not running yet, and a slot bound to a bot that is gone is released.
	if o.Err == nil && !bot.Status.Phase.Terminal() {
		if err := pass.AddFinalizer(ctx, r.Client, bot, v1.FinalizerBot); client.IgnoreNotFound(err) != nil {
			o.Err = err
		}
	}
	return o.Result(s.requeue, 0)
}

// poolTroubles are the pool conditions that say what keeps it from serving, in this order:
// Stalled, ServerOut, Reconciling for want of a server to place a slot on (ServersFull: every
// server cordoned or at its maxSlots; NoUsableServer: every server cordoned or out), and Ready
// False. All of them, not the first: a failed pre-pull (Stalled) does not keep a Stopped pool
// from binding, servers without room do, and a late bot must name the one that matters.
func poolTroubles(pool *v1.BotPool) []*metav1.Condition {
	var out []*metav1.Condition
	for _, typ := range []string{v1.ConditionStalled, v1.ConditionServerOut} {
		if c := meta.FindStatusCondition(pool.Status.Conditions, typ); c != nil && c.Status == metav1.ConditionTrue {
			out = append(out, c)
		}
	}
	if c := meta.FindStatusCondition(pool.Status.Conditions, v1.ConditionReconciling); c != nil && c.Status == metav1.ConditionTrue &&
		(c.Reason == v1.ReasonServersFull || c.Reason == v1.ReasonNoUsableServer) {
		out = append(out, c)
	}
	if c := meta.FindStatusCondition(pool.Status.Conditions, v1.ConditionReady); c != nil && c.Status == metav1.ConditionFalse {
		out = append(out, c)
	}
	return out
}

// lateBefore reports whether the bot already said its reservation is late.
func lateBefore(b *v1.Bot) bool {
	c := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionReady)
	return c != nil && c.Reason == v1.ReasonReservationLate
}

// boundBefore reports whether a bot in this phase has been bound to a slot (and has not ended).
func boundBefore(p v1.BotPhase) bool {
	switch p {
	case "", v1.BotPending, v1.BotScheduled, v1.BotQueued:
		return false
	}
	return !p.Terminal()
}

// reconcileDelete lets a deleted bot leave gracefully: while it is bound, heartbeats answer
// "leave" (the bot API sees the deletion), and leaveGracePeriod after the request recorded here
// the slot controller releases the slot anyway (and stops the container); see LeaveDeadline.
// The release brings the bot back, and the finalizer goes.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *botScope) error {
	bot := s.bot
	slot, err := r.boundSlot(ctx, bot)
	if err != nil {
		return err
	}
	if slot != nil {
		if policy.BotRunsIn(bot, slot) && bot.Status.LeaveRequestedAt == nil {
			bot.Status.LeaveRequestedAt = &metav1.Time{Time: r.Clock.Now()}
			bot.Status.Phase = v1.BotLeaving
		}
		// Look again when the slot is due to let go, in case its release is missed.
		pool := &v1.BotPool{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: slot.Namespace, Name: slot.Spec.Pool}, pool); err != nil {
			pool = nil // the default grace
		}
		wait := releaseWait
		if at, known := policy.LeaveDeadline(bot, slot, pool); known {
			wait = max(at.Sub(r.Clock.Now()), releaseWait)
		}
		s.after(wait)
		return nil
	}
	if _, err := pass.RemoveFinalizer(ctx, r.Client, bot, v1.FinalizerBot); err != nil {
		return err
	}
	r.projected.Delete(bot.UID)
	return nil
}

// expire deletes a finished bot once its ttlAfterFinished has passed.
func (r *Reconciler) expire(ctx context.Context, s *botScope, now time.Time) error {
	bot := s.bot
	ttl := bot.Spec.TTLAfterFinished.Duration()
	if ttl <= 0 || bot.Status.FinishedAt == nil {
		return nil
	}
	if left := bot.Status.FinishedAt.Add(ttl).Sub(now); left > 0 {
		s.after(left)
		return nil
	}
	return client.IgnoreNotFound(r.Client.Delete(ctx, bot))
}

// watchLiveness applies the pool's heartbeat rules to a bot whose container runs: Alive turns
// False after heartbeatGracePeriod of silence (and True again on the next beat), and an active
// bot silent for heartbeatTimeout fails. A store that cannot answer changes nothing: nobody is
// declared dead for lack of data. Past maxDuration plus leaveGracePeriod, a bot that did not
// leave when told to is ended.
func (r *Reconciler) watchLiveness(ctx context.Context, s *botScope, pool *v1.BotPool, slot *v1.BotPoolSlot, now time.Time) {
	bot, st := s.bot, &s.bot.Status
	if slot.Status.Phase != v1.SlotBusy || st.StartedAt == nil {
		return // still deploying: the slot controller's rules apply
	}
	t := pool.Spec.Timing
	grace := t.HeartbeatGracePeriod.OrDefault(v1.DefaultHeartbeatGracePeriod)
	timeout := t.HeartbeatTimeout.OrDefault(v1.DefaultHeartbeatTimeout)
	leave := t.LeaveGracePeriod.OrDefault(v1.DefaultLeaveGracePeriod)
	if end := st.StartedAt.Add(bot.Spec.MaxDuration.OrDefault(v1.DefaultMaxDuration) + leave); !now.Before(end) {
		r.fail(bot, v1.ReasonMaxDuration, "The bot ran past maxDuration and did not leave within leaveGracePeriod")
		return
	}
	alive := func(status metav1.ConditionStatus, reason, msg string) {
		v1.SetCondition(&st.Conditions, metav1.Condition{Type: v1.ConditionAlive, Status: status,
			Reason: reason, Message: msg, ObservedGeneration: bot.Generation}, now)
	}
	// A bot that never beat is judged over heartbeatTimeout, so after a restart it waits one
	// more timeout before its silence counts.
	live := pass.LivenessReader{Store: r.Store, Clock: r.Clock, Started: r.Started}.Read(ctx, bot.UID, timeout)
	if live.StoreDown {
		alive(metav1.ConditionUnknown, v1.ReasonLivenessUnknown, "The liveness store cannot answer; nobody is failed meanwhile")
		s.after(min(grace, aliveRecheck))
		return
	}
	var last time.Time
	beat := live.LastBeat != nil
	since := st.StartedAt.Time
	if beat {
		last = *live.LastBeat
		since = last
	}
	silent := now.Sub(since)
	switch {
	case silent >= timeout && beat:
		r.fail(bot, v1.ReasonHeartbeatTimeout, fmt.Sprintf("No heartbeat for %s", silent.Round(time.Second)))
		return
	case silent >= timeout && live.Known:
		// Never beat since its container started, and past the restart grace: the in-memory
		// store cannot have lost its beats.
		r.fail(bot, v1.ReasonHeartbeatTimeout, fmt.Sprintf("No heartbeat since the container started %s ago", silent.Round(time.Second)))
		return
	case silent > grace && beat:
		if c := meta.FindStatusCondition(st.Conditions, v1.ConditionAlive); c == nil || c.Status != metav1.ConditionFalse {
			st.LastHeartbeat = &metav1.Time{Time: last}
		}
		// A message naming the last beat, not the silence so far: it stays the same on every
		// look, and only a flip is written.
		alive(metav1.ConditionFalse, v1.ReasonHeartbeatMissed, "No heartbeat since "+last.UTC().Format(time.RFC3339))
	case silent > grace:
		alive(metav1.ConditionFalse, v1.ReasonHeartbeatMissed, "No heartbeat since the container started at "+since.UTC().Format(time.RFC3339))
	case beat:
		bot.MarkAlive(last)
	}
	// Look again when the next rule could fire; no status write unless something flips.
	next := min(grace, timeout-silent)
	if c := meta.FindStatusCondition(st.Conditions, v1.ConditionAlive); c == nil || c.Status != metav1.ConditionTrue {
		next = min(next, aliveRecheck)
	}
	s.after(max(next, time.Second))
}

// project writes the bot's projection row; a store outage buffers it.
func (r *Reconciler) project(ctx context.Context, bot *v1.Bot) {
	if r.Store == nil {
		return
	}
	rec := store.BotRecord{UID: bot.UID, Namespace: bot.Namespace, Name: bot.Name, Platform: string(bot.Status.Platform),
		Phase: string(bot.Status.Phase), Pool: bot.Status.Pool, SlotName: bot.Status.SlotName,
		ApplicationUUID: bot.Status.ApplicationUUID, CreatedAt: bot.CreationTimestamp.Time}
	if bot.Status.FinishedAt != nil {
		rec.FinishedAt = &bot.Status.FinishedAt.Time
	}
	if last, ok := r.projected.Load(bot.UID); ok && sameBotRecord(last.(store.BotRecord), rec) {
		return
	}
	if err := r.Store.UpsertBot(ctx, rec); !store.Accepted(err) {
		ctrl.LoggerFrom(ctx).Error(err, "Projecting the bot failed")
		return
	}
	r.projected.Store(bot.UID, rec)
}

func sameBotRecord(a, b store.BotRecord) bool {
	return a.UID == b.UID && a.Namespace == b.Namespace && a.Name == b.Name && a.Platform == b.Platform &&
		a.Phase == b.Phase && a.Pool == b.Pool && a.SlotName == b.SlotName && a.ApplicationUUID == b.ApplicationUUID &&
		a.CreatedAt.Equal(b.CreatedAt) && policy.SameTime(a.FinishedAt, b.FinishedAt)
}

func platformOf(bot *v1.Bot) v1.Platform {
	if bot.Spec.Platform != "" {
		return bot.Spec.Platform
	}
	p, _ := v1.PlatformForURL(bot.Spec.MeetingURL)
	return p
}

// resolvePool finds the bot's pool: spec.poolRef (in its namespace, or the one it names),
// else the pool it was routed to, else a pool of its platform in its own namespace (with
// several, the one with the most free slots), else one of another namespace shared with its
// namespace (the same rule among them). A pool of another platform, or being deleted, is never
// chosen; nor is one that does not admit the bot's namespace (spec.allowedNamespaces): refused
// then says why, for the bot's PoolNotAllowed. A bot routed to a shared pool that admits its
// namespace no longer is routed again. nil when no pool serves the bot.
func (r *Reconciler) resolvePool(ctx context.Context, bot *v1.Bot) (pool *v1.BotPool, refused string, err error) {
	platform := platformOf(bot)
	key := bot.PoolKey()
	if ref := bot.Spec.PoolRef; ref != nil {
		key = types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
		if key.Namespace == "" {
			key.Namespace = bot.Namespace
		}
	}
	if key.Name != "" {
		pool = &v1.BotPool{}
		err := r.Client.Get(ctx, key, pool)
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, "", err
		}
		usable := err == nil && pool.Spec.Platform == platform && pool.DeletionTimestamp.IsZero()
		ok := false
		if usable {
			if ok, err = r.Admission.Admits(ctx, pool, bot.Namespace); err != nil {
				return nil, "", err
			}
		}
		switch {
		case ok:
			return pool, "", nil
		case bot.Spec.PoolRef != nil && key.Namespace != bot.Namespace:
			// Named in another namespace: one answer whatever the cause (NotAllowedMessage).
			return nil, policy.NotAllowedMessage(key, bot.Namespace, platform), nil
		case key.Namespace == bot.Namespace:
			return nil, "", nil // its own namespace's pool is gone or of another platform: PoolNotFound
		}
		// Routed to a shared pool that is gone or admits its namespace no longer: routed again.
		if usable {
			refused = policy.NotAllowedMessage(key, bot.Namespace, platform)
		}
	}
	var pools v1.BotPoolList
	if err := r.Client.List(ctx, &pools, client.InNamespace(bot.Namespace)); err != nil {
		return nil, "", err
	}
	if best := mostFree(pools.Items, platform, nil); best != nil {
		return best, "", nil
	}
	// None of its own: the pools other namespaces share with the bot's.
	if err := r.Client.List(ctx, &pools); err != nil {
		return nil, "", err
	}
	var admitErr error
	best := mostFree(pools.Items, platform, func(p *v1.BotPool) bool {
		if p.Namespace == bot.Namespace || !policy.Shared(p) {
			return false
		}
		ok, err := r.Admission.Admits(ctx, p, bot.Namespace)
		admitErr = errors.Join(admitErr, err)
		return ok
	})
	if admitErr != nil {
		return nil, "", admitErr
	}
	if best != nil {
		refused = ""
	}
	return best, refused, nil
}

// mostFree is, of pools, the one of the platform with the most free slots (then the first by
// namespace and name) that is not being deleted and that eligible (when given) accepts; nil
// when none is.
func mostFree(pools []v1.BotPool, platform v1.Platform, eligible func(*v1.BotPool) bool) *v1.BotPool {
	var best *v1.BotPool
	bestFree := int32(-1)
	for i := range pools {
		p := &pools[i]
		if p.Spec.Platform != platform || !p.DeletionTimestamp.IsZero() || eligible != nil && !eligible(p) {
			continue
		}
		free := int32(0)
		if c := p.Status.Slots; c != nil {
			free = c.Idle + p.Spec.MaxSlots - c.Total
		} else {
			free = p.Spec.MaxSlots
		}
		// free is negative while a pool holds more slots than a lowered maxSlots: still a
		// candidate (its queue is served as its slots come free), the last one of all.
		if best == nil || free > bestFree || free == bestFree && poolBefore(p, best) {
			best, bestFree = p, free
		}
	}
	return best
}

func poolBefore(a, b *v1.BotPool) bool {
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

// boundSlot is the slot whose spec.botRef names this bot (the single source of truth).
func (r *Reconciler) boundSlot(ctx context.Context, bot *v1.Bot) (*v1.BotPoolSlot, error) {
	var slots v1.BotPoolSlotList
	// Of every namespace: a slot of a shared pool lives in the pool's.
	if err := r.Client.List(ctx, &slots, client.MatchingFields{index.SlotBotUID: string(bot.UID)}); err != nil {
		return nil, err
	}
	if len(slots.Items) == 0 {
		return nil, nil
	}
	return &slots.Items[0], nil
}

// mirror copies the binding into the bot's status and follows the slot's phase until the bot
// reports its own phases through the bot API.
func (r *Reconciler) mirror(bot *v1.Bot, slot *v1.BotPoolSlot, now time.Time) {
	st := &bot.Status
	st.SlotName, st.QueuePosition, st.EstimatedWait = slot.Name, 0, nil
	if slot.Status.ApplicationUUID != "" && !bot.ForeignTo(slot.Namespace) { // the pool's Coolify is not the tenant's to know
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

// fail ends the bot (see v1.Bot.Fail) and says so in an Event.
func (r *Reconciler) fail(bot *v1.Bot, reason v1.BotReason, msg string) {
	if bot.Fail(reason, msg, r.Clock.Now()) {
		r.Recorder.Eventf(bot, nil, corev1.EventTypeWarning, string(reason), "Fail", "%s", msg)
	}
}

// setConditions computes Ready and Bound once per pass from what it observed: the phase, the
// bound slot, and a wait with a reason (no pool serves the bot). A bot that ended has the
// finished conditions, Stalled with its reason when it failed. Alive is the liveness rules'
// (watchLiveness).
func (r *Reconciler) setConditions(s *botScope, wait *pass.Waiting) {
	bot, st, now := s.bot, &s.bot.Status, r.Clock.Now()
	set := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		v1.SetCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason,
			Message: msg, ObservedGeneration: bot.Generation}, now)
	}
	switch {
	case st.Phase.Terminal():
		bot.SetFinishedConditions()
		return
	case wait != nil && wait.Reason != "":
		set(v1.ConditionReady, metav1.ConditionFalse, wait.Reason, wait.Msg)
		return
	}
	if s.slot != nil {
		set(v1.ConditionBound, metav1.ConditionTrue, v1.ReasonBound, "Bound to slot "+s.slot.Name)
	} else {
		set(v1.ConditionBound, metav1.ConditionFalse, v1.ReasonWaiting, "Not bound to a slot")
	}
	switch {
	case st.Phase == v1.BotScheduled:
		set(v1.ConditionReady, metav1.ConditionFalse, v1.ReasonScheduled, "Waiting for its start time")
	case s.slot == nil && bot.ParametersHeld():
		c := meta.FindStatusCondition(st.Conditions, v1.ConditionParametersReady)
		set(v1.ConditionReady, metav1.ConditionFalse, c.Reason, "Waiting for its parameters: "+c.Message)
	case s.slot == nil && s.late != "":
		set(v1.ConditionReady, metav1.ConditionFalse, v1.ReasonReservationLate, s.late)
	case s.slot == nil && s.limited != "":
		set(v1.ConditionReady, metav1.ConditionFalse, v1.ReasonTenantLimit, s.limited)
	case s.slot == nil:
		set(v1.ConditionReady, metav1.ConditionFalse, v1.ReasonWaiting, "Waiting for a free slot of pool "+st.Pool)
	default:
		set(v1.ConditionReady, metav1.ConditionTrue, v1.ReasonRunning, "Running in slot "+s.slot.Name)
	}
}
