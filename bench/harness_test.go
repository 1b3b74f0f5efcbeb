package bench

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify/sim"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/internal/pgtest"
)

// shared is what every scenario of one `go test` process reuses: the manager binary (built
// once) and the Postgres server (a fresh database per scenario). It is set up by the first
// benchmark that needs it, so `go test ./bench/` without -bench costs nothing.
var shared struct {
	once    sync.Once
	err     error
	dir     string
	manager string // path of the built binary
	pg      *pgtest.Server
}

func TestMain(m *testing.M) {
	// The benchmark's own watch logs through controller-runtime: errors only.
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	code := m.Run()
	if shared.pg != nil {
		if err := shared.pg.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping Postgres:", err)
		}
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// setupShared builds the manager binary (or takes $BOTPOOL_BENCH_MANAGER) and starts Postgres.
func setupShared(b *testing.B) {
	b.Helper()
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("", "botpool-bench-"); shared.err != nil {
			return
		}
		if bin := os.Getenv(managerEnv); bin != "" {
			shared.manager = bin
		} else {
			shared.manager = filepath.Join(shared.dir, "manager")
			shared.err = buildManager(shared.manager)
		}
		if shared.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shared.pg, shared.err = pgtest.Start(ctx)
	})
	if shared.err != nil {
		b.Fatal(shared.err)
	}
}

// managerEnv names a manager binary to measure instead of the working tree's (say, a build of
// an earlier commit, for a before/after comparison).
const managerEnv = "BOTPOOL_BENCH_MANAGER"

// buildManager builds the manager binary from the repository root, without -race, as shipped.
func buildManager(path string) error {
	build := exec.Command("go", "build", "-trimpath", "-o", path, ".")
	build.Dir = kubetest.RepoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the manager: %w\n%s", err, out)
	}
	return nil
}

// scenario is one isolated world: its own control plane, database, Coolify simulator and
// manager process, so no benchmark's objects weigh on another's figures.
type scenario struct {
	b       *testing.B
	env     *kubetest.Env
	c       client.Client // the benchmark's own client, without a client-side rate limit
	ns      string
	sim     *sim.Server
	server  string // the simulator's server uuid
	project string
	dir     string
	dsn     string
	mgr     *managerProcess
	watch   *watcher
	fleet   *fleet
	closed  sync.Once
}

// simToken is the Coolify API token of the benchmark's simulator.
const simToken = "1|botpool-bench"

// newScenario starts a control plane and a simulator without latency or rate limit whose
// containers run fl's bots (nil: containers that never call the bot API). The manager starts
// later, with startManager, so a benchmark can measure the bare API server first.
func newScenario(b *testing.B, fl *fleet) *scenario {
	b.Helper()
	setupShared(b)
	env, err := kubetest.Start()
	if err != nil {
		b.Fatal(err)
	}
	sc := &scenario{b: b, env: env, fleet: fl}
	b.Cleanup(sc.close)
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 1e6, 1e6 // measure the server, not client-go's limiter
	if sc.c, err = client.New(cfg, client.Options{Scheme: env.Scheme}); err != nil {
		b.Fatal(err)
	}
	if sc.dir, err = os.MkdirTemp(shared.dir, "scenario-"); err != nil {
		b.Fatal(err)
	}
	sc.dsn = shared.pg.NewDatabase(b)

	hooks := sim.Hooks{}
	if fl != nil {
		hooks.OnStart = fl.onStart
	}
	// Speed turns Coolify's seconds and minutes into microseconds: deployments finish on the
	// simulator's next 10ms tick. Every limit that would queue or refuse work is lifted.
	sc.sim = sim.Start(sim.New(sim.Config{Speed: 1e6, RateLimit: -1, Workers: 10_000, RandSeed: uint64(time.Now().UnixNano()), Hooks: hooks}))
	sc.server = sc.sim.AddServer(sim.ServerSpec{Name: "bench", ConcurrentBuilds: 10_000, DeploymentQueueLimit: 100_000})
	sc.project = sc.sim.AddProject(sim.ProjectSpec{Name: "bots", Environments: []sim.EnvironmentSpec{{Name: "production"}}})
	sc.sim.AddToken(simToken, "bench", "read", "write", "deploy")
	sc.sim.WarmImage(sc.server, benchImage, "")

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}
	sc.ns = ns.Name
	ctx := context.Background()
	if err := sc.c.Create(ctx, ns); err != nil {
		b.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sc.ns, Name: "coolify",
		Labels: map[string]string{v1.LabelAllowPoolUse: "true"}},
		StringData: map[string]string{"url": sc.sim.URL, "token": simToken}}
	if err := sc.c.Create(ctx, secret); err != nil {
		b.Fatal(err)
	}
	if sc.watch, err = startWatcher(env.Config, env.Scheme, sc.ns); err != nil {
		b.Fatal(err)
	}
	return sc
}

