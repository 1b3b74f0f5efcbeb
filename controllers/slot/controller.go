package slot

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/deploygate"
	"botpool.dev/botpool/controllers/internal/metrics"
	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/internal/cachelag"
	"botpool.dev/botpool/store"
)

// Store is what the slot controller needs from the store.
type Store interface {
	LastHeartbeats(ctx context.Context, bots []types.UID) (map[types.UID]time.Time, error)
	// LastSlotAsks: when standby slots' containers last asked the bot API for work.
	LastSlotAsks(ctx context.Context, slots []types.UID) (map[types.UID]store.SlotAsk, error)
	RecordTransition(ctx context.Context, t store.Transition) error
	UpsertSlot(ctx context.Context, slot store.SlotRecord) error
	DeleteSlot(ctx context.Context, namespace, name string) error
}

// Reconciler drives one slot's Coolify application through its lifecycle:
// Creating → Idle ⇄ (Deploying → Busy) → Releasing → Idle, and Error → recovered or deleted.
type Reconciler struct {
	Client    client.Client
	APIReader client.Reader
	Connector coolifyview.Connector
	Store     Store
	Clock     clock.PassiveClock
	Recorder  events.EventRecorder
	Metrics   *metrics.Metrics
	Coolify   *coolifyview.BulkReader
	Gate      *deploygate.Gate
	// GateWake carries the slots the deploy gate wakes when a deployment ends (the gate's
	// Wake): a slot it refused asks again then, not only on its gate retry. nil: none.
	GateWake <-chan event.GenericEvent
	// BotAPIURL is what slots' containers get as BOTPOOL_API_URL.
	BotAPIURL string
	// ClusterID is this cluster's identity, part of every pool tag (see ClusterPoolTag).
	ClusterID string
	// Jitter returns a number in [0,1) for the ±20% poll jitter; nil uses math/rand.
	Jitter func() float64
	// GateRetry and AppCheck override DefaultGateRetry and DefaultAppCheck.
	GateRetry, AppCheck time.Duration
	// Writes remembers the slot versions this process's writes replaced: Client records them
	// (cachelag.NewClient with this Tracker), the dispatcher's bindings and the pool's
	// deletions included. A pass that still reads one from the cache would act on a past state
	// (say, judge a deployment it just cancelled), so it waits for the cache instead. nil
	// remembers nothing.
	Writes *cachelag.Tracker

	// Started is when this controller was set up: see LivenessReader.
	Started time.Time

	// projected is the projection's memory (see projection).
	projected sync.Map
}

func (r *Reconciler) gateRetry() time.Duration {
	return policy.OrDefault(r.GateRetry, pass.DefaultGateRetry)
}
func (r *Reconciler) appCheck() time.Duration {
	return policy.OrDefault(r.AppCheck, pass.DefaultAppCheck)
}

// slotScope is what one reconcile of a slot observed and decided.
type slotScope struct {
	slot *v1.BotPoolSlot
	pool *v1.BotPool
	api  coolifyview.CoolifyAPI
	bot  *v1.Bot // the bound bot, when it exists

	transitions []store.Transition
	requeue     time.Duration
	// admitted: this pass holds an admission of the deploy gate (see admit).
	admitted bool
	// handleNow: the last move asks for the handler of the phase it entered in this pass.
	handleNow bool
	// refused holds the moves slotTransitions does not allow; they fail the pass.
	refused error
	// createdFrom is the image reference this pass created (or adopted) the slot's application
	// with, "" if it created none (see setEnv and syncTemplate).
	createdFrom string
	// recordedToken is the token hash the slot's stored status held when the pass began: the
	// credential the bot API may know. One issued in this pass is known after the pass.
	recordedToken string
}

// related is the bound bot for an event's related object: a nil *v1.Bot inside a non-nil
// interface would make the recorder call GetObjectKind on nil and panic.
func (s *slotScope) related() runtime.Object {
	if s.bot == nil {
		return nil
	}
	return s.bot
}

func (s *slotScope) after(d time.Duration) {
	if d > 0 && (s.requeue == 0 || d < s.requeue) {
		s.requeue = d
	}
}

