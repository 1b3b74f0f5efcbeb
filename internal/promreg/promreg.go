// Package promreg registers Prometheus collectors so that a second component of the same
// kind in one process (a test, a restarted manager) shares the first one's series instead of
// panicking on a duplicate registration.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c with reg, or returns the collector already registered under the same
// descriptors. A nil reg registers nothing and returns c. Any other registration error is a
// programming error and panics, as MustRegister does.
func Register[T prometheus.Collector](reg prometheus.Registerer, c T) T {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(T); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}
