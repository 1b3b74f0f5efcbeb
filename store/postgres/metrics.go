package postgres

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the store's Prometheus series, all prefixed botpool_store_. The gauges read
// Status, so the metrics and the condition built from Status never disagree.
type metrics struct {
	batchSize     prometheus.Histogram
	flushDuration prometheus.Histogram
	errors        *prometheus.CounterVec
	statements    *prometheus.CounterVec
	replayed      prometheus.Counter
	rejected      *prometheus.CounterVec
	pruned        *prometheus.CounterVec
	collectors    []prometheus.Collector
}

func newMetrics(s *Store) *metrics {
	m := &metrics{
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "botpool_store_heartbeat_batch_size",
			Help:    "Heartbeats written per statement (one statement per batch).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11), // 1 … 1024
		}),
		flushDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "botpool_store_flush_duration_seconds",
			Help:    "Time to write one heartbeat batch.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5 ms … 4 s
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botpool_store_errors_total",
			Help: "Failed statements by kind: connection (the server cannot write now: buffered), conflict (returned as ErrConflict), invalid (data the server refuses, returned as ErrInvalid), other.",
		}, []string{"kind"}),
		statements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botpool_store_statements_total",
			Help: "Statements sent to Postgres by operation, successful or not.",
		}, []string{"op"}),
		replayed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "botpool_store_replayed_total",
			Help: "Buffered writes written after an outage.",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botpool_store_rejected_rows_total",
			Help: "Buffered transitions and events the database refused at replay, isolated and given up one by one; the rows around them were written.",
		}, []string{"table"}),
		pruned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botpool_store_pruned_rows_total",
			Help: "Rows deleted by the retention job, by table.",
		}, []string{"table"}),
	}
	for _, table := range []string{"slot_transitions", "bot_events"} {
		m.rejected.WithLabelValues(table)
	}
	for _, table := range []string{"slot_transitions", "bot_events", "bots"} {
		m.pruned.WithLabelValues(table)
	}
	offset := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "botpool_store_clock_offset_seconds",
		Help: "The database's clock minus this replica's, as last measured: heartbeats are kept in the database's time and read back in this replica's.",
	}, func() float64 { return s.clockOffset().Seconds() })
	up := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "botpool_store_up",
		Help: "1 while Postgres is reachable and nothing waits in the outage buffer, else 0.",
	}, func() float64 {
		if s.Status().Available {
			return 1
		}
		return 0
	})
	buffered := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "botpool_store_buffered",
		Help: "Writes waiting in the outage buffer.",
	}, func() float64 { return float64(s.Status().Buffered) })
	dropped := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "botpool_store_dropped_total",
		Help: "Buffered writes given up: oldest transitions and events beyond the buffer limit, and replays the server kept refusing.",
	}, func() float64 { return float64(s.Status().Dropped) })
	for _, kind := range []errKind{kindConnection, kindConflict, kindInvalid, kindOther} {
		m.errors.WithLabelValues(kind.String())
	}
	m.collectors = []prometheus.Collector{m.batchSize, m.flushDuration, m.errors, m.statements, m.replayed, m.rejected, m.pruned, up, buffered, dropped, offset}
	return m
}

// register adds the collectors to reg (nil: none), undoing a partial registration on failure.
func (m *metrics) register(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	for i, c := range m.collectors {
		if err := reg.Register(c); err != nil {
			for _, done := range m.collectors[:i] {
				reg.Unregister(done)
			}
			return errors.Join(errors.New("registering the store's metrics"), err)
		}
	}
	return nil
}

func (m *metrics) unregister(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	for _, c := range m.collectors {
		reg.Unregister(c)
	}
}
