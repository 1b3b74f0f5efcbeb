package botapi

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"botpool.dev/botpool/internal/botfailures"
	"botpool.dev/botpool/internal/promreg"
)

type metrics struct {
	requests      *prometheus.CounterVec
	latency       *prometheus.HistogramVec
	claimsRefused prometheus.Counter
	// failed is the controllers' botpool_bots_failed_total: the bot API counts the Fatal
	// phases bots report (reason BotReported).
	failed *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botpool_botapi_requests_total",
			Help: "Requests to the bot API by endpoint and status code.",
		}, []string{"endpoint", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "botpool_botapi_request_duration_seconds",
			Help:    "Latency of bot API requests by endpoint.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"endpoint"}),
	}
	m.claimsRefused = promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "botpool_botapi_binding_claims_refused_total",
		Help: "Config calls refused because the binding was already handed out (a binding is handed out once).",
	}))
	m.failed = botfailures.Register(reg)
	m.requests = promreg.Register(reg, m.requests)
	m.latency = promreg.Register(reg, m.latency)
	return m
}

func (m *metrics) observe(endpoint string, code int, d time.Duration) {
	m.requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(endpoint).Observe(d.Seconds())
}
