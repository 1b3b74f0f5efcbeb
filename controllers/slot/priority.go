package slot

import (
	"context"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify"
)

// withSlotPriority marks ctx's Coolify requests with the class of the slot's pass.
func withSlotPriority(ctx context.Context, s *slotScope) context.Context {
	return coolify.WithPriority(ctx, slotPriority(s))
}

// slotPriority is the class of a slot pass's Coolify requests: the start path while a bound
// bot that is not being deleted waits for its container (its slot is created, deployed and
// its deployment followed for it), or while a standby pool's bots wait in its queue for a
// free slot's recycle (its stop, its new credential, its deployment: the next Ready slot is
// theirs); housekeeping otherwise: a free slot's existence checks, a running bot's slot's
// checks, the stop of a released slot nobody waits for, a recovery, a deletion.
func slotPriority(s *slotScope) coolify.Priority {
	if !s.slot.DeletionTimestamp.IsZero() {
		return coolify.Housekeeping
	}
	switch s.slot.Status.Phase {
	case "", v1.SlotCreating, v1.SlotIdle, v1.SlotDeploying:
		if s.bot != nil && s.bot.DeletionTimestamp.IsZero() || s.bot == nil && queuedForRecycle(s) {
			return coolify.StartPath
		}
	case v1.SlotReleasing:
		if queuedForRecycle(s) {
			return coolify.StartPath
		}
	}
	return coolify.Housekeeping
}

// queuedForRecycle reports whether bots wait for the slot's recycle: its pool keeps standby
// containers and has bots queued (status.queued, as the pool last counted them), which start
// only on a Ready slot.
func queuedForRecycle(s *slotScope) bool {
	return standbyPool(s) && s.pool.Status.Queued > 0
}
