package callback

import (
	"github.com/prometheus/client_golang/prometheus"

	"botpool.dev/botpool/internal/promreg"
)

// Values of the result label of deliveries_total.
const (
	resultSuccess  = "success"  // a 2xx response
	resultFailed   = "failed"   // retryable failures until MaxAttempts
	resultDropped  = "dropped"  // refused at Enqueue: a queue bound (refusals_total says which)
	resultRejected = "rejected" // a response that retrying cannot fix (4xx other than 408/429, 3xx) or a bad URL
)

type metrics struct {
	deliveries *prometheus.CounterVec
	refusals   *prometheus.CounterVec
	attempts   prometheus.Counter
	queueDepth prometheus.Gauge
	duration   prometheus.Histogram
}

// newMetrics registers through promreg so that two notifiers in one process (tests, a restarted
// manager) share series instead of panicking on a duplicate registration.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		deliveries: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botpool_callback_deliveries_total",
			Help: "Callbacks by final outcome: success, failed (attempts exhausted), dropped (refused at Enqueue, a queue bound reached; its sender tries again), rejected (not retryable).",
		}, []string{"result"})),
		refusals: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botpool_callback_refusals_total",
			Help: "Callbacks refused at Enqueue by the bound they met: receiver (its receiver's queue full), namespace (its namespace holds its share of the queue), queue (the whole queue full).",
		}, []string{"limit"})),
		attempts: promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "botpool_callback_attempts_total",
			Help: "HTTP requests made to deliver callbacks, retries included.",
		})),
		queueDepth: promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "botpool_callback_queue_depth",
			Help: "Callbacks accepted and not finished: queued, waiting for a retry or in flight.",
		})),
		duration: promreg.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "botpool_callback_delivery_duration_seconds",
			Help:    "Duration of one callback request, until the response headers or the error.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		})),
	}
	// Pre-create the series so dashboards see zeros rather than gaps.
	for _, r := range []string{resultSuccess, resultFailed, resultDropped, resultRejected} {
		m.deliveries.WithLabelValues(r)
	}
	for _, l := range []string{limitReceiver, limitNamespace, limitQueue} {
		m.refusals.WithLabelValues(l)
	}
	return m
}
