// Command botpool runs the botpool manager: the controllers that keep warm pools of
// meeting-bot containers on Coolify, and (as later parts land) the HTTP API the bot containers
// call. One binary, leader-elected, so several replicas can run for availability.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5/pgconn"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	botpoolv1alpha1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/botapi"
	"botpool.dev/botpool/callback"
	"botpool.dev/botpool/controllers"
	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/internal/cachelag"
	"botpool.dev/botpool/store"
	"botpool.dev/botpool/store/memory"
	"botpool.dev/botpool/store/postgres"
)

// options are the manager's command-line settings.
type options struct {
	metricsAddr             string
	probeAddr               string
	leaderElect             bool
	leaderElectionNamespace string
	// kubeAPIQPS and kubeAPIBurst replace client-go's 20/30, which would throttle an allocator
	// binding hundreds of bots a second long before the API server is the limit.
	kubeAPIQPS              float64
	kubeAPIBurst            int
	maxConcurrentReconciles int
	// databaseURL is the Postgres DSN; empty selects the embedded in-memory store.
	databaseURL string
	botAPIAddr  string
	// botAPIURL is the address slots' containers reach the bot API at (BOTPOOL_API_URL).
	botAPIURL string
	// coolifyRateLimit is requests per minute per Coolify user, shared by all its pools.
	coolifyRateLimit int
	// scheduleLead is how long before its startTime a scheduled bot joins the queue.
	scheduleLead time.Duration
	// pprofAddr serves net/http/pprof when set: for profiling (the benchmarks use it); off by
	// default, as profiles expose the process's internals.
	pprofAddr string
	zap       zap.Options

	// Hardening (issue 13): see hardening.go.
	hardening hardeningOptions
	// skipNameValidation lets tests run the manager more than once in one process
	// (controller names are otherwise unique per process); never set by a flag.
	skipNameValidation bool
}

func parseFlags(args []string) (options, error) {
	o := options{zap: zap.Options{Development: false}}
	fs := flag.NewFlagSet("botpool", flag.ContinueOnError)
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint; 0 disables it.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", "Address of the net/http/pprof endpoints (/debug/pprof/); empty disables them.")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "Elect a leader so only one replica reconciles at a time.")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease; defaults to the pod's namespace in a cluster.")
	fs.Float64Var(&o.kubeAPIQPS, "kube-api-qps", 500, "Sustained requests per second to the Kubernetes API server.")
	fs.IntVar(&o.kubeAPIBurst, "kube-api-burst", 1000, "Burst of requests to the Kubernetes API server.")
	fs.IntVar(&o.maxConcurrentReconciles, "max-concurrent-reconciles", 8, "Reconciles each controller runs at once.")
	fs.StringVar(&o.databaseURL, "database-url", os.Getenv("BOTPOOL_DATABASE_URL"), "Postgres URL or DSN for liveness, projection and audit (env BOTPOOL_DATABASE_URL); empty uses the embedded in-memory store.")
	fs.StringVar(&o.botAPIAddr, "bot-api-bind-address", ":8082", "Address of the HTTP API that bot containers call.")
	fs.StringVar(&o.botAPIURL, "bot-api-url", "http://botpool-bot-api.botpool-system.svc:8082", "URL bot containers reach the bot API at; set as BOTPOOL_API_URL on every slot's application.")
	fs.DurationVar(&o.scheduleLead, "schedule-lead", 2*time.Minute, "How long before its startTime a scheduled Bot joins the queue, so its slot is warm when the meeting starts.")
	fs.IntVar(&o.coolifyRateLimit, "coolify-rate-limit", coolify.DefaultRateLimit, "Requests per minute to one Coolify instance per URL and token, shared by all pools using them (Coolify's own limit is 200 per user).")
	o.hardening.bindFlags(fs)
	o.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	return o, errors.Join(o.validate(), o.hardening.validate(o))
}

