package coolify

import (
	"errors"
	"fmt"
	"time"
)

// MaxPause caps every wait a Coolify answer can impose: a Retry-After of a year (or an HTTP
// date far ahead) pauses a shared limiter, a deployment gate or a requeue for at most this
// long. Anything the server says beyond it is a server we ask again after MaxPause.
const MaxPause = 5 * time.Minute

// ErrThrottled is matched (errors.Is) by every *WaitError: the call was not made, or was
// refused before it took effect, and may be made again after the error's Wait.
var ErrThrottled = errors.New("coolify: throttled")

// Why a call was not made: WaitError.Reason.
const (
	// WaitRateLimited: the server answered 429 (too many attempts) for longer than the
	// client waits inside a call.
	WaitRateLimited = "rate_limited"
	// WaitLimiter: the client's own rate limiter (or a server-requested pause of it) would
	// hold the request longer than the client waits inside a call.
	WaitLimiter = "limiter"
	// WaitBulkhead: the instance already has its maximum of requests in flight.
	WaitBulkhead = "bulkhead"
	// WaitBreaker: the instance failed (timed out) repeatedly; calls fail fast for a while.
	WaitBreaker = "breaker"
)

// WaitError is returned instead of sleeping: the client never waits inside a call for longer
// than its bound (WithMaxWait), so a caller (a reconcile) is not held by one Coolify
// instance's throttling or trouble. The request did not take effect: Coolify's throttle
// refuses before the controller runs, and the other reasons never sent it. Callers requeue
// after Wait, which is never more than MaxPause.
type WaitError struct {
	Op     string
	Reason string
	Wait   time.Duration
	// Err is the answer that caused the wait (a 429 *APIError), or nil when nothing was sent.
	Err error
}

func (e *WaitError) Error() string {
	s := fmt.Sprintf("coolify %s: not sent (%s); try again in %s", e.Op, e.Reason, e.Wait)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is makes errors.Is(err, ErrThrottled) true.
func (e *WaitError) Is(target error) bool { return target == ErrThrottled }

// Unwrap gives the answer behind the wait, so errors.Is(err, ErrRateLimited) still holds.
func (e *WaitError) Unwrap() error { return e.Err }

// RetryAfter reports how long to wait before calling again when err is (or wraps) a
// *WaitError.
func RetryAfter(err error) (time.Duration, bool) {
	var we *WaitError
	if errors.As(err, &we) {
		return we.Wait, true
	}
	return 0, false
}

// capPause bounds a server-requested or computed wait to [0, MaxPause].
func capPause(d time.Duration) time.Duration {
	return min(max(d, 0), MaxPause)
}
