package coolify_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/coolify/sim"
)

// UpdateApplication sends the image and limits fields it is given (checked against the spec
// by the env's transport), leaves the others, and the simulator applies them at the next
// deployment; NoLimit reads back as no limit.
func TestUpdateApplication(t *testing.T) {
	e := newEnv(t, sim.Config{})
	ctx := e.ctx()
	app := e.createApp("slot-1") // ghcr.io/example/bot:1.0, 1 CPU, 2048m
	if err := e.client.UpdateApplication(ctx, app, coolify.AppUpdate{Tag: "2.0", CPUs: "2"}); err != nil {
		t.Fatal(err)
	}
	got, err := e.client.GetApplication(ctx, app)
	if err != nil {
		t.Fatal(err)
	}
	if got.DockerRegistryImageName != "ghcr.io/example/bot" || got.DockerRegistryImageTag != "2.0" ||
		got.LimitsCPUs != "2" || got.LimitsMemory != "2048m" {
		t.Fatalf("after a tag and CPU update: %+v", got)
	}
	if err := e.client.UpdateApplication(ctx, app, coolify.AppUpdate{Image: "ghcr.io/example/other", CPUs: coolify.NoLimit, Memory: "4g"}); err != nil {
		t.Fatal(err)
	}
	got, _ = e.client.GetApplication(ctx, app)
	if cpus, mem := got.Limits(); got.DockerRegistryImageName != "ghcr.io/example/other" || got.DockerRegistryImageTag != "2.0" ||
		got.LimitsCPUs != "0" || cpus != "" || mem != "4g" {
		t.Fatalf("after an image and limits update: %+v (limits %q, %q)", got, cpus, mem)
	}
	if info, _ := e.sim.App(app); info.Image != "ghcr.io/example/other:2.0" || info.LimitsCPUs != "0" || info.LimitsMemory != "4g" {
		t.Fatalf("simulator holds %+v", info)
	}

	before := len(e.sim.Requests())
	if err := e.client.UpdateApplication(ctx, app, coolify.AppUpdate{}); !errors.Is(err, coolify.ErrValidation) {
		t.Fatalf("empty update: %v, want ErrValidation", err)
	}
	if n := len(e.sim.Requests()) - before; n != 0 {
		t.Fatalf("an empty update sent %d requests", n)
	}
	if err := e.client.UpdateApplication(ctx, "nope", coolify.AppUpdate{Tag: "x"}); !errors.Is(err, coolify.ErrNotFound) {
		t.Fatalf("unknown application: %v, want ErrNotFound", err)
	}
}

// DeleteEnv deletes one row; the key's preview twin is another row. A second delete is
// ErrNotFound.
func TestDeleteEnv(t *testing.T) {
	e := newEnv(t, sim.Config{})
	ctx := e.ctx()
	app := e.createApp("slot-1")
	if _, err := e.client.UpsertEnvs(ctx, app, []coolify.EnvVar{{Key: "OLD", Value: "1"}, {Key: "KEEP", Value: "2"}}); err != nil {
		t.Fatal(err)
	}
	envs, err := e.client.ListEnvs(ctx, app)
	if err != nil {
		t.Fatal(err)
	}
	var old []string
	for _, v := range envs {
		if v.Key == "OLD" {
			old = append(old, v.UUID)
		}
	}
	if len(old) != 2 {
		t.Fatalf("OLD rows %v, want it and its preview twin", old)
	}
	for _, uuid := range old {
		if err := e.client.DeleteEnv(ctx, app, uuid); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.client.DeleteEnv(ctx, app, old[0]); !errors.Is(err, coolify.ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	envs, _ = e.client.ListEnvs(ctx, app)
	if len(envs) != 2 || envs[0].Key != "KEEP" || envs[1].Key != "KEEP" {
		t.Fatalf("left %+v, want KEEP's two rows", envs)
	}
}

// A failed pull's reason comes from the deployment's logs, which only a token with
// read:sensitive reads: Docker's error by kind, past Coolify's cleanup line.
func TestFailedPullReasonFromTheLogs(t *testing.T) {
	e := newEnv(t, sim.Config{})
	const sensitive = "5|ops-sensitive"
	e.sim.AddToken(sensitive, "ops", "read", "write", "deploy", "read:sensitive")
	reader, err := coolify.New(e.url, sensitive, coolify.WithHTTPClient(e.http), coolify.WithClock(e.clock), coolify.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := e.ctx()
	second := e.sim.AddServer(sim.ServerSpec{UUID: "srv-2"})
	app := e.createApp("slot-1")
	other, err := e.client.CreateDockerImageApplication(ctx, coolify.CreateApplicationRequest{
		ProjectUUID: e.fix.ProjectUUID, ServerUUID: second, EnvironmentName: e.fix.EnvironmentName,
		Image: "ghcr.io/example/bot", Tag: "1.0", Name: "slot-2"})
	if err != nil {
		t.Fatal(err)
	}
	e.sim.FailPulls("ghcr.io/example/bot:1.0", 1)
	e.sim.FailPullsOn(second, "ghcr.io/example/bot:1.0", 1)
	for _, tc := range []struct{ app, want string }{
		{app, "Error response from daemon: manifest for ghcr.io/example/bot:1.0 not found: manifest unknown: manifest unknown"},
		{other, "Error response from daemon: pull access denied for ghcr.io/example/bot, repository does not exist or may require 'docker login': denied: requested access to the resource is denied"},
	} {
		res, err := e.client.Deploy(ctx, tc.app)
		if err != nil {
			t.Fatal(err)
		}
		e.sim.Advance(time.Minute)
		d, err := reader.GetDeployment(ctx, res.DeploymentUUID)
		if err != nil {
			t.Fatal(err)
		}
		if line, err := d.LastErrorLine(); d.Status != coolify.DeploymentFailed || err != nil || line != tc.want {
			t.Fatalf("deployment %s: last error line %q (%v), want %q", d.Status, line, err, tc.want)
		}
		hidden, err := e.client.GetDeployment(ctx, res.DeploymentUUID)
		if err != nil {
			t.Fatal(err)
		}
		if line, err := hidden.LastErrorLine(); !errors.Is(err, coolify.ErrLogsHidden) || line != "" ||
			!strings.Contains(err.Error(), "read:sensitive") {
			t.Fatalf("without read:sensitive: %q, %v; want ErrLogsHidden", line, err)
		}
	}
	// A list read with read:sensitive carries each deployment's logs too, except the list of
	// live deployments, where the client drops them.
	if _, err := e.client.Deploy(ctx, app); err != nil {
		t.Fatal(err)
	}
	_, list, err := reader.ListApplicationDeployments(context.Background(), app, 0, 2)
	if err != nil || len(list) != 2 || !list[0].Logs.Sent || !list[1].Logs.Sent || list[1].Logs.Text == "" {
		t.Fatalf("list with read:sensitive: %+v, %v", list, err)
	}
	live, err := reader.ListActiveDeployments(ctx)
	if err != nil || len(live) != 1 || live[0].Logs.Sent {
		t.Fatalf("live deployments with read:sensitive: %+v, %v; want one, without logs", live, err)
	}
}
