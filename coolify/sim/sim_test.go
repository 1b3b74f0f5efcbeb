package sim_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"botpool.dev/botpool/coolify/sim"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

type harness struct {
	t   testing.TB
	s   *sim.Sim
	fc  *clocktesting.FakeClock
	fix sim.Fixture
}

func newHarness(t *testing.T, cfg sim.Config) *harness {
	fc := clocktesting.NewFakeClock(t0)
	cfg.Clock = fc
	s := sim.New(cfg)
	return &harness{t: t, s: s, fc: fc, fix: s.SeedDefault()}
}

// do sends one request straight to the handler.
func (h *harness) do(method, path string, body any, hdr ...string) (int, http.Header, any) {
	h.t.Helper()
	var buf bytes.Buffer
	if body != nil {
		_ = json.NewEncoder(&buf).Encode(body)
	}
	req := httptest.NewRequest(method, "/api/v1"+path, &buf)
	req.Header.Set("Authorization", "Bearer "+h.fix.Token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.s.ServeHTTP(rec, req)
	var out any
	_ = json.Unmarshal(rec.Body.Bytes(), &out)
	return rec.Code, rec.Header(), out
}

func field(v any, k string) any {
	if m, ok := v.(map[string]any); ok {
		return m[k]
	}
	return nil
}

func (h *harness) create(name, server, image string) string {
	h.t.Helper()
	code, _, body := h.do(http.MethodPost, "/applications/dockerimage", map[string]any{
		"project_uuid": h.fix.ProjectUUID, "server_uuid": server, "environment_uuid": h.fix.EnvironmentUUID,
		"docker_registry_image_name": image, "name": name, "ports_exposes": "3000", "instant_deploy": false})
	if code != http.StatusCreated {
		h.t.Fatalf("create %s: %d %v", name, code, body)
	}
	return field(body, "uuid").(string)
}

func (h *harness) deploy(app string) string {
	h.t.Helper()
	code, _, body := h.do(http.MethodPost, "/applications/"+app+"/start", nil)
	if code != http.StatusOK {
		h.t.Fatalf("start: %d %v", code, body)
	}
	u, _ := field(body, "deployment_uuid").(string)
	return u
}

func statuses(ds []sim.DeploymentInfo) map[string]int {
	m := map[string]int{}
	for _, d := range ds {
		m[d.Status]++
	}
	return m
}

func TestConcurrentBuildsAndSharedWorkers(t *testing.T) {
	h := newHarness(t, sim.Config{Workers: 3})
	second := h.s.AddServer(sim.ServerSpec{UUID: "srv-2"})
	for i, srv := range []string{h.fix.ServerUUID, h.fix.ServerUUID, h.fix.ServerUUID, second, second} {
		h.deploy(h.create(string(rune('a'+i)), srv, "bot"))
	}
	ds := h.s.Deployments()
	if got := statuses(ds); got["in_progress"] != 4 || got["queued"] != 1 {
		t.Fatalf("statuses = %v, want 2 building per server and 1 queued", got)
	}
	workers := 0
	for _, d := range ds {
		if d.HasWorker {
			workers++
		}
	}
	if workers != 3 {
		t.Fatalf("%d deployments have a worker, want the instance's 3", workers)
	}
	h.s.Advance(2 * time.Hour)
	if got := statuses(h.s.Deployments()); got["finished"] != 5 {
		t.Fatalf("statuses after 2h = %v", got)
	}
}

func TestColdPullThenCache(t *testing.T) {
	h := newHarness(t, sim.Config{ColdPull: 7 * time.Minute, WarmPull: 5 * time.Second, ComposeUp: 3 * time.Second})
	a, b := h.create("a", h.fix.ServerUUID, "bot:2"), h.create("b", h.fix.ServerUUID, "bot:2")
	h.deploy(a)
	h.s.Advance(7*time.Minute + 3*time.Second)
	h.deploy(b)
	h.s.Advance(8 * time.Second)
	ds := h.s.Deployments()
	if d := ds[0].Finished.Sub(ds[0].Created); d != 7*time.Minute+3*time.Second {
		t.Errorf("cold deployment took %s", d)
	}
	if d := ds[1].Finished.Sub(ds[1].Created); d != 8*time.Second {
		t.Errorf("warm deployment took %s", d)
	}
}

// One big clock step must give the same history as many small ones: events run at their
// own times, and freed capacity is reused at the moment it frees up.
func TestBigStepEqualsSmallSteps(t *testing.T) {
	run := func(step time.Duration) []time.Time {
		h := newHarness(t, sim.Config{Workers: 2})
		for i := range 6 {
			h.deploy(h.create(string(rune('a'+i)), h.fix.ServerUUID, "img"+string(rune('0'+i%2))))
		}
		for elapsed := time.Duration(0); elapsed < time.Hour; elapsed += step {
			h.s.Advance(step)
		}
		var out []time.Time
		for _, d := range h.s.Deployments() {
			out = append(out, d.Finished)
		}
		return out
	}
	big, small := run(time.Hour), run(7*time.Second)
	if !slices.Equal(big, small) {
		t.Fatalf("finish times differ:\n big   %v\n small %v", big, small)
	}
}

func TestHooksCrashLoopAndStatusLag(t *testing.T) {
	var mu sync.Mutex
	var events []sim.Container
	hook := func(c sim.Container) { mu.Lock(); events = append(events, c); mu.Unlock() }
	h := newHarness(t, sim.Config{Hooks: sim.Hooks{OnStart: hook, OnStop: hook}, StatusLag: time.Minute})
	app := h.create("slot-0", h.fix.ServerUUID, "crashy")
	h.do(http.MethodPatch, "/applications/"+app+"/envs/bulk", map[string]any{"data": []any{map[string]any{"key": "POOL_SLOT_UUID", "value": app}}})
	h.s.WarmImage(h.fix.ServerUUID, "crashy", "")
	h.s.CrashContainers("crashy", sim.Crash{After: 20 * time.Second, Loop: true})
	h.deploy(app)
	h.s.Advance(8 * time.Second)
	mu.Lock()
	if len(events) != 1 || events[0].Reason != "deployed" || events[0].Env["POOL_SLOT_UUID"] != app {
		t.Fatalf("start hook = %+v", events)
	}
	mu.Unlock()
	if info, _ := h.s.App(app); info.Status != "exited:unhealthy" || info.TrueStatus != "running:unknown" {
		t.Fatalf("before the lag: %+v", info)
	}
	h.s.Advance(20 * time.Second) // crash
	h.s.Advance(time.Minute)      // lag
	info, _ := h.s.App(app)
	if info.Status != "restarting:unknown" || info.Restarts != 1 {
		t.Fatalf("after a crash loop: %+v", info)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 || events[1].Reason != "crash-loop" || events[1].Seq <= events[0].Seq ||
		events[1].At.Sub(events[0].At) != 20*time.Second {
		t.Fatalf("hooks = %+v", events)
	}
}

func TestPullFailureAndStopDuringDeploy(t *testing.T) {
	h := newHarness(t, sim.Config{})
	a := h.create("a", h.fix.ServerUUID, "private/bot")
	h.s.FailPulls("private/bot", 1)
	dep := h.deploy(a)
	h.s.Advance(10 * time.Minute)
	_, _, body := h.do(http.MethodGet, "/deployments/"+dep, nil)
	if field(body, "status") != "failed" {
		t.Fatalf("deployment after a failed pull: %v", body)
	}
	// Stop does not cancel a deployment in flight: the container comes back.
	h.deploy(a)
	h.do(http.MethodPost, "/applications/"+a+"/stop", nil)
	h.s.Advance(10 * time.Minute)
	if info, _ := h.s.App(a); !info.Running {
		t.Fatal("the deployment after a stop did not start the container")
	}
	// Cancel answers 400 once terminal.
	if code, _, _ := h.do(http.MethodPost, "/deployments/"+dep+"/cancel", nil); code != http.StatusBadRequest {
		t.Fatalf("cancel of a failed deployment: %d", code)
	}
}

func TestRateLimitPerUser(t *testing.T) {
	h := newHarness(t, sim.Config{RateLimit: 3})
	h.s.AddToken("2|second-token-of-ops", "ops", "read")
	code, hdr, _ := h.do(http.MethodGet, "/servers", nil)
	if code != 200 || hdr.Get("X-RateLimit-Limit") != "3" || hdr.Get("X-RateLimit-Remaining") != "2" {
		t.Fatalf("first: %d %v", code, hdr)
	}
	h.do(http.MethodGet, "/servers", nil)
	h.do(http.MethodGet, "/servers", nil, "Authorization", "Bearer 2|second-token-of-ops") // same user
	h.fc.Step(15 * time.Second)
	code, hdr, body := h.do(http.MethodGet, "/servers", nil)
	if code != 429 || field(body, "message") != "Too Many Attempts." || hdr.Get("Retry-After") != "45" || hdr.Get("X-RateLimit-Reset") == "" {
		t.Fatalf("fourth: %d %v %v", code, hdr, body)
	}
	if code, _, _ := h.do(http.MethodGet, "/servers", nil, "Accept", "text/html"); code != 429 {
		t.Fatalf("HTML 429: %d", code)
	}
	h.fc.Step(45 * time.Second)
	if code, _, _ := h.do(http.MethodGet, "/servers", nil); code != 200 {
		t.Fatalf("after the window: %d", code)
	}
}

func TestAnswersWithoutAcceptJSON(t *testing.T) {
	h := newHarness(t, sim.Config{})
	code, hdr, _ := h.do(http.MethodPatch, "/applications/"+h.create("a", h.fix.ServerUUID, "bot"),
		map[string]any{"bogus": true}, "Accept", "")
	if code != http.StatusFound || hdr.Get("Location") == "" {
		t.Fatalf("422 without Accept: %d %v", code, hdr)
	}
}

func TestFaults(t *testing.T) {
	h := newHarness(t, sim.Config{})
	h.s.SetOutage(true)
	if code, _, _ := h.do(http.MethodGet, "/health", nil); code != http.StatusServiceUnavailable {
		t.Fatalf("health during an outage: %d", code)
	}
	h.s.SetOutage(false)
	h.s.SetFault("*", sim.Fault{ErrorRate: 1})
	if code, _, body := h.do(http.MethodGet, "/servers", nil); code != 500 || field(body, "message") != "Server Error" {
		t.Fatalf("error rate 1: %d %v", code, body)
	}
	h.s.SetFault("*", sim.Fault{})
	if code, _, _ := h.do(http.MethodGet, "/servers", nil); code != 200 {
		t.Fatalf("after clearing: %d", code)
	}
	if h.s.Counts()["list-servers"][500] != 1 || h.s.CountCode(503) != 1 {
		t.Fatalf("counts = %v", h.s.Counts())
	}
}

func TestServerCapacityPatch(t *testing.T) {
	h := newHarness(t, sim.Config{})
	code, _, _ := h.do(http.MethodPatch, "/servers/"+h.fix.ServerUUID, map[string]any{"concurrent_builds": 4, "deployment_queue_limit": 50})
	_, _, body := h.do(http.MethodGet, "/servers/"+h.fix.ServerUUID, nil)
	settings, _ := field(body, "settings").(map[string]any)
	if code != http.StatusCreated || settings["concurrent_builds"] != float64(4) || settings["deployment_queue_limit"] != float64(50) {
		t.Fatalf("patch %d, server %v", code, body)
	}
}

// Start runs in real time × Speed: a 7-minute cold pull at speed 10,000 takes 42 ms.
func TestStartRealTimeWithSpeed(t *testing.T) {
	started := make(chan sim.Container, 1)
	s := sim.New(sim.Config{Speed: 10_000, Hooks: sim.Hooks{OnStart: func(c sim.Container) { started <- c }}})
	fix := s.SeedDefault()
	srv := sim.Start(s)
	defer srv.Close()
	body, _ := json.Marshal(map[string]any{"project_uuid": fix.ProjectUUID, "server_uuid": fix.ServerUUID,
		"environment_name": "production", "docker_registry_image_name": "bot", "instant_deploy": true})
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/applications/dockerimage", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+fix.Token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	select {
	case c := <-started:
		if c.Reason != "deployed" {
			t.Fatalf("hook = %+v", c)
		}
	case <-time.After(time.Minute): // a liveness bound
		t.Fatal("the container never started")
	}
}

// BenchmarkDeployCycle measures the simulator's cost of one slot's create, deploy, run and stop.
func BenchmarkDeployCycle(b *testing.B) {
	fc := clocktesting.NewFakeClock(t0)
	s := sim.New(sim.Config{Clock: fc, RateLimit: -1})
	h := &harness{t: b, s: s, fc: fc, fix: s.SeedDefault()}
	b.ResetTimer()
	for i := range b.N {
		app := h.create("slot-"+strconv.Itoa(i), h.fix.ServerUUID, "bot")
		h.deploy(app)
		s.Advance(8 * time.Minute)
		h.do(http.MethodPost, "/applications/"+app+"/stop", nil)
	}
}

// TestFaultRetryAfter: an injected 429 answers as Coolify's throttle does, with the fault's
// Retry-After (a hostile server's year included).
func TestFaultRetryAfter(t *testing.T) {
	h := newHarness(t, sim.Config{})
	h.s.SetFault("*", sim.Fault{Burst: 1, BurstCode: http.StatusTooManyRequests, RetryAfter: 365 * 24 * time.Hour})
	code, hdr, body := h.do(http.MethodGet, "/servers", nil)
	if code != http.StatusTooManyRequests || hdr.Get("Retry-After") != "31536000" || field(body, "message") != "Too Many Attempts." {
		t.Fatalf("injected 429: %d %v %v", code, hdr, body)
	}
	if code, hdr, _ := h.do(http.MethodGet, "/servers", nil); code != 200 || hdr.Get("Retry-After") != "" {
		t.Fatalf("after the burst: %d %v", code, hdr)
	}
}
