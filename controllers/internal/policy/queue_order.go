package policy

import (
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// QueueLess orders a pool's queue: bots with a reservation first (they are served from the
// slot held for them, not from the queue's turn), then higher priority, then first come first
// served (the time the bot entered the queue), then creation and name so the order is total
// and stable.
func QueueLess(a, b *v1.Bot) bool {
	if ra, rb := Reserved(a), Reserved(b); ra != rb {
		return ra
	}
	if a.Spec.Priority != b.Spec.Priority {
		return a.Spec.Priority > b.Spec.Priority
	}
	return arrivedBefore(a, b)
}

// arrivedBefore orders two bots by arrival alone: queue time, then creation and name.
func arrivedBefore(a, b *v1.Bot) bool {
	ta, tb := QueuedAt(a), QueuedAt(b)
	if !ta.Equal(tb) {
		return ta.Before(tb)
	}
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// Reserved reports whether the bot holds a reservation (Reserved True, its window recorded).
func Reserved(b *v1.Bot) bool {
	return b.Spec.StartTime != nil && b.Status.Reservation != nil && meta.IsStatusConditionTrue(b.Status.Conditions, v1.ConditionReserved)
}

func QueuedAt(b *v1.Bot) time.Time {
	if b.Status.QueuedAt != nil {
		return b.Status.QueuedAt.Time
	}
	return b.CreationTimestamp.Time
}

// slotLess orders free slots: least recently used first, never-used before all.
func slotLess(a, b *v1.BotPoolSlot) bool {
	ua, ub := a.Status.LastUsedAt, b.Status.LastUsedAt
	switch {
	case ua == nil && ub != nil:
		return true
	case ua != nil && ub == nil:
		return false
	case ua != nil && !ua.Equal(ub):
		return ua.Before(ub)
	}
	return a.Name < b.Name
}

func SortQueue(bots []*v1.Bot) {
	sort.SliceStable(bots, func(i, j int) bool { return QueueLess(bots[i], bots[j]) })
}

func SortSlots(slots []*v1.BotPoolSlot) {
	sort.SliceStable(slots, func(i, j int) bool { return slotLess(slots[i], slots[j]) })
}

// PositionChanged reports whether a queue position moved enough to be worth a status write:
// always on entry and for the first ten places, else by a tenth. A queue of a thousand bots
// draining one by one thus costs tens of writes per waiter over its whole wait, not a thousand.
func PositionChanged(old, updated int32) bool {
	if old == updated {
		return false
	}
	if old == 0 || updated <= 10 {
		return true
	}
	diff := old - updated
	if diff < 0 {
		diff = -diff
	}
	return diff*10 >= old
}
