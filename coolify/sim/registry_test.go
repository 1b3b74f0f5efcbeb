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

// pulls collects OnPull calls.
type pulls struct {
	mu   sync.Mutex
	list []sim.PullInfo
}

func (p *pulls) hook(i sim.PullInfo) { p.mu.Lock(); p.list = append(p.list, i); p.mu.Unlock() }

func (p *pulls) all() []sim.PullInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.list)
}

// createTagged creates an application of image:tag with the given limits ("" for none).
func (h *harness) createTagged(name, server, image, tag, cpus, mem string) string {
	h.t.Helper()
	body := map[string]any{
		"project_uuid": h.fix.ProjectUUID, "server_uuid": server, "environment_uuid": h.fix.EnvironmentUUID,
		"docker_registry_image_name": image, "docker_registry_image_tag": tag, "name": name, "ports_exposes": "3000"}
	if cpus != "" {
		body["limits_cpus"], body["limits_memory"] = cpus, mem
	}
	code, _, out := h.do(http.MethodPost, "/applications/dockerimage", body)
	if code != http.StatusCreated {
		h.t.Fatalf("create %s: %d %v", name, code, out)
	}
	return field(out, "uuid").(string)
}

// A tag is not a version: PushImage gives image:tag a new digest, the server's cache keeps the
// digest it pulled, so the next deployment there pulls cold, and the one after is warm again.
// Each deployment records its pull, and OnPull reports it as it starts.
func TestPushImageMakesTheNextPullCold(t *testing.T) {
	var rec pulls
	h := newHarness(t, sim.Config{Hooks: sim.Hooks{OnPull: rec.hook}})
	second := h.s.AddServer(sim.ServerSpec{UUID: "srv-2"})
	h.s.WarmImage(h.fix.ServerUUID, "bot", "v1")
	h.s.WarmImage(second, "bot", "v1")
	a := h.createTagged("a", h.fix.ServerUUID, "bot", "v1", "", "")
	old := h.s.ImageDigest("bot", "v1")
	if got, ok := h.s.CachedImage(h.fix.ServerUUID, "bot", "v1"); !ok || got != old || !strings.HasPrefix(old, "sha256:") {
		t.Fatalf("warmed cache holds %q (%v), want the registry's %q", got, ok, old)
	}

	took := func() (sim.DeploymentInfo, time.Duration) {
		t.Helper()
		start := h.fc.Now()
		d := h.deploy(a)
		h.s.Advance(10 * time.Minute)
		got := deployment(t, h.s, d)
		if got.Status != "finished" || got.Ref != "bot:v1" || !got.PullStarted.Equal(start) {
			t.Fatalf("deployment = %+v, want finished, of bot:v1, pulling from %s", got, start)
		}
		return got, got.Finished.Sub(start)
	}
	if got, d := took(); got.Cold || d != 8*time.Second || got.Digest != old {
		t.Fatalf("before a push: cold %v in %s (digest %s), want warm in 8s", got.Cold, d, got.Digest)
	}
	pushed := h.s.PushImage("bot", "v1")
	if pushed == old || h.s.ImageDigest("bot", "v1") != pushed {
		t.Fatalf("push kept the digest %s", old)
	}
	if got, ok := h.s.CachedImage(second, "bot", "v1"); !ok || got != old {
		t.Fatalf("a push changed srv-2's cache to %q", got)
	}
	if got, d := took(); !got.Cold || d != 7*time.Minute+3*time.Second || got.Digest != pushed {
		t.Fatalf("after a push: cold %v in %s (digest %s), want a cold pull of %s", got.Cold, d, got.Digest, pushed)
	}
	if got, _ := h.s.CachedImage(h.fix.ServerUUID, "bot", "v1"); got != pushed {
		t.Fatalf("cache after the cold pull = %s, want %s", got, pushed)
	}
	if got, _ := took(); got.Cold {
		t.Fatal("the pull after a cold one was cold again")
	}

	got := rec.all()
	if len(got) != 3 {
		t.Fatalf("OnPull called %d times, want 3: %+v", len(got), got)
	}
	for i, cold := range []bool{false, true, false} {
		if got[i].Cold != cold || got[i].AppUUID != a || got[i].AppName != "a" || got[i].ServerUUID != h.fix.ServerUUID ||
			got[i].Ref != "bot:v1" || got[i].DeploymentUUID == "" || (i > 0 && got[i].Seq <= got[i-1].Seq) {
			t.Errorf("pull %d = %+v, want cold %v", i, got[i], cold)
		}
	}
}

