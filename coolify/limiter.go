package coolify

import (
	"context"
	"math"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// DefaultRateLimit is Coolify's default API limit: 200 requests per minute per user.
const DefaultRateLimit = 200

const limiterBurst = 5

// The limiter's priority rules (see Limiter).
const (
	// housekeepingReserve is how many tokens a housekeeping request leaves in the bucket: a
	// start-path request that arrives next finds one at once instead of waiting for a refill.
	housekeepingReserve = 1
	// housekeepingShare bounds how long housekeeping can be held back: while both classes
	// wait, at least one grant in this many goes to housekeeping (a quarter of the budget).
	housekeepingShare = 4
	// tokenEpsilon absorbs float rounding of the refill, so a waiter woken at the computed
	// moment finds its token instead of sleeping again for a nanosecond.
	tokenEpsilon = 1e-9
)

// Priority is the class of a request when a Coolify user's budget is short: requests someone
// waits for go before housekeeping. Carry it on the context with WithPriority.
type Priority int

const (
	// StartPath is a request a user waits for: a deploy, a poll of a deployment whose bot
	// waits, a read a bound slot needs. It is the default, so a call nobody marked competes
	// as every call did before priorities existed, and is never held back by mistake.
	StartPath Priority = iota
	// Housekeeping is a request nobody waits for: description updates, orphan checks and the
	// lists they read, existence checks of free slots, recycles, stops of released slots.
	// When the budget is short it goes after the start path, but it is never starved: it
	// gets at least one request in housekeepingShare.
	Housekeeping
)

func (p Priority) String() string {
	if p == Housekeeping {
		return "housekeeping"
	}
	return "start"
}

type priorityKey struct{}

// WithPriority marks the requests made with ctx as of class p.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, p)
}

// PriorityOf is the class WithPriority put on ctx, StartPath when none.
func PriorityOf(ctx context.Context) Priority {
	if p, ok := ctx.Value(priorityKey{}).(Priority); ok && p == Housekeeping {
		return Housekeeping
	}
	return StartPath
}

// Limiter paces requests to one Coolify user. Share one between every client that uses the
// same instance and token (see Registry): the server counts per user, not per client.
//
// It is a token bucket with two queues. A request takes a token at once when one is free and
// nobody of its class or a higher one waits (a housekeeping request also leaves
// housekeepingReserve tokens); otherwise it queues. Tokens go to the start-path queue first,
// except that while housekeeping waits, every housekeepingShare-th token goes to it. Whatever
// the order, tokens are handed out no faster than the bucket fills, so the per-minute budget
// holds.
type Limiter struct {
	// perSecond is the refill rate; 0 means no limit.
	perSecond float64
	burst     float64

	mu     sync.Mutex
	tokens float64
	filled time.Time // when tokens was last brought up to date; zero: never (a full bucket)
	queues [2][]*waiter
	// skipped counts the tokens given to the start path in a row while housekeeping waited.
	skipped int
	// changed is closed (and replaced) when a waiter leaves without its token or gives one
	// back: the others may go sooner than they computed, and look again.
	changed chan struct{}
	// until is when the server said (429 Retry-After) the user's budget comes back: every
	// client sharing the limiter holds off until then, not only the one that was refused.
	until time.Time
	// lastUsed lets a Registry forget a limiter nobody uses any more.
	lastUsed time.Time
	// descriptions holds the description updates waiting for the budget (see SetDescription).
	descriptions descriptionQueue
}

// waiter is a request queued for a token.
type waiter struct {
	prio    Priority
	granted bool
	ch      chan struct{} // closed when granted
}

// NewLimiter allows perMinute requests in any 60-second window. The refill rate leaves room
// for the burst so that even a burst at a window's edge stays within the server's count.
func NewLimiter(perMinute int) *Limiter {
	if perMinute <= 0 {
		return &Limiter{changed: make(chan struct{})}
	}
	burst := min(limiterBurst, perMinute)
	refill := max(perMinute-burst, 1)
	return &Limiter{perSecond: float64(refill) / 60, burst: float64(burst), tokens: float64(burst),
		changed: make(chan struct{})}
}

// wait blocks until a request of ctx's priority may go, timing by clk so tests can use a fake
// clock, and returns how long it waited. It never waits longer than maxWait: when the
// server's pause or the pacing would hold the request longer, it returns a *WaitError at once
// (and takes no token), so a caller is never held for a pause someone else's 429 caused. A
// housekeeping request that later start-path requests push back past maxWait gives up then,
// with a *WaitError too. A request that yields waits only while no start-path request does,
// and never for a pause.
func (l *Limiter) wait(ctx context.Context, clk clock.Clock, op string, maxWait time.Duration, yield bool) (time.Duration, error) {
	var paused time.Duration
	l.mu.Lock()
	until := l.until
	l.lastUsed = clk.Now()
	l.mu.Unlock()
	if d := until.Sub(clk.Now()); d > 0 {
		if d > maxWait || yield {
			return 0, &WaitError{Op: op, Reason: WaitLimiter, Wait: capPause(d)}
		}
		if err := sleepCtx(ctx, clk, d); err != nil {
			return 0, err
		}
		paused = d
	}
	d, err := l.take(ctx, clk, op, maxWait, PriorityOf(ctx), yield)
	return paused + d, err
}