// statusWriteTimeout bounds the status write that ends a pass, which does not share the pass's
// context (see Reconcile).
const statusWriteTimeout = 10 * time.Second

// Reconcile implements reconcile.Reconciler: load, the body, and one deferred status write
// computed from what the pass observed and how it ended.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	slot := &v1.BotPoolSlot{}
	if err := r.Client.Get(ctx, req.NamespacedName, slot); err != nil {
		if apierrors.IsNotFound(err) {
			r.projection().write(ctx, req.Namespace, req.Name, nil)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if r.Writes.Stale(slot.UID, slot.ResourceVersion) {
		return ctrl.Result{RequeueAfter: pass.CacheWait}, nil
	}
	log := ctrl.LoggerFrom(ctx).WithValues("pool", slot.Spec.Pool, "appUUID", slot.Status.ApplicationUUID)
	ctx = ctrl.LoggerInto(ctx, log)
	if err := pass.AddFinalizer(ctx, r.Client, slot, v1.FinalizerSlot); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	s := &slotScope{slot: slot, recordedToken: slot.Status.TokenSHA256}
	before := slot.DeepCopy()
	defer func() { res, err = r.finish(ctx, s, before, pass.Settle(err, true)) }()
	err = r.run(ctx, s)
	if s.refused != nil { // a move slotTransitions does not allow: a defect, never a wait
		err = errors.Join(err, s.refused)
	}
	return ctrl.Result{}, err
}

// run is the body of a pass: the steps every slot takes, then its phase's or its deletion's.
func (r *Reconciler) run(ctx context.Context, s *slotScope) error {
	deleted := !s.slot.DeletionTimestamp.IsZero()
	// Before anything that may wait on Coolify: a slot made before slots recorded their token's
	// hash has running containers whose every call is refused until it does.
	if err := r.backfillTokenHash(ctx, s); err != nil {
		return err
	}
	// Releasing a finished bot's slot needs only the API server: never wait on Coolify for it.
	if released, err := r.releaseOrphan(ctx, s); err != nil || released {
		return err
	}
	if err := r.connect(ctx, s); err != nil {
		if deleted {
			return r.deleteUnreachable(ctx, s, err)
		}
		return pass.Stall(pass.UnreachableReason(err), "Cannot reach Coolify: see the pool's conditions", err)
	}
	if !s.sameInstance() {
		if deleted && r.orphanAllowed(ctx, s.slot) {
			ctrl.LoggerFrom(ctx).Info("Deleting the slot without cleaning its old Coolify instance, as annotated")
			return r.dropFinalizer(ctx, s)
		}
		return r.instanceChanged(ctx, s)
	}
	ctx = withSlotPriority(ctx, s)
	if deleted {
		return r.reconcileDelete(ctx, s)
	}
	return r.advance(ctx, s)
}

// finish ends a pass: a wait says why nothing moves (the phase stays), a stall sets Stalled
// with its reason, a pass that went well clears Stalled; the conditions follow from the
// phase; the status is written once, if it changed, and observedGeneration only after a pass
// that handled the generation (a failure leaves it for the retry).
func (r *Reconciler) finish(ctx context.Context, s *slotScope, before *v1.BotPoolSlot, o pass.Outcome) (ctrl.Result, error) {
	slot := s.slot
	switch {
	case o.Wait != nil:
		if o.Wait.Msg != "" {
			slot.Status.Message = o.Wait.Msg
		}
	case o.Stalled != nil:
		r.setStalled(s, o.Stalled.Reason, o.Stalled.Msg)
		if o.Stalled.Announce {
			r.Recorder.Eventf(slot, nil, corev1.EventTypeWarning, o.Stalled.Reason, "Stalled", "%s", o.Stalled.Msg)
		}
	}
	if o.Err == nil && o.Stalled == nil {
		// A pass that went well, or waits with nothing wrong: nothing needs a person now.
		meta.RemoveStatusCondition(&slot.Status.Conditions, v1.ConditionStalled)
	}
	setSlotConditions(slot)
	if o.Handled() {
		slot.Status.ObservedGeneration = slot.Generation
	}
	slot.Status.TruncateTexts()
	if !equality.Semantic.DeepEqual(before.Status, slot.Status) {
		// On a context of its own: a pass cut off (shutdown, the reconcile timeout) while a
		// deploy request was out must still record DeployingSince, or the next pass, not
		// knowing a deployment may be queued, would deploy again and restart the bot.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statusWriteTimeout)
		defer cancel()
		switch perr := r.Client.Status().Patch(wctx, slot, client.MergeFrom(before)); {
		case perr == nil:
			r.flush(wctx, s)
		case !apierrors.IsNotFound(perr): // gone: nothing to report, nothing to project
			o.Err = errors.Join(o.Err, perr)
		}
	} else {
		r.projection().write(ctx, slot.Namespace, slot.Name, slot)
	}
	return o.Result(s.requeue, pass.StalledRetry)
}

// setStalled reports a problem only a person can fix: nothing else changes until they do,
// and the slot looks again every StalledRetry.
func (r *Reconciler) setStalled(s *slotScope, reason, msg string) {
	v1.SetCondition(&s.slot.Status.Conditions, metav1.Condition{Type: v1.ConditionStalled, Status: metav1.ConditionTrue,
		Reason: reason, Message: msg, ObservedGeneration: s.slot.Generation}, r.Clock.Now())
}

// setSlotConditions derives Ready and Reconciling from the phase (kstatus): Ready while the
// slot serves or can serve, Reconciling while it moves between those states. They change
// when the phase does, so they changed at phaseSince (a time of the injected clock).
func setSlotConditions(slot *v1.BotPoolSlot) {
	st := &slot.Status
	var at time.Time
	if st.PhaseSince != nil {
		at = st.PhaseSince.Time
	}
	set := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		v1.SetCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason,
			Message: msg, ObservedGeneration: slot.Generation}, at)
	}
	phase := string(st.Phase)
	if phase == "" {
		phase = string(v1.SlotCreating)
	}
	switch st.Phase {
	case v1.SlotIdle, v1.SlotBusy:
		set(v1.ConditionReady, metav1.ConditionTrue, phase, "The slot is "+phase)
		meta.RemoveStatusCondition(&st.Conditions, v1.ConditionReconciling)
	default:
		set(v1.ConditionReady, metav1.ConditionFalse, phase, "The slot is "+phase)
		set(v1.ConditionReconciling, metav1.ConditionTrue, phase, "The slot is "+phase)
	}
}

