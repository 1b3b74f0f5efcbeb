package slot

import (
	"fmt"
	"testing"
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"

	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/internal/egress"
)

// TestThrottledIsAWait: a *WaitError is a wait (capped), not a failure a person must fix.
func TestThrottledIsAWait(t *testing.T) {
	err := fmt.Errorf("deploying: %w", &coolify.WaitError{Op: "deploy", Reason: coolify.WaitRateLimited, Wait: time.Hour})
	if wait, ok := pass.CoolifyWait(err); !ok || wait != coolify.MaxPause {
		t.Fatalf("coolifyWait = %s, %v; want MaxPause, true", wait, ok)
	}
	if _, ok := pass.NeedsPerson(err); ok {
		t.Fatal("a throttled call counted as needing a person")
	}
	if !transient(err) {
		t.Fatal("a throttled call is not transient")
	}
	if _, ok := pass.CoolifyWait(coolify.ErrServer); ok {
		t.Fatal("a server error counted as a wait")
	}
	// A Coolify URL the egress policy refuses is for a person to fix, not a wait.
	refused := fmt.Errorf("coolify list-servers: %w", fmt.Errorf("dial: %w", egress.ErrRefused))
	if reason, ok := pass.NeedsPerson(refused); !ok || reason != v1.ReasonDestinationRefused {
		t.Fatalf("needsPerson(refused) = %q, %v; want %s", reason, ok, v1.ReasonDestinationRefused)
	}
}
