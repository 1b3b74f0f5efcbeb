package controllers

import (
	"context"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "botpool.dev/botpool/api/v1alpha1"
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
func (r *BotPoolReconciler) supply(ctx context.Context, s *poolScope) error {
	spec := s.pool.Spec
	if excess := len(s.slots) - int(spec.MaxSlots); excess > 0 {
		return r.shrink(ctx, s, excess)
	}
	free := 0
	for i := range s.slots {
		if sl := &s.slots[i]; available(sl) && takesBots(sl, s.pool) {
			free++
		}
	}
	if slotsToCreate(int(spec.MaxSlots), s.warm.minIdle, len(s.slots), free, s.waiting) == 0 && s.surge == 0 {
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
			if available(sl) && takesBots(sl, s.pool) {
				free++
			}
		}
	}
	want := slotsToCreate(int(spec.MaxSlots), s.warm.minIdle, total, free, s.waiting)
	if s.surge > 0 { // a rollout's surge (rolloutBudget keeps it within maxSlots)
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
		slot := r.newSlot(s.pool, slotName(spec.Platform, n), server)
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
		r.Recorder.Eventf(s.pool, nil, "Normal", v1.ReasonSlotsCreated, "ScaleUp", "Created %d slot(s): %s", len(s.created), abbreviate(s.created))
		ctrl.LoggerFrom(ctx).Info("Created slots", "count", len(s.created), "waiting", s.waiting, "slots", s.created)
	}
	return nil
}

// scaleDown removes the free slots above what the pool needs (the minIdle in force and its
// waiting bots) once each has been free for scaleDownDelay: what a burst or a closed warm
// window left behind goes, a slot between two bots of a steady stream stays. A rollout's
// surge is its end's to remove, so nothing goes while one runs. removeIdle takes the highest
// numbers first and never a slot bound meanwhile.
func (r *BotPoolReconciler) scaleDown(ctx context.Context, s *poolScope) error {
	if s.pool.Status.Rollout != nil || s.surge > 0 || len(s.created) > 0 {
		return nil
	}
	free := 0
	for i := range s.slots {
		if sl := &s.slots[i]; available(sl) && takesBots(sl, s.pool) {
			free++
		}
	}
	excess := free - max(s.waiting, s.warm.minIdle)
	if excess <= 0 {
		return nil
	}
	delay := s.pool.Spec.ScaleDownDelay.OrDefault(v1.DefaultScaleDownDelay)
	now := r.Clock.Now()
	var long []*v1.BotPoolSlot
	for i := range s.slots {
		sl := &s.slots[i]
		if !removable(sl) || !takesBots(sl, s.pool) || sl.Status.PhaseSince == nil {
			continue
		}
		if left := delay - now.Sub(sl.Status.PhaseSince.Time); left > 0 {
			s.after(left) // it may go then
			continue
		}
		long = append(long, sl)
	}
	removed, err := r.removeIdle(ctx, s.pool, long, excess)
	if len(removed) > 0 {
		r.Recorder.Eventf(s.pool, nil, "Normal", v1.ReasonSlotsRemoved, "ScaleDown",
			"Removed %d slot(s) free for %s above minIdle %d and %d waiting bot(s): %s", len(removed), delay, s.warm.minIdle, s.waiting, abbreviate(removed))
		ctrl.LoggerFrom(ctx).Info("Removed free slots", "count", len(removed), "minIdle", s.warm.minIdle, "waiting", s.waiting, "slots", removed)
	}
	return err
}

// shrink brings a pool whose maxSlots was lowered back under it (invariant 2): free Idle
// slots go first (removeIdle). Busy slots are never taken from their bots; the pool shrinks
// further as they come back.
func (r *BotPoolReconciler) shrink(ctx context.Context, s *poolScope, excess int) error {
	slots := make([]*v1.BotPoolSlot, len(s.slots))
	for i := range s.slots {
		slots[i] = &s.slots[i]
	}
	removed, err := r.removeIdle(ctx, s.pool, slots, excess)
	if len(removed) > 0 {
		r.Recorder.Eventf(s.pool, nil, "Normal", v1.ReasonSlotsRemoved, "ScaleDown", "Removed %d slot(s) above maxSlots: %s", len(removed), abbreviate(removed))
	}
	return err
}

// removeIdle deletes up to n of slots that are removable, highest numbers first, each only if
// it is still the version seen (a slot bound meanwhile stays). It returns the names deleted.
func (r *BotPoolReconciler) removeIdle(ctx context.Context, pool *v1.BotPool, slots []*v1.BotPoolSlot, n int) ([]string, error) {
	prefix := slotPrefix(pool.Spec.Platform)
	var idle []*v1.BotPoolSlot
	for _, sl := range slots {
		if removable(sl) {
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
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		default:
			return removed, fmt.Errorf("deleting slot %s: %w", sl.Name, err)
		}
	}
	return removed, nil
}

func (r *BotPoolReconciler) newSlot(pool *v1.BotPool, name, server string) *v1.BotPoolSlot {
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

// abbreviate names at most five slots for an Event, and counts the others.
func abbreviate(names []string) string {
	const limit = 5
	if len(names) <= limit {
		return fmt.Sprint(names)
	}
	return fmt.Sprintf("%v and %d more", names[:limit], len(names)-limit)
}
