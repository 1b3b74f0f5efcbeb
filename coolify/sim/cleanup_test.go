package sim_test

import (
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"botpool.dev/botpool/coolify/sim"
)

// cleanups collects OnCleanup calls.
type cleanups struct {
	mu   sync.Mutex
	list []sim.CleanupInfo
}

func (c *cleanups) hook(i sim.CleanupInfo) { c.mu.Lock(); c.list = append(c.list, i); c.mu.Unlock() }

func (c *cleanups) all() []sim.CleanupInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.list)
}

// cached lists which of refs ("image:tag") the server's cache holds.
func (h *harness) cached(server string, refs ...string) []string {
	h.t.Helper()
	var out []string
	for _, r := range refs {
		image, tag := r, ""
		for i := len(r) - 1; i >= 0; i-- {
			if r[i] == ':' {
				image, tag = r[:i], r[i+1:]
				break
			}
		}
		if _, ok := h.s.CachedImage(server, image, tag); ok {
			out = append(out, r)
		}
	}
	return out
}

// runTo deploys the application and lets its deployment finish (a warm pull: 8 s).
func (h *harness) runTo(app string) {
	h.t.Helper()
	dep := h.deploy(app)
	h.s.Advance(10 * time.Second)
	for _, d := range h.s.Deployments() {
		if d.UUID == dep && d.Status != "finished" {
			h.t.Fatalf("deployment %s of %s: %+v", dep, app, d)
		}
	}
}

func (h *harness) stop(app string, query string) {
	h.t.Helper()
	if code, _, body := h.do(http.MethodPost, "/applications/"+app+"/stop"+query, nil); code != http.StatusOK {
		h.t.Fatalf("stop %s: %d %v", app, code, body)
	}
	h.s.Advance(sim.DefaultStopDelay)
}

// rolloutServer is srv-1 as a pool's rollout leaves it: a slot runs bot:v1, the pool's puller
// pulled bot:v2 and was stopped, bot:v0 (which nothing ran lately) and another tenant's
// image with no application are in the cache too. The clock is at 23:59.
func rolloutServer(t *testing.T, cfg sim.Config) (h *harness, slot, puller string) {
	t.Helper()
	fc := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 23, 0, 0, 0, time.UTC))
	cfg.Clock = fc
	s := sim.New(cfg)
	h = &harness{t: t, s: s, fc: fc, fix: s.SeedDefault()}
	srv := h.fix.ServerUUID
	for _, r := range [][2]string{{"bot", "v0"}, {"bot", "v1"}, {"bot", "v2"}, {"other", "x"}} {
		h.s.WarmImage(srv, r[0], r[1])
	}
	slot = h.createTagged("pool-zoom-001", srv, "bot", "v1", "", "")
	h.runTo(slot)
	puller = h.createTagged("botpool-pull-"+srv, srv, "bot", "v2", "", "")
	h.runTo(puller)
	h.stop(puller, "?docker_cleanup=0")
	h.s.Advance(time.Date(2026, 11, 23, 23, 59, 0, 0, time.UTC).Sub(fc.Now()))
	return h, slot, puller
}