// A pull starts when a worker takes the deployment, not when it is queued: that is when the
// deployment reads the registry and the cache, and when OnPull fires.
func TestPullStartsWithTheWorker(t *testing.T) {
	var rec pulls
	h := newHarness(t, sim.Config{Workers: 1, Hooks: sim.Hooks{OnPull: rec.hook}})
	h.s.WarmImage(h.fix.ServerUUID, "bot", "")
	first, second := h.deploy(h.create("a", h.fix.ServerUUID, "bot")), h.deploy(h.create("b", h.fix.ServerUUID, "bot"))
	if got := deployment(t, h.s, second); !got.PullStarted.IsZero() || got.Ref != "" || len(rec.all()) != 1 {
		t.Fatalf("waiting for the worker: %+v, %d pulls reported", got, len(rec.all()))
	}
	h.s.Advance(time.Minute)
	f, s := deployment(t, h.s, first), deployment(t, h.s, second)
	if !s.PullStarted.Equal(f.Finished) || !s.PullStarted.Equal(t0.Add(8*time.Second)) {
		t.Fatalf("second pull started at %s, want when the first freed the worker (%s)", s.PullStarted, f.Finished)
	}
	if got := rec.all(); len(got) != 2 || !got[1].At.Equal(s.PullStarted) || got[1].DeploymentUUID != second {
		t.Fatalf("pulls reported %+v", got)
	}
}

// OnPulled reports a pull when it put its image in the server's cache, at that moment: a pull
// that failed never does, whatever OnPull said when it started.
func TestOnPulledReportsOnlyPullsThatFilledTheCache(t *testing.T) {
	var started, filled pulls
	h := newHarness(t, sim.Config{Hooks: sim.Hooks{OnPull: started.hook, OnPulled: filled.hook}})
	ok, bad := h.create("ok", h.fix.ServerUUID, "bot"), h.create("bad", h.fix.ServerUUID, "other")
	h.s.FailPulls("other", 1)
	dOK, dBad := h.deploy(ok), h.deploy(bad)
	h.s.Advance(10 * time.Minute)
	if got := deployment(t, h.s, dBad); got.Status != "failed" {
		t.Fatalf("the failing pull's deployment ended %s", got.Status)
	}
	fin := deployment(t, h.s, dOK)
	if got := started.all(); len(got) != 2 {
		t.Fatalf("OnPull called %d times, want 2: %+v", len(got), got)
	}
	got := filled.all()
	if len(got) != 1 || got[0].DeploymentUUID != dOK || got[0].Ref != "bot:latest" || !got[0].Cold || !got[0].At.Equal(fin.Finished) {
		t.Fatalf("OnPulled = %+v, want only %s's pull of bot:latest at %s", got, dOK, fin.Finished)
	}
	if _, cached := h.s.CachedImage(h.fix.ServerUUID, "other", ""); cached {
		t.Fatal("the failed pull filled the cache")
	}
}

