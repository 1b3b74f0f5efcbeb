package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/internal/pgtest"
	"botpool.dev/botpool/store"
	"botpool.dev/botpool/store/memory"
)

var env *kubetest.Env

func TestMain(m *testing.M) {
	kubetest.Main(m, func(e *kubetest.Env) { env = e })
}

func TestParseFlags(t *testing.T) {
	t.Setenv("BOTPOOL_DATABASE_URL", "")
	defaults, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !defaults.leaderElect || defaults.kubeAPIQPS < 100 || defaults.kubeAPIBurst < 200 || defaults.databaseURL != "" {
		t.Errorf("defaults = %+v: want leader election on, an API client far above client-go's 20/30 QPS, the in-memory store", defaults)
	}
	if !defaults.retention.Enabled() || defaults.eventQuota.BotEvents == 0 || defaults.eventQuota.NamespaceBytes == 0 {
		t.Errorf("defaults = %+v: want a retention and event quotas, not unbounded growth", defaults)
	}
	if p := defaults.egressPolicy(); p.AllowPrivate || len(p.Allowed) != 0 || defaults.reconcileTimeout != time.Minute {
		t.Errorf("defaults = %+v: want a strict egress policy and a one-minute reconcile timeout", defaults)
	}
	custom, err := parseFlags([]string{"--coolify-allow-private-networks", "--egress-allowed-cidrs=127.0.0.0/8,::1"})
	if p := custom.egressPolicy(); err != nil || !p.AllowPrivate || len(p.Allowed) != 2 || p.Allowed[1].String() != "::1/128" {
		t.Errorf("egress flags: %+v, %v", p, err)
	}

	t.Setenv("BOTPOOL_DATABASE_URL", "postgres://botpool@db:5432/botpool")
	fromEnv, err := parseFlags(nil)
	if err != nil || fromEnv.databaseURL != "postgres://botpool@db:5432/botpool" {
		t.Errorf("database URL from the environment: %q, %v", fromEnv.databaseURL, err)
	}

	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--kube-api-qps=800", "--kube-api-burst=1600", "--max-concurrent-reconciles=16", "--leader-elect=false"}, ""},
		{[]string{"--kube-api-qps=0"}, "--kube-api-qps must be positive"},
		{[]string{"--kube-api-burst=0"}, "--kube-api-burst must be at least 1"},
		{[]string{"--max-concurrent-reconciles=0"}, "--max-concurrent-reconciles must be at least 1"},
		{[]string{"--bot-api-bind-address=8082"}, "--bot-api-bind-address"},
		{[]string{"--bot-api-url=botpool:8082"}, "--bot-api-url"},
		{[]string{"--coolify-rate-limit=0"}, "--coolify-rate-limit must be at least 1"},
		{[]string{"--callback-allow-private-networks", "--callback-allowed-cidrs=10.20.0.0/16, fd00::/8,192.0.2.7"}, ""},
		{[]string{"--callback-allowed-cidrs=10.0.0.1/8"}, "--callback-allowed-cidrs"},
		{[]string{"--callback-allowed-cidrs=cluster"}, "--callback-allowed-cidrs"},
		{[]string{"--database-url=postgres://u:secret@db:notaport/x"}, "--database-url"},
		{[]string{"--cluster-name=staging-eu1"}, ""},
		{[]string{"--cluster-name=Staging_EU"}, "--cluster-name"},
		{[]string{"--reconcile-timeout=2m", "--coolify-max-in-flight=2", "--coolify-allow-private-networks", "--egress-allowed-cidrs=10.0.5.0/24, 127.0.0.1"}, ""},
		{[]string{"--reconcile-timeout=0"}, "--reconcile-timeout must be at least 5s"},
		{[]string{"--coolify-max-in-flight=0"}, "--coolify-max-in-flight must be at least 1"},
		{[]string{"--egress-allowed-cidrs=10.1.2.3/8"}, "did you mean 10.0.0.0/8"},
		{[]string{"--egress-allowed-cidrs=coolify.example"}, "--egress-allowed-cidrs"},
		{[]string{"--no-such-flag"}, "flag provided but not defined"},
		{[]string{"--retention-events=0", "--retention-transitions=8760h", "--retention-finished-bots=24h"}, ""},
		{[]string{"--retention-events=30m"}, "retention of events must be 0 (keep forever) or at least 1h0m0s"},
		{[]string{"--retention-interval=1s"}, "--retention-interval must be at least 1m"},
		{[]string{"--event-quota-bot-events=0", "--event-quota-namespace-bytes=0"}, ""},
		{[]string{"--event-quota-bot-bytes=-1"}, "bot bytes per second must be a finite number"},
		{[]string{"--event-quota-window=0s"}, "the window must be positive"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, err := parseFlags(tt.args)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Fatalf("error %q leaks the database password", err)
			}
		})
	}
}

