package policy

import (
	v1 "botpool.dev/botpool/api/v1alpha1"
)

// Available reports whether a slot can take a bot now or soon without new capacity: it is
// unbound and not failing (Creating and Releasing slots turn Idle by themselves).
//
// Unlike IsFree and removable it counts slots that are not Idle yet and ignores a pending
// deploy request: the question is how many slots to create, and a slot that will be free in a
// moment must not make the pool create another one the queue and minIdle do not need.
//
// A free standby slot deploying its fresh container (Deploying, unbound, status.standby set)
// is available too: it is Ready in seconds. Counting it out made a standby pool create a slot
// beside each one deploying, up to maxSlots, while it warmed up and after every bot.
func Available(s *v1.BotPoolSlot) bool {
	if s.Spec.BotRef != nil || s.DeletionTimestamp != nil {
		return false
	}
	switch s.Status.Phase {
	case "", v1.SlotCreating, v1.SlotIdle, v1.SlotReleasing:
		return true
	case v1.SlotDeploying:
		return s.Status.Standby != ""
	}
	return false
}

// IsFree reports whether a slot can take a bot: Idle, unbound, not going away, and without a
// deploy request of an earlier binding that may have reached Coolify unanswered
// (status.deployingSince on an Idle slot). The slot cancels that and stops its container
// first; a bot bound before would take that deployment for its own, and turn Busy on a
// container that was never started for it.
//
// A standby slot (status.standby set) is free only while Ready: its current container asks for
// work, so the bot starts on it without a deployment. One Starting or Lost would leave the bot
// waiting for a container that may never ask; a slot of a Stopped pool has no standby state
// and deploys for its bot as always.
//
// It is the strictest of the three because a wrong "yes" hands a bot a slot that cannot run
// it yet; a wrong "no" only waits for the slot's next update (slotFreed wakes the dispatcher
// when IsFree turns true).
func IsFree(s *v1.BotPoolSlot) bool {
	return s.Status.Phase == v1.SlotIdle && s.Spec.BotRef == nil && s.DeletionTimestamp.IsZero() && s.Status.DeployingSince == nil &&
		(s.Status.Standby == "" || s.Status.Standby == v1.StandbyReady)
}

// Offered reports whether the dispatcher offers the slot to a bot now: free, on a server of
// the pool that takes bots (a cordoned server's slots drain, an out one's wait). The rollout
// counts its ready free slots by it, and so do the tests and benchmarks that hold it to its
// floor.
func Offered(s *v1.BotPoolSlot, pool *v1.BotPool) bool { return IsFree(s) && TakesBots(s, pool) }

// Removable reports whether shrink may delete a slot to bring the pool back under maxSlots:
// Idle, unbound and not already going away. Unlike IsFree it does not mind a pending deploy
// request (status.deployingSince): the slot is deleted, not bound, and its finalizer stops
// its application either way. Unlike available it leaves Creating and Releasing slots alone:
// shrink takes only slots at rest, and the pool shrinks further as those turn Idle.
func Removable(s *v1.BotPoolSlot) bool {
	return s.Status.Phase == v1.SlotIdle && s.Spec.BotRef == nil && s.DeletionTimestamp.IsZero()
}