// A failing pull fails PullFailAfter into the pull (scaled by Speed), not after the whole
// pull and compose up; it leaves the cache as it was; its log names the kind of failure, the
// way Coolify logs a failed command, readable through the deployment's logs field.
func TestFailedPullFailsEarlyAndKeepsTheCache(t *testing.T) {
	h := newHarness(t, sim.Config{Speed: 10})
	h.s.AddToken(sensitiveToken, "ops", "read", "read:sensitive")
	second := h.s.AddServer(sim.ServerSpec{UUID: "srv-2"})
	h.s.WarmImage(h.fix.ServerUUID, "ghcr.io/x/bot", "v1")
	old := h.s.ImageDigest("ghcr.io/x/bot", "v1")
	h.s.PushImage("ghcr.io/x/bot", "v1") // srv-1 holds an older digest: the pull would be cold
	here, there := h.createTagged("here", h.fix.ServerUUID, "ghcr.io/x/bot", "v1", "", ""), h.createTagged("there", second, "ghcr.io/x/bot", "v1", "", "")

	h.s.FailPulls("ghcr.io/x/bot:v1", 1)
	h.s.FailPullsOn(second, "ghcr.io/x/bot:v1", 1)
	dh, dt := h.deploy(here), h.deploy(there)
	h.s.Advance(499 * time.Millisecond)
	if got := deployment(t, h.s, dh); got.Status != "in_progress" {
		t.Fatalf("before PullFailAfter/Speed: %s", got.Status)
	}
	h.s.Advance(time.Millisecond)
	for _, tc := range []struct{ uuid, line string }{
		{dh, "Error response from daemon: manifest for ghcr.io/x/bot:v1 not found: manifest unknown: manifest unknown"},
		{dt, "Error response from daemon: pull access denied for ghcr.io/x/bot, repository does not exist or may require 'docker login'"},
	} {
		got := deployment(t, h.s, tc.uuid)
		if got.Status != "failed" || !got.Finished.Equal(t0.Add(500*time.Millisecond)) {
			t.Fatalf("deployment %+v, want failed 5 s (scaled: 500 ms) into a 7-minute pull", got)
		}
		_, _, body := h.do(http.MethodGet, "/deployments/"+tc.uuid, nil, "Authorization", "Bearer "+sensitiveToken)
		var logs []map[string]any
		if s, ok := field(body, "logs").(string); !ok || json.Unmarshal([]byte(s), &logs) != nil || len(logs) != 3 {
			t.Fatalf("logs = %v", field(body, "logs"))
		}
		if logs[0]["type"] != "stderr" || !strings.HasPrefix(logs[0]["output"].(string), "Oops something is not okay") ||
			logs[1]["type"] != "stderr" || !strings.HasPrefix(logs[1]["output"].(string), tc.line) ||
			logs[2]["type"] != "stdout" || logs[2]["output"] != "Deployment failed. Removing the new version of your application." {
			t.Fatalf("logs = %v, want Coolify's marker, %q, and its cleanup line", logs, tc.line)
		}
	}
	if got, ok := h.s.CachedImage(h.fix.ServerUUID, "ghcr.io/x/bot", "v1"); !ok || got != old {
		t.Fatalf("cache after a failed pull = %q (%v), want the old digest kept", got, ok)
	}
	if _, ok := h.s.CachedImage(second, "ghcr.io/x/bot", "v1"); ok {
		t.Fatal("a failed pull cached the image")
	}
	// Each switch was for one pull: the next ones pull cold, as the failed ones left the caches.
	dh, dt = h.deploy(here), h.deploy(there)
	h.s.Advance(time.Hour)
	for _, uuid := range []string{dh, dt} {
		if got := deployment(t, h.s, uuid); got.Status != "finished" || !got.Cold {
			t.Fatalf("the pull after a failed one = %+v, want a cold finished pull", got)
		}
	}
}

// A pull shorter than PullFailAfter fails when it would have ended; a switch set once a pull
// is past PullFailAfter fails the next pull, not that one (the registry already answered).
func TestPullFailureTiming(t *testing.T) {
	h := newHarness(t, sim.Config{WarmPull: 2 * time.Second})
	h.s.WarmImage(h.fix.ServerUUID, "bot", "")
	a := h.create("a", h.fix.ServerUUID, "bot")
	h.s.FailPulls("bot", 1)
	d := h.deploy(a)
	h.s.Advance(time.Minute)
	if got := deployment(t, h.s, d); got.Status != "failed" || got.Finished.Sub(got.PullStarted) != 2*time.Second {
		t.Fatalf("warm failing pull = %+v, want failed after the 2 s pull", got)
	}

	b := h.create("b", h.fix.ServerUUID, "cold")
	d = h.deploy(b)
	h.s.Advance(6 * time.Second)
	h.s.FailPulls("cold", 1)
	h.s.Advance(10 * time.Minute)
	if got := deployment(t, h.s, d); got.Status != "finished" {
		t.Fatalf("pull already past PullFailAfter = %+v, want finished", got)
	}
	d = h.deploy(b)
	h.s.Advance(time.Minute)
	if got := deployment(t, h.s, d); got.Status != "failed" {
		t.Fatalf("the next pull = %+v, want it to take the failure", got)
	}
}

