package pool

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/deploygate"
	"botpool.dev/botpool/controllers/internal/index"
	"botpool.dev/botpool/controllers/internal/metrics"
	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
)

// Requeue intervals of the pool controller.
const (
	// credentialsRecheck: a Stalled pool looks at its credentials again this often (the
	// Secret is not watched: the manager caches only slot token Secrets).
	credentialsRecheck = time.Minute
	// healthRecheck: a healthy pool re-validates its Coolify access this often.
	healthRecheck = 5 * time.Minute
)

// Reconciler keeps the supply of a pool: it pre-pulls the pool's image on its servers,
// creates slots when bots wait and the pool is below maxSlots, keeps minIdle slots free, and
// reports counts and health. It never binds bots and never talks to a slot's application:
// that is the slot controller's job.
type Reconciler struct {
	Client client.Client
	// APIReader lists slots past the cache before creating any, so a stale cache never makes
	// the pool exceed maxSlots.
	APIReader client.Reader
	Connector coolifyview.Connector
	// Coolify is the bulk reader shared with the slot controller.
	Coolify *coolifyview.BulkReader
	// Gate is the deploy gate shared with the slot controller: the pool's pre-pulls take a
	// server's builds only where no deployment a bot waits for needs them (AdmitPull).
	Gate     *deploygate.Gate
	Clock    clock.PassiveClock
	Recorder events.EventRecorder
	Metrics  *metrics.Metrics
	// OrphanCheck is how old the application list may be for the orphan check
	// (default DefaultAppCheck).
	OrphanCheck time.Duration
	// ClusterID is this cluster's identity, part of every pool tag (see ClusterPoolTag).
	ClusterID string
	// BotAPIURL is what slots' containers get as BOTPOOL_API_URL: part of the slot template.
	BotAPIURL string

	envDigests envDigests
	pullPolls  pullPolls
	zones      zoneCache
}

// tag is the Coolify tag of the pool's applications created by this cluster.
func (r *Reconciler) tag(pool *v1.BotPool) string {
	return coolifyview.ClusterPoolTag(r.ClusterID, pool.Namespace, pool.Name)
}

// poolScope is what one reconcile of a pool observed and did; status is computed from it.
type poolScope struct {
	pool  *v1.BotPool
	api   coolifyview.CoolifyAPI
	slots []v1.BotPoolSlot // this pool's slots, from the cache
	// waiting counts the bots of this pool in Queued that a slot could serve: in a pool with
	// tenants, those a tenant at its limit keeps waiting are left out, so a tenant that queues a
	// thousand bots beyond its limit warms no slot for them (status.queued counts them all).
	waiting int
	queued  int // every bot of this pool in Queued: status.queued
	// tenants and tenantCount are status.tenants and status.tenantCount (a pool with a tenancy).
	tenants     []v1.TenantStatus
	tenantCount int32
	created     []string // slots created in this pass

	// connErr is a problem reaching Coolify: a person must fix it when stalled is set.
	connErr error
	stalled string // a Stalled reason, or ""
	// moved counts the slots whose application lives on another Coolify instance than the
	// credentials now name (stalled is then ReasonCoolifyInstanceChanged).
	moved int
	// draining counts, for a deleted pool, the slots whose bots are still leaving.
	draining int
	// throttled says why Coolify asked this pass to wait, or "".
	throttled string
	// serversFull counts the slots supply wanted but no Active server had room for.
	serversFull int
	// servers is what Coolify last said of the settings of the pool's Active servers (those
	// it knows).
	servers map[string]coolify.ServerSettings
	// health is each listed server's health by this pass's read; nil when the pass did not
	// read (the status keeps what the last read said).
	health map[string]v1.ServerHealth
	// requeue is when the pool is looked at again after a pass that went well.
	requeue time.Duration
	// warm is what spec.warmSchedule says now: the minIdle in force, which every decision of
	// the pass uses in place of spec.minIdle.
	warm warmState
	// reservedStarts is the starts of the pool's granted reservations not bound yet, earliest
	// first; warming is how many of them need a free slot now, by lead (planReservations).
	reservedStarts []time.Time
	warming        int
	lead           leadModel

	// template is the slot template the pool asks for now; nil when it could not be read
	// (templateErr says why), and the status keeps the template it named.
	template    *policy.SlotTemplate
	templateErr error
	// images is what the pool knows of its images on each server (status.servers[].cached
	// and pull), read from the status and updated by this pass's pre-pulls.
	images map[string]*policy.ServerImages
	// rolloutView is what the pass observed of the slots against the template (nil when it
	// did not look); surge is how many slots above its need supply may add for a rollout.
	rolloutView *rolloutView
	surge       int
}

