package policy

import (
	"testing"
	"time"
)

// TestPullBackoff: a pull that keeps failing is tried again after 2, 4, 8, 16, then 30 minutes.
func TestPullBackoff(t *testing.T) {
	for failures, want := range map[int32]time.Duration{0: 2 * time.Minute, 1: 2 * time.Minute, 2: 4 * time.Minute, 3: 8 * time.Minute,
		4: 16 * time.Minute, 5: 30 * time.Minute, 40: 30 * time.Minute} {
		if got := PullBackoff(failures); got != want {
			t.Errorf("pullBackoff(%d) = %s, want %s", failures, got, want)
		}
	}
}