func (o options) validate() error {
	var errs []error
	if o.kubeAPIQPS <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-qps must be positive, got %v", o.kubeAPIQPS))
	}
	if o.kubeAPIBurst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-burst must be at least 1, got %d", o.kubeAPIBurst))
	}
	if o.maxConcurrentReconciles < 1 {
		errs = append(errs, fmt.Errorf("--max-concurrent-reconciles must be at least 1, got %d", o.maxConcurrentReconciles))
	}
	if u, err := url.Parse(o.botAPIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("--bot-api-url %q: want an http(s) URL that bot containers can reach", o.botAPIURL))
	}
	if o.scheduleLead < 0 {
		errs = append(errs, fmt.Errorf("--schedule-lead must not be negative, got %s", o.scheduleLead))
	}
	if o.coolifyRateLimit < 1 {
		errs = append(errs, fmt.Errorf("--coolify-rate-limit must be at least 1, got %d", o.coolifyRateLimit))
	}
	if _, _, err := net.SplitHostPort(o.botAPIAddr); err != nil {
		errs = append(errs, fmt.Errorf("--bot-api-bind-address %q: %w", o.botAPIAddr, err))
	}
	if o.databaseURL != "" {
		// Parse only: a typo should stop the manager at start, not at the first heartbeat.
		// The error text of pgconn never includes the password.
		if _, err := pgconn.ParseConfig(o.databaseURL); err != nil {
			errs = append(errs, fmt.Errorf("--database-url: %w", err))
		}
	}
	return errors.Join(errs...)
}

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(botpoolv1alpha1.AddToScheme(s))
	return s
}

// newManager builds the manager with its probes; controllers register on it as they land.
func newManager(cfg *rest.Config, o options) (ctrl.Manager, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS = float32(o.kubeAPIQPS)
	cfg.Burst = o.kubeAPIBurst

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: newScheme(),
		// Cache only the slot token Secrets, never every Secret of the cluster: memory, and
		// the least privilege an informer can have. Other Secrets (Coolify credentials) are
		// read directly when needed.
		Cache: cache.Options{
			ByObject: map[client.Object]cache.ByObject{
				&corev1.Secret{}: {Label: botapi.TokenSecretSelector},
			},
			// Nothing reads managedFields, and they are a large share of every cached object:
			// with ten thousand Bots, tens of MiB, and more to copy on every read that copies.
			DefaultTransform: cache.TransformStripManagedFields(),
			// nil (every namespace) unless --watch-namespaces restricts the informers.
			DefaultNamespaces: o.hardening.cacheNamespaces(),
		},
		Metrics:                       o.hardening.metricsOptions(o.metricsAddr),
		HealthProbeBindAddress:        o.probeAddr,
		PprofBindAddress:              o.pprofAddr,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              "botpool-manager.botpool.dev",
		LeaderElectionNamespace:       o.leaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		Controller:                    config.Controller{MaxConcurrentReconciles: o.maxConcurrentReconciles, SkipNameValidation: &o.skipNameValidation},
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding healthz check: %w", err)
	}
	// Ready once the informer caches are synced: before that a replica would answer from an
	// empty cache.
	if err := mgr.AddReadyzCheck("informers", func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("informer caches not synced")
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("adding readyz check: %w", err)
	}
	return mgr, nil
}

// openStore connects the store: Postgres when a database URL is given (migrated at start,
// under an advisory lock), else the embedded in-memory store.
func openStore(ctx context.Context, log logr.Logger, o options) (store.Store, error) {
	if o.databaseURL == "" {
		log.Info("No --database-url given: liveness and audit use the embedded in-memory store, lost on restart")
		return memory.New(), nil
	}
	st, err := postgres.New(ctx, o.databaseURL,
		postgres.WithRegisterer(metrics.Registry), postgres.WithLogger(ctrl.Log.WithName("store")))
	if err != nil {
		return nil, fmt.Errorf("opening the Postgres store: %w", err)
	}
	log.Info("Using the Postgres store")
	return st, nil
}

