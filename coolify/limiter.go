package coolify

import (
	"context"
	"errors"
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

// wait blocks until a request may go, timing by clk so tests can use a fake clock. It returns
// how long it waited.
func (l *Limiter) wait(ctx context.Context, clk clock.Clock) (time.Duration, error) {
	now := clk.Now()
	r := l.lim.ReserveN(now, 1)
	if !r.OK() {
		return 0, errors.New("coolify: rate limiter cannot grant a request")
	}
	d := r.DelayFrom(now)
	if d <= 0 {
		return 0, nil
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return d, nil
	case <-ctx.Done():
		r.CancelAt(clk.Now())
		return 0, ctx.Err()
	}
}
