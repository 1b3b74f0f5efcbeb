package policy

import (
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// LeaveDeadline is when the slot of a deleted bot is released. A bot whose container does not
// run in the slot (not Busy yet, or the bot already ended) has nothing to leave: at once. A
// running bot is released leaveGracePeriod after the Bot controller recorded its leave request
// (status.leaveRequestedAt), from which its heartbeats are answered "leave"; known is false
// until that is recorded. pool may be nil (gone): the default grace applies.
func LeaveDeadline(bot *v1.Bot, slot *v1.BotPoolSlot, pool *v1.BotPool) (at time.Time, known bool) {
	if !BotRunsIn(bot, slot) {
		return time.Time{}, true
	}
	if bot.Status.LeaveRequestedAt == nil {
		return time.Time{}, false
	}
	grace := v1.DefaultLeaveGracePeriod
	if pool != nil {
		grace = pool.Spec.Timing.LeaveGracePeriod.OrDefault(grace)
	}
	return bot.Status.LeaveRequestedAt.Add(grace), true
}

// BotRunsIn reports whether the bot's container runs in the slot it is bound to.
func BotRunsIn(bot *v1.Bot, slot *v1.BotPoolSlot) bool {
	return slot.Status.Phase == v1.SlotBusy && !bot.Status.Phase.Terminal()
}

// DrainDeadline is when a deleted slot stops waiting for its bot to leave the meeting, and the
// Bot controller ends the bot (SlotLost). A bot whose container does not run in the slot has
// nothing to leave: at once. A running bot gets leaveGracePeriod from the start of the drain
// (status.drainingSince, when its heartbeats began to answer "leave"), twice that once it
// reports Leaving or CallEnded, being on its way out; known is false until the slot recorded
// the start. pool may be nil (gone): the default grace applies.
func DrainDeadline(slot *v1.BotPoolSlot, bot *v1.Bot, pool *v1.BotPool) (at time.Time, known bool) {
	if !BotRunsIn(bot, slot) {
		return time.Time{}, true
	}
	if slot.Status.DrainingSince == nil {
		return time.Time{}, false
	}
	grace := v1.DefaultLeaveGracePeriod
	if pool != nil {
		grace = pool.Spec.Timing.LeaveGracePeriod.OrDefault(grace)
	}
	if bot.Status.Phase == v1.BotLeaving || bot.Status.Phase == v1.BotCallEnded {
		grace *= 2
	}
	return slot.Status.DrainingSince.Add(grace), true
}

// DrainedMessage says why a bot of a deleted slot ended.
func DrainedMessage(slot *v1.BotPoolSlot, bot *v1.Bot) string {
	if BotRunsIn(bot, slot) {
		return "Slot " + slot.Name + " was deleted; the bot did not leave within leaveGracePeriod"
	}
	return "Slot " + slot.Name + " was deleted"
}