// TestManagerServesProbes starts the manager against a real API server and checks that it
// reports healthy and, once its caches sync, ready; that it serves the bot API; and that it
// stops cleanly.
func TestManagerServesProbes(t *testing.T) {
	probeAddr, botAPIAddr := freeAddr(t), freeAddr(t)
	o, err := parseFlags([]string{
		"--leader-elect=true", "--leader-election-namespace=" + env.Namespace(t),
		"--health-probe-bind-address=" + probeAddr, "--metrics-bind-address=" + freeAddr(t),
		"--bot-api-bind-address=" + botAPIAddr,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // a failed check must not leave the manager running
	done := make(chan error, 1)
	go func() { done <- run(ctx, env.Config, o) }()

	for _, path := range []string{"/healthz", "/readyz"} {
		url := fmt.Sprintf("http://%s%s", probeAddr, path)
		kubetest.Eventually(t, 30*time.Second, func() error {
			resp, err := http.Get(url)
			if err != nil {
				return err
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s answered %d", url, resp.StatusCode)
			}
			return nil
		})
	}

	// The bot API is served too, and refuses a request without a slot token.
	kubetest.Eventually(t, 30*time.Second, func() error {
		resp, err := http.Post("http://"+botAPIAddr+"/v1/bots/standup/heartbeat", "application/json", nil)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			return fmt.Errorf("bot API without a token answered %d, want 401", resp.StatusCode)
		}
		return nil
	})

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("manager stopped with an error: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("manager did not stop within 30s of its context ending")
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// TestDeploymentArgsAreKnownFlags keeps config/manager in step with the flags: a renamed flag
// would otherwise crash-loop the deployed manager.
func TestDeploymentArgsAreKnownFlags(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("config", "manager", "manager.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var d appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatal(err)
		}
		if d.Kind != "Deployment" {
			continue
		}
		found = true
		for _, c := range d.Spec.Template.Spec.Containers {
			if _, err := parseFlags(c.Args); err != nil {
				t.Errorf("container %s: args %v: %v", c.Name, c.Args, err)
			}
		}
	}
	if !found {
		t.Fatal("no Deployment in config/manager/manager.yaml")
	}
}

// TestOpenStore: without a database URL the manager runs on the in-memory store; with one it
// connects to Postgres and migrates it.
func TestOpenStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := logr.Discard()

	mem, err := openStore(ctx, log, options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := mem.(*memory.Store); !ok {
		t.Errorf("no database URL: got %T, want the in-memory store", mem)
	}
	_ = mem.Close()

	pg, err := pgtest.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Close() })
	st, err := openStore(ctx, log, options{databaseURL: pg.NewDatabase(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	if err := st.RecordHeartbeat(ctx, store.Heartbeat{BotUID: "b1", Namespace: "ns", Name: "b"}); err != nil {
		t.Fatalf("heartbeat into Postgres: %v", err)
	}
	if !st.Status().Available {
		t.Error("the Postgres store reports unavailable")
	}

	if _, err := openStore(ctx, log, options{databaseURL: "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"}); err == nil {
		t.Error("an unreachable database at start must fail the manager with a clear error")
	}
}

// TestClusterIdentity: --cluster-name wins; else the kube-system namespace's uid; a manager
// that cannot read it says to set --cluster-name.
func TestClusterIdentity(t *testing.T) {
	ctx := context.Background()
	kubeSystem := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system", UID: "c1a5-7e12"}}
	c := fake.NewClientBuilder().WithObjects(kubeSystem).Build()
	if id, err := clusterIdentity(ctx, c, ""); err != nil || id != "uid:c1a5-7e12" {
		t.Errorf("default identity %q, %v; want the kube-system uid", id, err)
	}
	if id, err := clusterIdentity(ctx, c, "staging"); err != nil || id != "name:staging" {
		t.Errorf("named identity %q, %v", id, err)
	}
	if _, err := clusterIdentity(ctx, fake.NewClientBuilder().Build(), ""); err == nil || !strings.Contains(err.Error(), "--cluster-name") {
		t.Errorf("without kube-system: %v, want an error naming --cluster-name", err)
	}
}
