package botapi

import (
	"fmt"
	"net/http"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// A container whose bot ended is told to exit, and not to restart (410), whenever it calls,
// until the slot controller has stopped it and replaced the slot's token: its config calls
// (waiting or not) with the slot token, and its bot calls with the binding credential. Asked
// "ask again" instead (404), a container that exits and is restarted by Docker in the
// meantime would wait for a bot it will never get, and one that sends its credential would
// learn no more than that it is invalid (401).

// leavingSlot answers 410 to a config call made with the current token of a slot that holds
// no binding (spec.botRef) and whose container the slot controller is about to stop: the
// container of a bot that let go of the slot, or of a slot that failed or is being deleted.
// nil when the container may wait for a bot: a free Idle slot, or one deploying its standby
// container. It decides by the fields the slot controller decides by (controllers/slot):
//
//   - being deleted: the application is deleted (deletion.go);
//   - Busy, Releasing: the bot let go (releaseOrphan clears a binding only when its bot is
//     Done or Fatal, deleted and past its leave, or back in the queue), and the container is
//     stopped, then the token replaced (busy, releasing, freshCredential);
//   - Deploying the container of a bot (no status.standby): the bot let go during the
//     deployment, which is cancelled and stopped likewise (deploying);
//   - Error: recovery stops the container and replaces the token, or retires the slot
//     (recover).
//
// A fresh standby container never meets these: it is deployed with a token issued after the
// previous container stopped, on a slot that is Idle (Starting, Ready) or Deploying with
// status.standby set, and the token and the phase are written together. Nor does a slot that
// lost its application (Creating keeps the token for the new one): no container is stopped.
func leavingSlot(slot *v1.BotPoolSlot) error {
	if slot.Spec.BotRef != nil {
		return nil // the bound bot decides (handleConfig)
	}
	st := &slot.Status
	switch {
	case !slot.DeletionTimestamp.IsZero():
		return errorf(http.StatusGone, fmt.Sprintf("slot %s is being deleted: its container stops; exit", slot.Name))
	case st.Phase == v1.SlotBusy, st.Phase == v1.SlotReleasing, st.Phase == v1.SlotDeploying && st.Standby == "":
		return errorf(http.StatusGone, fmt.Sprintf("the bot of slot %s ended and let go of it: its container stops; exit", slot.Name))
	case st.Phase == v1.SlotError:
		return errorf(http.StatusGone, fmt.Sprintf("slot %s failed (%s): its container stops; exit", slot.Name, st.Reason))
	}
	return nil
}

// endedBinding answers 410 to a bot call whose credential's binding has ended because its bot
// ended: Done or Fatal, or deleted and released after its leave. slot is the slot of the
// claim, which exists and no longer names the bot. nil when the binding ended otherwise (the
// caller answers 401).
func endedBinding(bot *v1.Bot, slot *v1.BotPoolSlot) error {
	switch {
	case bot.Status.Phase.Terminal():
		return errorf(http.StatusGone, fmt.Sprintf("bot %s is %s and slot %s let go of it: exit", bot.Name, bot.Status.Phase, slot.Name))
	case !bot.DeletionTimestamp.IsZero():
		return errorf(http.StatusGone, fmt.Sprintf("bot %s was deleted and slot %s let go of it: exit", bot.Name, slot.Name))
	}
	return nil
}
