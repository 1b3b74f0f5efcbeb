package modelcheck

import (
	"bytes"
	"encoding/json"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"botpool.dev/botpool/coolify/sim"
)

// inProcess is an http.RoundTripper that serves requests with a handler in the calling
// goroutine: the real Coolify client talks to the simulator without sockets or goroutines,
// so a run is sequential and replayable. Latency, when set, passes on the fake clock (a slow
// Coolify makes a reconcile see time move under it); real time never matters in the model.
type inProcess struct {
	sim  *sim.Sim
	clk  *clocktesting.FakeClock
	seed uint64

	mu      sync.Mutex
	latency time.Duration
	// lagging makes deployment records lag behind the containers (see lagged); fixedLag, when
	// set, is the lag of every deployment (for scripts).
	lagging  bool
	fixedLag time.Duration
}

func (t *inProcess) setLagging(on bool) {
	t.mu.Lock()
	t.lagging = on
	t.mu.Unlock()
}

func (t *inProcess) setLatency(d time.Duration) {
	t.mu.Lock()
	t.latency = d
	t.mu.Unlock()
}

// RoundTrip implements http.RoundTripper.
func (t *inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	t.mu.Lock()
	d, lagging := t.latency, t.lagging
	t.mu.Unlock()
	if d > 0 {
		t.clk.Step(d)
	}
	rec := httptest.NewRecorder()
	t.sim.ServeHTTP(rec, r)
	res := rec.Result()
	if lagging && r.Method == http.MethodGet && res.StatusCode == http.StatusOK && strings.HasPrefix(r.URL.Path, "/api/v1/deployments") {
		body, err := io.ReadAll(res.Body)
		if err != nil {
			return nil, err
		}
		body = t.lagRecords(r.URL.Path, body)
		res.Body, res.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		res.Header.Set("Content-Length", strconv.Itoa(len(body)))
	}
	return res, nil
}

// lagged is how long a deployment's record reads in_progress after it finished: for half of
// the deployments (by uuid), up to 40 minutes. Real Coolify's records trail its containers
// under load; this is what the heartbeat-aware stale-deploying rules are for (invariant 8).
func (t *inProcess) lagged(uuid string) time.Duration {
	if t.fixedLag > 0 {
		return t.fixedLag
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(strconv.FormatUint(t.seed, 10) + "/" + uuid))
	n := h.Sum64()
	if n%2 == 0 {
		return 0
	}
	return time.Duration(n/2%2400) * time.Second
}

// stuck reports whether a finished deployment still reads in_progress now.
func (t *inProcess) stuck(uuid string, finished time.Time) bool {
	return !finished.IsZero() && t.clk.Now().Before(finished.Add(t.lagged(uuid)))
}

// lagRecords rewrites the answers about deployments: a stuck one reads in_progress, and the
// list of active deployments holds it.
func (t *inProcess) lagRecords(path string, body []byte) []byte {
	rewrite := func(d map[string]any) {
		uuid, _ := d["deployment_uuid"].(string)
		at, _ := d["finished_at"].(string)
		finished, err := time.Parse(time.RFC3339Nano, at)
		if d["status"] == "finished" && err == nil && t.stuck(uuid, finished) {
			d["status"], d["finished_at"] = "in_progress", nil
		}
	}
	var out any
	switch rest := strings.TrimPrefix(path, "/api/v1/deployments"); {
	case rest == "": // the active deployments: add the stuck ones
		var list []map[string]any
		must(json.Unmarshal(body, &list))
		for _, d := range t.sim.Deployments() {
			if d.Status == "finished" && t.stuck(d.UUID, d.Finished) {
				rec := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodGet, "/api/v1/deployments/"+d.UUID, nil)
				req.Header.Set("Authorization", "Bearer "+sim.DefaultToken)
				t.sim.ServeHTTP(rec, req)
				var m map[string]any
				if rec.Code == http.StatusOK && json.Unmarshal(rec.Body.Bytes(), &m) == nil {
					rewrite(m)
					list = append(list, m)
				}
			}
		}
		out = list
	case strings.HasPrefix(rest, "/applications/"):
		var page map[string]any
		must(json.Unmarshal(body, &page))
		deps, _ := page["deployments"].([]any)
		for _, d := range deps {
			if m, ok := d.(map[string]any); ok {
				rewrite(m)
			}
		}
		out = page
	default:
		var m map[string]any
		must(json.Unmarshal(body, &m))
		rewrite(m)
		out = m
	}
	b, err := json.Marshal(out)
	must(err)
	return b
}

// retryClock is the Coolify client's clock: the model's time, but its waits (retry backoff,
// Retry-After) end at once. The client's retries still run and each attempt still meets the
// simulator's faults; only the wall time they would cost is gone. The reconcilers' own timers
// are not affected: they requeue on the model's clock.
type retryClock struct{ clock.PassiveClock }

func (c retryClock) After(time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- c.Now()
	return ch
}

func (c retryClock) NewTimer(time.Duration) clock.Timer { return firedTimer{c.After(0)} }
func (retryClock) Sleep(time.Duration)                  {}
func (c retryClock) Tick(time.Duration) <-chan time.Time {
	return c.After(0)
}

type firedTimer struct{ c <-chan time.Time }

func (t firedTimer) C() <-chan time.Time    { return t.c }
func (firedTimer) Stop() bool               { return false }
func (firedTimer) Reset(time.Duration) bool { return false }
