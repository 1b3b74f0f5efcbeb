package slot

import (
	"context"
	"sync"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/store"
)

// projection keeps the store's copy of each slot (its row in bot_pool_slots, docs/store.md) in
// step with the slot: a pass writes the record when it
// differs from the one last handed to the store, not only when the pass changed the status,
// so a write lost between the status patch and the store (a crash, a cancelled request) or a
// binding (spec only) is made by the next pass.
type projection struct {
	store Store
	clock clock.PassiveClock
	// last holds, per slot (namespace/name), the record last handed to the store.
	last *sync.Map
}

func (r *Reconciler) projection() projection {
	return projection{store: r.Store, clock: r.Clock, last: &r.projected}
}

// write hands the store the slot's record when it differs from the one last handed; a nil
// slot, or one whose finalizers are gone, is removed.
func (p projection) write(ctx context.Context, namespace, name string, slot *v1.BotPoolSlot) {
	key := namespace + "/" + name
	if slot == nil || !slot.DeletionTimestamp.IsZero() && len(slot.Finalizers) == 0 {
		p.remove(ctx, namespace, name)
		return
	}
	rec := store.SlotRecord{Namespace: namespace, Name: name, Pool: slot.Spec.Pool, Phase: string(slot.Status.Phase),
		ApplicationUUID: slot.Status.ApplicationUUID}
	if ref := slot.Spec.BotRef; ref != nil {
		rec.BotUID, rec.BotName = ref.UID, ref.Name
	}
	if slot.Status.LastUsedAt != nil {
		rec.LastUsedAt = &slot.Status.LastUsedAt.Time
	}
	if last, ok := p.last.Load(key); ok && sameSlotRecord(last.(store.SlotRecord), rec) {
		return
	}
	stamped := rec
	stamped.UpdatedAt = p.clock.Now()
	if err := p.store.UpsertSlot(ctx, stamped); !store.Accepted(err) {
		ctrl.LoggerFrom(ctx).Error(err, "Projecting the slot failed")
		return
	}
	p.last.Store(key, rec)
}

// sameSlotRecord compares two projections of a slot, its write time aside.
func sameSlotRecord(a, b store.SlotRecord) bool {
	return a.Namespace == b.Namespace && a.Name == b.Name && a.Pool == b.Pool && a.Phase == b.Phase &&
		a.ApplicationUUID == b.ApplicationUUID && a.BotUID == b.BotUID && a.BotName == b.BotName && policy.SameTime(a.LastUsedAt, b.LastUsedAt)
}

// remove takes the slot's record out of the store.
func (p projection) remove(ctx context.Context, namespace, name string) {
	if err := p.store.DeleteSlot(ctx, namespace, name); !store.Accepted(err) {
		ctrl.LoggerFrom(ctx).Error(err, "Removing the slot's projection failed")
		return
	}
	p.last.Delete(namespace + "/" + name)
}