// TestDockerCleanupSettings: GET /servers/{uuid}/docker-cleanup answers the server's settings
// (Coolify's defaults, then what SetDockerCleanup gave), with the auth and errors of the
// other server routes; a release before 4.3.0 answers it as an unknown path.
func TestDockerCleanupSettings(t *testing.T) {
	h := newHarness(t, sim.Config{})
	second := h.s.AddServer(sim.ServerSpec{UUID: "srv-2"})
	h.s.SetDockerCleanup(second, sim.DockerCleanup{Frequency: "*/10 * * * *", Threshold: 50, DisableImageRetention: true})
	h.s.AddToken("2|writer", "ops", "write")
	for _, tc := range []struct {
		name, server string
		hdr          []string
		code         int
		want         map[string]any
	}{
		{"defaults", h.fix.ServerUUID, nil, 200, map[string]any{"docker_cleanup_frequency": "0 0 * * *", "docker_cleanup_threshold": 80.0,
			"force_docker_cleanup": true, "delete_unused_volumes": false, "delete_unused_networks": false, "disable_application_image_retention": false}},
		{"set", second, nil, 200, map[string]any{"docker_cleanup_frequency": "*/10 * * * *", "docker_cleanup_threshold": 50.0,
			"force_docker_cleanup": false, "delete_unused_volumes": false, "delete_unused_networks": false, "disable_application_image_retention": true}},
		{"unknown server", "nope", nil, 404, map[string]any{"message": "Server not found."}},
		{"no read ability", h.fix.ServerUUID, []string{"Authorization", "Bearer 2|writer"}, 403, map[string]any{"message": "Missing required permissions: read"}},
		{"bad token", h.fix.ServerUUID, []string{"Authorization", "Bearer 9|nope"}, 401, map[string]any{"message": "Unauthenticated."}},
	} {
		code, _, body := h.do(http.MethodGet, "/servers/"+tc.server+"/docker-cleanup", nil, tc.hdr...)
		got, _ := body.(map[string]any)
		if code != tc.code || len(got) != len(tc.want) {
			t.Errorf("%s: %d %v, want %d %v", tc.name, code, body, tc.code, tc.want)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%s: %s = %v, want %v", tc.name, k, got[k], v)
			}
		}
	}

	old := newHarness(t, sim.Config{Version: "4.2.0"})
	if code, _, body := old.do(http.MethodGet, "/servers/"+old.fix.ServerUUID+"/docker-cleanup", nil); code != 404 || field(body, "message") != "Not found." {
		t.Errorf("4.2.0: %d %v, want 404 Not found.", code, body)
	}
}

// TestScheduledCleanup: at the scheduled time (daily at midnight by default) the cleanup
// removes the images no container runs that some application of their repository does not
// keep: the image the puller pulled for the rollout (the slot never deployed it), the old one
// and the other tenant's. What the slot runs stays; nothing goes before midnight.
func TestScheduledCleanup(t *testing.T) {
	var rec cleanups
	h, _, _ := rolloutServer(t, sim.Config{Hooks: sim.Hooks{OnCleanup: rec.hook}})
	srv := h.fix.ServerUUID
	all := []string{"bot:v0", "bot:v1", "bot:v2", "other:x"}
	if got := h.cached(srv, all...); !slices.Equal(got, all) || len(rec.all()) != 0 {
		t.Fatalf("before midnight: cache %v, cleanups %v", got, rec.all())
	}
	h.s.Advance(time.Minute)
	if got := h.cached(srv, all...); !slices.Equal(got, []string{"bot:v1"}) {
		t.Fatalf("after midnight the cache holds %v, want only the running bot:v1", got)
	}
	midnight := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	if got := rec.all(); len(got) != 1 || got[0].Reason != "scheduled" || !got[0].At.Equal(midnight) ||
		!slices.Equal(got[0].Evicted, []string{"bot:v0", "bot:v2", "other:x"}) {
		t.Fatalf("cleanups %+v, want one scheduled at %s evicting bot:v0, bot:v2, other:x", got, midnight)
	}
	h.s.Advance(24 * time.Hour)
	if got := rec.all(); len(got) != 2 || !got[1].At.Equal(midnight.Add(24*time.Hour)) || len(got[1].Evicted) != 0 {
		t.Fatalf("the next day: %+v, want a second run evicting nothing", got)
	}
}

// TestCleanupKeepsWhatEveryApplicationKeeps: an image of a repository stays when every
// application of that repository deployed it lately, running or not, and goes when one did
// not; with image retention disabled only running images stay.
func TestCleanupKeepsWhatEveryApplicationKeeps(t *testing.T) {
	for _, retention := range []bool{true, false} {
		h, slot, _ := rolloutServer(t, sim.Config{})
		srv := h.fix.ServerUUID
		h.s.SetDockerCleanup(srv, sim.DockerCleanup{Frequency: "0 0 * * *", Threshold: 80, Force: true, DisableImageRetention: !retention})
		// The slot takes bot:v2 and is stopped: both applications deployed it last.
		if code, _, body := h.do(http.MethodPatch, "/applications/"+slot, map[string]any{"docker_registry_image_tag": "v2"}); code != 200 {
			t.Fatalf("patch: %d %v", code, body)
		}
		h.runTo(slot)
		h.stop(slot, "?docker_cleanup=false")
		h.s.Advance(time.Hour)
		// bot:v1, the slot's deployment before, goes: the puller never deployed it.
		want := []string{"bot:v2"}
		if !retention {
			want = nil
		}
		if got := h.cached(srv, "bot:v0", "bot:v1", "bot:v2", "other:x"); !slices.Equal(got, want) {
			t.Errorf("retention %v: the cache holds %v, want %v", retention, got, want)
		}
	}
}

