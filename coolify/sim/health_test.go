package sim_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"botpool.dev/botpool/coolify/sim"
)

// sensitiveToken may read deployment logs (read:sensitive).
const sensitiveToken = "3|ops-sensitive"

// recorder collects hook calls.
type recorder struct {
	mu     sync.Mutex
	events []sim.Container
}

func (r *recorder) hook(c sim.Container) { r.mu.Lock(); r.events = append(r.events, c); r.mu.Unlock() }

// reasons lists the reasons of app's hook calls, in order.
func (r *recorder) reasons(app string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range r.events {
		if c.AppUUID == app {
			out = append(out, c.Reason)
		}
	}
	return out
}

// twoServers is a harness with srv-1 (the default) and srv-2, both holding image "bot" so a
// deployment takes 8 s (warm pull and compose up).
func twoServers(t *testing.T, cfg sim.Config) (*harness, string) {
	h := newHarness(t, cfg)
	second := h.s.AddServer(sim.ServerSpec{UUID: "srv-2", Name: "bots-2"})
	h.s.WarmImage(h.fix.ServerUUID, "bot", "")
	h.s.WarmImage(second, "bot", "")
	return h, second
}

func deployment(t *testing.T, s *sim.Sim, uuid string) sim.DeploymentInfo {
	t.Helper()
	for _, d := range s.Deployments() {
		if d.UUID == uuid {
			return d
		}
	}
	t.Fatalf("no deployment %s", uuid)
	return sim.DeploymentInfo{}
}

// serverHealth reads is_reachable and is_usable of a server from GET /servers (top level and
// settings, which must agree) and from GET /servers/{uuid}.
func serverHealth(t *testing.T, h *harness, uuid string) (reachable, usable bool) {
	t.Helper()
	_, _, list := h.do(http.MethodGet, "/servers", nil)
	items, _ := list.([]any)
	found := false
	for _, it := range items {
		if field(it, "uuid") != uuid {
			continue
		}
		found = true
		settings := field(it, "settings")
		r, rok := field(it, "is_reachable").(bool)
		u, uok := field(it, "is_usable").(bool)
		if !rok || !uok || field(settings, "is_reachable") != r || field(settings, "is_usable") != u {
			t.Fatalf("GET /servers item %v: top level and settings disagree", it)
		}
		reachable, usable = r, u
	}
	if !found {
		t.Fatalf("GET /servers lacks %s: %v", uuid, list)
	}
	_, _, one := h.do(http.MethodGet, "/servers/"+uuid, nil)
	settings := field(one, "settings")
	if field(settings, "is_reachable") != reachable || field(settings, "is_usable") != usable {
		t.Fatalf("GET /servers/%s settings %v, the list said reachable=%v usable=%v", uuid, settings, reachable, usable)
	}
	return reachable, usable
}

func TestServerHealthInServers(t *testing.T) {
	h, second := twoServers(t, sim.Config{})
	check := func(step string, uuid string, reachable, usable bool) {
		t.Helper()
		if r, u := serverHealth(t, h, uuid); r != reachable || u != usable {
			t.Fatalf("%s: %s reads reachable=%v usable=%v, want %v %v", step, uuid, r, u, reachable, usable)
		}
	}
	check("seeded", second, true, true)
	h.s.SetServerUsable(second, false)
	check("Docker down", second, true, false)
	h.s.SetServerReachable(second, false)
	check("unreachable", second, false, false)
	check("the other server", h.fix.ServerUUID, true, true)
	h.s.SetServerReachable(second, true)
	check("reachable, Docker still down", second, true, false)
	h.s.SetServerUsable(second, true)
	check("back", second, true, true)

	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "srv-9") {
			t.Fatalf("an unknown server: recovered %v, want a panic naming it", r)
		}
	}()
	h.s.SetServerReachable("srv-9", false)
}

