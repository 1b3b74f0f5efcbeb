package policy

import (
	"fmt"
)

// Abbreviate names at most five slots for an Event, and counts the others.
func Abbreviate(names []string) string {
	const limit = 5
	if len(names) <= limit {
		return fmt.Sprint(names)
	}
	return fmt.Sprintf("%v and %d more", names[:limit], len(names)-limit)
}
