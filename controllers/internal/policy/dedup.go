package policy

import (
	v1 "botpool.dev/botpool/api/v1alpha1"
)

// DeduplicationKey is the bot's deduplication key in pool: "key:" and its own
// spec.deduplicationKey, else, in a pool whose deduplication is MeetingURL, "meeting:" and the
// key of its meeting URL (v1.MeetingKey); "" for none. IndexedDeduplicationKey is the same key
// without the pool, as the cache indexes it.
func DeduplicationKey(bot *v1.Bot, pool *v1.BotPool) string {
	if bot.Spec.DeduplicationKey == "" && (pool == nil || pool.Spec.Deduplication != v1.DeduplicationMeetingURL) {
		return "" // no URL to parse: a wave asks this of every bot of its pool
	}
	return IndexedDeduplicationKey(bot)
}

// IndexedDeduplicationKey is the key DeduplicationKey gives the bot in a pool that
// deduplicates by meeting URL: its own key, else its meeting's.
func IndexedDeduplicationKey(bot *v1.Bot) string {
	if k := bot.Spec.DeduplicationKey; k != "" {
		return "key:" + k
	}
	if k := v1.MeetingKey(bot.Spec.MeetingURL); k != "" {
		return "meeting:" + k
	}
	return ""
}

// Holder is, of bots that share a deduplication key, the one that holds it and may be
// bound: one bound already (bound says which are: a slot's botRef, or a wave's binding the
// cache may not show yet), else the one created first (then by name) of those in the queue.
// Only a bot in the queue or past it holds a key: one that ended holds nothing, nor does one
// still Pending or Scheduled (tomorrow's bot for a meeting that recurs under one link must not
// end today's), nor one not bound that is deleted or waits for its parameters (a bot that
// cannot start must not keep a corrected one out). Every other bot of the key ends Fatal,
// Duplicate, and is never bound: the dispatcher and the bot controller, deciding from the
// same cache, name the same holder, and while one of them does not see a bot yet the
// dispatcher binds the bot it does see and the other one finds it bound. nil when none holds.
func Holder(bots []*v1.Bot, bound func(*v1.Bot) bool) *v1.Bot {
	var holder *v1.Bot
	holderBound := false
	for _, b := range bots {
		if !HoldsKeys(b) {
			continue
		}
		isBound := bound(b)
		if !isBound && (!b.DeletionTimestamp.IsZero() || b.ParametersHeld()) {
			continue
		}
		switch {
		case holder == nil, isBound && !holderBound:
		case isBound != holderBound:
			continue
		case !createdBefore(b, holder):
			continue
		}
		holder, holderBound = b, isBound
	}
	return holder
}

func createdBefore(a, b *v1.Bot) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// HoldsKeys reports whether the bot's phase lets it hold a deduplication key: it is in the
// queue or past it, and has not ended.
func HoldsKeys(b *v1.Bot) bool {
	switch b.Status.Phase {
	case "", v1.BotPending, v1.BotScheduled:
		return false
	}
	return !b.Status.Phase.Terminal()
}