// close stops everything the scenario started; it runs once, from the benchmark's defer or its
// cleanup, whichever comes first.
func (sc *scenario) close() {
	sc.closed.Do(sc.stopAll)
}

func (sc *scenario) stopAll() {
	if sc.watch != nil {
		sc.watch.stop()
	}
	if sc.mgr != nil {
		sc.mgr.stop()
	}
	if sc.fleet != nil {
		sc.fleet.stop()
	}
	if sc.sim != nil {
		sc.sim.Close()
	}
	if err := sc.env.Stop(); err != nil {
		sc.b.Logf("stopping the control plane: %v", err)
	}
}

// startManager runs the manager binary with its shipped defaults, except what a benchmark on
// one machine needs: no leader election, loopback addresses, and a Coolify rate limit high
// enough that the simulator's zero latency is what the operator sees.
func (sc *scenario) startManager(extra ...string) {
	sc.b.Helper()
	kubeconfig := filepath.Join(sc.dir, "kubeconfig")
	if err := writeKubeconfig(sc.env.Config, kubeconfig); err != nil {
		sc.b.Fatal(err)
	}
	extra = append(extra, strings.Fields(os.Getenv(argsEnv))...)
	if os.Getenv(profileEnv) != "" {
		addr, err := freeAddr()
		if err != nil {
			sc.b.Fatal(err)
		}
		extra = append(extra, "--pprof-bind-address="+addr)
	}
	mgr, err := startManagerProcess(shared.manager, kubeconfig, sc.dsn, filepath.Join(sc.dir, "manager.log"), extra)
	if err != nil {
		sc.b.Fatal(err)
	}
	sc.mgr = mgr
	if err := mgr.waitReady(time.Minute); err != nil {
		sc.b.Fatalf("%v\n%s", err, mgr.logTail())
	}
}

// argsEnv holds extra manager flags (space-separated), to measure a setting other than the
// shipped default, e.g. BOTPOOL_BENCH_ARGS=--max-concurrent-reconciles=32.
const argsEnv = "BOTPOOL_BENCH_ARGS"

// profileEnv names a directory for CPU profiles of the manager during each benchmark's
// measured phase; unset, the manager serves no pprof and nothing is profiled.
const profileEnv = "BOTPOOL_BENCH_PROFILE"

// profile records a CPU profile of the manager for the next d, into
// $BOTPOOL_BENCH_PROFILE/<benchmark>-<name>.pprof; the returned func waits for it.
func (sc *scenario) profile(name string, d time.Duration) (wait func()) {
	dir := os.Getenv(profileEnv)
	if dir == "" || sc.mgr == nil {
		return func() {}
	}
	path := filepath.Join(dir, strings.ReplaceAll(sc.b.Name(), "/", "_")+"-"+name+".pprof")
	done := make(chan error, 1)
	go func() {
		done <- sc.mgr.profile(fmt.Sprintf("profile?seconds=%d", max(int(d.Seconds()), 1)), path, d+time.Minute)
	}()
	return func() {
		if err := sc.mgr.saveMetrics(strings.TrimSuffix(path, ".pprof") + ".metrics"); err != nil {
			sc.b.Logf("saving the manager's metrics: %v", err)
		}
		if err := <-done; err != nil {
			sc.b.Logf("profiling the manager: %v", err)
		} else {
			sc.b.Logf("CPU profile of the manager: %s", path)
		}
	}
}

// heapProfile saves the manager's heap profile to $BOTPOOL_BENCH_PROFILE/<benchmark>-<name>.heap.pprof.
func (sc *scenario) heapProfile(name string) {
	dir := os.Getenv(profileEnv)
	if dir == "" || sc.mgr == nil {
		return
	}
	path := filepath.Join(dir, strings.ReplaceAll(sc.b.Name(), "/", "_")+"-"+name+".heap.pprof")
	if err := sc.mgr.profile("heap", path, time.Minute); err != nil {
		sc.b.Logf("heap profile of the manager: %v", err)
		return
	}
	sc.b.Logf("heap profile of the manager: %s", path)
}

