package coolify

import (
	"context"
	"slices"
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
	// DefaultBreakerThreshold transport failures (timeouts, refused connections) in a row of
	// one user's calls open that user's breaker.
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
// their token, with a bulkhead the instance's users share fairly and a breaker per user.
//
// The bulkhead lets at most MaxInFlight requests be in flight to the instance; the rest wait
// briefly, then fail fast with a *WaitError. So an instance that is slow or black-holed holds
// a bounded number of the manager's workers, and the others keep working. Within that bound
// each Coolify user (a token on this URL) gets its share, so that one tenant's slow calls do
// not take another's places:
//   - a user takes a place only while it holds fewer than max(1, MaxInFlight/N), N being the
//     users with calls in flight or waiting (a user alone may take them all); one that
//     took more while alone keeps them until its calls end;
//   - a freed place goes to the waiting users in turn (round-robin, one place a turn), so a
//     user that waits gets one before a user over its share gets another;
//   - a user that holds a place does not take the last free one while another user the
//     instance knows (see Registry) holds none: a tenant whose neighbour keeps the instance
//     busy still finds a place at once.
//
// Housekeeping holds at most half the places (at least one), each user at most its share of
// them, so start-path requests always find a place however much housekeeping waits in the
// rate limiter while holding its own.
//
// The breaker is per user: after BreakerThreshold transport failures in a row of one user's
// calls, that user's calls fail fast until a single probe gets through. A tenant whose token
// or applications make its calls time out opens only its own breaker; an instance that fails
// for everyone opens each user's after that user's own failures.
type Instance struct {
	limits   InstanceLimits
	houseMax int

	mu       sync.Mutex
	users    map[string]*instanceUser
	turns    []*instanceUser // users with calls waiting, in the order they are served
	inFlight int             // places held, all users
	house    int             // places held by housekeeping, all users
}

// instanceUser is one user's part of an Instance: the places it holds, its calls waiting for
// one, and its breaker.
type instanceUser struct {
	held, house int
	queue       []*placeWaiter
	lastUsed    time.Time

	failures  int           // transport failures in a row
	openUntil time.Time     // calls fail fast before this
	openFor   time.Duration // the current open period (doubles while probes fail)
	probing   bool          // a probe is in flight after the open period
}

// placeWaiter is a call waiting for a place.
type placeWaiter struct {
	prio    Priority
	granted bool
	ch      chan struct{} // closed when granted
}

// NewInstance builds an instance guard.
func NewInstance(limits InstanceLimits) *Instance {
	limits = limits.withDefaults()
	return &Instance{limits: limits, houseMax: max(limits.MaxInFlight/2, 1), users: map[string]*instanceUser{}}
}

// acquire takes a place for a call of user (a UserKey) of class prio, waiting at most maxWait
// for one, unless the user's breaker is open. release must be called when the call ends.
func (in *Instance) acquire(ctx context.Context, clk clock.Clock, user, op string, maxWait time.Duration, prio Priority) (release func(), err error) {
	in.mu.Lock()
	u := in.user(user, clk.Now())
	probe, err := u.admit(clk.Now(), op, in.limits.BreakerThreshold)
	if err != nil {
		in.mu.Unlock()
		return nil, err
	}
	w := in.enqueue(u, prio)
	if !w.granted && maxWait > 0 {
		in.mu.Unlock()
		// The timer is made only when no place is free at once (a test's clock may move
		// when a timer is made).
		t := clk.NewTimer(maxWait)
		select {
		case <-w.ch:
		case <-t.C():
		case <-ctx.Done():
		}
		t.Stop()
		in.mu.Lock()
	}
	defer in.mu.Unlock()
	if !w.granted {
		in.leave(u, w)
		if probe {
			u.probing = false
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, &WaitError{Op: op, Reason: WaitBulkhead, Wait: bulkheadRetry}
	}
	var once sync.Once
	return func() { once.Do(func() { in.release(u, w.prio, probe) }) }, nil
}

// user is user's entry, made when missing, marked used at now. Callers hold in.mu.
func (in *Instance) user(key string, now time.Time) *instanceUser {
	u, ok := in.users[key]
	if !ok {
		u = &instanceUser{}
		in.users[key] = u
	}
	if now.After(u.lastUsed) {
		u.lastUsed = now
	}
	return u
}

// touch marks user as a user of the instance at now (see Registry).
func (in *Instance) touch(user string, now time.Time) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.user(user, now)
}

// enqueue queues a call of u's for a place, which it may get at once. Callers hold in.mu.
func (in *Instance) enqueue(u *instanceUser, prio Priority) *placeWaiter {
	w := &placeWaiter{prio: prio, ch: make(chan struct{})}
	if len(u.queue) == 0 {
		in.turns = append(in.turns, u)
	}
	u.queue = append(u.queue, w)
	in.grant()
	return w
}

// release gives back a place of u's. Callers do not hold in.mu.
func (in *Instance) release(u *instanceUser, prio Priority, probe bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	u.held--
	in.inFlight--
	if prio == Housekeeping {
		u.house--
		in.house--
	}
	if probe {
		u.probing = false
	}
	in.grant()
}

// leave takes w, which got no place, out of u's queue; the others may get one now (one user
// fewer waiting may raise the shares). Callers hold in.mu.
func (in *Instance) leave(u *instanceUser, w *placeWaiter) {
	if i := slices.Index(u.queue, w); i >= 0 {
		u.queue = slices.Delete(u.queue, i, i+1)
	}
	if len(u.queue) == 0 {
		if i := slices.Index(in.turns, u); i >= 0 {
			in.turns = slices.Delete(in.turns, i, i+1)
		}
	}
	in.grant()
}

// grant hands the free places to the waiting calls, the users in turn. Callers hold in.mu.
func (in *Instance) grant() {
	for in.inFlight < in.limits.MaxInFlight {
		i, j := in.next()
		if i < 0 {
			return
		}
		u := in.turns[i]
		w := u.queue[j]
		u.queue = slices.Delete(u.queue, j, j+1)
		in.turns = slices.Delete(in.turns, i, i+1)
		if len(u.queue) > 0 {
			in.turns = append(in.turns, u) // its next call waits for its next turn
		}
		u.held++
		in.inFlight++
		if w.prio == Housekeeping {
			u.house++
			in.house++
		}
		w.granted = true
		close(w.ch)
	}
}

// next is the call owed the next free place, as indexes into in.turns and that user's queue
// (-1 when none may have it): the first call, in the first user's queue in turn order, that
// the user's share, the last free place's reservation and the housekeeping bound allow.
// Callers hold in.mu.
func (in *Instance) next() (turn, call int) {
	if len(in.turns) == 0 {
		return -1, -1
	}
	active, holdsNone := 0, false
	for _, u := range in.users {
		if u.held > 0 || len(u.queue) > 0 {
			active++
		}
		holdsNone = holdsNone || u.held == 0
	}
	share := max(1, in.limits.MaxInFlight/active)
	houseShare := max(1, in.houseMax/active)
	lastKept := in.inFlight == in.limits.MaxInFlight-1 && holdsNone
	for i, u := range in.turns {
		if u.held >= share || u.held > 0 && lastKept {
			continue
		}
		for j, w := range u.queue {
			if w.prio != Housekeeping || in.house < in.houseMax && u.house < houseShare {
				return i, j
			}
		}
	}
	return -1, -1
}

// admit applies u's breaker: closed lets every call through; open refuses; after the open
// period one call (the probe) goes through while the others still fail fast. Callers hold
// in.mu.
func (u *instanceUser) admit(now time.Time, op string, threshold int) (probe bool, err error) {
	if u.failures < threshold {
		return false, nil
	}
	if now.Before(u.openUntil) {
		return false, &WaitError{Op: op, Reason: WaitBreaker, Wait: u.openUntil.Sub(now)}
	}
	if u.probing {
		return false, &WaitError{Op: op, Reason: WaitBreaker, Wait: bulkheadRetry}
	}
	u.probing = true
	return true, nil
}

// record feeds one attempt's outcome to user's breaker: failed says the instance did not
// answer (a transport failure); any answer, even an error status, closes it. opened says the
// breaker opened, or opened again after a failed probe.
func (in *Instance) record(now time.Time, user string, failed bool) (opened bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	u := in.user(user, now)
	if !failed {
		u.failures, u.openFor, u.openUntil = 0, 0, time.Time{}
		return false
	}
	u.failures++
	if u.failures < in.limits.BreakerThreshold {
		return false
	}
	switch {
	case u.openFor == 0:
		u.openFor = in.limits.BreakerOpen
	case u.failures > in.limits.BreakerThreshold: // a probe failed: back off further
		u.openFor = min(2*u.openFor, MaxPause)
	}
	u.openUntil = now.Add(u.openFor)
	return true
}

// prune forgets the users that have made no call since t, have none in flight or waiting,
// and whose breaker is not open; it reports whether no user is left. A user forgotten frees
// the last place it was kept.
func (in *Instance) prune(t, now time.Time) (empty bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for k, u := range in.users {
		if u.lastUsed.Before(t) && !now.Before(u.openUntil) && u.held == 0 && len(u.queue) == 0 && !u.probing {
			delete(in.users, k)
		}
	}
	in.grant()
	return len(in.users) == 0
}
