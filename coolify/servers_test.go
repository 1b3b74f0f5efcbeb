package coolify_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/coolify/sim"
)

// TestServerHealth: ListServers reads each server's is_reachable and is_usable from its
// settings, where the spec puts them; every answer passes the contract checker.
func TestServerHealth(t *testing.T) {
	sc := loadSpec(t).doc.Components.Schemas["ServerSetting"]
	for _, f := range []string{"is_reachable", "is_usable"} {
		if p := sc.Value.Properties[f]; p == nil || p.Value.Type == nil || !p.Value.Type.Is("boolean") {
			t.Fatalf("the spec's ServerSetting lacks the boolean %s", f)
		}
	}

	e := newEnv(t, fast())
	ctx := e.ctx()
	down := e.sim.AddServer(sim.ServerSpec{UUID: "srv-2", Name: "bots-2"})
	noDocker := e.sim.AddServer(sim.ServerSpec{UUID: "srv-3", Name: "bots-3"})
	e.sim.SetServerReachable(down, false)
	e.sim.SetServerUsable(noDocker, false)

	want := map[string]struct {
		name              string
		reachable, usable bool
	}{e.fix.ServerUUID: {"localhost", true, true}, down: {"bots-2", false, false}, noDocker: {"bots-3", true, false}}
	servers, err := e.client.ListServers(ctx)
	if err != nil || len(servers) != len(want) {
		t.Fatalf("servers = %+v, %v", servers, err)
	}
	for _, s := range servers {
		w, ok := want[s.UUID]
		st := s.Settings
		if !ok || s.Name != w.name || st.IsReachable == nil || st.IsUsable == nil ||
			*st.IsReachable != w.reachable || *st.IsUsable != w.usable || st.Functional() != (w.reachable && w.usable) {
			t.Errorf("server %s %q: reachable %v usable %v functional %v, want %+v",
				s.UUID, s.Name, deref(st.IsReachable), deref(st.IsUsable), st.Functional(), w)
		}
	}

	e.sim.SetServerReachable(down, true)
	servers, err = e.client.ListServers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		if s.UUID == down && !s.Settings.Functional() {
			t.Errorf("server %s back: %+v", down, s.Settings)
		}
	}
}

// TestDeploymentOnServerThatIsNotFunctional: the start is accepted and the deployment fails;
// with read:sensitive its logs (a JSON string, as the spec says) carry Coolify's line.
func TestDeploymentOnServerThatIsNotFunctional(t *testing.T) {
	e := newEnv(t, fast())
	ctx := e.ctx()
	const sensitive = "3|ops-sensitive"
	e.sim.AddToken(sensitive, "ops", "read", "read:sensitive")
	uuid := e.createApp("slot-a-0")
	e.sim.SetServerReachable(e.fix.ServerUUID, false)
	res, err := e.client.Deploy(ctx, uuid)
	if err != nil || res.DeploymentUUID == "" {
		t.Fatalf("deploy = %+v, %v", res, err)
	}
	e.sim.Advance(time.Minute)
	d, err := e.client.GetDeployment(ctx, res.DeploymentUUID)
	if err != nil || d.Status != coolify.DeploymentFailed {
		t.Fatalf("deployment = %+v, %v", d, err)
	}
	code, _, body := e.raw(http.MethodGet, "/deployments/"+res.DeploymentUUID, nil, map[string]string{"Authorization": "Bearer " + sensitive})
	logs, _ := body["logs"].(string)
	var entries []map[string]any
	if code != http.StatusOK || json.Unmarshal([]byte(logs), &entries) != nil || len(entries) == 0 ||
		!strings.Contains(entries[len(entries)-1]["output"].(string), "not functional") {
		t.Fatalf("deployment with read:sensitive: %d %v", code, body)
	}
}

// TestServerHealthUnknown: an answer without the fields leaves them nil, and the server counts
// as functional; only a reported false takes it out.
func TestServerHealthUnknown(t *testing.T) {
	for _, c := range []struct {
		settings   string
		functional bool
	}{
		{`{"concurrent_builds":2}`, true},
		{`{"is_reachable":true,"is_usable":true}`, true},
		{`{"is_reachable":false}`, false},
		{`{"is_reachable":true,"is_usable":false}`, false},
		{`{"is_usable":null}`, true},
	} {
		var s coolify.Server
		if err := json.Unmarshal([]byte(`{"uuid":"u","name":"n","settings":`+c.settings+`}`), &s); err != nil {
			t.Fatal(err)
		}
		if s.Settings.Functional() != c.functional {
			t.Errorf("settings %s: functional %v, want %v", c.settings, s.Settings.Functional(), c.functional)
		}
	}
}

func deref(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}

// TestServerDockerCleanup: GetServerDockerCleanup reads a server's cleanup schedule where the
// spec puts it, its answer passes the contract checker, and a server the token does not see,
// or a Coolify without the endpoint, is ErrNotFound.
func TestServerDockerCleanup(t *testing.T) {
	e := newEnv(t, fast())
	ctx := e.ctx()
	second := e.sim.AddServer(sim.ServerSpec{UUID: "srv-2"})
	e.sim.SetDockerCleanup(second, sim.DockerCleanup{Frequency: "hourly", Threshold: 60})
	for server, want := range map[string]coolify.DockerCleanup{
		e.fix.ServerUUID: {Frequency: coolify.DefaultCleanupFrequency, Threshold: 80, Force: true},
		second:           {Frequency: "hourly", Threshold: 60},
	} {
		got, err := e.client.GetServerDockerCleanup(ctx, server)
		if err != nil || *got != want {
			t.Errorf("server %s: %+v, %v; want %+v", server, got, err, want)
		}
	}
	if _, err := e.client.GetServerDockerCleanup(ctx, "nope"); !errors.Is(err, coolify.ErrNotFound) {
		t.Errorf("unknown server: %v, want ErrNotFound", err)
	}

	cfg := fast()
	cfg.Version = "4.2.0"
	old := newEnv(t, cfg)
	if _, err := old.client.GetServerDockerCleanup(old.ctx(), old.fix.ServerUUID); !errors.Is(err, coolify.ErrNotFound) {
		t.Errorf("a Coolify without the endpoint: %v, want ErrNotFound", err)
	}
}