// Reconcile implements reconcile.Reconciler: load, the body (delete or normal), and one
// deferred status write computed from what the pass observed and how it ended.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	pool := &v1.BotPool{}
	if err := r.Client.Get(ctx, req.NamespacedName, pool); err != nil {
		if apierrors.IsNotFound(err) {
			r.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if err := pass.AddFinalizer(ctx, r.Client, pool, v1.FinalizerPool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	s := &poolScope{pool: pool, images: policy.ImagesOf(pool), warm: warmAt(pool.Spec, r.Clock.Now(), &r.zones)}
	if err := r.observe(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	before := pool.DeepCopy()
	defer func() { res, err = r.finish(ctx, s, before, pass.Settle(err, false)) }()
	if !pool.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, s)
	}
	return ctrl.Result{}, r.reconcileNormal(ctx, s)
}

// reconcileNormal checks the pool's Coolify access, pre-pulls its image on its servers,
// creates the slots it needs and sweeps orphaned applications.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *poolScope) error {
	r.readTemplate(ctx, s)
	if err := r.connect(ctx, s); err != nil {
		return err
	}
	r.readServerLimits(ctx, s)
	if err := r.recordServers(ctx, s); err != nil {
		return err
	}
	// A pre-pull is housekeeping: its errors fail the pass (retried with backoff) only once
	// the pass has done the rest, so a Coolify hiccup on a pull never holds back the supply.
	pullErr := r.prePull(ctx, s)
	r.planReservations(s, r.Clock.Now())
	if err := r.rollout(ctx, s); err != nil {
		return errors.Join(err, pullErr)
	}
	if err := r.supply(ctx, s); err != nil {
		return errors.Join(err, pullErr)
	}
	if err := r.scaleDown(ctx, s); err != nil {
		return errors.Join(err, pullErr)
	}
	if err := r.drain(ctx, s); err != nil {
		return errors.Join(err, pullErr)
	}
	if err := r.deleteOrphanApps(ctx, s); err != nil {
		return errors.Join(err, pullErr)
	}
	s.after(min(healthRecheck, policy.OrDefault(r.OrphanCheck, pass.DefaultAppCheck)))
	if !s.warm.next.IsZero() {
		// A window opens or closes; a pass that runs past the moment looks again at once.
		s.after(max(s.warm.next.Sub(r.Clock.Now()), time.Millisecond))
	}
	if s.pool.Spec.SlotEnvFrom != nil {
		s.after(templateRecheck) // the Secret is read, not watched
	}
	return pullErr
}

// idleNeed is how many free slots the pool keeps besides its queue: the minIdle in force and
// one for each reservation it warms for now.
func (s *poolScope) idleNeed() int { return s.warm.minIdle + s.warming }

// after asks for the pool's next pass within d at the latest (the earliest of the pass's
// timers wins).
func (s *poolScope) after(d time.Duration) { s.requeue = pass.Earliest(s.requeue, d) }

// finish ends a pass: it computes the status from what the pass observed and how it ended
// (a wait is Coolify throttling, a stall a credentials problem), writes it once if it
// changed, and answers with the pass's timers.
func (r *Reconciler) finish(ctx context.Context, s *poolScope, before *v1.BotPool, o pass.Outcome) (ctrl.Result, error) {
	pool := s.pool
	if o.Wait != nil {
		s.throttled = o.Wait.Msg
	}
	if o.Stalled != nil {
		s.stalled = o.Stalled.Reason
		r.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, s.stalled, "Connect", "%s", stalledMessage(s))
	}
	if !pool.DeletionTimestamp.IsZero() {
		if controllerutil.ContainsFinalizer(pool, v1.FinalizerPool) {
			setDrainingStatus(s, r.Clock.Now())
		}
	} else {
		setPoolStatus(s, r.Clock.Now(), o.Handled())
		r.Metrics.ObservePool(pool)
	}
	v1.TruncateConditions(pool.Status.Conditions)
	if controllerutil.ContainsFinalizer(pool, v1.FinalizerPool) && !equality.Semantic.DeepEqual(before.Status, pool.Status) {
		o.Err = errors.Join(o.Err, client.IgnoreNotFound(r.Client.Status().Patch(ctx, pool, client.MergeFrom(before))))
	}
	return o.Result(s.requeue, credentialsRecheck)
}

// observe reads the pool's slots and waiting bots from the cache.
func (r *Reconciler) observe(ctx context.Context, s *poolScope) error {
	var slots v1.BotPoolSlotList
	if err := r.Client.List(ctx, &slots, client.InNamespace(s.pool.Namespace), client.MatchingFields{index.SlotPool: s.pool.Name}); err != nil {
		return fmt.Errorf("listing slots: %w", err)
	}
	s.slots = slots.Items
	var bots v1.BotList // only counted: read from the cache without copying each bot
	if err := r.Client.List(ctx, &bots, index.BotsOf(s.pool), client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing bots: %w", err)
	}
	for i := range bots.Items {
		if bots.Items[i].Status.Phase == v1.BotQueued {
			s.queued++
		}
	}
	s.reservedStarts = pendingStarts(bots.Items)
	s.waiting = s.queued
	if policy.Tenancy(s.pool) != nil {
		s.tenants, s.tenantCount, s.waiting = tenantStatuses(s.pool, s.slots, bots.Items)
	}
	return nil
}

