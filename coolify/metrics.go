package coolify

import (
	"github.com/prometheus/client_golang/prometheus"

	"botpool.dev/botpool/internal/promreg"
)

// Metrics are the client's Prometheus collectors. One Metrics may serve many clients.
type Metrics struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	retries   *prometheus.CounterVec
	throttled *prometheus.CounterVec
	waits     *prometheus.CounterVec
	notSent   *prometheus.CounterVec
	// breakerOpened counts a user's breaker opening, or opening again after a failed probe.
	breakerOpened prometheus.Counter
	// superseded counts description updates replaced by a newer one before they were sent.
	superseded prometheus.Counter
}

// NewMetrics builds the collectors and registers them with reg; a nil reg registers nothing.
// Registering twice with one registry reuses the collectors already there, so tests and the
// operator can build many clients.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botpool_coolify_requests_total",
			Help: "Coolify API requests by operation and HTTP status code (\"error\" for transport failures).",
		}, []string{"operation", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "botpool_coolify_request_duration_seconds",
			Help:    "Latency of one Coolify API request attempt.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"operation"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botpool_coolify_retries_total",
			Help: "Coolify API request retries by operation and reason.",
		}, []string{"operation", "reason"}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botpool_coolify_throttled_seconds_total",
			Help: "Time spent waiting for the client-side rate limiter.",
		}, []string{"operation"}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botpool_coolify_throttle_waits_total",
			Help: "Requests that had to wait for the client-side rate limiter.",
		}, []string{"operation"}),
		notSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botpool_coolify_calls_deferred_total",
			Help: "Coolify API calls handed back to the caller to retry later instead of waiting (reason: rate_limited, limiter, bulkhead, breaker).",
		}, []string{"operation", "reason"}),
		breakerOpened: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "botpool_coolify_breaker_opened_total",
			Help: "Times a Coolify user's breaker opened after transport failures in a row (or again after a failed probe); its calls to that instance then fail fast.",
		}),
		superseded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "botpool_coolify_descriptions_superseded_total",
			Help: "Application description updates replaced, while they waited for the rate limit, by a newer one for the same application (never sent).",
		}),
	}
	m.requests = promreg.Register(reg, m.requests)
	m.duration = promreg.Register(reg, m.duration)
	m.retries = promreg.Register(reg, m.retries)
	m.throttled = promreg.Register(reg, m.throttled)
	m.waits = promreg.Register(reg, m.waits)
	m.notSent = promreg.Register(reg, m.notSent)
	m.breakerOpened = promreg.Register(reg, m.breakerOpened)
	m.superseded = promreg.Register(reg, m.superseded)
	return m
}
