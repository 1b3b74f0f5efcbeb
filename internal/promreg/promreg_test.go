package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegisterSharesExistingCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	newCounter := func() *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"a"})
	}
	first := Register(reg, newCounter())
	second := Register(reg, newCounter())
	if first != second {
		t.Fatal("a second registration did not return the first collector")
	}
	second.WithLabelValues("v").Inc()
	if got := first.WithLabelValues("v"); got == nil {
		t.Fatal("missing series")
	}
	if c := newCounter(); Register(nil, c) != c {
		t.Fatal("nil registerer must return the collector itself")
	}
}

func TestRegisterPanicsOnConflictingDescriptors(t *testing.T) {
	reg := prometheus.NewRegistry()
	Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "y_total", Help: "y"}))
	defer func() {
		if recover() == nil {
			t.Fatal("registering a different collector type under the same name did not panic")
		}
	}()
	Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "y_total", Help: "other help"}))
}
