package coolify

import (
	"context"
	"fmt"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"botpool.dev/botpool/internal/kubetest"
)

// saturated is a limiter of 65 a minute (a burst of 5, then one token a second) whose bucket
// is empty, on a fake clock.
func saturated(t *testing.T) (*Limiter, *clocktesting.FakeClock) {
	t.Helper()
	fc := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	l := NewLimiter(65)
	for range limiterBurst {
		if d, err := l.wait(context.Background(), fc, "drain", 0, false); err != nil || d != 0 {
			t.Fatalf("draining the burst: %s, %v", d, err)
		}
	}
	return l, fc
}

// queue starts a request of class p that waits (up to an hour) for the limiter; its name
// arrives on done when it got its token. It returns once the request is queued.
func queue(t *testing.T, l *Limiter, fc *clocktesting.FakeClock, name string, p Priority, done chan<- string) {
	t.Helper()
	s0, h0 := l.Waiting()
	go func() {
		if _, err := l.wait(WithPriority(context.Background(), p), fc, name, time.Hour, false); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		done <- name
	}()
	kubetest.Eventually(t, 10*time.Second, func() error {
		if s, h := l.Waiting(); s+h != s0+h0+1 {
			return fmt.Errorf("%s not queued yet", name)
		}
		return nil
	})
}

// granted steps the fake clock by d and returns who got a token then (exactly one).
func granted(t *testing.T, fc *clocktesting.FakeClock, done <-chan string, d time.Duration) string {
	t.Helper()
	fc.Step(d)
	select {
	case name := <-done:
		return name
	case <-time.After(10 * time.Second): // a liveness bound, not a timing assumption
		t.Fatalf("nobody got a token %s later", d)
		return ""
	}
}

// TestLimiterServesTheStartPathFirst: on a saturated limiter, a start-path request queued after
// a housekeeping one gets the next token; housekeeping then also leaves a token in reserve.
func TestLimiterServesTheStartPathFirst(t *testing.T) {
	l, fc := saturated(t)
	done := make(chan string, 2)
	queue(t, l, fc, "housekeeping", Housekeeping, done)
	queue(t, l, fc, "start", StartPath, done)
	if got := granted(t, fc, done, time.Second); got != "start" {
		t.Fatalf("first token went to %s, want the start path", got)
	}
	// One more token: housekeeping leaves it for a start-path request that may come.
	fc.Step(time.Second)
	l.mu.Lock()
	l.grant(fc.Now())
	s, h := len(l.queues[StartPath]), len(l.queues[Housekeeping])
	l.mu.Unlock()
	if s != 0 || h != 1 {
		t.Fatalf("waiting = %d start, %d housekeeping; want housekeeping still waiting for a reserve", s, h)
	}
	if got := granted(t, fc, done, time.Second); got != "housekeeping" {
		t.Fatalf("got %s", got)
	}
}

// TestLimiterDoesNotStarveHousekeeping: however many start-path requests wait, a waiting
// housekeeping request gets at least one token in housekeepingShare.
func TestLimiterDoesNotStarveHousekeeping(t *testing.T) {
	l, fc := saturated(t)
	done := make(chan string, 8)
	queue(t, l, fc, "h", Housekeeping, done)
	for i := range 6 {
		queue(t, l, fc, fmt.Sprintf("s%d", i+1), StartPath, done)
	}
	var order []string
	for range 7 {
		order = append(order, granted(t, fc, done, time.Second))
	}
	if got, want := fmt.Sprint(order), "[s1 s2 s3 h s4 s5 s6]"; got != want {
		t.Fatalf("grant order %s, want %s", got, want)
	}
}

// TestLimiterBudgetHoldsWithPriorities plays the grant rule over five simulated minutes with
// both classes always waiting: no 60-second window gets more than the budget, the start path
// gets three tokens in four, and housekeeping the rest.
func TestLimiterBudgetHoldsWithPriorities(t *testing.T) {
	const perMinute = 200
	l := NewLimiter(perMinute)
	for i := range 2000 {
		p := StartPath
		if i%2 == 1 {
			p = Housekeeping
		}
		l.queues[p] = append(l.queues[p], &waiter{prio: p, ch: make(chan struct{})})
	}
	t0 := time.Unix(1_800_000_000, 0)
	var at []time.Time
	var prios []Priority
	for step := range 3000 { // 100 ms steps
		now := t0.Add(time.Duration(step) * 100 * time.Millisecond)
		s, h := len(l.queues[StartPath]), len(l.queues[Housekeeping])
		l.grant(now)
		for range s - len(l.queues[StartPath]) {
			at, prios = append(at, now), append(prios, StartPath)
		}
		for range h - len(l.queues[Housekeeping]) {
			at, prios = append(at, now), append(prios, Housekeeping)
		}
	}
	lo, most := 0, 0
	for hi := range at {
		for at[hi].Sub(at[lo]) >= time.Minute {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	if most > perMinute {
		t.Fatalf("%d tokens in one minute, budget %d", most, perMinute)
	}
	if len(at) < 4*perMinute {
		t.Fatalf("only %d tokens in 5 minutes: the limiter wastes budget", len(at))
	}
	house := 0
	for _, p := range prios[:400] {
		if p == Housekeeping {
			house++
		}
	}
	if house < 100-1 || house > 100+1 {
		t.Fatalf("housekeeping got %d of the first 400 tokens, want a quarter", house)
	}
}

// TestLimiterYieldsToTheStartPath: a request that yields (a description update) gives up at
// once while a start-path request waits, and never waits for a pause.
func TestLimiterYieldsToTheStartPath(t *testing.T) {
	l, fc := saturated(t)
	done := make(chan string, 1)
	queue(t, l, fc, "start", StartPath, done)
	ctx := WithPriority(context.Background(), Housekeeping)
	if _, err := l.wait(ctx, fc, "describe", time.Hour, true); err == nil {
		t.Fatal("a yielding request waited behind the start path")
	}
	if got := granted(t, fc, done, time.Second); got != "start" {
		t.Fatal(got)
	}
	l.pause(fc.Now(), fc.Now().Add(time.Minute))
	if _, err := l.wait(ctx, fc, "describe", time.Hour, true); err == nil {
		t.Fatal("a yielding request waited for a pause")
	}
}