// connect checks that the pool can reach its Coolify instance with its credentials. Problems a
// person must fix (a missing Secret, a refused token, the API switched off, slots left on
// another instance) stall the pool; anything else is transient and retried with backoff.
func (r *Reconciler) connect(ctx context.Context, s *poolScope) error {
	api, err := r.Connector.ForPool(ctx, s.pool)
	if err == nil {
		_, err = api.ServerVersion(ctx)
		s.api = api
	}
	s.connErr = err
	if err == nil {
		if s.moved = movedSlots(s.slots, coolifyview.InstanceOf(api)); s.moved > 0 {
			return pass.Stall(v1.ReasonCoolifyInstanceChanged, "", nil)
		}
		return nil
	}
	if reason, ok := pass.NeedsPerson(err); ok {
		return pass.Stall(reason, "", err)
	}
	return fmt.Errorf("reaching Coolify: %w", err)
}

// reconcileDelete deletes the pool's slots and lets the pool go once they are gone. Each
// slot's own finalizer lets its running bot leave (heartbeats answer "leave" once the slot is
// deleted; see the slot's drain), then stops and deletes its Coolify application. The
// dispatcher binds nothing to a deleted pool, and a deleted slot is never free. The pool's
// puller applications (its image pre-pulls) are deleted last, before the finalizer goes.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *poolScope) error {
	for i := range s.slots {
		if sl := &s.slots[i]; sl.Spec.BotRef != nil && sl.Status.Phase == v1.SlotBusy {
			s.draining++
		}
	}
	if c := meta.FindStatusCondition(s.pool.Status.Conditions, v1.ConditionReconciling); (c == nil || c.Reason != v1.ReasonDraining) && s.draining > 0 {
		r.Recorder.Eventf(s.pool, nil, corev1.EventTypeNormal, v1.ReasonDraining, "Delete",
			"Pool deleted: asking %d running bot(s) to leave before deleting their applications", s.draining)
	}
	for i := range s.slots {
		if s.slots[i].DeletionTimestamp.IsZero() {
			if err := r.Client.Delete(ctx, &s.slots[i]); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting slot %s: %w", s.slots[i].Name, err)
			}
		}
	}
	if len(s.slots) > 0 {
		return nil // the slots' deletion events bring us back
	}
	// The cache may not show a slot created a moment ago: let go only on a live list.
	var live v1.BotPoolSlotList
	if err := r.APIReader.List(ctx, &live, client.InNamespace(s.pool.Namespace), client.MatchingLabels{v1.LabelPool: s.pool.Name}); err != nil {
		return fmt.Errorf("listing slots: %w", err)
	}
	if len(live.Items) > 0 {
		for i := range live.Items {
			if live.Items[i].DeletionTimestamp.IsZero() {
				if err := r.Client.Delete(ctx, &live.Items[i]); client.IgnoreNotFound(err) != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := r.deletePullers(ctx, s); err != nil {
		return err
	}
	if _, err := pass.RemoveFinalizer(ctx, r.Client, s.pool, v1.FinalizerPool); err != nil {
		return err
	}
	r.Forget(types.NamespacedName{Namespace: s.pool.Namespace, Name: s.pool.Name})
	if ref := s.pool.Spec.SlotEnvFrom; ref != nil {
		r.envDigests.forget(types.NamespacedName{Namespace: s.pool.Namespace, Name: ref.Name})
	}
	return nil
}

// Forget drops what this process remembers about a pool that is gone: its metrics, its cached
// application lists and its Coolify client. The maps would otherwise only grow as pools come
// and go.
func (r *Reconciler) Forget(pool types.NamespacedName) {
	r.Metrics.ForgetPool(pool.Namespace, pool.Name)
	if r.Coolify != nil {
		r.Coolify.Invalidate(coolifyview.ClusterPoolTag(r.ClusterID, pool.Namespace, pool.Name))
		r.Coolify.Invalidate(coolifyview.PoolTagOf(pool.Namespace, pool.Name))
	}
	if f, ok := r.Connector.(interface{ Forget(types.NamespacedName) }); ok {
		f.Forget(pool)
	}
}

// movedSlots counts the slots whose application was recorded on another Coolify instance than
// instance.
func movedSlots(slots []v1.BotPoolSlot, instance string) int {
	n := 0
	for i := range slots {
		st := &slots[i].Status
		if instance != "" && st.ApplicationUUID != "" && st.CoolifyInstance != "" && st.CoolifyInstance != instance {
			n++
		}
	}
	return n
}
