package pool

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
)

// slotsToCreate is the supply rule: every waiting bot gets a slot, minIdle slots stay free,
// and the pool never exceeds maxSlots.
func slotsToCreate(maxSlots, minIdle, total, available, waiting int) int {
	want := max(waiting-available, minIdle-available, 0)
	return max(min(want, maxSlots-total), 0)
}

// countSlots counts slots by phase; a slot without a phase yet counts as Creating.
func countSlots(slots []v1.BotPoolSlot) v1.SlotCounts {
	c := v1.SlotCounts{Total: int32(len(slots))}
	for i := range slots {
		if sl := &slots[i]; sl.Spec.BotRef == nil && sl.DeletionTimestamp.IsZero() {
			switch sl.Status.Standby {
			case v1.StandbyReady:
				c.Ready++
			case v1.StandbyStarting, v1.StandbyLost:
				c.Starting++
			}
		}
		switch slots[i].Status.Phase {
		case "", v1.SlotCreating:
			c.Creating++
		case v1.SlotIdle:
			c.Idle++
		case v1.SlotDeploying:
			c.Deploying++
		case v1.SlotBusy:
			c.Busy++
		case v1.SlotReleasing:
			c.Releasing++
		case v1.SlotError:
			c.Error++
		}
	}
	return c
}

// supply creates the slots the pool needs now.
func (r *Reconciler) supply(ctx context.Context, s *poolScope) error {
	spec := s.pool.Spec
	if excess := len(s.slots) - int(spec.MaxSlots); excess > 0 {
		return r.shrink(ctx, s, excess)
	}
	// A pending reservation within its lead holds a free slot apart from the minIdle and the
	// queue: neither an ad-hoc bot nor the warm capacity it is for takes it (see unreserved).
	minIdle, waiting := s.idleNeed(), s.waiting+s.warming
	free, _ := countFree(s)
	if slotsToCreate(int(spec.MaxSlots), minIdle, len(s.slots), free, waiting) == 0 && s.surge == 0 {
		return nil
	}

	// The cache may not show the slots created a moment ago: decide again on a live list
	// before creating anything. Names are unique by construction (the API server refuses a
	// duplicate), so two passes can never create the same slot.
	var live v1.BotPoolSlotList
	if err := r.APIReader.List(ctx, &live, client.InNamespace(s.pool.Namespace)); err != nil {
		return fmt.Errorf("listing slots: %w", err)
	}
	prefix := slotPrefix(spec.Platform)
	used := map[int]bool{}
	total, free := 0, 0
	var mine []v1.BotPoolSlot
	for i := range live.Items {
		sl := &live.Items[i]
		if n, ok := slotNumber(prefix, sl.Name); ok {
			used[n] = true
		}
		if sl.Spec.Pool == s.pool.Name {
			total++
			mine = append(mine, *sl)
			if policy.Available(sl) && policy.TakesBots(sl, s.pool) {
				free++
			}
		}
	}
	want := slotsToCreate(int(spec.MaxSlots), minIdle, total, free, waiting)
	if s.surge > 0 { // a rollout's surge (RolloutBudget keeps it within maxSlots)
		want = min(want+s.surge, max(int(spec.MaxSlots)-total, 0))
	}
	place := newPlacement(s.pool, mine, s.health)
	for attempts := 0; len(s.created) < want && attempts < 2*want+10; attempts++ {
		server, ok := place.next()
		if !ok {
			s.serversFull = want - len(s.created)
			break
		}
		n := lowestFree(used, 1)[0]
		used[n] = true
		slot := r.newSlot(s.pool, SlotName(spec.Platform, n), server)
		if err := r.Client.Create(ctx, slot); err != nil {
			if apierrors.IsAlreadyExists(err) {
				place.slots[server]-- // not placed after all
				continue              // taken meanwhile (another pool of the platform): try the next number
			}
			return fmt.Errorf("creating slot %s: %w", slot.Name, err)
		}
		s.created = append(s.created, slot.Name)
		s.slots = append(s.slots, *slot)
	}
	if len(s.created) > 0 {
		r.Recorder.Eventf(s.pool, nil, corev1.EventTypeNormal, v1.ReasonSlotsCreated, "ScaleUp", "Created %d slot(s): %s", len(s.created), policy.Abbreviate(s.created))
		ctrl.LoggerFrom(ctx).Info("Created slots", "count", len(s.created), "waiting", s.waiting, "slots", s.created)
	}
	return nil
}

