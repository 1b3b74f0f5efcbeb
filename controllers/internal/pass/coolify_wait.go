package pass

import (
	"errors"
	"time"

	"botpool.dev/botpool/coolify"
)

// CoolifyWait reports whether err says Coolify (or the client guarding it) wants the call
// made again later, and after how long: a throttled call did not happen, so the caller
// requeues after the wait instead of failing, backing off or erroring the slot.
func CoolifyWait(err error) (time.Duration, bool) {
	wait, ok := coolify.RetryAfter(err)
	if !ok {
		return 0, false
	}
	return min(max(wait, 100*time.Millisecond), coolify.MaxPause), true
}

// ThrottledMessage says why a slot or pool waits, in words that stay the same from one pass
// to the next (no countdown): a changing message would write the status, and the write
// would bring the object straight back.
func ThrottledMessage(err error) string {
	var we *coolify.WaitError
	reason := "throttled"
	if errors.As(err, &we) {
		reason = we.Reason
	}
	switch reason {
	case coolify.WaitRateLimited, coolify.WaitLimiter:
		return "Coolify's API rate limit is used up; waiting for it before the next request"
	case coolify.WaitBulkhead, coolify.WaitBreaker:
		return "Coolify is not answering in time; the operator holds requests to it back for a while"
	}
	return "Waiting for Coolify"
}
