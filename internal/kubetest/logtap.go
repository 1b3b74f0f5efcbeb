package kubetest

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"

	uzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// The log tap: every log line of the code under test, at every level, while a test watches
// the logs for a string (WatchLogs). Off otherwise, so the suites pay nothing for it.
var tap struct {
	mu       sync.Mutex
	watches  []*LogWatch
	watching atomic.Int32
}

// LogWatch looks for a string in every log line written while it is registered.
type LogWatch struct {
	needle []byte
	found  atomic.Bool
	lines  atomic.Int64
}

// Found reports whether a log line held the string.
func (w *LogWatch) Found() bool { return w.found.Load() }

// Lines is how many log lines the watch saw: a test asserts it saw some, so a tap that sees
// nothing cannot pass for one that found nothing.
func (w *LogWatch) Lines() int64 { return w.lines.Load() }

// WatchLogs watches the logs of the code under test (every level, V-levels included, whatever
// BOTPOOL_TEST_VERBOSE says) for needle until the test ends: a test that must leave no trace
// of a secret in the logs registers it before the secret exists.
func WatchLogs(t testing.TB, needle string) *LogWatch {
	w := &LogWatch{needle: []byte(needle)}
	tap.mu.Lock()
	tap.watches = append(tap.watches, w)
	tap.mu.Unlock()
	tap.watching.Add(1)
	t.Cleanup(func() {
		tap.watching.Add(-1)
		tap.mu.Lock()
		defer tap.mu.Unlock()
		for i, x := range tap.watches {
			if x == w {
				tap.watches = append(tap.watches[:i], tap.watches[i+1:]...)
				break
			}
		}
	})
	return w
}

// tapWriter hands each encoded log line to the watches.
type tapWriter struct{}

func (tapWriter) Write(p []byte) (int, error) {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	for _, w := range tap.watches {
		w.lines.Add(1)
		if bytes.Contains(p, w.needle) {
			w.found.Store(true)
		}
	}
	return len(p), nil
}

func (tapWriter) Sync() error { return nil }

// withTap adds the tap to a logger's core: enabled at every level while a watch is
// registered, disabled otherwise.
func withTap() uzap.Option {
	enabled := uzap.LevelEnablerFunc(func(zapcore.Level) bool { return tap.watching.Load() > 0 })
	cfg := uzap.NewDevelopmentEncoderConfig()
	core := zapcore.NewCore(zapcore.NewJSONEncoder(cfg), tapWriter{}, enabled)
	return uzap.WrapCore(func(c zapcore.Core) zapcore.Core { return zapcore.NewTee(c, core) })
}
