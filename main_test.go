package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	botpoolv1alpha1 "botpool.dev/botpool/api/v1alpha1"
	bt "botpool.dev/botpool/internal/botpooltest"

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
	probeAddr, botAPIAddr := kubetest.FreeLocalAddr(t), kubetest.FreeLocalAddr(t)
	o, err := parseFlags([]string{
		"--leader-elect=true", "--leader-election-namespace=" + env.Namespace(t),
		"--health-probe-bind-address=" + probeAddr, "--metrics-bind-address=" + kubetest.FreeLocalAddr(t),
		"--bot-api-bind-address=" + botAPIAddr,
	})
	if err != nil {
		t.Fatal(err)
	}
	o.skipNameValidation = true // other tests of this package run the manager too
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

	pg := pgtest.StartT(t)
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
	// The controllers' setup takes the store as the webhook outbox when it is one: with
	// Postgres, webhook messages are durable.
	if _, ok := st.(store.Outbox); !ok {
		t.Errorf("the Postgres store (%T) is no store.Outbox: webhooks would fall back to memory", st)
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

// TestHardeningFlags: the watched namespaces, bot API TLS, the http:// bot API URL check and
// the pprof address are validated at start, with errors that name the flag.
func TestHardeningFlags(t *testing.T) {
	t.Setenv("BOTPOOL_DATABASE_URL", "")
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"in-cluster Service URL", []string{"--bot-api-url=http://botpool-bot-api.botpool-system.svc:8082"}, ""},
		{"fully qualified Service URL", []string{"--bot-api-url=http://botpool-bot-api.botpool-system.svc.cluster.local:8082"}, ""},
		{"single-label name", []string{"--bot-api-url=http://botpool-bot-api:8082"}, ""},
		{"loopback", []string{"--bot-api-url=http://127.0.0.1:8082"}, ""},
		{"localhost", []string{"--bot-api-url=http://localhost:8082"}, ""},
		{"private IPv4", []string{"--bot-api-url=http://10.96.12.7:8082"}, ""},
		{"private 192.168", []string{"--bot-api-url=http://192.168.1.20:8082"}, ""},
		{"shared address space", []string{"--bot-api-url=http://100.64.3.4:8082"}, ""},
		{"IPv6 unique local", []string{"--bot-api-url=http://[fd00::1]:8082"}, ""},
		{"https public name", []string{"--bot-api-url=https://bots.example.com"}, ""},
		{"http public name", []string{"--bot-api-url=http://bots.example.com"}, "plain http to a host outside the cluster"},
		{"http public IP", []string{"--bot-api-url=http://203.0.113.7:8082"}, "plain http to a host outside the cluster"},
		{"http public IPv6", []string{"--bot-api-url=http://[2001:db8::1]:8082"}, "plain http to a host outside the cluster"},
		{"svc as a label of a public name", []string{"--bot-api-url=http://svc.example.com"}, "plain http to a host outside the cluster"},
		{"name ending in svc without the dot", []string{"--bot-api-url=http://mysvc.com"}, "plain http to a host outside the cluster"},
		{"svc inside a public name", []string{"--bot-api-url=http://bots.svc.example.com"}, "plain http to a host outside the cluster"},
		{"http public name allowed", []string{"--bot-api-url=http://bots.example.com", "--allow-insecure-bot-api-url"}, ""},
		{"TLS pair", []string{"--bot-api-tls-cert-file=/tls/tls.crt", "--bot-api-tls-key-file=/tls/tls.key"}, ""},
		{"TLS cert without key", []string{"--bot-api-tls-cert-file=/tls/tls.crt"}, "set both or neither"},
		{"TLS key without cert", []string{"--bot-api-tls-key-file=/tls/tls.key"}, "set both or neither"},
		{"watched namespaces", []string{"--watch-namespaces=team-a, team-b,team-a"}, ""},
		{"bad namespace", []string{"--watch-namespaces=team-a,Team_B"}, `--watch-namespaces: "Team_B" is not a namespace name`},
		{"pprof on loopback", []string{"--pprof-bind-address=127.0.0.1:6060"}, ""},
		{"pprof on localhost", []string{"--pprof-bind-address=localhost:6060"}, ""},
		{"pprof on every interface", []string{"--pprof-bind-address=:6060"}, "--pprof-bind-address"},
		{"pprof on a pod address", []string{"--pprof-bind-address=10.0.0.5:6060"}, "--pprof-bind-address"},
		{"secure metrics", []string{"--metrics-secure"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseFlags(tt.args)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("%v: unexpected error: %v", tt.args, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("%v: error = %v, want one containing %q", tt.args, err, tt.wantErr)
			}
		})
	}

	o, err := parseFlags([]string{"--watch-namespaces= team-a,team-b,,team-a "})
	if err != nil {
		t.Fatal(err)
	}
	if got := o.hardening.cacheNamespaces(); len(got) != 2 || !hasKeys(got, "team-a", "team-b") {
		t.Errorf("cache namespaces = %v, want team-a and team-b", got)
	}
	if all, _ := parseFlags(nil); all.hardening.cacheNamespaces() != nil {
		t.Errorf("no --watch-namespaces: cache namespaces = %v, want nil (every namespace)", all.hardening.cacheNamespaces())
	}
	if m := o.hardening.metricsOptions(":8080"); m.SecureServing || m.FilterProvider != nil {
		t.Error("metrics are secured without --metrics-secure")
	}
	secure, _ := parseFlags([]string{"--metrics-secure"})
	if m := secure.hardening.metricsOptions(":8443"); !m.SecureServing || m.FilterProvider == nil || m.BindAddress != ":8443" {
		t.Errorf("--metrics-secure: %+v, want HTTPS with the authentication and authorization filter", m)
	}
}