// TestCleanupScheduleSettings: the schedule follows the frequency (Coolify's names too), a
// run without force removes nothing (the simulator's disks never fill), a frequency the
// scheduler cannot read never runs, and a server that is not functional is skipped.
func TestCleanupScheduleSettings(t *testing.T) {
	for _, tc := range []struct {
		name      string
		settings  sim.DockerCleanup
		reachable bool
		runs      int // in the 3 hours after 23:59
		evicts    bool
	}{
		{"hourly by name", sim.DockerCleanup{Frequency: "hourly", Force: true}, true, 3, true},
		{"every 30 minutes", sim.DockerCleanup{Frequency: "*/30 * * * *", Force: true}, true, 6, true},
		{"@daily", sim.DockerCleanup{Frequency: "@daily", Force: true}, true, 1, true},
		{"without force", sim.DockerCleanup{Frequency: "hourly"}, true, 0, false},
		{"unreadable", sim.DockerCleanup{Frequency: "0 0 L * *", Force: true}, true, 0, false},
		{"unreachable server", sim.DockerCleanup{Frequency: "hourly", Force: true}, false, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec cleanups
			h, _, _ := rolloutServer(t, sim.Config{Hooks: sim.Hooks{OnCleanup: rec.hook}})
			srv := h.fix.ServerUUID
			h.s.SetDockerCleanup(srv, tc.settings)
			h.s.SetServerReachable(srv, tc.reachable)
			h.s.Advance(3 * time.Hour)
			if got := len(rec.all()); got != tc.runs {
				t.Errorf("%d runs, want %d: %+v", got, tc.runs, rec.all())
			}
			if _, ok := h.s.CachedImage(srv, "bot", "v2"); ok == tc.evicts {
				t.Errorf("bot:v2 cached %v, want evicted %v", ok, tc.evicts)
			}
		})
	}
}

// TestDeleteAndStopRunTheCleanup: a delete or a stop runs the server's Docker cleanup unless
// its docker_cleanup flag is false (absent, it is true): another application's delete evicts
// the image the pool's puller pulled.
func TestDeleteAndStopRunTheCleanup(t *testing.T) {
	for _, tc := range []struct {
		name, method, query string
		evicts              bool
	}{
		{"delete", http.MethodDelete, "", true},
		{"delete docker_cleanup=0", http.MethodDelete, "?docker_cleanup=0", false},
		{"delete docker_cleanup=false", http.MethodDelete, "?docker_cleanup=false&delete_volumes=true", false},
		{"delete docker_cleanup=1", http.MethodDelete, "?docker_cleanup=1", true},
		{"stop", http.MethodPost, "", true},
		{"stop docker_cleanup=0", http.MethodPost, "?docker_cleanup=0", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec cleanups
			h, _, _ := rolloutServer(t, sim.Config{Hooks: sim.Hooks{OnCleanup: rec.hook}})
			srv := h.fix.ServerUUID
			h.s.WarmImage(srv, "tool", "1")
			other := h.createTagged("someone-else", srv, "tool", "1", "", "")
			h.runTo(other)
			path := "/applications/" + other
			if tc.method == http.MethodPost {
				path += "/stop"
			}
			if code, _, body := h.do(tc.method, path+tc.query, nil); code != http.StatusOK {
				t.Fatalf("%d %v", code, body)
			}
			h.s.Advance(sim.DefaultDeleteDelay)
			if _, ok := h.s.CachedImage(srv, "bot", "v2"); ok == tc.evicts {
				t.Errorf("the puller's bot:v2 cached %v after the %s, want evicted %v", ok, tc.name, tc.evicts)
			}
			if runs := rec.all(); tc.evicts != (len(runs) == 1) || tc.evicts && !slices.Contains(runs[0].Evicted, "bot:v2") {
				t.Errorf("cleanups %+v", runs)
			}
		})
	}
}
