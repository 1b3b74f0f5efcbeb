package coolify_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/coolify/sim"
)

// fast keeps simulated durations short enough that a test steps through them in a few calls.
func fast() sim.Config {
	return sim.Config{ColdPull: 7 * time.Minute, WarmPull: 5 * time.Second, ComposeUp: 3 * time.Second,
		StatusLag: 30 * time.Second, DeleteDelay: 10 * time.Second, StopDelay: 2 * time.Second}
}

func TestSlotLifecycle(t *testing.T) {
	e := newEnv(t, fast())
	ctx := e.ctx()
	c := e.client

	if v, err := c.ServerVersion(ctx); err != nil || v != sim.DefaultVersion {
		t.Fatalf("version = %q, %v", v, err)
	}
	servers, err := c.ListServers(ctx)
	if err != nil || len(servers) != 1 || servers[0].Settings.ConcurrentBuilds != 2 || servers[0].Settings.DeploymentQueueLimit != 25 {
		t.Fatalf("servers = %+v, %v", servers, err)
	}
	projects, err := c.ListProjects(ctx)
	if err != nil || len(projects) != 1 {
		t.Fatalf("projects = %+v, %v", projects, err)
	}
	envs, err := c.ListEnvironments(ctx, projects[0].UUID)
	if err != nil || len(envs) != 1 || envs[0].UUID != e.fix.EnvironmentUUID {
		t.Fatalf("environments = %+v, %v", envs, err)
	}
	dests, err := c.ListServerDestinations(ctx, servers[0].UUID)
	if err != nil || len(dests) != 1 {
		t.Fatalf("destinations = %+v, %v", dests, err)
	}

	uuid := e.createApp("slot-a-0")
	app, err := c.GetApplication(ctx, uuid)
	if err != nil || app.Status != "exited:unhealthy" || app.State() != coolify.StateExited {
		t.Fatalf("new app = %+v, %v", app, err)
	}
	if _, err := c.UpsertEnvs(ctx, uuid, []coolify.EnvVar{{Key: "POOL_SLOT_UUID", Value: uuid}, {Key: "BOTPOOL_API_URL", Value: "http://op"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetDescription(ctx, uuid, "[DEPLOYING] Bot b-1"); err != nil {
		t.Fatal(err)
	}
	apps, err := c.ListApplications(ctx, "pool-a")
	if err != nil || len(apps) != 1 || apps[0].Description != "[DEPLOYING] Bot b-1" {
		t.Fatalf("list by tag = %+v, %v", apps, err)
	}
	if other, _ := c.ListApplications(ctx, "pool-b"); len(other) != 0 {
		t.Fatalf("other tag lists %d apps", len(other))
	}

	res, err := c.Deploy(ctx, uuid)
	if err != nil || res.DeploymentUUID == "" {
		t.Fatalf("deploy = %+v, %v", res, err)
	}
	d, err := c.GetDeployment(ctx, res.DeploymentUUID)
	if err != nil || d.Status != coolify.DeploymentInProgress {
		t.Fatalf("deployment = %+v, %v", d, err)
	}
	active, err := c.ListActiveDeployments(ctx)
	if err != nil || len(active) != 1 {
		t.Fatalf("active = %+v, %v", active, err)
	}

	e.sim.Advance(7*time.Minute + 3*time.Second) // a cold pull, then compose up
	d, err = c.GetDeployment(ctx, res.DeploymentUUID)
	if err != nil || d.Status != coolify.DeploymentFinished || !d.Status.Terminal() {
		t.Fatalf("deployment after pull = %+v, %v", d, err)
	}
	info, _ := e.sim.App(uuid)
	if !info.Running || info.Env["POOL_SLOT_UUID"] != uuid {
		t.Fatalf("container = %+v", info)
	}

	if err := c.Stop(ctx, uuid); err != nil {
		t.Fatal(err)
	}
	e.sim.Advance(2*time.Second + 30*time.Second)
	app, _ = c.GetApplication(ctx, uuid)
	if app.State() != coolify.StateExited {
		t.Fatalf("status after stop = %q", app.Status)
	}
	n, list, err := c.ListApplicationDeployments(ctx, uuid, 0, 10)
	if err != nil || n != 1 || len(list) != 1 || list[0].DeploymentUUID != res.DeploymentUUID {
		t.Fatalf("app deployments = %d %+v, %v", n, list, err)
	}
	if err := c.DeleteApplication(ctx, uuid, coolify.AppLeftovers); err != nil {
		t.Fatal(err)
	}
}

func TestStartWithoutDeploymentUUIDWhenOneIsQueued(t *testing.T) {
	e := newEnv(t, fast())
	ctx := e.ctx()
	uuid := e.createApp("slot-a-0")
	first, err := e.client.Start(ctx, uuid)
	if err != nil || first.DeploymentUUID == "" {
		t.Fatalf("first start = %+v, %v", first, err)
	}
	second, err := e.client.Start(ctx, uuid)
	if err != nil || second.DeploymentUUID != "" || !strings.Contains(second.Message, "already queued") {
		t.Fatalf("second start = %+v, %v; want 200 without deployment_uuid", second, err)
	}
	// The caller finds the live deployment as the newest of the app.
	_, list, err := e.client.ListApplicationDeployments(ctx, uuid, 0, 1)
	if err != nil || len(list) != 1 || list[0].DeploymentUUID != first.DeploymentUUID {
		t.Fatalf("newest deployment = %+v, %v", list, err)
	}
	// /deploy de-duplicates the same way.
	res, err := e.client.Deploy(ctx, uuid)
	if err != nil || res.DeploymentUUID != "" {
		t.Fatalf("deploy while queued = %+v, %v", res, err)
	}
	// Restart too.
	res, err = e.client.Restart(ctx, uuid)
	if err != nil || res.DeploymentUUID != "" {
		t.Fatalf("restart while queued = %+v, %v", res, err)
	}
}

// fullQueue seeds a server that builds one at a time and queues two, fills it and returns
// one more application waiting to start.
func fullQueue(t *testing.T) (*env, string) {
	e := newEnv(t, fast())
	srv := e.sim.AddServer(sim.ServerSpec{UUID: "small", Name: "small", ConcurrentBuilds: 1, DeploymentQueueLimit: 2})
	ctx := e.ctx()
	var last string
	for i := range 4 {
		uuid, err := e.client.CreateDockerImageApplication(ctx, coolify.CreateApplicationRequest{
			ProjectUUID: e.fix.ProjectUUID, ServerUUID: srv, EnvironmentUUID: e.fix.EnvironmentUUID,
			Image: "bot", Name: "q-" + string(rune('a'+i))})
		if err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			last = uuid
			break
		}
		if res, err := e.client.Deploy(ctx, uuid); err != nil || res.DeploymentUUID == "" {
			t.Fatalf("deploy %d = %+v, %v", i, res, err)
		}
	}
	return e, last
}

func TestStartPhantomUUIDOnFullQueue(t *testing.T) {
	e, last := fullQueue(t)
	ctx := e.ctx()
	res, err := e.client.Start(ctx, last)
	if err != nil || res.DeploymentUUID == "" {
		t.Fatalf("start on a full queue = %+v, %v; want 200 with a uuid", res, err)
	}
	_, err = e.client.GetDeployment(ctx, res.DeploymentUUID)
	if !errors.Is(err, coolify.ErrNotFound) {
		t.Fatalf("polling the phantom uuid: %v, want ErrNotFound", err)
	}
}

func TestDeployQueueFullIs429WithRetryAfter(t *testing.T) {
	e, last := fullQueue(t)
	_, err := e.client.Deploy(e.ctx(), last)
	var apiErr *coolify.APIError
	if !errors.Is(err, coolify.ErrQueueFull) || !errors.As(err, &apiErr) || apiErr.RetryAfter != time.Minute {
		t.Fatalf("deploy on a full queue: %v, want ErrQueueFull with Retry-After 60s", err)
	}
	if errors.Is(err, coolify.ErrRateLimited) {
		t.Error("a full queue must not read as the API rate limit")
	}
	if got := e.sim.Counts()["deploy-by-tag-or-uuid"][429]; got != 1 {
		t.Errorf("queue-full deploys sent = %d, want 1 (not retried)", got)
	}
	// Once the queue drains, the same call succeeds.
	e.sim.Advance(30 * time.Minute)
	if res, err := e.client.Deploy(e.ctx(), last); err != nil || res.DeploymentUUID == "" {
		t.Fatalf("deploy after the queue drained = %+v, %v", res, err)
	}
}

func TestRateLimit429RetryAfterThenSuccess(t *testing.T) {
	cfg := fast()
	cfg.RateLimit = 5
	// No client-side pacing, and a client that sits out the server's minute itself.
	e := newEnv(t, cfg, coolify.WithLimiter(coolify.NewLimiter(0)), coolify.WithMaxWait(2*time.Minute),
		coolify.WithCallBudget(5*time.Minute))
	ctx := e.ctx()
	for i := range 7 {
		if _, err := e.client.ListServers(ctx); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	counts := e.sim.Counts()["list-servers"]
	if counts[429] != 1 || counts[200] != 7 {
		t.Fatalf("answers = %v, want one 429 then success after Retry-After", counts)
	}
}

func TestClientLimiterAvoids429(t *testing.T) {
	e := newEnv(t, fast()) // default: 200/min on both sides
	ctx := e.ctx()
	for i := range 230 {
		if _, err := e.client.ListApplications(ctx, "pool-a"); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if n := e.sim.CountCode(http.StatusTooManyRequests); n != 0 {
		t.Fatalf("%d answers were 429", n)
	}
	if got := e.sim.MaxPerMinute("ops"); got > coolify.DefaultRateLimit {
		t.Fatalf("max requests in a minute = %d", got)
	}
}

func TestServerErrorBurstThenSuccess(t *testing.T) {
	e := newEnv(t, fast())
	ctx := e.ctx()
	uuid := e.createApp("slot-a-0")
	e.sim.SetFault("get-application-by-uuid", sim.Fault{Burst: 3})
	if _, err := e.client.GetApplication(ctx, uuid); err != nil {
		t.Fatalf("get after a burst of 3: %v", err)
	}
	if got := e.sim.Counts()["get-application-by-uuid"]; got[500] != 3 || got[200] != 1 {
		t.Fatalf("answers = %v", got)
	}
	e.sim.SetFault("get-application-by-uuid", sim.Fault{Burst: 10, BurstCode: 503})
	if _, err := e.client.GetApplication(ctx, uuid); !errors.Is(err, coolify.ErrServer) {
		t.Fatalf("get during a long outage: %v, want ErrServer after the retries", err)
	}
}

func TestCreateIsNotRetriedAfterServerError(t *testing.T) {
	e := newEnv(t, fast())
	e.sim.SetFault("create-dockerimage-application", sim.Fault{Burst: 1, AfterProcessing: true})
	_, err := e.client.CreateDockerImageApplication(e.ctx(), coolify.CreateApplicationRequest{
		ProjectUUID: e.fix.ProjectUUID, ServerUUID: e.fix.ServerUUID, EnvironmentName: "production",
		Image: "bot", Name: "slot-a-0"})
	if !errors.Is(err, coolify.ErrServer) {
		t.Fatalf("create: %v, want ErrServer", err)
	}
	if got := e.sim.Counts()["create-dockerimage-application"][500]; got != 1 {
		t.Fatalf("create sent %d times, want 1", got)
	}
	// The create happened anyway: the caller adopts it by name.
	apps, err := e.client.ListApplications(e.ctx(), "")
	if err != nil || len(apps) != 1 || apps[0].Name != "slot-a-0" {
		t.Fatalf("apps = %+v, %v", apps, err)
	}
}

func TestStatusLagsTheContainer(t *testing.T) {
	e := newEnv(t, fast())
	ctx := e.ctx()
	uuid := e.createApp("slot-a-0")
	e.sim.WarmImage(e.fix.ServerUUID, "ghcr.io/example/bot", "1.0")
	res, err := e.client.Deploy(ctx, uuid)
	if err != nil {
		t.Fatal(err)
	}
	e.sim.Advance(8 * time.Second) // warm pull + up
	d, _ := e.client.GetDeployment(ctx, res.DeploymentUUID)
	app, _ := e.client.GetApplication(ctx, uuid)
	if d.Status != coolify.DeploymentFinished || app.State() != coolify.StateExited {
		t.Fatalf("right after finishing: deployment %s, status %s; want finished and a stale exited", d.Status, app.Status)
	}
	e.sim.Advance(30 * time.Second)
	app, _ = e.client.GetApplication(ctx, uuid)
	if app.State() != coolify.StateRunning {
		t.Fatalf("after the lag: %s", app.Status)
	}
}

func TestDeleteIsAsynchronous(t *testing.T) {
	e := newEnv(t, fast())
	ctx := e.ctx()
	uuid := e.createApp("slot-a-0")
	if err := e.client.DeleteApplication(ctx, uuid, coolify.AppLeftovers); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.GetApplication(ctx, uuid); err != nil {
		t.Fatalf("GET right after delete: %v, want 200", err)
	}
	e.sim.Advance(10 * time.Second)
	if _, err := e.client.GetApplication(ctx, uuid); !errors.Is(err, coolify.ErrNotFound) {
		t.Fatalf("GET after the delete ran: %v, want ErrNotFound", err)
	}
	if err := e.client.DeleteApplication(ctx, uuid, coolify.AppLeftovers); !errors.Is(err, coolify.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

func TestEnvBulkIsNotTransactional(t *testing.T) {
	e := newEnv(t, fast())
	ctx := e.ctx()
	uuid := e.createApp("slot-a-0")
	_, err := e.client.UpsertEnvs(ctx, uuid, []coolify.EnvVar{{Key: "A", Value: "1"}, {Key: "B", Value: "2"}, {Key: "", Value: "x"}, {Key: "C", Value: "3"}})
	var apiErr *coolify.APIError
	if !errors.Is(err, coolify.ErrValidation) || !errors.As(err, &apiErr) || len(apiErr.Fields["key"]) == 0 {
		t.Fatalf("bulk with an invalid item: %v", err)
	}
	info, _ := e.sim.App(uuid)
	if info.Env["A"] != "1" || info.Env["B"] != "2" || info.Env["C"] != "" || info.EnvRows != 4 {
		t.Fatalf("saved env = %v (%d rows), want A and B with preview twins", info.Env, info.EnvRows)
	}
	// Upserting again changes values without adding rows.
	out, err := e.client.UpsertEnvs(ctx, uuid, []coolify.EnvVar{{Key: "A", Value: "9"}})
	if err != nil || len(out) != 1 {
		t.Fatalf("upsert = %+v, %v", out, err)
	}
	rows, err := e.client.ListEnvs(ctx, uuid)
	if err != nil || len(rows) != 4 {
		t.Fatalf("rows = %+v, %v", rows, err)
	}
	for _, r := range rows {
		if r.Value != "" {
			t.Errorf("value of %s visible without read:sensitive", r.Key)
		}
	}
	if _, err := e.client.CreateEnv(ctx, uuid, coolify.EnvVar{Key: "A", Value: "x"}); !errors.Is(err, coolify.ErrConflict) {
		t.Fatalf("create of an existing key: %v, want ErrConflict", err)
	}
	if _, err := e.client.CreateEnv(ctx, uuid, coolify.EnvVar{Key: "D", Value: "4"}); err != nil {
		t.Fatal(err)
	}
}

func TestAuthFailures(t *testing.T) {
	e := newEnv(t, fast())
	ctx := e.ctx()
	uuid := e.createApp("slot-a-0")

	e.sim.AddToken("2|read-only", "viewer", "read")
	ro, _ := coolify.New(e.url, "2|read-only", coolify.WithHTTPClient(e.http), coolify.WithClock(e.clock))
	_, err := ro.Start(ctx, uuid)
	var apiErr *coolify.APIError
	if !errors.Is(err, coolify.ErrForbidden) || !errors.As(err, &apiErr) || apiErr.Message != "Missing required permissions: deploy" {
		t.Fatalf("start with a read token: %v", err)
	}

	e.sim.SetAPIEnabled(false)
	_, err = e.client.Start(ctx, uuid)
	if !errors.Is(err, coolify.ErrAPIDisabled) || errors.Is(err, coolify.ErrForbidden) {
		t.Fatalf("API disabled: %v", err)
	}
	e.sim.SetAPIEnabled(true)

	e.sim.RevokeToken(e.fix.Token)
	_, err = e.client.GetApplication(ctx, uuid)
	if !errors.Is(err, coolify.ErrUnauthorized) {
		t.Fatalf("revoked token: %v", err)
	}
	if strings.Contains(err.Error(), "botpool-sim-token") {
		t.Fatalf("the token leaked into an error: %v", err)
	}
}

func TestDescriptionLength(t *testing.T) {
	e := newEnv(t, fast())
	uuid := e.createApp("slot-a-0")
	long := strings.Repeat("x", 256)
	if err := e.client.SetDescription(e.ctx(), uuid, long); !errors.Is(err, coolify.ErrValidation) {
		t.Fatalf("long description: %v, want a local ErrValidation", err)
	}
	if got := e.sim.Counts()["update-application-by-uuid"]; len(got) != 0 {
		t.Fatalf("a long description reached the server: %v", got)
	}
	if err := e.client.SetDescription(e.ctx(), uuid, strings.Repeat("é", 255)); err != nil {
		t.Fatalf("255 characters: %v", err)
	}
	// The server itself fails with a 500 on 256.
	if code, _, body := e.raw(http.MethodPatch, "/applications/"+uuid, map[string]string{"description": long}, nil); code != 500 || body["message"] != "Server Error" {
		t.Fatalf("server on a long description: %d %v", code, body)
	}
}

func TestServerRefusals(t *testing.T) {
	e := newEnv(t, fast())
	uuid := e.createApp("slot-a-0")
	cases := []struct {
		name   string
		method string
		path   string
		body   any
		header map[string]string
		code   int
		want   string
	}{
		{"patch refuses server_uuid", http.MethodPatch, "/applications/" + uuid, map[string]string{"server_uuid": "x"}, nil, 422, "Validation failed."},
		{"unknown create field", http.MethodPost, "/applications/dockerimage", map[string]any{"project_uuid": "prj-1", "bogus": 1}, nil, 422, "Validation failed."},
		{"no content type", http.MethodPatch, "/applications/" + uuid, map[string]string{"description": "x"}, map[string]string{"Content-Type": "text/plain"}, 400, "Invalid request."},
		{"GET on an action", http.MethodGet, "/applications/" + uuid + "/start", nil, nil, 405, "This endpoint has changed to a POST request."},
		{"unknown path", http.MethodGet, "/nope", nil, nil, 404, "Not found."},
		{"no environment", http.MethodPost, "/applications/dockerimage", map[string]any{"project_uuid": "prj-1", "server_uuid": "srv-1", "docker_registry_image_name": "bot"}, nil, 422, "You need to provide at least one of environment_name or environment_uuid."},
		{"unknown project", http.MethodPost, "/applications/dockerimage", map[string]any{"project_uuid": "x", "server_uuid": "srv-1", "environment_name": "production", "docker_registry_image_name": "bot"}, nil, 404, "Project not found."},
		{"unknown app on patch", http.MethodPatch, "/applications/nope", map[string]string{"description": "x"}, nil, 404, "Application not found"},
		{"unknown app on get", http.MethodGet, "/applications/nope", nil, nil, 404, "Application not found."},
		{"bad token", http.MethodGet, "/servers", nil, map[string]string{"Authorization": "Bearer 9|nope"}, 401, "Unauthenticated."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body := e.raw(tc.method, tc.path, tc.body, tc.header)
			if code != tc.code || body["message"] != tc.want {
				t.Fatalf("got %d %v, want %d %q", code, body, tc.code, tc.want)
			}
		})
	}
}

func TestCancelDeployment(t *testing.T) {
	e := newEnv(t, fast())
	ctx := e.ctx()
	uuid := e.createApp("slot-a-0")
	res, err := e.client.Deploy(ctx, uuid)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.client.CancelDeployment(ctx, res.DeploymentUUID); err != nil {
		t.Fatal(err)
	}
	d, _ := e.client.GetDeployment(ctx, res.DeploymentUUID)
	if d.Status != coolify.DeploymentCancelled {
		t.Fatalf("status = %s", d.Status)
	}
	if err := e.client.CancelDeployment(ctx, res.DeploymentUUID); !errors.Is(err, coolify.ErrBadRequest) {
		t.Fatalf("second cancel: %v, want ErrBadRequest", err)
	}
	e.sim.Advance(10 * time.Minute)
	if info, _ := e.sim.App(uuid); info.Running {
		t.Fatal("a cancelled deployment started the container")
	}
}

func TestVersionGating(t *testing.T) {
	for _, tc := range []struct {
		version      string
		destinations bool
	}{
		{"4.0.0-beta.400", false},
		{"4.1.0", false},
		{"4.2.0", true},
	} {
		t.Run(tc.version, func(t *testing.T) {
			cfg := fast()
			cfg.Version = tc.version
			e := newEnv(t, cfg)
			e.createApp("slot-a-0") // the simulator refuses fields this version lacks
			_, err := e.client.ListServerDestinations(e.ctx(), e.fix.ServerUUID)
			if tc.destinations != (err == nil) || (!tc.destinations && !errors.Is(err, coolify.ErrUnsupported)) {
				t.Fatalf("destinations: %v", err)
			}
			if n := e.sim.Counts()["version"][200]; n != 1 {
				t.Fatalf("version read %d times, want once", n)
			}
		})
	}
}

// A 429 seen by one client holds back every client of the same user until Retry-After.
func TestRateLimit429PausesTheSharedLimiter(t *testing.T) {
	cfg := fast()
	cfg.RateLimit = 3
	e := newEnv(t, cfg)
	reg := coolify.NewRegistry(-1, coolify.WithHTTPClient(e.http), coolify.WithClock(e.clock), coolify.WithVersion("4.3.11"))
	a, _ := reg.Client(e.url, e.fix.Token, coolify.WithMaxRetries(0))
	// b is told to sit out the server's minute itself; c is a default client, which never
	// waits that long inside a call.
	b, _ := reg.Client(e.url, e.fix.Token, coolify.WithMaxWait(2*time.Minute), coolify.WithCallBudget(5*time.Minute))
	c, _ := reg.Client(e.url, e.fix.Token)
	ctx := e.ctx()
	for range 3 {
		if _, err := a.ListServers(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.ListServers(ctx); !errors.Is(err, coolify.ErrRateLimited) {
		t.Fatalf("4th call: %v, want ErrRateLimited", err)
	}
	before := e.clock.Now()
	if _, err := c.ListProjects(ctx); !errors.Is(err, coolify.ErrThrottled) {
		t.Fatalf("default client during the pause: %v, want ErrThrottled", err)
	} else if wait, _ := coolify.RetryAfter(err); wait < 59*time.Second || wait > time.Minute {
		t.Fatalf("default client told to wait %s, want the server's minute", wait)
	}
	if e.clock.Since(before) != 0 {
		t.Fatal("the default client waited for the pause")
	}
	if _, err := b.ListProjects(ctx); err != nil {
		t.Fatalf("other pool: %v", err)
	}
	if waited := e.clock.Since(before); waited < 59*time.Second {
		t.Fatalf("the other client waited %s, want the server's Retry-After", waited)
	}
	if n := e.sim.CountCode(http.StatusTooManyRequests); n != 1 {
		t.Fatalf("%d answers were 429, want 1", n)
	}
}