// fatalf stops the benchmark with the manager's last log lines, which usually say why.
func (sc *scenario) fatalf(format string, args ...any) {
	sc.b.Helper()
	msg := fmt.Sprintf(format, args...)
	if sc.mgr != nil {
		msg += "\nmanager log (tail):\n" + sc.mgr.logTail()
	}
	sc.b.Fatal(msg)
}

// waitFor polls check every 20ms until it returns nil; the scenario fails when timeout
// passes first, or at once when a simulated bot reported an error.
func (sc *scenario) waitFor(what string, timeout time.Duration, check func() error) {
	sc.b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if sc.fleet != nil {
			if err := sc.fleet.err(); err != nil {
				sc.fatalf("a simulated bot failed while waiting for %s: %v", what, err)
			}
		}
		if sc.mgr != nil && sc.mgr.exited() {
			sc.fatalf("the manager exited while waiting for %s", what)
		}
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			sc.fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// benchImage is the pools' image; the simulator's server has it cached (warm pools).
const benchImage = "ghcr.io/example/bot"

// pool builds a zoom pool on the scenario's simulator.
func (sc *scenario) pool(name string, maxSlots, minIdle int32, mutate ...func(*v1.BotPool)) *v1.BotPool {
	p := bt.MakePool(sc.ns, name).Image(benchImage, "").MaxSlots(maxSlots).MinIdle(minIdle).
		Placement(sc.project, sc.server, "production").Obj()
	for _, f := range mutate {
		f(p)
	}
	if err := sc.c.Create(context.Background(), p); err != nil {
		sc.b.Fatal(err)
	}
	return p
}

// newBot is a Bot of pool, as a user would create it.
func (sc *scenario) newBot(name, pool string) *v1.Bot {
	return bt.MakeBot(sc.ns, name).PoolRef(pool).Obj()
}

// createBots creates bots from workers goroutines and records, per bot, when its create
// request was sent: the start of its acquire time.
func (sc *scenario) createBots(bots []*v1.Bot, workers int) map[string]time.Time {
	sc.b.Helper()
	sent := make(map[string]time.Time, len(bots))
	var mu sync.Mutex
	parallel(sc, bots, workers, func(bot *v1.Bot) error {
		t := time.Now()
		if err := sc.c.Create(context.Background(), bot); err != nil {
			return fmt.Errorf("creating bot %s: %w", bot.Name, err)
		}
		mu.Lock()
		sent[bot.Name] = t
		mu.Unlock()
		return nil
	})
	return sent
}

// writeKubeconfig writes cfg (envtest's admin credentials) for the manager subprocess.
func writeKubeconfig(cfg *rest.Config, path string) error {
	server := cfg.Host
	if !strings.Contains(server, "://") {
		server = "https://" + server
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	return clientcmd.WriteToFile(*kc, path)
}

// freeAddr returns a loopback address with a port free at the time of asking.
func freeAddr() (string, error) {
	l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// managerWrites is the manager's API server writes so far, by method and status code class.
func (sc *scenario) managerWrites() map[string]float64 {
	sc.b.Helper()
	s, err := sc.mgr.scrape()
	if err != nil {
		sc.fatalf("scraping the manager's metrics: %v", err)
	}
	return s.writes()
}

// serverWrites is the API server's own count of writes, by verb and resource.
func (sc *scenario) serverWrites() map[string]float64 {
	sc.b.Helper()
	cs, err := kubernetes.NewForConfig(sc.env.Config)
	if err != nil {
		sc.b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		sc.b.Fatalf("reading the API server's metrics: %v", err)
	}
	s, err := parseMetrics(bytes.NewReader(raw))
	if err != nil {
		sc.b.Fatal(err)
	}
	return s.serverWrites()
}

// waitQuiet waits until the manager has sent no write for quiet, and returns its write
// counts then.
func (sc *scenario) waitQuiet(quiet, timeout time.Duration) map[string]float64 {
	sc.b.Helper()
	last := sc.managerWrites()
	since := time.Now()
	deadline := since.Add(timeout)
	for time.Since(since) < quiet {
		if time.Now().After(deadline) {
			sc.fatalf("the manager did not stop writing for %v within %v", quiet, timeout)
		}
		time.Sleep(250 * time.Millisecond)
		if now := sc.managerWrites(); total(now) != total(last) {
			last, since = now, time.Now()
		}
	}
	return last
}

// cpuTime is the CPU time the manager process has used so far (user + system).
func (sc *scenario) cpuTime() time.Duration {
	sc.b.Helper()
	d, err := sc.mgr.cpuTime()
	if err != nil {
		sc.fatalf("reading the manager's CPU time: %v", err)
	}
	return d
}
