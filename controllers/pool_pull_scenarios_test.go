package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	poolctrl "botpool.dev/botpool/controllers/pool"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/kubetest"
)

// isPullerApp reports whether a Coolify application is a pool's puller (its image pre-pull),
// no slot's.
func isPullerApp(name string) bool { return strings.HasPrefix(name, poolctrl.PullerPrefix) }

// pullerApps are the uuids of the simulator's puller applications.
func (sc *scenario) pullerApps() map[string]bool {
	out := map[string]bool{}
	for _, a := range sc.sim.Apps() {
		if isPullerApp(a.Name) {
			out[a.UUID] = true
		}
	}
	return out
}

// prePulled moves the clock until the pool's status records its image pulled on each of its
// servers. Tests of what a slot's own deployment meets (a failing pull, a full queue) start
// once the pool's pre-pull, a deployment of its own, is over.
func (sc *scenario) prePulled() {
	sc.t.Helper()
	waitPrePull(sc.t, client.ObjectKeyFromObject(sc.pool), func() { clk.Step(5 * time.Second) })
}

// warm puts the pool's image in its server's cache and waits for the pool's pre-pull to end
// (stepping the clock).
func (sc *scenario) warm() {
	sc.t.Helper()
	sc.sim.WarmImage(fixture.ServerUUID, sc.pool.Spec.Image, sc.pool.Spec.ImageTag)
	sc.prePulled()
}

// waitPrePull moves the clock on with step until prePullLeft says the pool's image pre-pull is
// over. The pull began when the pool was created and takes Coolify's time; until it ends, the
// deploy gate holds a bot's deployment behind it (the first deployment of an image new to a
// server runs alone), and a pool is Ready only once a server holds its image: a test waiting
// for either on a clock that stands waited for ever. Every wait through a pre-pull is this one
// (or, for a single poll, pullRuns).
func waitPrePull(tb testing.TB, key client.ObjectKey, step func()) {
	tb.Helper()
	kubetest.Eventually(tb, 30*time.Second, func() error {
		var p v1.BotPool
		if err := env.Client.Get(context.Background(), key, &p); err != nil {
			return err
		}
		if left := prePullLeft(&p); left != "" {
			step()
			return fmt.Errorf("pool %s: %s", key.Name, left)
		}
		return nil
	})
}

// pullsEnd is waitPrePull for the tests that make a pool without a scenario.
func pullsEnd(t *testing.T, key client.ObjectKey) {
	t.Helper()
	waitPrePull(t, key, func() { clk.Step(5 * time.Second) })
}

// prePullLeft says what is left of the pool's image pre-pull as its status records it: "" once
// every server it lists holds its image and runs no pull.
func prePullLeft(p *v1.BotPool) string {
	for _, srv := range p.Spec.Coolify.ServerList() {
		switch st := serverStatusOf(p, srv.UUID); {
		case st == nil:
			return "server " + srv.UUID + " is not in the status yet"
		case st.Pull != nil:
			return fmt.Sprintf("server %s: pull of %s %s", st.UUID, st.Pull.Image, st.Pull.State)
		case len(st.Cached) == 0:
			return "server " + st.UUID + " holds no image of the pool yet"
		}
	}
	return ""
}

// pullRuns reports whether a pre-pull is in flight on some server of the pool.
func pullRuns(p *v1.BotPool) bool {
	for _, st := range p.Status.Servers {
		if st.Pull != nil && st.Pull.State == v1.ImagePulling {
			return true
		}
	}
	return false
}

// readLogs gives the pool a token that may read deployment logs (read:sensitive), so a failed
// pull says Docker's error; the scenario's token may not. Called before the clock moves, so
// the pool's first pull is followed with it.
func (sc *scenario) readLogs() {
	sc.t.Helper()
	const token = "sensitive-token"
	sc.sim.AddToken(token, "sensitive", "read", "write", "deploy", "read:sensitive")
	api, err := testRegistry.Client(sc.sim.URL, token)
	if err != nil {
		sc.t.Fatal(err)
	}
	connector.use(sc.pool.Name, api)
}

// noSlots keeps a scenario's pool without slots: its image pre-pull is all it does.
func noSlots(p *v1.BotPool) { p.Spec.MinIdle = 0 }

// pullers are the simulator's puller applications (not being deleted), by server.
func (sc *scenario) pullers() map[string]sim.AppInfo {
	out := map[string]sim.AppInfo{}
	for _, a := range sc.sim.Apps() {
		if srv, ok := strings.CutPrefix(a.Name, poolctrl.PullerPrefix); ok && !a.Deleting {
			out[srv] = a
		}
	}
	return out
}

