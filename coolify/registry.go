package coolify

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
)

// Registry hands out clients that share one rate limiter per Coolify user. The server limits
// requests per user, so every BotPool whose credentials point to the same instance with the
// same token must draw from one budget. Keys are the normalised base URL and a hash of the
// token; the token itself is not kept as a key.
type Registry struct {
	perMinute int
	opts      []Option

	mu       sync.Mutex
	limiters map[string]*Limiter
}

// NewRegistry builds a registry whose limiters allow perMinute requests (0: DefaultRateLimit).
// opts apply to every client it builds (share one WithMetrics, not WithRegisterer).
func NewRegistry(perMinute int, opts ...Option) *Registry {
	if perMinute == 0 {
		perMinute = DefaultRateLimit
	}
	return &Registry{perMinute: perMinute, opts: opts, limiters: map[string]*Limiter{}}
}

// Client returns a client for baseURL and token sharing the limiter of that pair.
func (r *Registry) Client(baseURL, token string, opts ...Option) (*Client, error) {
	base, err := normalizeBaseURL(baseURL)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(token))
	key := base.String() + "#" + hex.EncodeToString(sum[:])
	r.mu.Lock()
	lim, ok := r.limiters[key]
	if !ok {
		lim = NewLimiter(r.perMinute)
		r.limiters[key] = lim
	}
	r.mu.Unlock()
	all := append(append(append([]Option{}, r.opts...), opts...), WithLimiter(lim))
	return New(baseURL, token, all...)
}
