package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// metric reads one series from reg: a counter's or gauge's value, or a histogram's sample
// count (with its sum), matching the given label pairs.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) (value, sum float64) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue(), 0
			case m.Gauge != nil:
				return m.Gauge.GetValue(), 0
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), m.Histogram.GetSampleSum()
			}
		}
	}
	return 0, 0
}

// bucketCount returns how many observations of a histogram were at most le.
func bucketCount(t *testing.T, reg *prometheus.Registry, name string, le float64) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, b := range f.GetMetric()[0].GetHistogram().GetBucket() {
			if b.GetUpperBound() == le {
				return float64(b.GetCumulativeCount())
			}
		}
	}
	t.Fatalf("no bucket le=%v in %s", le, name)
	return 0
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// eventually polls cond every 10 ms until it holds or the timeout passes. The timeout is a
// liveness bound, raised to a minute as kubetest.Eventually's: a busy machine only waits longer.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	timeout = max(timeout, time.Minute)
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond) // bounded polling, not a sleep for effect
	}
}

// sqlConn connects straight to a test database, to check what the store wrote.
func sqlConn(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func queryInt(t *testing.T, c *pgx.Conn, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := c.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