// setupControllers registers the reconcilers with what they share: one Coolify client per
// instance and user (one rate limiter), one bulk reader, one deployment gate.
// writes is shared by the Bot controller and the bot API, the two writers of a Bot's status.
func setupControllers(ctx context.Context, mgr ctrl.Manager, st store.Store, writes *cachelag.Tracker, o options) error {
	if err := controllers.SetupIndexes(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("indexing for the controllers: %w", err)
	}
	clk := clock.RealClock{}
	registry := coolify.NewRegistry(o.coolifyRateLimit,
		coolify.WithMetrics(coolify.NewMetrics(metrics.Registry)), coolify.WithLogger(ctrl.Log.WithName("coolify")))
	connector := &controllers.SecretConnector{Reader: mgr.GetAPIReader(), Registry: registry, Clock: clk, RefreshAfter: time.Minute}
	bulk := &controllers.BulkReader{Clock: clk}
	m := controllers.NewMetrics(metrics.Registry)
	recorder := mgr.GetEventRecorder("botpool")
	if err := (&controllers.BotPoolReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Connector: connector, Coolify: bulk,
		Clock: clk, Recorder: recorder, Metrics: m,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the BotPool controller: %w", err)
	}
	if err := (&controllers.BotPoolSlotReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Connector: connector, Store: st,
		Clock: clk, Recorder: recorder, Metrics: m, Coolify: bulk, Gate: &controllers.DeployGate{Clock: clk},
		BotAPIURL: o.botAPIURL,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the BotPoolSlot controller: %w", err)
	}
	callbacks := callback.New(callback.Options{Clock: clk, Logger: ctrl.Log.WithName("callback"), Registerer: metrics.Registry})
	if err := mgr.Add(callbacks); err != nil {
		return fmt.Errorf("adding the callback notifier: %w", err)
	}
	if err := (&controllers.BotReconciler{
		Client: mgr.GetClient(), Clock: clk, Recorder: recorder, Callbacks: callbacks, Store: st, ScheduleLead: o.scheduleLead,
		Writes: writes,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the Bot controller: %w", err)
	}
	if err := (&controllers.Dispatcher{Client: mgr.GetClient(), Clock: clk, Metrics: m}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the dispatcher: %w", err)
	}
	return nil
}

func run(ctx context.Context, cfg *rest.Config, o options) (err error) {
	log := ctrl.Log.WithName("setup")
	mgr, err := newManager(cfg, o)
	if err != nil {
		return err
	}
	st, err := openStore(ctx, log, o)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close()) }()

	if err := botapi.IndexFields(ctx, mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("indexing for the bot API: %w", err)
	}
	writes := &cachelag.Tracker{}
	if err := setupControllers(ctx, mgr, st, writes, o); err != nil {
		return err
	}
	if err := mgr.Add(botapi.New(botapi.Config{
		Addr:       o.botAPIAddr,
		Cache:      mgr.GetCache(),
		Client:     mgr.GetClient(),
		APIReader:  mgr.GetAPIReader(),
		Writes:     writes,
		Liveness:   st,
		Clock:      clock.RealClock{},
		Log:        ctrl.Log.WithName("botapi"),
		Registerer: metrics.Registry,

		// Empty: plain HTTP (see --bot-api-tls-cert-file).
		TLSCertFile: o.hardening.botAPITLSCertFile,
		TLSKeyFile:  o.hardening.botAPITLSKeyFile,
	})); err != nil {
		return fmt.Errorf("adding the bot API: %w", err)
	}

	log.Info("Starting manager", "leaderElect", o.leaderElect, "kubeAPIQPS", o.kubeAPIQPS, "kubeAPIBurst", o.kubeAPIBurst)
	return mgr.Start(ctx)
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	logger := zap.New(zap.UseFlagOptions(&o.zap))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)

	if err := run(ctrl.SetupSignalHandler(), ctrl.GetConfigOrDie(), o); err != nil {
		ctrl.Log.Error(err, "Manager stopped")
		os.Exit(1)
	}
}
