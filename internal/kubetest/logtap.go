package kubetest

import (
	"bytes"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	uzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Taps hands what it is shown (log lines, Events) to the watches registered on it, each
// looking for a string: a test that must leave no trace of a secret registers one before the
// secret exists.
type Taps struct {
	mu       sync.Mutex
	watches  []*Watch
	watching atomic.Int32
}

// Watch looks for a string in everything its Taps is shown while it is registered.
type Watch struct {
	needle []byte
	found  atomic.Bool
	seen   atomic.Int64
}

// Found reports whether something shown held the string.
func (w *Watch) Found() bool { return w.found.Load() }

// Seen is how many things the watch was shown: a test asserts it saw some, so a tap that sees
// nothing cannot pass for one that found nothing.
func (w *Watch) Seen() int64 { return w.seen.Load() }

// Watch registers a watch for needle until the test ends.
func (ts *Taps) Watch(t testing.TB, needle string) *Watch {
	w := &Watch{needle: []byte(needle)}
	ts.mu.Lock()
	ts.watches = append(ts.watches, w)
	ts.mu.Unlock()
	ts.watching.Add(1)
	t.Cleanup(func() {
		ts.watching.Add(-1)
		ts.mu.Lock()
		defer ts.mu.Unlock()
		ts.watches = slices.DeleteFunc(ts.watches, func(x *Watch) bool { return x == w })
	})
	return w
}

// See shows p to every watch.
func (ts *Taps) See(p []byte) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, w := range ts.watches {
		w.seen.Add(1)
		if bytes.Contains(p, w.needle) {
			w.found.Store(true)
		}
	}
}

// Watching reports whether a watch is registered.
func (ts *Taps) Watching() bool { return ts.watching.Load() > 0 }

// logTaps are shown every log line of the code under test, at every level, while a watch is
// registered (WatchLogs); the suites pay nothing for it otherwise.
var logTaps Taps

// WatchLogs watches the logs of the code under test (every level, V-levels included, whatever
// BOTPOOL_TEST_VERBOSE says) for needle until the test ends.
func WatchLogs(t testing.TB, needle string) *Watch { return logTaps.Watch(t, needle) }

// tapWriter hands each encoded log line to the log watches.
type tapWriter struct{}

func (tapWriter) Write(p []byte) (int, error) {
	logTaps.See(p)
	return len(p), nil
}

func (tapWriter) Sync() error { return nil }

// withTap adds the tap to a logger's core: enabled at every level while a watch is
// registered, disabled otherwise.
func withTap() uzap.Option {
	enabled := uzap.LevelEnablerFunc(func(zapcore.Level) bool { return logTaps.Watching() })
	core := zapcore.NewCore(zapcore.NewJSONEncoder(uzap.NewDevelopmentEncoderConfig()), tapWriter{}, enabled)
	return uzap.WrapCore(func(c zapcore.Core) zapcore.Core { return zapcore.NewTee(c, core) })
}
