package coolify

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/utils/clock"
)

// DefaultRateLimit is Coolify's default API limit: 200 requests per minute per user.
const DefaultRateLimit = 200

const limiterBurst = 5

// Limiter paces requests to one Coolify user. Share one between every client that uses the
// same instance and token (see Registry): the server counts per user, not per client.
type Limiter struct {
	lim *rate.Limiter

	mu sync.Mutex
	// until is when the server said (429 Retry-After) the user's budget comes back: every
	// client sharing the limiter holds off until then, not only the one that was refused.
	until time.Time
	// lastUsed lets a Registry forget a limiter nobody uses any more.
	lastUsed time.Time
}

// NewLimiter allows perMinute requests in any 60-second window. The refill rate leaves room
// for the burst so that even a burst at a window's edge stays within the server's count.
func NewLimiter(perMinute int) *Limiter {
	if perMinute <= 0 {
		return &Limiter{lim: rate.NewLimiter(rate.Inf, 1)}
	}
	burst := min(limiterBurst, perMinute)
	refill := max(perMinute-burst, 1)
	return &Limiter{lim: rate.NewLimiter(rate.Limit(float64(refill)/60), burst)}
}

// wait blocks until a request may go, timing by clk so tests can use a fake clock, and
// returns how long it waited. It never waits longer than maxWait: when the server's pause or
// the pacing would hold the request longer, it returns a *WaitError at once (and gives the
// reservation back), so a caller is never held for a pause someone else's 429 caused.
func (l *Limiter) wait(ctx context.Context, clk clock.Clock, op string, maxWait time.Duration) (time.Duration, error) {
	var paused time.Duration
	l.mu.Lock()
	until := l.until
	l.lastUsed = clk.Now()
	l.mu.Unlock()
	if d := until.Sub(clk.Now()); d > 0 {
		if d > maxWait {
			return 0, &WaitError{Op: op, Reason: WaitLimiter, Wait: capPause(d)}
		}
		if err := sleepCtx(ctx, clk, d); err != nil {
			return 0, err
		}
		paused = d
	}
	d, err := l.reserve(ctx, clk, op, maxWait)
	return paused + d, err
}

// pause holds every request back until at, but never beyond MaxPause from now: a Retry-After
// of a year must not switch a user off for a year.
func (l *Limiter) pause(now, at time.Time) {
	if limit := now.Add(MaxPause); at.After(limit) {
		at = limit
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if at.After(l.until) {
		l.until = at
	}
}

// idleSince reports whether nobody waited on the limiter since t and no pause is pending.
func (l *Limiter) idleSince(t, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastUsed.Before(t) && !l.until.After(now)
}

func (l *Limiter) reserve(ctx context.Context, clk clock.Clock, op string, maxWait time.Duration) (time.Duration, error) {
	now := clk.Now()
	r := l.lim.ReserveN(now, 1)
	if !r.OK() {
		return 0, errors.New("coolify: rate limiter cannot grant a request")
	}
	d := r.DelayFrom(now)
	if d <= 0 {
		return 0, nil
	}
	if d > maxWait {
		r.CancelAt(now)
		return 0, &WaitError{Op: op, Reason: WaitLimiter, Wait: capPause(d)}
	}
	if err := sleepCtx(ctx, clk, d); err != nil {
		r.CancelAt(clk.Now())
		return 0, err
	}
	return d, nil
}

// sleepCtx waits d on clk, or until ctx ends.
func sleepCtx(ctx context.Context, clk clock.Clock, d time.Duration) error {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