// A deployment to a server Coolify cannot reach is accepted, and fails with Coolify's log line
// when a worker takes it; the same deployment to the other server finishes. One running when
// the server goes fails at that moment, and its worker goes to the next deployment.
func TestDeployToUnreachableServerFails(t *testing.T) {
	h, second := twoServers(t, sim.Config{Workers: 1})
	h.s.AddToken(sensitiveToken, "ops", "read", "read:sensitive")
	on1, on2 := h.create("on-1", h.fix.ServerUUID, "bot"), h.create("on-2", second, "bot")
	h.s.SetServerReachable(second, false)
	d2 := h.deploy(on2)
	d1 := h.deploy(on1)
	if d1 == "" || d2 == "" {
		t.Fatalf("starts not accepted: %q %q", d1, d2)
	}
	h.s.Advance(time.Minute)
	got2, got1 := deployment(t, h.s, d2), deployment(t, h.s, d1)
	if got2.Status != "failed" || !got2.Finished.Equal(t0) || !slices.Equal(got2.Logs, []string{"Server is not functional."}) {
		t.Fatalf("deployment on the unreachable server = %+v", got2)
	}
	if got1.Status != "finished" {
		t.Fatalf("deployment on the reachable server = %+v", got1)
	}
	if a, _ := h.s.App(on2); a.Running {
		t.Fatal("a container started on the unreachable server")
	}
	// The log is in the API for a token that may read it, and hidden from others.
	_, _, body := h.do(http.MethodGet, "/deployments/"+d2, nil, "Authorization", "Bearer "+sensitiveToken)
	var logs []map[string]any
	if s, ok := field(body, "logs").(string); !ok || json.Unmarshal([]byte(s), &logs) != nil ||
		len(logs) != 1 || logs[0]["output"] != "Server is not functional." || logs[0]["type"] != "stderr" {
		t.Fatalf("logs with read:sensitive: %v", field(body, "logs"))
	}
	if _, _, body := h.do(http.MethodGet, "/deployments/"+d2, nil); body.(map[string]any)["logs"] != nil {
		t.Fatalf("logs shown without read:sensitive: %v", body)
	}

	// In flight: a cold pull on srv-1 loses its server a minute in; the deployment of srv-2's
	// app (reachable again), waiting for the only worker, gets it at that moment.
	h.s.SetServerReachable(second, true)
	cold := h.create("cold", h.fix.ServerUUID, "big")
	dc := h.deploy(cold)
	d2 = h.deploy(on2)
	h.s.Advance(time.Minute)
	if got := deployment(t, h.s, d2); got.HasWorker {
		t.Fatalf("deployment on srv-2 has a worker while the cold pull holds the only one: %+v", got)
	}
	h.s.SetServerReachable(h.fix.ServerUUID, false)
	lost := h.fc.Now()
	h.s.Advance(time.Minute)
	if got := deployment(t, h.s, dc); got.Status != "failed" || !got.Finished.Equal(lost) ||
		len(got.Logs) != 1 || !strings.Contains(got.Logs[0], "not reachable") {
		t.Fatalf("deployment in flight when its server went = %+v", got)
	}
	if got := deployment(t, h.s, d2); got.Status != "finished" || !got.Finished.Equal(lost.Add(8*time.Second)) {
		t.Fatalf("deployment waiting for the worker = %+v, want finished 8 s after %s", got, lost)
	}
}

// An outage of the connection leaves the containers running: their apps stay listed with the
// status last seen, a stop sent meanwhile is lost, and a container that dies meanwhile reads
// running until Coolify sees the server again.
func TestContainersSurviveReachabilityOutage(t *testing.T) {
	var rec recorder
	h, second := twoServers(t, sim.Config{Hooks: sim.Hooks{OnStart: rec.hook, OnStop: rec.hook}})
	h.s.WarmImage(second, "crashy", "")
	keep, dies := h.create("keep", second, "bot"), h.create("dies", second, "crashy")
	h.s.CrashContainers("crashy", sim.Crash{After: 5 * time.Minute})
	h.deploy(keep)
	h.deploy(dies)
	h.s.Advance(time.Minute) // up at 8 s, seen running after the 30 s lag
	for _, a := range []string{keep, dies} {
		if info, _ := h.s.App(a); info.Status != "running:unknown" {
			t.Fatalf("before the outage: %+v", info)
		}
	}

	h.s.SetServerReachable(second, false)
	if code, _, _ := h.do(http.MethodPost, "/applications/"+keep+"/stop", nil); code != http.StatusOK {
		t.Fatalf("stop during the outage: %d", code)
	}
	h.s.Advance(10 * time.Minute) // the stop's job has run; "dies" crashed at 5 min 8 s
	if info, _ := h.s.App(keep); !info.Running || info.Status != "running:unknown" {
		t.Fatalf("kept container during the outage: %+v", info)
	}
	if info, _ := h.s.App(dies); info.Running || info.TrueStatus != "exited:unhealthy" || info.Status != "running:unknown" {
		t.Fatalf("crashed container during the outage: %+v, want exited but shown running", info)
	}
	_, _, list := h.do(http.MethodGet, "/applications", nil)
	if items, _ := list.([]any); len(items) != 2 {
		t.Fatalf("apps listed during the outage: %v", list)
	}

	h.s.SetServerReachable(second, true)
	h.s.Advance(time.Minute)
	if info, _ := h.s.App(keep); !info.Running || info.Status != "running:unknown" {
		t.Fatalf("kept container after the outage: %+v (the lost stop must not run late)", info)
	}
	if info, _ := h.s.App(dies); info.Status != "exited:unhealthy" {
		t.Fatalf("crashed container after the outage: %+v", info)
	}
	if got := rec.reasons(keep); !slices.Equal(got, []string{"deployed"}) {
		t.Fatalf("hooks of the kept container: %v", got)
	}
	// Once back, a stop works.
	h.do(http.MethodPost, "/applications/"+keep+"/stop", nil)
	h.s.Advance(time.Minute)
	if info, _ := h.s.App(keep); info.Running || info.Status != "exited:unhealthy" {
		t.Fatalf("stop after the outage: %+v", info)
	}
}

