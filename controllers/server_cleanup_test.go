package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"

	"botpool.dev/botpool/controllers/internal/coolifyview"
	poolctrl "botpool.dev/botpool/controllers/pool"
	"botpool.dev/botpool/coolify"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// TestCleanedSince: a pull is repeated once a scheduled run of the server's Docker cleanup was
// due after it (or shortly before it, still running as it ended) and had CleanupSettle to end;
// never within minRePull of the pull, and never for an unknown schedule.
func TestCleanedSince(t *testing.T) {
	day := func(h, m int) time.Time { return time.Date(2026, 1, 15, h, m, 0, 0, time.UTC) }
	daily, err := coolify.ParseCleanupFrequency("0 0 * * *")
	if err != nil {
		t.Fatal(err)
	}
	tenMinutes, err := coolify.ParseCleanupFrequency("*/10 * * * *")
	if err != nil {
		t.Fatal(err)
	}
	everyMinute, err := coolify.ParseCleanupFrequency("every_minute")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		schedule    coolify.CleanupSchedule
		pulled, now time.Time
		want        bool
	}{
		{"pulled after the day's run", daily, day(8, 0), day(20, 0), false},
		{"a run since the pull, settled", daily, day(8, 0).Add(-10 * time.Hour), day(0, 5), true},
		{"a run since the pull, still settling", daily, day(8, 0).Add(-10 * time.Hour), day(0, 4), false},
		{"pulled while the run was due", daily, day(0, 2), day(0, 12), true},
		{"pulled just before the run", daily, day(0, 0).Add(-3 * time.Minute), day(0, 10), true},
		{"pulled once the run settled", daily, day(0, 6), day(23, 59), false},
		{"every ten minutes: the run before the pull, still settling as it ended", tenMinutes, day(8, 1), day(8, 11), true},
		{"every ten minutes: the next run", tenMinutes, day(8, 6), day(8, 16), true},
		{"every ten minutes: before it settled", tenMinutes, day(8, 6), day(8, 14), false},
		{"every minute: not within minRePull", everyMinute, day(8, 0), day(8, 9), false},
		{"every minute: after minRePull", everyMinute, day(8, 0), day(8, 10), true},
		{"unknown schedule", coolify.CleanupSchedule{}, day(8, 0).Add(-23 * time.Hour), day(8, 0), false},
	} {
		if got := poolctrl.CleanedSince(tc.schedule, tc.pulled, tc.now); got != tc.want {
			t.Errorf("%s: pulled %s, now %s: cleaned %v, want %v", tc.name, tc.pulled, tc.now, got, tc.want)
		}
	}
}

// TestCleanupScheduleReads: a server's schedule is read at most every CleanupRefresh; a
// failing read keeps what the last one said, one that says the schedule is unknown (404, a
// frequency the operator cannot read) forgets it, and a run of failures is logged once.
func TestCleanupScheduleReads(t *testing.T) {
	now := time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(now)
	b := &coolifyview.BulkReader{Clock: clk}
	var answer func() (*coolify.DockerCleanup, error)
	api := &bt.Coolify{GetServerDockerCleanupFn: func(context.Context, string) (*coolify.DockerCleanup, error) { return answer() }}
	var logs []string
	ctx := ctrl.LoggerInto(context.Background(), funcr.New(func(_, args string) { logs = append(logs, args) }, funcr.Options{Verbosity: 1}))
	frequency := func(f string) func() (*coolify.DockerCleanup, error) {
		return func() (*coolify.DockerCleanup, error) { return &coolify.DockerCleanup{Frequency: f}, nil }
	}
	fails := func(err error) func() (*coolify.DockerCleanup, error) {
		return func() (*coolify.DockerCleanup, error) { return nil, err }
	}
	midnight := time.Date(2026, 1, 16, 0, 0, 0, 0, time.UTC)
	hour := time.Date(2026, 1, 15, 10, 0, 0, 0, time.UTC)

	for i, step := range []struct {
		name   string
		after  time.Duration // the clock steps this first
		answer func() (*coolify.DockerCleanup, error)
		reads  int // GetServerDockerCleanup calls so far
		next   time.Time
		logs   int
	}{
		{"first read", 0, frequency("0 0 * * *"), 1, midnight, 0},
		{"within cleanupRefresh: not read again", coolifyview.CleanupRefresh - time.Second, frequency("hourly"), 1, midnight, 0},
		{"after cleanupRefresh: read again", time.Second, frequency("hourly"), 2, hour, 0},
		{"a failure keeps the last schedule, logged", coolifyview.CleanupRefresh, fails(coolify.ErrServer), 3, hour, 1},
		{"a second failure is not logged again", coolifyview.CleanupRefresh, fails(fmt.Errorf("%w: timeout", coolify.ErrTransport)), 4, hour, 1},
		{"a 404 forgets it", coolifyview.CleanupRefresh, fails(coolify.ErrNotFound), 5, time.Time{}, 1},
		{"read again", coolifyview.CleanupRefresh, frequency("0 0 * * *"), 6, midnight, 1},
		{"an unreadable frequency forgets it, logged", coolifyview.CleanupRefresh, frequency("0 0 L * *"), 7, time.Time{}, 2},
	} {
		clk.Step(step.after)
		answer = step.answer
		got := b.CleanupSchedule(ctx, api, "srv-1")
		if reads := len(api.Calls()); reads != step.reads || !got.Next(clk.Now()).Equal(step.next) || len(logs) != step.logs {
			t.Fatalf("step %d (%s): %d reads, next run %s, %d log lines %q; want %d, %s, %d",
				i, step.name, reads, got.Next(clk.Now()), len(logs), logs, step.reads, step.next, step.logs)
		}
	}
	if !strings.Contains(logs[0], "srv-1") {
		t.Errorf("the log does not name the server: %s", logs[0])
	}
	if other := b.CleanupSchedule(ctx, api, "srv-2"); len(api.Calls()) != 8 || !other.Next(clk.Now()).IsZero() {
		t.Errorf("another server shares the read: %v", api.Calls())
	}
}
