package coolify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/coolify/sim"
)

// autoClock is a fake clock whose timers fire at once after moving time forward: a client
// waiting 60 s for Retry-After moves the simulator's world 60 s on, in no real time.
type autoClock struct{ *clocktesting.FakeClock }

func (c autoClock) NewTimer(d time.Duration) clock.Timer {
	c.Step(d)
	return firedTimer(c.Now())
}

func (c autoClock) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).C() }

type firedTimerT struct{ ch chan time.Time }

func firedTimer(now time.Time) clock.Timer {
	ch := make(chan time.Time, 1)
	ch <- now
	return firedTimerT{ch}
}

func (f firedTimerT) C() <-chan time.Time { return f.ch }
func (firedTimerT) Stop() bool            { return false }
func (firedTimerT) Reset(time.Duration) bool {
	return false
}

// env is a simulator on a fake clock, a client validated against the spec, and a raw HTTP
// client for requests outside the contract. The simulator is served without its background
// ticker: time moves only when a test (or the client's waits) moves it.
type env struct {
	t       *testing.T
	clock   autoClock
	sim     *sim.Sim
	fix     sim.Fixture
	url     string
	client  *coolify.Client
	http    *http.Client
	checker *contractChecker
}

func newEnv(t *testing.T, cfg sim.Config, opts ...coolify.Option) *env {
	t.Helper()
	fc := autoClock{clocktesting.NewFakeClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))}
	cfg.Clock = fc
	s := sim.New(cfg)
	fix := s.SeedDefault()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	checker := newChecker(t)
	hc := &http.Client{Transport: &transport{base: http.DefaultTransport, checker: checker}}
	all := append([]coolify.Option{coolify.WithHTTPClient(hc), coolify.WithClock(fc), coolify.WithTimeout(5 * time.Second)}, opts...)
	c, err := coolify.New(srv.URL, fix.Token, all...)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, clock: fc, sim: s, fix: fix, url: srv.URL, client: c, http: hc, checker: checker}
	t.Cleanup(func() { checker.finish(t) })
	return e
}

// ctx bounds a test's calls: a liveness bound, not a speed target (the simulator runs on the
// fake clock; 230 calls under the race detector on a busy machine once took longer than 10 s).
func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	e.t.Cleanup(cancel)
	return ctx
}

// createApp creates a slot-like application and returns its uuid.
func (e *env) createApp(name string) string {
	e.t.Helper()
	uuid, err := e.client.CreateDockerImageApplication(e.ctx(), coolify.CreateApplicationRequest{
		ProjectUUID: e.fix.ProjectUUID, ServerUUID: e.fix.ServerUUID, EnvironmentName: e.fix.EnvironmentName,
		Image: "ghcr.io/example/bot", Tag: "1.0", Name: name, Description: "[IDLE] Available",
		LimitsCPUs: "1", LimitsMemory: "2048m", Tags: []string{"pool-a"},
	})
	if err != nil {
		e.t.Fatalf("create %s: %v", name, err)
	}
	return uuid
}

// raw sends a request outside the client: only the answer is checked against the spec.
func (e *env) raw(method, path string, body any, header map[string]string) (int, http.Header, map[string]any) {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	ctx := context.WithValue(e.ctx(), rawRequest, true)
	req, err := http.NewRequestWithContext(ctx, method, e.url+"/api/v1"+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+e.fix.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := e.http.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	return resp.StatusCode, resp.Header, m
}