// take queues for a token and waits for it, at most maxWait (see wait for yield).
func (l *Limiter) take(ctx context.Context, clk clock.Clock, op string, maxWait time.Duration, prio Priority, yield bool) (time.Duration, error) {
	if l.perSecond == 0 {
		return 0, nil
	}
	start := clk.Now()
	w := &waiter{prio: prio, ch: make(chan struct{})}
	l.mu.Lock()
	l.queues[prio] = append(l.queues[prio], w)
	l.grant(start)
	if !w.granted && prio == StartPath {
		l.wake() // a request that yields to this one learns it now
	}
	for !w.granted {
		now := clk.Now()
		eta := l.eta(w)
		if now.Sub(start)+eta > maxWait || yield && len(l.queues[StartPath]) > 0 {
			l.leave(w)
			l.mu.Unlock()
			return 0, &WaitError{Op: op, Reason: WaitLimiter, Wait: capPause(eta)}
		}
		changed := l.changed
		l.mu.Unlock()
		t := clk.NewTimer(eta)
		select {
		case <-w.ch:
		case <-t.C():
		case <-changed:
		case <-ctx.Done():
			t.Stop()
			l.mu.Lock()
			if w.granted {
				l.giveBack()
			} else {
				l.leave(w)
			}
			l.mu.Unlock()
			return 0, ctx.Err()
		}
		t.Stop()
		l.mu.Lock()
		l.grant(clk.Now())
	}
	l.mu.Unlock()
	return clk.Since(start), nil
}

// refill brings the bucket up to now. Callers hold l.mu.
func (l *Limiter) refill(now time.Time) {
	if !l.filled.IsZero() && now.After(l.filled) {
		l.tokens = min(l.burst, l.tokens+now.Sub(l.filled).Seconds()*l.perSecond)
	}
	if l.filled.IsZero() || now.After(l.filled) {
		l.filled = now
	}
}

// next is the waiter owed the next token, nil when none waits; owed says a housekeeping
// request has its share due. Callers hold l.mu.
func next(start, house []*waiter, skipped int) (w *waiter, owed bool) {
	switch {
	case len(house) > 0 && (len(start) == 0 || skipped >= housekeepingShare-1):
		return house[0], skipped >= housekeepingShare-1
	case len(start) > 0:
		return start[0], false
	}
	return nil, false
}

// need is how many tokens the bucket must hold for w to take one.
func (l *Limiter) need(w *waiter, owed bool) float64 {
	if w.prio == Housekeeping && !owed {
		return min(1+housekeepingReserve, l.burst)
	}
	return 1
}

// grant hands the tokens the bucket holds at now to the waiters, in priority order. Callers
// hold l.mu.
func (l *Limiter) grant(now time.Time) {
	l.refill(now)
	for {
		w, owed := next(l.queues[StartPath], l.queues[Housekeeping], l.skipped)
		if w == nil || l.tokens+tokenEpsilon < l.need(w, owed) {
			return
		}
		l.tokens--
		l.queues[w.prio] = l.queues[w.prio][1:]
		switch {
		case w.prio == Housekeeping:
			l.skipped = 0
		case len(l.queues[Housekeeping]) > 0:
			l.skipped++
		default:
			l.skipped = 0
		}
		w.granted = true
		close(w.ch)
	}
}

// eta is how long until w gets a token if nothing changes: the grant order played forward
// from the bucket's present. Callers hold l.mu, after grant.
func (l *Limiter) eta(w *waiter) time.Duration {
	start, house := l.queues[StartPath], l.queues[Housekeeping]
	tokens, skipped, secs := l.tokens, l.skipped, 0.0
	for {
		x, owed := next(start, house, skipped)
		if x == nil { // not queued: cannot happen, but never sleep forever on it
			return 0
		}
		if need := l.need(x, owed); tokens < need {
			secs += (need - tokens) / l.perSecond
			tokens = need
		}
		if x == w {
			return time.Duration(math.Ceil(secs * float64(time.Second)))
		}
		tokens--
		if x.prio == Housekeeping {
			house, skipped = house[1:], 0
		} else {
			start = start[1:]
			if len(house) > 0 {
				skipped++
			}
		}
	}
}

// leave takes w out of its queue without a token; the others may go sooner now. Callers
// hold l.mu.
func (l *Limiter) leave(w *waiter) {
	q := l.queues[w.prio]
	for i, x := range q {
		if x == w {
			l.queues[w.prio] = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	l.wake()
}

// giveBack returns a token granted to a request that did not use it. Callers hold l.mu.
func (l *Limiter) giveBack() {
	l.tokens = min(l.burst, l.tokens+1)
	l.wake()
}

func (l *Limiter) wake() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// Waiting reports how many requests of each class wait for a token (for tests and metrics).
func (l *Limiter) Waiting() (start, housekeeping int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queues[StartPath]), len(l.queues[Housekeeping])
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

// idleSince reports whether nobody waited on the limiter since t, none waits now, no pause
// is pending and no description update is queued.
func (l *Limiter) idleSince(t, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastUsed.Before(t) && !l.until.After(now) &&
		len(l.queues[StartPath])+len(l.queues[Housekeeping]) == 0 && l.descriptions.empty()
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
