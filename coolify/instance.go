package coolify

import (
	"context"
	"errors"
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
	// house bounds the places housekeeping holds (half of them, at least one): a request on
	// the start path always finds a place, or waits only behind other start-path requests,
	// however much housekeeping waits in the rate limiter while holding its place.
	house chan struct{}

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
	return &Instance{limits: limits, slots: make(chan struct{}, limits.MaxInFlight),
		house: make(chan struct{}, max(limits.MaxInFlight/2, 1))}
}

// acquire takes a bulkhead slot for a call of class prio, waiting at most maxWait for one,
// unless the breaker is open. release must be called when the call ends.
func (in *Instance) acquire(ctx context.Context, clk clock.Clock, op string, maxWait time.Duration, prio Priority) (release func(), err error) {
	probe, err := in.admit(clk.Now(), op)
	if err != nil {
		return nil, err
	}
	// One timer bounds the whole wait, made only when a place is not free at once (a test's
	// clock may move when a timer is made).
	var t clock.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	timer := func() clock.Timer {
		if t == nil && maxWait > 0 {
			t = clk.NewTimer(maxWait)
		}
		return t
	}
	var held []chan struct{}
	release = func() {
		for _, ch := range held {
			<-ch
		}
		in.unprobe(probe)
	}
	sems := []chan struct{}{in.slots}
	if prio == Housekeeping {
		sems = []chan struct{}{in.house, in.slots}
	}
	for _, sem := range sems {
		if err := enter(ctx, sem, timer); err != nil {
			release()
			if errors.Is(err, errBulkheadFull) {
				return nil, &WaitError{Op: op, Reason: WaitBulkhead, Wait: bulkheadRetry}
			}
			return nil, err
		}
		held = append(held, sem)
	}
	return release, nil
}

var errBulkheadFull = errors.New("bulkhead full")

// enter takes a place in sem, waiting until the timer fires (none: not at all) or ctx ends.
func enter(ctx context.Context, sem chan struct{}, timer func() clock.Timer) error {
	select {
	case sem <- struct{}{}:
		return nil
	default:
	}
	t := timer()
	if t == nil {
		return errBulkheadFull
	}
	select {
	case sem <- struct{}{}:
		return nil
	case <-t.C():
		return errBulkheadFull
	case <-ctx.Done():
		return ctx.Err()
	}
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
