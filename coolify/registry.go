package coolify

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// registryIdle is how long a limiter, or an instance guard's user, nobody asked for is kept.
// Connectors ask again every minute or so for each live pool; an entry idle this long belongs
// to pools that are gone (or moved to other credentials).
const registryIdle = 15 * time.Minute

// Registry hands out clients that share one rate limiter per Coolify user and one guard per
// Coolify instance. The server limits requests per user, so every BotPool whose credentials
// point to the same instance with the same token must draw from one budget; an instance's
// trouble must hold a bounded share of the callers, whoever's token they use, and within that
// bound each user gets its share of the places and its own breaker (see Instance). Keys are
// the normalised base URL and a hash of the token; the token itself is not kept as a key. A
// user whose client the registry built is known to its instance guard (a place is kept for it)
// until it has not asked for 15 minutes. Entries nobody asked for in a while are forgotten.
type Registry struct {
	perMinute int
	opts      []Option
	limits    InstanceLimits
	clock     clock.PassiveClock

	mu        sync.Mutex
	limiters  map[string]*Limiter
	instances map[string]*Instance
	pruned    time.Time
}

// NewRegistry builds a registry whose limiters allow perMinute requests (0: DefaultRateLimit).
// opts apply to every client it builds (share one WithMetrics, not WithRegisterer); its
// WithInstanceLimits configures the instance guards, WithClock times their expiry, and
// WithEgress builds one http.Client for all its clients.
func NewRegistry(perMinute int, opts ...Option) *Registry {
	if perMinute == 0 {
		perMinute = DefaultRateLimit
	}
	cfg := defaults()
	for _, o := range opts {
		o(cfg)
	}
	opts = append([]Option{}, opts...)
	if cfg.http == nil {
		// One http.Client (one connection pool) for every client, not one per pool.
		opts = append(opts, WithHTTPClient(newHTTPClient(cfg.egress)))
	}
	return &Registry{perMinute: perMinute, opts: opts, limits: cfg.limits, clock: cfg.clock,
		limiters: map[string]*Limiter{}, instances: map[string]*Instance{}}
}

// Client returns a client for baseURL and token sharing the limiter of that pair and the
// guard of that instance.
func (r *Registry) Client(baseURL, token string, opts ...Option) (*Client, error) {
	base, err := normalizeBaseURL(baseURL)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(token))
	key := base.String() + "#" + hex.EncodeToString(sum[:])
	now := r.clock.Now()
	r.mu.Lock()
	r.prune(now)
	lim, ok := r.limiters[key]
	if !ok {
		lim = NewLimiter(r.perMinute)
		r.limiters[key] = lim
	}
	lim.mu.Lock()
	lim.lastUsed = now
	lim.mu.Unlock()
	in, ok := r.instances[base.String()]
	if !ok {
		in = NewInstance(r.limits)
		r.instances[base.String()] = in
	}
	in.touch(userKey(base, token), now)
	r.mu.Unlock()
	all := append(append(append([]Option{}, r.opts...), opts...), WithLimiter(lim), WithInstance(in))
	return New(baseURL, token, all...)
}

// prune forgets limiters, and instance guards' users, idle for registryIdle, at most once a
// minute, and a guard once it has no user left. A paused limiter or a user's open breaker is
// kept: forgetting it would lift the pause. Callers hold r.mu.
func (r *Registry) prune(now time.Time) {
	if now.Sub(r.pruned) < time.Minute {
		return
	}
	r.pruned = now
	cutoff := now.Add(-registryIdle)
	for k, l := range r.limiters {
		if l.idleSince(cutoff, now) {
			delete(r.limiters, k)
		}
	}
	for k, in := range r.instances {
		if in.prune(cutoff, now) {
			delete(r.instances, k)
		}
	}
}

// Len reports how many limiters and instance guards the registry holds (for tests and metrics).
func (r *Registry) Len() (limiters, instances int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.limiters), len(r.instances)
}