// deleteUnreachable deletes a slot whose pool or credentials are gone: with the last client
// the pool used, if this process knows it; else only when the slot (or its pool) carries
// v1.AnnotationOrphanApplication, after a person decided the application may leak.
func (r *Reconciler) deleteUnreachable(ctx context.Context, s *slotScope, cause error) error {
	key := types.NamespacedName{Namespace: s.slot.Namespace, Name: s.slot.Spec.Pool}
	if api := r.Connector.LastKnown(key); api != nil {
		s.api = api
		return r.reconcileDelete(ctx, s)
	}
	if r.orphanAllowed(ctx, s.slot) {
		ctrl.LoggerFrom(ctx).Info("Deleting the slot without cleaning Coolify, as annotated", "appUUID", s.slot.Status.ApplicationUUID)
		return r.dropFinalizer(ctx, s)
	}
	r.Recorder.Eventf(s.slot, nil, corev1.EventTypeWarning, v1.ReasonCleanupBlocked, "Delete",
		"Cannot reach Coolify to delete application %s (%v); annotate the slot or its pool with %s=true to let it go",
		s.slot.Status.ApplicationUUID, cause, v1.AnnotationOrphanApplication)
	s.after(pass.StalledRetry)
	return nil
}

func (r *Reconciler) orphanAllowed(ctx context.Context, slot *v1.BotPoolSlot) bool {
	if slot.Annotations[v1.AnnotationOrphanApplication] == "true" {
		return true
	}
	pool := &v1.BotPool{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: slot.Namespace, Name: slot.Spec.Pool}, pool)
	return err == nil && pool.Annotations[v1.AnnotationOrphanApplication] == "true"
}