// waitPulls moves the clock a step at a time until every listed server's entry in
// status.servers satisfies cond, and returns the pool then.
func (sc *scenario) waitPulls(stepBy time.Duration, what string, cond func(v1.ServerStatus) bool) *v1.BotPool {
	sc.t.Helper()
	var pool *v1.BotPool
	kubetest.Eventually(sc.t, 30*time.Second, func() error {
		clk.Step(stepBy)
		pool = sc.poolNow()
		for _, srv := range pool.Spec.Coolify.ServerList() {
			st := serverStatusOf(pool, srv.UUID)
			if st == nil || !cond(*st) {
				return fmt.Errorf("server %s: %+v, want %s", srv.UUID, st, what)
			}
		}
		return nil
	})
	return pool
}

func serverStatusOf(pool *v1.BotPool, server string) *v1.ServerStatus {
	for i := range pool.Status.Servers {
		if pool.Status.Servers[i].UUID == server {
			return &pool.Status.Servers[i]
		}
	}
	return nil
}

// TestPoolPrePullsItsImageOnEachServer: a new pool pulls its image on each of its two servers
// at once, with a puller application per server that holds only BOTPOOL_PREPULL=1, records
// the image in status.servers[].cached when the pull finished (the servers' caches hold it),
// and stops the pullers' containers.
func TestPoolPrePullsItsImageOnEachServer(t *testing.T) {
	sc := newScenario(t, "prepull", sim.Config{}, noSlots)
	home := sc.pool.Spec.Coolify.ServerUUID
	other := sc.sim.AddServer(sim.ServerSpec{Name: "other"})
	sc.updatePool(onServers(v1.PoolServer{UUID: home}, v1.PoolServer{UUID: other}))
	image, tag := sc.pool.Spec.Image, v1.DefaultImageTag
	ref := image + ":" + tag

	// Both pulls run together: the clock is not moved until both are in flight.
	sc.waitPulls(0, "a pull in flight", func(st v1.ServerStatus) bool {
		return st.Pull != nil && st.Pull.State == v1.ImagePulling && st.Pull.Image == ref
	})
	pool := sc.waitPulls(30*time.Second, ref+" cached", func(st v1.ServerStatus) bool {
		return st.Pull == nil && len(st.Cached) == 1 && st.Cached[0].Image == ref
	})
	for _, srv := range []string{home, other} {
		if _, ok := sc.sim.CachedImage(srv, image, tag); !ok {
			t.Errorf("server %s's cache lacks %s, which the pool's status lists", srv, ref)
		}
		if st := serverStatusOf(pool, srv); st.Cached[0].PulledAt.IsZero() || st.Cached[0].RestartedAt != "" {
			t.Errorf("server %s: cached %+v", srv, st.Cached[0])
		}
	}
	deploys := map[string]int{}
	pullers := sc.pullers()
	for _, d := range sc.sim.Deployments() {
		for srv, a := range pullers {
			if d.AppUUID == a.UUID {
				deploys[srv]++
			}
		}
	}
	for _, srv := range []string{home, other} {
		a, ok := pullers[srv]
		switch {
		case !ok:
			t.Fatalf("no puller application on server %s: %+v", srv, sc.sim.Apps())
		case a.ServerUUID != srv || a.Image != ref || len(a.Tags) != 1 || a.Tags[0] != sc.tag():
			t.Errorf("puller on %s: %+v", srv, a)
		case len(a.Env) != 1 || a.Env[poolctrl.PrePullEnv] != "1":
			t.Errorf("puller on %s has env %v, want only %s=1", srv, a.Env, poolctrl.PrePullEnv)
		case deploys[srv] != 1:
			t.Errorf("puller on %s deployed %d times, want once", srv, deploys[srv])
		}
	}
	kubetest.Eventually(t, 10*time.Second, func() error {
		clk.Step(10 * time.Second) // the stop takes its grace period
		for srv, a := range sc.pullers() {
			if a.Running {
				return fmt.Errorf("the puller's container on %s still runs", srv)
			}
		}
		return nil
	})
	if n := len(listSlots(t, sc.ns)); n != 0 {
		t.Errorf("%d slots, want none", n)
	}
}

// TestPoolPrePullFailsThenRetries: a pull of a tag the registry lacks is recorded Failed with
// Docker's message from Coolify's log; once the tag exists, the retry after PullRetry ends
// with the image cached.
func TestPoolPrePullFailsThenRetries(t *testing.T) {
	sc := newScenario(t, "pullfails", sim.Config{}, noSlots)
	sc.readLogs()
	image := sc.pool.Spec.Image
	// Read when the pull fails, a moment into it: the pull the new pool started fails.
	sc.sim.FailPulls(image, -1)
	pool := sc.waitPulls(time.Second, "a failed pull", func(st v1.ServerStatus) bool {
		return st.Pull != nil && st.Pull.State == v1.ImagePullFailed
	})
	pull := serverStatusOf(pool, sc.pool.Spec.Coolify.ServerUUID).Pull
	if want := "Pulling " + image + ":latest on server " + sc.pool.Spec.Coolify.ServerUUID + " failed: " +
		"Error response from daemon: manifest for " + image + ":latest not found"; !strings.HasPrefix(pull.Message, want) {
		t.Errorf("message %q, want it to start with %q", pull.Message, want)
	}
	sc.sim.FailPulls(image, 0) // the tag is pushed
	sc.waitPulls(30*time.Second, "the image cached", func(st v1.ServerStatus) bool {
		return st.Pull == nil && len(st.Cached) == 1
	})
	if n := len(sc.pullers()); n != 1 {
		t.Errorf("%d puller applications, want the one, deployed again", n)
	}
}