// A deletion during an outage drops the application and leaves its container running, known to
// no one, until the server loses its containers.
func TestDeleteDuringOutageLeavesAnOrphan(t *testing.T) {
	var rec recorder
	h, second := twoServers(t, sim.Config{Hooks: sim.Hooks{OnStop: rec.hook}})
	app := h.create("gone", second, "bot")
	h.deploy(app)
	h.s.Advance(time.Minute)
	h.s.SetServerReachable(second, false)
	h.do(http.MethodDelete, "/applications/"+app, nil)
	h.s.Advance(time.Minute)
	if code, _, _ := h.do(http.MethodGet, "/applications/"+app, nil); code != http.StatusNotFound {
		t.Fatalf("deleted app answers %d", code)
	}
	if o := h.s.Orphans(); len(o) != 1 || o[0].UUID != app || !o[0].Running {
		t.Fatalf("orphans = %+v", o)
	}
	h.s.SetServerReachable(second, true)
	h.s.Advance(time.Hour)
	if o := h.s.Orphans(); len(o) != 1 {
		t.Fatalf("orphans once back = %+v: nothing removes them", o)
	}
	h.s.LoseServerContainers(second)
	if o := h.s.Orphans(); len(o) != 0 || !slices.Equal(rec.reasons(app), []string{"lost"}) {
		t.Fatalf("after losing the containers: orphans %+v, hooks %v", o, rec.reasons(app))
	}
}

// A server that comes back without its containers: they exit (hook "lost"), Coolify sees it once
// the server is back, the other server's containers are untouched, and the image cache stays.
func TestLoseServerContainers(t *testing.T) {
	var rec recorder
	h, second := twoServers(t, sim.Config{Hooks: sim.Hooks{OnStop: rec.hook}})
	here, there := h.create("here", h.fix.ServerUUID, "bot"), h.create("there", second, "bot")
	h.deploy(here)
	h.deploy(there)
	h.s.Advance(time.Minute)

	h.s.SetServerReachable(second, false)
	h.s.LoseServerContainers(second)
	h.s.Advance(time.Minute)
	if info, _ := h.s.App(there); info.Running || info.Status != "running:unknown" {
		t.Fatalf("lost container while unreachable: %+v, want exited and shown running", info)
	}
	h.s.SetServerReachable(second, true)
	h.s.Advance(time.Minute)
	if info, _ := h.s.App(there); info.Status != "exited:unhealthy" {
		t.Fatalf("lost container once back: %+v", info)
	}
	if info, _ := h.s.App(here); !info.Running || info.Status != "running:unknown" {
		t.Fatalf("the other server's container: %+v", info)
	}
	if got := rec.reasons(there); !slices.Equal(got, []string{"lost"}) || len(rec.reasons(here)) != 0 {
		t.Fatalf("stop hooks: there %v, here %v", got, rec.reasons(here))
	}

	start := h.fc.Now()
	d := h.deploy(there)
	h.s.Advance(time.Minute)
	if got := deployment(t, h.s, d); got.Status != "finished" || got.Finished.Sub(start) != 8*time.Second {
		t.Fatalf("redeploy after the loss = %+v, want a warm 8 s (the cache is kept)", got)
	}
	h.s.ClearImageCache(second)
	start = h.fc.Now()
	d = h.deploy(there)
	h.s.Advance(10 * time.Minute)
	if got := deployment(t, h.s, d); got.Finished.Sub(start) != 7*time.Minute+3*time.Second {
		t.Fatalf("deploy after ClearImageCache took %s, want a cold pull", got.Finished.Sub(start))
	}
}

// FailPullsOn fails one server's pulls of an image; the other server pulls it as usual.
func TestFailPullsOnOneServer(t *testing.T) {
	h, second := twoServers(t, sim.Config{})
	h.s.FailPullsOn(second, "bot", 1)
	here, there := h.create("here", h.fix.ServerUUID, "bot"), h.create("there", second, "bot")
	dh, dt := h.deploy(here), h.deploy(there)
	h.s.Advance(time.Minute)
	if got := deployment(t, h.s, dh); got.Status != "finished" {
		t.Fatalf("pull on the healthy server = %+v", got)
	}
	if got := deployment(t, h.s, dt); got.Status != "failed" || len(got.Logs) != 3 || !strings.Contains(got.Logs[1], "pull access denied for bot") {
		t.Fatalf("pull on the failing server = %+v", got)
	}
	dt = h.deploy(there)
	h.s.Advance(time.Minute)
	if got := deployment(t, h.s, dt); got.Status != "finished" {
		t.Fatalf("second pull on srv-2 (one failure asked) = %+v", got)
	}
	// FailPulls still applies to every server.
	h.s.FailPulls("bot", 2)
	dh, dt = h.deploy(here), h.deploy(there)
	h.s.Advance(time.Minute)
	if a, b := deployment(t, h.s, dh), deployment(t, h.s, dt); a.Status != "failed" || b.Status != "failed" {
		t.Fatalf("FailPulls on both servers: %s, %s", a.Status, b.Status)
	}
}