// connect loads the slot's pool and the pool's Coolify client.
func (r *Reconciler) connect(ctx context.Context, s *slotScope) error {
	pool := &v1.BotPool{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.slot.Namespace, Name: s.slot.Spec.Pool}, pool); err != nil {
		return fmt.Errorf("pool %s: %w", s.slot.Spec.Pool, err)
	}
	s.pool = pool // known even without credentials: a deleted slot drains by its timing
	api, err := r.Connector.ForPool(ctx, pool)
	if err != nil {
		return err
	}
	s.api = api
	return nil
}

// appTag is the Coolify tag of the slot's application: the one recorded with it, the legacy
// tag (no cluster identity) for an application recorded before tags had one, and this
// cluster's pool tag for an application still to create.
func (r *Reconciler) appTag(s *slotScope) string {
	st := &s.slot.Status
	switch {
	case st.ApplicationTag != "" && st.ApplicationUUID != "":
		return st.ApplicationTag
	case st.ApplicationUUID != "":
		return coolifyview.PoolTagOf(s.slot.Namespace, s.slot.Spec.Pool)
	}
	return coolifyview.ClusterPoolTag(r.ClusterID, s.slot.Namespace, s.slot.Spec.Pool)
}

// sameInstance checks that the pool's client talks to the Coolify instance holding the slot's
// application. An application recorded before instances were recorded is taken to live on the
// current one. On another instance every call would answer 404, read as "deleted behind our
// back": the slot would create a new application and the old one, with valid bot credentials
// in its env, would leak. The slot stalls instead until a person restores the credentials or
// lets the application go (v1.AnnotationOrphanApplication).
func (s *slotScope) sameInstance() bool {
	st := &s.slot.Status
	now := coolifyview.InstanceOf(s.api)
	if st.ApplicationUUID == "" || now == "" {
		return true
	}
	if st.CoolifyInstance == "" {
		st.CoolifyInstance = now
		return true
	}
	return st.CoolifyInstance == now
}

// instanceChanged stalls a slot whose application lives on another Coolify instance than the
// pool's credentials now name. Its Event is said once, when the slot starts to stall for it.
func (r *Reconciler) instanceChanged(ctx context.Context, s *slotScope) error {
	msg := "The pool's credentials Secret " + s.pool.Spec.Coolify.CredentialsSecretRef.Name +
		" now names another Coolify instance than the one holding application " + s.slot.Status.ApplicationUUID +
		": restore its url (the application is cleaned up, then the slot moves), or annotate the slot with " +
		v1.AnnotationOrphanApplication + "=true to let the old application go"
	if c := meta.FindStatusCondition(s.slot.Status.Conditions, v1.ConditionStalled); c == nil || c.Reason != v1.ReasonCoolifyInstanceChanged {
		r.Recorder.Eventf(s.slot, nil, corev1.EventTypeWarning, v1.ReasonCoolifyInstanceChanged, "Connect", "%s", msg)
	}
	ctrl.LoggerFrom(ctx).Info("Coolify instance changed under the slot", "appUUID", s.slot.Status.ApplicationUUID)
	return pass.Stall(v1.ReasonCoolifyInstanceChanged, msg, nil)
}

// releaseOrphan clears the binding of a slot whose bot is finished or gone (invariant 6),
// went back to the queue from this failed slot (Bot.LeftSlot), or is deleted and past its
// leave (see LeaveDeadline). Releasing is the slot controller's alone: the
// Bot controller of a deleted bot waits for it.
func (r *Reconciler) releaseOrphan(ctx context.Context, s *slotScope) (bool, error) {
	ref := s.slot.Spec.BotRef
	if ref == nil {
		return false, nil
	}
	bot := &v1.Bot{}
	err := r.Client.Get(ctx, s.slot.BotKey(), bot)
	why := "the bound bot is finished or gone"
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return false, err
	case bot.UID == ref.UID && bot.LeftSlot(s.slot):
		why = "the bound bot went back to the queue after its start failed here"
	case bot.UID == ref.UID && !bot.Status.Phase.Terminal() && bot.DeletionTimestamp.IsZero():
		s.bot = bot
		return false, nil
	case bot.UID == ref.UID && !bot.Status.Phase.Terminal():
		pool := &v1.BotPool{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.slot.Namespace, Name: s.slot.Spec.Pool}, pool); err != nil {
			if !apierrors.IsNotFound(err) {
				return false, err
			}
			pool = nil // the default leave grace
		}
		at, known := policy.LeaveDeadline(bot, s.slot, pool)
		if now := r.Clock.Now(); !known || now.Before(at) {
			// Its container runs and was told to leave (or will be, once the Bot controller
			// records the request: that write brings the slot back).
			s.bot = bot
			if known {
				s.after(at.Sub(now))
			}
			return false, nil
		}
		why = "the bound bot was deleted and had its time to leave"
	}
	return true, r.unbind(ctx, s, why)
}

