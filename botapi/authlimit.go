package botapi

import (
	"math"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxFailureKeys bounds the per-address failure limiters: past it, addresses without one share
// a single overflow limiter, so a caller spraying addresses (an IPv6 range) costs memory for a
// bounded number of them and still meets a limit.
const maxFailureKeys = 16384

// failureLimiter limits failed authentications per client address. It counts only failures:
// many bots may call from one address (every container of a Coolify server, or a load
// balancer's), and their valid requests must not use up each other's budget. Once an address's
// failures exceed the budget, a request from it whose token does not authenticate is answered
// 429 instead of 401, until the budget refills; a valid token is still served (see authFailed).
//
// A request whose authentication takes a while (an unknown binding credential gives the cache a
// moment: see botByCredential) holds one failure of its address's budget meanwhile (begin), so
// that an address cannot have more such requests waiting at once than its budget allows.
type failureLimiter struct {
	rate  rate.Limit
	burst int

	mu       sync.Mutex
	byKey    map[string]*rate.Limiter
	overflow *rate.Limiter
	pending  map[*rate.Limiter]int // failures held by requests still being decided (begin)
}

func newFailureLimiter(r rate.Limit, burst int) *failureLimiter {
	return &failureLimiter{rate: r, burst: burst, byKey: map[string]*rate.Limiter{}, overflow: rate.NewLimiter(r, burst),
		pending: map[*rate.Limiter]int{}}
}

// lookup returns the key's limiter, or the overflow one when the map is full; with create, a
// new key gets its own limiter while there is room. Call with mu held.
func (f *failureLimiter) lookup(key string, now time.Time, create bool) *rate.Limiter {
	if l, ok := f.byKey[key]; ok {
		return l
	}
	if len(f.byKey) >= maxFailureKeys {
		// A full bucket holds no state a fresh one would not.
		for k, l := range f.byKey {
			if l.TokensAt(now) >= float64(f.burst) && f.pending[l] == 0 {
				delete(f.byKey, k)
			}
		}
		if len(f.byKey) >= maxFailureKeys {
			return f.overflow
		}
	}
	if !create {
		return nil
	}
	l := rate.NewLimiter(f.rate, f.burst)
	f.byKey[key] = l
	return l
}

// blocked returns how long requests from key must wait, or 0 when they may be served.
func (f *failureLimiter) blocked(key string, now time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wait(f.lookup(key, now, false), now)
}

// wait is how long a request must wait for l's budget (nil: a key without a limiter, whose
// budget is whole), counting the failures held by requests still being decided. mu is held.
func (f *failureLimiter) wait(l *rate.Limiter, now time.Time) time.Duration {
	if l == nil {
		return 0
	}
	tokens := l.TokensAt(now) - float64(f.pending[l])
	if tokens >= 1 {
		return 0
	}
	// Whole seconds, at least one: Retry-After has no finer unit, and 0 would invite a retry
	// that is refused again.
	secs := math.Ceil((1 - tokens) / float64(f.rate))
	return time.Duration(max(secs, 1)) * time.Second
}

// failed records a failed authentication from key.
func (f *failureLimiter) failed(key string, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookup(key, now, true).AllowN(now, 1)
}

// begin holds one failure of key's budget for a request whose authentication is still being
// decided, and returns end, which lets it go and records the failure if there was one; or,
// when key's budget is spent (held failures counted), how long requests from key must wait,
// and no end.
func (f *failureLimiter) begin(key string, now time.Time) (time.Duration, func(failed bool, at time.Time)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.lookup(key, now, true)
	if wait := f.wait(l, now); wait > 0 {
		return wait, nil
	}
	f.pending[l]++
	return 0, func(failed bool, at time.Time) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.pending[l]--; f.pending[l] <= 0 {
			delete(f.pending, l)
		}
		if failed {
			l.AllowN(at, 1)
		}
	}
}

// clientKey is the address a request's failures are counted under: the peer's IP, with IPv6
// addresses grouped by their /64 (one host usually owns a whole /64 and could change
// addresses within it at will). The peer is the TCP peer: X-Forwarded-For is the caller's to
// write and not trusted.
func clientKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}
