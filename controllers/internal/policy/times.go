package policy

import "time"

// Small helpers on times and durations that several controllers use.

// OrDefault is d, or def when d is unset (zero or negative): the reconcilers' interval fields
// are optional, zero meaning the default.
func OrDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// SameTime reports whether two optional times are both unset or the same instant (Equal, not
// ==: one instant may carry another location or monotonic reading).
func SameTime(a, b *time.Time) bool {
	return a == nil && b == nil || a != nil && b != nil && a.Equal(*b)
}