func hasKeys[V any](m map[string]V, keys ...string) bool {
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			return false
		}
	}
	return true
}

// TestWatchNamespacesRestrictsReconciles runs the manager with --watch-namespaces=A: the pool
// in A is reconciled (it gets its finalizer), the pool in B, created first, is never touched.
func TestWatchNamespacesRestrictsReconciles(t *testing.T) {
	ctx := t.Context()
	nsA, nsB := env.Namespace(t), env.Namespace(t)
	pool := func(ns string) *botpoolv1alpha1.BotPool {
		return bt.MakePool(ns, "meet").Platform(botpoolv1alpha1.PlatformGoogleMeet).Image("ghcr.io/example/meeting-bot", "").
			Credentials("coolify-credentials").Placement("p", "s", "production").Obj()
	}
	// B's pool exists before the manager starts, so an unrestricted manager would find it in
	// its first list, before A's pool is even created.
	poolB := pool(nsB)
	if err := env.Client.Create(ctx, poolB); err != nil {
		t.Fatal(err)
	}

	o, err := parseFlags([]string{
		"--leader-elect=false", "--watch-namespaces=" + nsA,
		"--health-probe-bind-address=" + kubetest.FreeLocalAddr(t), "--metrics-bind-address=0",
		"--bot-api-bind-address=" + kubetest.FreeLocalAddr(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	startManager(t, env.Config, o)

	poolA := pool(nsA)
	if err := env.Client.Create(ctx, poolA); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 30*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(poolA), poolA); err != nil {
			return err
		}
		if len(poolA.Finalizers) == 0 {
			return errors.New("the pool in the watched namespace has no finalizer yet")
		}
		return nil
	})
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(poolB), poolB); err != nil {
		t.Fatal(err)
	}
	if len(poolB.Finalizers) != 0 || len(poolB.Status.Conditions) != 0 || poolB.Generation != 1 {
		t.Errorf("the pool in the unwatched namespace %s was reconciled: finalizers %v, conditions %v",
			nsB, poolB.Finalizers, poolB.Status.Conditions)
	}
}

// TestSecureMetrics: with --metrics-secure the metrics answer only over HTTPS, refuse a caller
// without a token, refuse a ServiceAccount not allowed GET /metrics, and serve one that is.
func TestSecureMetrics(t *testing.T) {
	ctx := t.Context()
	ns := env.Namespace(t)
	metricsAddr := kubetest.FreeLocalAddr(t)
	o, err := parseFlags([]string{
		"--leader-elect=false", "--metrics-secure", "--metrics-bind-address=" + metricsAddr,
		"--health-probe-bind-address=" + kubetest.FreeLocalAddr(t), "--bot-api-bind-address=" + kubetest.FreeLocalAddr(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	startManager(t, env.Config, o)

	// token issues a token for a new ServiceAccount, allowed GET /metrics when reader is set.
	token := func(name string, reader bool) string {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		if err := env.Client.Create(ctx, sa); err != nil {
			t.Fatal(err)
		}
		if reader {
			role := &rbacv1.ClusterRole{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "metrics-reader-"},
				Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
			}
			if err := env.Client.Create(ctx, role); err != nil {
				t.Fatal(err)
			}
			binding := &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "metrics-reader-"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
				Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}},
			}
			if err := env.Client.Create(ctx, binding); err != nil {
				t.Fatal(err)
			}
		}
		tr := &authenticationv1.TokenRequest{}
		if err := env.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	reader, stranger := token("prometheus", true), token("stranger", false)

	// The certificate is self-signed: the token, not the certificate, is what is checked here.
	httpsClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // self-signed by design
	}}
	get := func(bearer string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+metricsAddr+"/metrics", nil)
		if err != nil {
			return 0, err
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := httpsClient.Do(req)
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	// Serving (liveness), and the authorized reader gets its metrics.
	kubetest.Eventually(t, 30*time.Second, func() error {
		code, err := get(reader)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("an authorized reader got %d", code)
		}
		return nil
	})
	for _, tc := range []struct {
		who, token string
		want       int
	}{
		{"no token", "", http.StatusUnauthorized},
		// controller-runtime's filter answers 500 ("Authentication failed") when the review of
		// a malformed token errs: refused all the same.
		{"a forged token", "not-a-token", 0},
		{"a ServiceAccount without the metrics-reader rule", stranger, http.StatusForbidden},
	} {
		code, err := get(tc.token)
		if err != nil || (tc.want != 0 && code != tc.want) || code < 400 {
			t.Errorf("%s: %d, %v; want %d (0: any refusal)", tc.who, code, err, tc.want)
		}
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + metricsAddr + "/metrics")
	if err == nil {
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP still serves the metrics")
		}
	}
}

// startManager runs the manager with o against cfg until the test ends, and fails the test if
// it stops with an error or does not stop once its context ends.
func startManager(t *testing.T, cfg *rest.Config, o options) {
	t.Helper()
	o.skipNameValidation = true // other tests of this package run the manager too
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, o) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("manager stopped with an error: %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("the manager did not stop within a minute of its context's end")
		}
	})
}
