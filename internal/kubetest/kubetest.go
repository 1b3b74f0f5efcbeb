// Package kubetest starts a real kube-apiserver and etcd (controller-runtime's envtest) with
// botpool's CRDs installed, for the test suites of every package: one environment per package
// in TestMain, a generated namespace per test.
package kubetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	botpoolv1alpha1 "botpool.dev/botpool/api/v1alpha1"
)

// Env is a running control plane with the CRDs installed.
type Env struct {
	Config *rest.Config
	Client client.Client
	Scheme *k8sruntime.Scheme

	env *envtest.Environment
}

// RepoRoot is the root of the botpool repository, found from this file's location so tests
// work from any package directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Start launches kube-apiserver and etcd from KUBEBUILDER_ASSETS and installs the CRDs of
// config/crd/bases. The caller stops it with Stop.
func Start() (*Env, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is not set: run the tests with `make test`, " +
			"or export KUBEBUILDER_ASSETS=$(make -s envtest) (builds kube-apiserver and etcd once, ~10 minutes)")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, fmt.Errorf("KUBEBUILDER_ASSETS=%s has no %s: run `make envtest` to build it: %w", assets, bin, err)
		}
	}

	scheme := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(botpoolv1alpha1.AddToScheme(scheme))

	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest control plane: %w", err)
	}
	// Tests create objects in bursts; client-go's default 5 QPS would make them crawl.
	cfg.QPS, cfg.Burst = 1000, 2000
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("creating client: %w", err)
	}
	return &Env{Config: cfg, Client: c, Scheme: scheme, env: env}, nil
}

// Stop shuts the control plane down and removes its data.
func (e *Env) Stop() error {
	return e.env.Stop()
}

// Namespace creates a namespace with a generated name for one test and deletes it when the
// test ends, so tests never see each other's objects.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating test namespace: %v", err)
	}
	t.Cleanup(func() {
		// envtest runs no namespace controller, so objects stay; deleting the namespace still
		// keeps later listings of namespaces short and documents intent.
		_ = e.Client.Delete(context.Background(), ns)
	})
	return ns.Name
}

// Main is a package's TestMain: it starts one environment, hands it to use (typically to keep
// it in a package variable), runs the tests and stops the environment.
//
// Logs of the code under test go to stderr (go test shows them for failing packages only):
// errors by default, everything with BOTPOOL_TEST_VERBOSE=1; and, at every level, to the
// watches of WatchLogs.
func Main(m *testing.M, use func(*Env)) {
	level := zapcore.ErrorLevel
	if os.Getenv("BOTPOOL_TEST_VERBOSE") != "" {
		level = zapcore.DebugLevel
	}
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(level), zap.RawZapOpts(withTap())))

	env, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	use(env)
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping envtest:", err)
	}
	os.Exit(code)
}

// MinEventually is the shortest wait Eventually grants.
const MinEventually = time.Minute

// Eventually polls check every 10ms until it returns nil, and fails the test with check's
// last error when timeout passes first. Tests poll instead of sleeping: caches and controllers
// converge in milliseconds here, and a slow machine only makes the wait longer.
//
// The timeout is a liveness bound, not a speed target: it is raised to MinEventually, because
// on a machine other suites share a 10 s wait for a reconcile was seen to run out (issue 14,
// item 9). A test that must prove something did NOT happen steps the fake clock instead.
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	timeout = max(timeout, MinEventually)
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %v", timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FreeLocalAddr returns a loopback address with a port nobody listens on now, for a server a
// test starts by address (the manager's probes, the bot API).
func FreeLocalAddr(t testing.TB) string {
	t.Helper()
	l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}
