package pool

import (
	"fmt"
	"strconv"
	"strings"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// slotPrefix is the name prefix of a platform's slots: slots are named pool-<platform>-NNN.
func slotPrefix(p v1.Platform) string { return "pool-" + string(p) + "-" }

func SlotName(p v1.Platform, n int) string { return fmt.Sprintf("%s%03d", slotPrefix(p), n) }

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