// unbind clears spec.botRef, with the slot's resourceVersion as an optimistic lock. The
// update brings the slot back, to stop its container.
func (r *Reconciler) unbind(ctx context.Context, s *slotScope, why string) error {
	ref := *s.slot.Spec.BotRef
	ctrl.LoggerFrom(ctx).Info("Releasing slot", "bot", ref.Name, "why", why)
	if st := &s.slot.Status; st.Phase == v1.SlotIdle && st.Standby == v1.StandbyReady {
		// The bot ended before it started, but its standby container may have taken its
		// binding (the meeting, its credential): it serves no other bot. The slot replaces it
		// as after any bot, and says so in its status before it lets the bot go: were the
		// binding cleared first, a crash or a lost write in between would leave a free,
		// Ready slot whose container could take the next bot.
		before := s.slot.DeepCopy()
		r.moveTo(s, v1.SlotReleasing, "", "Bot "+ref.Name+" let go before it started; replacing the standby container that may have taken it")
		if err := r.Client.Status().Patch(ctx, s.slot, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return err
		}
	}
	patch := client.MergeFromWithOptions(s.slot.DeepCopy(), client.MergeFromWithOptimisticLock{})
	s.slot.Spec.BotRef = nil
	status := s.slot.Status // the patch answers with the stored status; keep ours
	if err := r.Client.Patch(ctx, s.slot, patch); err != nil {
		return err
	}
	s.slot.Status = status
	s.bot = nil
	return nil
}

// flush reports the transitions of a pass once its status is stored: a log line, a row in the
// audit log and metrics, an Event for a transition with a cause (an error, a recovery, a lost
// application); then the slot's projection. The routine cycle (Idle, Deploying, Busy,
// Releasing) has no Events: four API writes per bot for what the audit log, the status and
// the bot's own Bound Event already tell.
func (r *Reconciler) flush(ctx context.Context, s *slotScope) {
	log := ctrl.LoggerFrom(ctx)
	for _, t := range s.transitions {
		log.Info("Slot transition", "slot", t.Slot, "pool", t.Pool, "bot", t.BotName, "appUUID", t.ApplicationUUID,
			"from", t.From, "to", t.To, "reason", t.Reason, "correlationID", t.CorrelationID)
		if t.Reason != "" {
			typ := corev1.EventTypeNormal
			if t.To == string(v1.SlotError) {
				typ = corev1.EventTypeWarning
			}
			r.Recorder.Eventf(s.slot, s.related(), typ, t.Reason, "Transition", "%s → %s: %s", orNone(t.From), t.To, s.slot.Status.Message)
		}
		if err := r.Store.RecordTransition(ctx, t); !store.Accepted(err) {
			log.Error(err, "Recording a slot transition failed")
		}
		r.Metrics.SlotTransition(t.From, t.To, t.Reason)
	}
	r.projection().write(ctx, s.slot.Namespace, s.slot.Name, s.slot)
}

func orNone(s string) string {
	if s == "" {
		return "(new)"
	}
	return s
}

// jittered spreads polls over ±20% so slots deployed together do not poll together.
func (r *Reconciler) jittered(d time.Duration) time.Duration {
	j := rand.Float64
	if r.Jitter != nil {
		j = r.Jitter
	}
	return time.Duration(float64(d) * (0.8 + 0.4*j()))
}