// TestPoolPrePullFailsOnOneServer: a server without the registry login fails its pull with
// Coolify's "docker login" message, while the pool's other server caches the image.
func TestPoolPrePullFailsOnOneServer(t *testing.T) {
	sc := newScenario(t, "pulllogin", sim.Config{}, noSlots)
	sc.readLogs()
	home := sc.pool.Spec.Coolify.ServerUUID
	other := sc.sim.AddServer(sim.ServerSpec{Name: "other"})
	sc.sim.FailPullsOn(other, sc.pool.Spec.Image, -1)
	sc.updatePool(onServers(v1.PoolServer{UUID: home}, v1.PoolServer{UUID: other}))
	pool := sc.waitPulls(30*time.Second, "cached on home, failed on other", func(st v1.ServerStatus) bool {
		if st.UUID == home {
			return st.Pull == nil && len(st.Cached) == 1
		}
		return st.Pull != nil && st.Pull.State == v1.ImagePullFailed
	})
	if msg := serverStatusOf(pool, other).Pull.Message; !strings.Contains(msg, "pull access denied for "+sc.pool.Spec.Image) ||
		!strings.Contains(msg, "docker login") {
		t.Errorf("message %q, want Docker's login refusal", msg)
	}
}

// TestPoolDeletionDeletesItsPullers: a deleted pool deletes its puller applications, one with a
// pull still in flight included, before it goes.
func TestPoolDeletionDeletesItsPullers(t *testing.T) {
	sc := newScenario(t, "pulldelete", sim.Config{}, noSlots)
	sc.waitPulls(0, "a pull in flight", func(st v1.ServerStatus) bool {
		return st.Pull != nil && st.Pull.State == v1.ImagePulling
	})
	puller := sc.pullers()[sc.pool.Spec.Coolify.ServerUUID]
	if puller.UUID == "" {
		t.Fatalf("no puller application: %+v", sc.sim.Apps())
	}
	sc.teardown()
	if p := sc.pullers(); len(p) != 0 {
		t.Fatalf("puller applications left after the pool went: %+v", p)
	}
	for _, d := range sc.sim.Deployments() {
		if d.AppUUID == puller.UUID && (d.Status == "queued" || d.Status == "in_progress") {
			t.Errorf("the deleted puller's deployment %s is still %s", d.UUID, d.Status)
		}
	}
}

// TestPoolPullsAgainAfterTheServersCleanup: the server's scheduled Docker cleanup removes the
// image the pool pre-pulled there (no slot ran it, and this server keeps no image of past
// deployments); the pool, which read the schedule, pulls it again once the run had time to
// end, cold, and not before.
func TestPoolPullsAgainAfterTheServersCleanup(t *testing.T) {
	sc := newScenario(t, "cleanup", sim.Config{}, noSlots)
	home := sc.pool.Spec.Coolify.ServerUUID
	run := clk.Now().Add(40 * time.Minute).Truncate(time.Minute)
	sc.sim.SetDockerCleanup(home, sim.DockerCleanup{Frequency: fmt.Sprintf("%d %d * * *", run.Minute(), run.Hour()),
		Threshold: sim.DefaultCleanupThreshold, Force: true, DisableImageRetention: true})
	sc.prePulled()
	image, tag := sc.pool.Spec.Image, v1.DefaultImageTag
	if _, ok := sc.sim.CachedImage(home, image, tag); !ok {
		t.Fatal("the pre-pull left nothing in the server's cache")
	}
	sc.waitPulls(30*time.Second, "pulled again after the cleanup at "+run.Format("15:04"), func(st v1.ServerStatus) bool {
		return st.Pull == nil && len(st.Cached) == 1 && st.Cached[0].PulledAt.After(run)
	})
	if _, ok := sc.sim.CachedImage(home, image, tag); !ok {
		t.Error("the server's cache lacks the image after the pool pulled it again")
	}
	puller := sc.pullers()[home]
	var pulls []sim.DeploymentInfo
	for _, d := range sc.sim.Deployments() {
		if d.AppUUID == puller.UUID {
			pulls = append(pulls, d)
		}
	}
	switch {
	case len(pulls) != 2:
		t.Fatalf("the puller deployed %d times, want twice (the pre-pull, and once after the cleanup): %+v", len(pulls), pulls)
	case !pulls[1].Cold:
		t.Error("the pull after the cleanup was warm: the cleanup removed nothing, or the pull came before it")
	case pulls[1].Created.Before(run.Add(coolifyview.CleanupSettle)):
		t.Errorf("pulled again at %s, before the run at %s had cleanupSettle to end", pulls[1].Created.Format("15:04:05"), run.Format("15:04"))
	}
}
