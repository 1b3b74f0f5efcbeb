package slot

import (
	"strings"
	"testing"
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
)

func TestDecideStale(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	timing := v1.Timing{DeployingTimeout: "15m", HeartbeatFreshness: "5m"} // three skips by default
	beat := func(ago time.Duration) policy.Liveness {
		b := t0.Add(16*time.Minute - ago)
		return policy.Liveness{Known: true, LastBeat: &b}
	}
	now := t0.Add(16 * time.Minute)
	tests := []struct {
		name    string
		now     time.Time
		live    policy.Liveness
		skipped int32
		want    staleAction
	}{
		{"not stale yet", t0.Add(14 * time.Minute), policy.Liveness{Known: true}, 0, staleWait},
		{"exactly at the timeout is not stale", t0.Add(15 * time.Minute), policy.Liveness{Known: true}, 0, staleWait},
		{"stale, the bot never beat", now, policy.Liveness{Known: true}, 0, staleRecover},
		{"stale, last beat too old", now, beat(6 * time.Minute), 0, staleRecover},
		{"stale, the bot beats: skip", now, beat(30 * time.Second), 0, staleSkip},
		{"stale, the bot beats, two skips so far", now, beat(30 * time.Second), 2, staleSkip},
		{"stale, the bot beat through every skip: Busy", now, beat(30 * time.Second), 3, staleBusy},
		{"stale, but the store is down: never fail for lack of data", now, policy.Liveness{Known: false}, 0, staleWait},
	}
	for _, tt := range tests {
		if got := decideStale(tt.now, t0, timing, tt.live, tt.skipped); got != tt.want {
			t.Errorf("%s: decideStale = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestJudgeDeployment(t *testing.T) {
	timing := v1.Timing{DeployGracePeriod: "3m", DeploymentTimeout: "25m"}
	dep := func(s coolify.DeploymentStatus) *coolify.Deployment {
		return &coolify.Deployment{DeploymentUUID: "d1", Status: s}
	}
	app := func(status string) *coolify.Application { return &coolify.Application{UUID: "a1", Status: status} }
	tests := []struct {
		name    string
		dep     *coolify.Deployment
		app     *coolify.Application
		inPhase time.Duration
		fresh   bool
		want    v1.SlotPhase
		reason  string
	}{
		{"finished", dep(coolify.DeploymentFinished), nil, time.Minute, false, v1.SlotBusy, ""},
		{"failed", dep(coolify.DeploymentFailed), nil, time.Minute, false, v1.SlotError, string(v1.ReasonDeploymentFailed)},
		{"cancelled", dep(coolify.DeploymentCancelled), nil, time.Minute, false, v1.SlotError, string(v1.ReasonDeploymentFailed)},
		{"in progress", dep(coolify.DeploymentInProgress), nil, 10 * time.Minute, false, "", ""},
		{"queued past the timeout", dep(coolify.DeploymentQueued), nil, 26 * time.Minute, false, v1.SlotError, string(v1.ReasonDeploymentTimeout)},
		{"past the timeout but the bot beats: the stale rules decide", dep(coolify.DeploymentInProgress), nil, 26 * time.Minute, true, "", ""},
		{"no record, container runs", nil, app("running:unknown"), time.Minute, false, v1.SlotBusy, ""},
		{"no record, exited within the grace period", nil, app("exited:unhealthy"), 2 * time.Minute, false, "", ""},
		{"no record, exited after the grace period", nil, app("exited:unhealthy"), 4 * time.Minute, false, v1.SlotError, string(v1.ReasonDeploymentLost)},
		{"no record, exited, but the bot beats", nil, app("exited:unhealthy"), 4 * time.Minute, true, "", ""},
		{"no record, no application seen yet", nil, nil, time.Minute, false, "", ""},
	}
	for _, tt := range tests {
		got := judgeDeployment(tt.dep, tt.app, tt.inPhase, timing, tt.fresh)
		if got.phase != tt.want || got.reason != tt.reason {
			t.Errorf("%s: verdict %+v, want phase %q reason %q", tt.name, got, tt.want, tt.reason)
		}
	}
}

func TestDescription(t *testing.T) {
	at := time.Date(2026, 1, 15, 14, 0, 0, 0, time.UTC)
	tests := map[string]string{
		description(v1.SlotIdle, "", time.Time{}, ""):    "[IDLE] Available - never used",
		description(v1.SlotIdle, "", at, ""):             "[IDLE] Available - Last used: 2026-01-15T14:00:00Z",
		description(v1.SlotDeploying, "standup", at, ""): "[DEPLOYING] Bot standup since 2026-01-15T14:00:00Z",
		description(v1.SlotBusy, "standup", at, ""):      "[BUSY] Bot standup since 2026-01-15T14:00:00Z",
		description(v1.SlotError, "", at, "pull failed"): "[ERROR] pull failed",
	}
	for got, want := range tests {
		if got != want {
			t.Errorf("description = %q, want %q", got, want)
		}
	}
	if long := description(v1.SlotError, "", at, strings.Repeat("x", 400)); len(long) != 255 {
		t.Errorf("a long description has %d characters, want 255", len(long))
	}
}
