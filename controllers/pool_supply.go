package controllers

import (
	"fmt"
	"strconv"
	"strings"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// slotPrefix is the name prefix of a platform's slots: slots are named pool-<platform>-NNN.
func slotPrefix(p v1.Platform) string { return "pool-" + string(p) + "-" }

func slotName(p v1.Platform, n int) string { return fmt.Sprintf("%s%03d", slotPrefix(p), n) }

// slotNumber parses NNN out of a slot name with the given prefix.
func slotNumber(prefix, name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n > 0
}

// lowestFree returns the count lowest positive numbers not in used.
func lowestFree(used map[int]bool, count int) []int {
	free := make([]int, 0, count)
	for n := 1; len(free) < count; n++ {
		if !used[n] {
			free = append(free, n)
		}
	}
	return free
}

// available reports whether a slot can take a bot now or soon without new capacity: it is
// unbound and not failing (Creating and Releasing slots turn Idle by themselves).
func available(s *v1.BotPoolSlot) bool {
	if s.Spec.BotRef != nil || s.DeletionTimestamp != nil {
		return false
	}
	switch s.Status.Phase {
	case "", v1.SlotCreating, v1.SlotIdle, v1.SlotReleasing:
		return true
	}
	return false
}

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
