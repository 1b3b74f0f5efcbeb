package v1alpha1

// LeftSlot reports whether the bot went back to the queue from the failed binding that slot
// still holds: the bot is Queued again, its binding was never handed out, and its last failed
// start names the slot, which is still in Error. Such a bot is no longer the slot's: the slot
// lets it go (as it lets a finished bot go), the bot controller does not count the failure a
// second time, and the bot API hands the binding to no container of that slot.
//
// A bot bound again to the same slot (or to a later slot of its name) and failing there before
// the bot controller recorded the new binding reads as the old failure: that start goes
// uncounted, and is harmless (its binding was never handed out either, or the bot would not be
// Queued with none). The dispatcher, which holds a bot it bound until the cache shows the
// binding, sees the slot let it go and serves it again (waveBinding.ended in controllers).
func (b *Bot) LeftSlot(slot *BotPoolSlot) bool {
	st := &b.Status
	if st.Phase != BotQueued || st.Binding != nil || len(st.StartAttempts) == 0 || slot.Status.Phase != SlotError {
		return false
	}
	ref := slot.Spec.BotRef
	return ref != nil && ref.UID == b.UID && st.StartAttempts[len(st.StartAttempts)-1].SlotName == slot.Name
}