// PATCH stores the limits as it stores the image: the application reads them at once, the
// running container keeps what it was started with, and the next deployment applies them. A
// deployment already pulling keeps what it read as it started. An empty PATCH is refused.
func TestPatchAppliesAtTheNextDeployment(t *testing.T) {
	var rec recorder
	h := newHarness(t, sim.Config{Hooks: sim.Hooks{OnStart: rec.hook}})
	a := h.createTagged("a", h.fix.ServerUUID, "bot", "v1", "1", "2048m")
	h.deploy(a)
	h.s.Advance(time.Second) // the deployment has read the application: a PATCH now is for the next one
	patch := map[string]any{"docker_registry_image_tag": "v2", "limits_cpus": "2", "limits_memory": "4096m"}
	if code, _, body := h.do(http.MethodPatch, "/applications/"+a, patch); code != http.StatusOK || field(body, "uuid") != a {
		t.Fatalf("patch: %d %v", code, body)
	}
	_, _, got := h.do(http.MethodGet, "/applications/"+a, nil)
	if field(got, "limits_cpus") != "2" || field(got, "limits_memory") != "4096m" || field(got, "docker_registry_image_tag") != "v2" {
		t.Fatalf("after the patch GET reads %v", got)
	}
	if info, _ := h.s.App(a); info.LimitsCPUs != "2" || info.LimitsMemory != "4096m" || info.Image != "bot:v2" {
		t.Fatalf("app info %+v", info)
	}
	h.s.Advance(10 * time.Minute)
	h.deploy(a)
	h.s.Advance(10 * time.Minute)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.events) != 2 {
		t.Fatalf("%d starts, want 2", len(rec.events))
	}
	if c := rec.events[0]; c.Image != "bot:v1" || c.CPUs != "1" || c.Memory != "2048m" {
		t.Errorf("the deployment in flight at the patch started %s with %s CPUs, %s; want what it read: bot:v1, 1, 2048m", c.Image, c.CPUs, c.Memory)
	}
	if c := rec.events[1]; c.Image != "bot:v2" || c.CPUs != "2" || c.Memory != "4096m" {
		t.Errorf("the next deployment started %s with %s CPUs, %s; want bot:v2, 2, 4096m", c.Image, c.CPUs, c.Memory)
	}
	if code, _, body := h.do(http.MethodPatch, "/applications/"+a, map[string]any{}); code != http.StatusBadRequest || field(body, "message") != "Invalid request." {
		t.Errorf("empty patch: %d %v, want 400 Invalid request.", code, body)
	}
}

// DELETE /applications/{uuid}/envs/{env_uuid} deletes that one row: the key's preview twin
// stays until deleted too. It needs write, and answers 404 for an unknown variable or one of
// another application.
func TestDeleteEnv(t *testing.T) {
	h := newHarness(t, sim.Config{})
	h.s.AddToken("4|ops-read", "ops", "read")
	a, b := h.create("a", h.fix.ServerUUID, "bot"), h.create("b", h.fix.ServerUUID, "bot")
	h.do(http.MethodPatch, "/applications/"+a+"/envs/bulk", map[string]any{"data": []any{
		map[string]any{"key": "GONE", "value": "1"}, map[string]any{"key": "KEPT", "value": "2"}}})
	rows := func() map[string][]string { // key -> uuids, the non-preview row first
		_, _, body := h.do(http.MethodGet, "/applications/"+a+"/envs", nil)
		out := map[string][]string{}
		for _, e := range body.([]any) {
			m := e.(map[string]any)
			if m["is_preview"] == true {
				out[m["key"].(string)] = append(out[m["key"].(string)], m["uuid"].(string))
			} else {
				out[m["key"].(string)] = append([]string{m["uuid"].(string)}, out[m["key"].(string)]...)
			}
		}
		return out
	}
	gone := rows()["GONE"]
	if len(gone) != 2 {
		t.Fatalf("GONE has rows %v, want it and its preview twin", gone)
	}
	if code, _, _ := h.do(http.MethodDelete, "/applications/"+a+"/envs/"+gone[0], nil, "Authorization", "Bearer 4|ops-read"); code != http.StatusForbidden {
		t.Fatalf("delete with read only: %d, want 403", code)
	}
	if code, _, body := h.do(http.MethodDelete, "/applications/"+b+"/envs/"+gone[0], nil); code != http.StatusNotFound ||
		field(body, "message") != "Environment variable not found." {
		t.Fatalf("delete through another application: %d %v", code, body)
	}
	if code, _, body := h.do(http.MethodDelete, "/applications/"+a+"/envs/"+gone[0], nil); code != http.StatusOK ||
		field(body, "message") != "Environment variable deleted." {
		t.Fatalf("delete: %d %v", code, body)
	}
	if got := rows(); len(got["GONE"]) != 1 || got["GONE"][0] != gone[1] || len(got["KEPT"]) != 2 {
		t.Fatalf("rows after the delete %v, want GONE's preview twin and both KEPT", got)
	}
	if info, _ := h.s.App(a); info.Env["GONE"] != "" || info.Env["KEPT"] != "2" || info.EnvRows != 3 {
		t.Fatalf("app env %v (%d rows)", info.Env, info.EnvRows)
	}
	if code, _, _ := h.do(http.MethodDelete, "/applications/"+a+"/envs/"+gone[0], nil); code != http.StatusNotFound {
		t.Fatalf("second delete: %d, want 404", code)
	}
	if code, _, body := h.do(http.MethodDelete, "/applications/nope/envs/"+gone[1], nil); code != http.StatusNotFound ||
		field(body, "message") != "Application not found." {
		t.Fatalf("unknown application: %d %v", code, body)
	}
}
