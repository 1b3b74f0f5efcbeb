package coolify

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Defaults of an Instance's guard.
const (
	// DefaultMaxInFlight bounds the requests in flight to one Coolify instance. The manager
	// runs 8 reconciles per controller: a black-holed instance holds at most this many of
	// them, each for at most one call's budget.
	DefaultMaxInFlight = 4
	// DefaultBreakerThreshold transport failures (timeouts, refused connections) in a row
	// open the breaker.
	DefaultBreakerThreshold = 3
	// DefaultBreakerOpen is how long an open breaker fails calls fast; it doubles while the
	// probes keep failing, up to MaxPause.
	DefaultBreakerOpen = 30 * time.Second
	// bulkheadRetry is the wait a call refused by a full bulkhead suggests.
	bulkheadRetry = time.Second
)

// InstanceLimits configure the guard every client of one Coolify instance shares.
type InstanceLimits struct {
	// MaxInFlight is the most requests in flight to the instance at once (0: default).
	MaxInFlight int
	// BreakerThreshold is how many transport failures in a row open the breaker (0: default).
	BreakerThreshold int
	// BreakerOpen is how long an open breaker first fails calls fast (0: default).
	BreakerOpen time.Duration
}

func (l InstanceLimits) withDefaults() InstanceLimits {
	if l.MaxInFlight <= 0 {
		l.MaxInFlight = DefaultMaxInFlight
	}
	if l.BreakerThreshold <= 0 {
		l.BreakerThreshold = DefaultBreakerThreshold
	}
	if l.BreakerOpen <= 0 {
		l.BreakerOpen = DefaultBreakerOpen
	}
	return l
}

// Instance guards one Coolify instance (one base URL) for every client that calls it, whatever
// their token: a bulkhead (at most MaxInFlight requests in flight; the rest wait briefly, then
// fail fast with a *WaitError) and a breaker (after BreakerThreshold transport failures in a
// row, calls fail fast until a single probe gets through). So an instance that is slow or
// black-holed holds a bounded share of the manager's workers, and the others keep working.
type Instance struct {
	limits InstanceLimits
	slots  chan struct{}

	mu        sync.Mutex
	failures  int           // transport failures in a row
	openUntil time.Time     // calls fail fast before this
	openFor   time.Duration // the current open period (doubles while probes fail)
	probing   bool          // a probe is in flight after the open period
	lastUsed  time.Time
}

// NewInstance builds an instance guard.
func NewInstance(limits InstanceLimits) *Instance {
	limits = limits.withDefaults()
	return &Instance{limits: limits, slots: make(chan struct{}, limits.MaxInFlight)}
}

// acquire takes a bulkhead slot for a call, waiting at most maxWait for one, unless the
// breaker is open. release must be called when the call ends.
func (in *Instance) acquire(ctx context.Context, clk clock.Clock, op string, maxWait time.Duration) (release func(), err error) {
	probe, err := in.admit(clk.Now(), op)
	if err != nil {
		return nil, err
	}
	release = func() {
		<-in.slots
		if probe {
			in.mu.Lock()
			in.probing = false
			in.mu.Unlock()
		}
	}
	select {
	case in.slots <- struct{}{}:
		return release, nil
	default:
	}
	if maxWait > 0 {
		t := clk.NewTimer(maxWait)
		defer t.Stop()
		select {
		case in.slots <- struct{}{}:
			return release, nil
		case <-t.C():
		case <-ctx.Done():
			in.unprobe(probe)
			return nil, ctx.Err()
		}
	}
	in.unprobe(probe)
	return nil, &WaitError{Op: op, Reason: WaitBulkhead, Wait: bulkheadRetry}
}

// admit applies the breaker: closed lets every call through; open refuses; after the open
// period one call (the probe) goes through while the others still fail fast.
func (in *Instance) admit(now time.Time, op string) (probe bool, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.lastUsed = now
	if in.failures < in.limits.BreakerThreshold {
		return false, nil
	}
	if now.Before(in.openUntil) {
		return false, &WaitError{Op: op, Reason: WaitBreaker, Wait: in.openUntil.Sub(now)}
	}
	if in.probing {
		return false, &WaitError{Op: op, Reason: WaitBreaker, Wait: bulkheadRetry}
	}
	in.probing = true
	return true, nil
}

func (in *Instance) unprobe(probe bool) {
	if probe {
		in.mu.Lock()
		in.probing = false
		in.mu.Unlock()
	}
}

// record feeds one attempt's outcome to the breaker: failed says the instance did not answer
// (a transport failure); any answer, even an error status, closes it.
func (in *Instance) record(now time.Time, failed bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !failed {
		in.failures, in.openFor, in.openUntil = 0, 0, time.Time{}
		return
	}
	in.failures++
	if in.failures < in.limits.BreakerThreshold {
		return
	}
	switch {
	case in.openFor == 0:
		in.openFor = in.limits.BreakerOpen
	case in.failures > in.limits.BreakerThreshold: // a probe failed: back off further
		in.openFor = min(2*in.openFor, MaxPause)
	}
	in.openUntil = now.Add(in.openFor)
}

// idleSince reports whether the instance has seen no call since t and is not open.
func (in *Instance) idleSince(t, now time.Time) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.lastUsed.Before(t) && !now.Before(in.openUntil) && len(in.slots) == 0
}