// scaleDown removes what the pool holds above its need (the minIdle in force, the minIdle of
// windows opening within scaleDownDelay, or its waiting bots, and the reservations it warms
// for) once that surplus has lasted
// scaleDownDelay (status.surplusSince): what a burst or a closed warm window left behind goes,
// a slot between two bots of a steady stream stays. It waits while slots are being created
// (the pool is growing) and while a rollout runs (its end removes its own surge). Slots whose
// standby container is not Ready go first, then the highest numbers; removeIdle never takes a
// slot bound meanwhile.
func (r *Reconciler) scaleDown(ctx context.Context, s *poolScope) error {
	free, creating := countFree(s)
	growing := creating || len(s.created) > 0
	need := max(s.waiting, s.warm.soon) + s.warming
	surplus := free - need
	if surplus <= 0 {
		s.pool.Status.SurplusSince = nil
		return nil
	}
	now := r.Clock.Now()
	if s.pool.Status.SurplusSince == nil {
		s.pool.Status.SurplusSince = &metav1.Time{Time: now}
	}
	if growing || s.pool.Status.Rollout != nil || s.surge > 0 {
		return nil
	}
	delay := s.pool.Spec.ScaleDownDelay.OrDefault(v1.DefaultScaleDownDelay)
	if left := delay - now.Sub(s.pool.Status.SurplusSince.Time); left > 0 {
		s.after(left)
		return nil
	}
	var candidates []*v1.BotPoolSlot
	for i := range s.slots {
		if sl := &s.slots[i]; policy.TakesBots(sl, s.pool) {
			candidates = append(candidates, sl)
		}
	}
	removed, err := r.removeNotReadyFirst(ctx, s.pool, candidates, surplus)
	if len(removed) > 0 {
		r.Recorder.Eventf(s.pool, nil, corev1.EventTypeNormal, v1.ReasonSlotsRemoved, "ScaleDown",
			"Removed %d slot(s): the pool held %d free for %s above its need of %d (minIdle in force %d, %d waiting bot(s), %d reservation(s) warming): %s",
			len(removed), surplus, delay, need, s.warm.minIdle, s.waiting, s.warming, policy.Abbreviate(removed))
		ctrl.LoggerFrom(ctx).Info("Removed surplus free slots", "count", len(removed), "need", need, "slots", removed)
	}
	return err
}

// countFree counts the pool's free slots as supply does (available, on a server that takes
// bots), and says whether one of them is still being created.
func countFree(s *poolScope) (free int, creating bool) {
	for i := range s.slots {
		if sl := &s.slots[i]; policy.Available(sl) && policy.TakesBots(sl, s.pool) {
			free++
			creating = creating || sl.Status.Phase == "" || sl.Status.Phase == v1.SlotCreating
		}
	}
	return free, creating
}

// removeNotReadyFirst removes up to n of slots with removeIdle: in a standby Running pool
// those whose container is not Ready first (a Ready one serves a bot at once), then the rest;
// highest numbers first within each.
func (r *Reconciler) removeNotReadyFirst(ctx context.Context, pool *v1.BotPool, slots []*v1.BotPoolSlot, n int) ([]string, error) {
	var cold, ready []*v1.BotPoolSlot
	for _, sl := range slots {
		if pool.Spec.Standby.Running() && sl.Status.Standby != v1.StandbyReady {
			cold = append(cold, sl)
		} else {
			ready = append(ready, sl)
		}
	}
	removed, err := r.removeIdle(ctx, pool, cold, n)
	if err == nil && len(removed) < n {
		var more []string
		more, err = r.removeIdle(ctx, pool, ready, n-len(removed))
		removed = append(removed, more...)
	}
	return removed, err
}

// shrink brings a pool whose maxSlots was lowered back under it (invariant 2): free Idle
// slots go first (removeIdle). Busy slots are never taken from their bots; the pool shrinks
// further as they come back.
func (r *Reconciler) shrink(ctx context.Context, s *poolScope, excess int) error {
	slots := make([]*v1.BotPoolSlot, len(s.slots))
	for i := range s.slots {
		slots[i] = &s.slots[i]
	}
	removed, err := r.removeIdle(ctx, s.pool, slots, excess)
	if len(removed) > 0 {
		r.Recorder.Eventf(s.pool, nil, corev1.EventTypeNormal, v1.ReasonSlotsRemoved, "ScaleDown", "Removed %d slot(s) above maxSlots: %s", len(removed), policy.Abbreviate(removed))
	}
	return err
}

// removeIdle deletes up to n of slots that are removable, highest numbers first, each only if
// it is still the version seen (a slot bound meanwhile stays). It returns the names deleted.
func (r *Reconciler) removeIdle(ctx context.Context, pool *v1.BotPool, slots []*v1.BotPoolSlot, n int) ([]string, error) {
	prefix := slotPrefix(pool.Spec.Platform)
	var idle []*v1.BotPoolSlot
	for _, sl := range slots {
		if policy.Removable(sl) {
			idle = append(idle, sl)
		}
	}
	sort.Slice(idle, func(i, j int) bool {
		a, _ := slotNumber(prefix, idle[i].Name)
		b, _ := slotNumber(prefix, idle[j].Name)
		return a > b
	})
	var removed []string
	for _, sl := range idle[:min(n, len(idle))] {
		rv := sl.ResourceVersion
		err := r.Client.Delete(ctx, sl, client.Preconditions{ResourceVersion: &rv})
		switch {
		case err == nil:
			removed = append(removed, sl.Name)
			// The pass's later steps (drain, scaleDown, the status) must not count it again.
			sl.DeletionTimestamp = &metav1.Time{Time: r.Clock.Now()}
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		default:
			return removed, fmt.Errorf("deleting slot %s: %w", sl.Name, err)
		}
	}
	return removed, nil
}

func (r *Reconciler) newSlot(pool *v1.BotPool, name, server string) *v1.BotPoolSlot {
	slot := &v1.BotPoolSlot{}
	slot.Namespace, slot.Name = pool.Namespace, name
	slot.Labels = map[string]string{v1.LabelPool: pool.Name}
	slot.Spec.Pool = pool.Name
	slot.Spec.Server = server
	// The pool owns its slots: garbage collection removes them should the pool vanish
	// without its finalizer (which deletes them first, so their applications are cleaned).
	_ = controllerutil.SetControllerReference(pool, slot, r.Client.Scheme())
	return slot
}
