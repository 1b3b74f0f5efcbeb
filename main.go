// Command botpool runs the botpool manager: the controllers that keep warm pools of
// meeting-bot containers on Coolify, and the HTTP API the bot containers call (package botapi).
// One binary, so several replicas can run for availability: the controllers, callbacks and
// retention run on the elected leader, the bot API on every replica. --components runs either
// part alone, so that the bot API can run apart from the controllers (components.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"time"
	_ "time/tzdata" // the zone database in the binary: warmSchedule names IANA zones, whatever the image holds

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	"botpool.dev/botpool/internal/egress"
	"botpool.dev/botpool/store"
	"botpool.dev/botpool/store/memory"
	"botpool.dev/botpool/store/postgres"
)

// options are the manager's command-line settings.
type options struct {
	// components is what this process runs: all, controllers or bot-api (components.go).
	components              string
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
	// coolifyMaxInFlight bounds the requests in flight to one Coolify instance, so a slow or
	// black-holed instance holds at most that many reconciles.
	coolifyMaxInFlight int
	// reconcileTimeout bounds every reconcile; nothing may hold a worker for longer.
	reconcileTimeout time.Duration
	// coolifyAllowPrivate lets Coolify URLs reach private ranges (RFC 1918, fc00::/7,
	// 100.64.0.0/10); egressAllowedCIDRs are exceptions to the egress policy.
	coolifyAllowPrivate bool
	egressAllowedCIDRs  string
	egressAllowed       []netip.Prefix
	// scheduleLead is how long before its startTime a scheduled bot joins the queue.
	scheduleLead time.Duration
	// pprofAddr serves net/http/pprof when set: for profiling (the benchmarks use it); off by
	// default, as profiles expose the process's internals.
	pprofAddr string
	// clusterName is this cluster's identity in every pool's Coolify tag; empty uses the
	// kube-system namespace's uid (see clusterIdentity).
	clusterName string
	// retention is how long the store keeps events, transitions and finished bots; the job
	// runs every retentionInterval on the leader.
	retention         store.Retention
	retentionInterval time.Duration
	// eventQuota bounds the events one bot and one namespace may store.
	eventQuota botapi.EventQuota
	// callbackAllowPrivate lets callbacks reach private (RFC 1918, ULA, CGNAT) addresses;
	// callbackAllowedCIDRs lets the listed prefixes through even when a rule refuses them,
	// loopback included (the demo's --webhook-url: never in production).
	callbackAllowPrivate bool
	callbackAllowedCIDRs string
	callbackAllowed      []netip.Prefix
	zap                  zap.Options

	// Hardening (issue 13): see hardening.go.
	hardening hardeningOptions
	// skipNameValidation lets tests run the manager more than once in one process
	// (controller names are otherwise unique per process); never set by a flag.
	skipNameValidation bool
	// registry receives the manager's own metrics; nil is controller-runtime's registry, which
	// the metrics endpoint serves. A test running two managers on Postgres in one process gives
	// one of them a registry of its own: a store's gauges read that store, so a registry takes
	// one store's only. Never set by a flag.
	registry prometheus.Registerer
}

// registerer is where the manager's own metrics go (see options.registry).
func (o options) registerer() prometheus.Registerer {
	if o.registry != nil {
		return o.registry
	}
	return metrics.Registry
}

func parseFlags(args []string) (options, error) {
	o := options{zap: zap.Options{Development: false}}
	fs := flag.NewFlagSet("botpool", flag.ContinueOnError)
	fs.StringVar(&o.components, "components", componentsAll, "What this process runs: all (the controllers on the elected leader and the bot API on every replica), controllers (no bot API), or bot-api (the bot API alone: no controllers, no leader election, no retention job). Apart, both need --database-url.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint; 0 disables it.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", "Address of the net/http/pprof endpoints (/debug/pprof/); empty disables them.")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "Elect a leader so only one replica reconciles at a time.")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease; defaults to the pod's namespace in a cluster.")
	fs.Float64Var(&o.kubeAPIQPS, "kube-api-qps", 500, "Sustained requests per second to the Kubernetes API server.")
	fs.IntVar(&o.kubeAPIBurst, "kube-api-burst", 1000, "Burst of requests to the Kubernetes API server.")
	fs.IntVar(&o.maxConcurrentReconciles, "max-concurrent-reconciles", 8, "Reconciles of each controller that namespaces share beyond their own; each namespace also has a quarter as many (at least 1) of its own, and each controller runs four times as many goroutines (docs/security.md).")
	fs.StringVar(&o.databaseURL, "database-url", os.Getenv("BOTPOOL_DATABASE_URL"), "Postgres URL or DSN for liveness, projection and audit (env BOTPOOL_DATABASE_URL); empty uses the embedded in-memory store.")
	fs.StringVar(&o.botAPIAddr, "bot-api-bind-address", ":8082", "Address of the HTTP API that bot containers call.")
	fs.StringVar(&o.botAPIURL, "bot-api-url", "http://botpool-bot-api.botpool-system.svc:8082", "URL bot containers reach the bot API at; set as BOTPOOL_API_URL on every slot's application.")
	fs.DurationVar(&o.scheduleLead, "schedule-lead", 2*time.Minute, "How long before its startTime a scheduled Bot without a reservation joins the queue, so its slot is warm when the meeting starts (a reserved Bot joins at its startTime, from the slot its pool warmed for it).")
	fs.IntVar(&o.coolifyRateLimit, "coolify-rate-limit", coolify.DefaultRateLimit, "Requests per minute to one Coolify instance per URL and token, shared by all pools using them (Coolify's own limit is 200 per user).")
	fs.StringVar(&o.clusterName, "cluster-name", "", "This cluster's identity in the Coolify tags of its pools' applications, so clusters sharing a Coolify team never adopt or delete each other's applications; empty uses the kube-system namespace's uid. Set it to keep a pool's applications when the cluster is rebuilt.")
	fs.DurationVar(&o.retention.Events, "retention-events", 720*time.Hour, "How long the store keeps bot events; 0 keeps them forever, else at least 1h.")
	fs.DurationVar(&o.retention.Transitions, "retention-transitions", 2160*time.Hour, "How long the store keeps the audit log of slot transitions; 0 keeps it forever, else at least 1h.")
	fs.DurationVar(&o.retention.FinishedBots, "retention-finished-bots", 720*time.Hour, "How long the store keeps the projection of a finished bot; 0 keeps it forever, else at least 1h.")
	fs.DurationVar(&o.retentionInterval, "retention-interval", time.Hour, "How often the leader deletes what is past its retention, in small batches.")
	fs.Float64Var(&o.eventQuota.BotEvents, "event-quota-bot-events", 20, "Events per second one bot may store (bursts of --event-quota-window); 0 is unlimited.")
	fs.Float64Var(&o.eventQuota.BotBytes, "event-quota-bot-bytes", 64<<10, "Bytes of event data per second one bot may store; 0 is unlimited.")
	fs.Float64Var(&o.eventQuota.NamespaceEvents, "event-quota-namespace-events", 200, "Events per second the bots of one namespace may store together; 0 is unlimited.")
	fs.Float64Var(&o.eventQuota.NamespaceBytes, "event-quota-namespace-bytes", 1<<20, "Bytes of event data per second the bots of one namespace may store together; 0 is unlimited.")
	fs.DurationVar(&o.eventQuota.Window, "event-quota-window", 30*time.Second, "The burst of the event quotas: this long's worth of their rates at once.")
	fs.BoolVar(&o.callbackAllowPrivate, "callback-allow-private-networks", false, "Let Bot callbacks reach private addresses (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7): in-cluster receivers. Loopback and link-local stay refused.")
	fs.StringVar(&o.callbackAllowedCIDRs, "callback-allowed-cidrs", "", "Comma-separated CIDR prefixes Bot callbacks and webhooks may reach even though they are loopback, link-local or private, e.g. 10.20.0.0/16 for one receiver network. "+
		"Unsafe in production with loopback (127.0.0.0/8, ::1/128) or link-local: whoever may create a Bot could then make the manager POST to services of its own host or to the cloud metadata endpoint; "+
		"loopback is for a receiver on a developer's machine (cmd/demo --webhook-url).")
	fs.IntVar(&o.coolifyMaxInFlight, "coolify-max-in-flight", coolify.DefaultMaxInFlight, "Requests in flight at once to one Coolify instance (base URL), whatever the token; more calls fail fast and are requeued, so one slow instance cannot hold every reconcile.")
	fs.DurationVar(&o.reconcileTimeout, "reconcile-timeout", time.Minute, "Longest one reconcile may run; its context is cancelled then and the object retried.")
	fs.BoolVar(&o.coolifyAllowPrivate, "coolify-allow-private-networks", false, "Let Coolify URLs reach private addresses (10/8, 172.16/12, 192.168/16, fc00::/7, 100.64/10): needed when Coolify runs in the cluster or on the LAN. Loopback and link-local (cloud metadata) stay refused.")
	fs.StringVar(&o.egressAllowedCIDRs, "egress-allowed-cidrs", "", "Comma-separated CIDR prefixes the manager may reach at URLs users configure even though the egress policy would refuse them (e.g. 10.0.5.0/24 for one Coolify host, 127.0.0.1/32 for a local simulator).")
	o.hardening.bindFlags(fs)
	o.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if err := errors.Join(o.validateComponents(), o.validate(), o.hardening.validate(o)); err != nil {
		return o, err
	}
	o.egressAllowed, _ = egress.ParsePrefixes(o.egressAllowedCIDRs)     // validated above
	o.callbackAllowed, _ = egress.ParsePrefixes(o.callbackAllowedCIDRs) // likewise
	return o, nil
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
	if o.clusterName != "" && !clusterNamePattern.MatchString(o.clusterName) {
		errs = append(errs, fmt.Errorf("--cluster-name %q: want 1 to 63 lower-case letters, digits and '-', starting and ending with a letter or digit", o.clusterName))
	}
	if _, err := egress.ParsePrefixes(o.callbackAllowedCIDRs); err != nil {
		errs = append(errs, fmt.Errorf("--callback-allowed-cidrs: %w", err))
	}
	if o.coolifyRateLimit < 1 {
		errs = append(errs, fmt.Errorf("--coolify-rate-limit must be at least 1, got %d", o.coolifyRateLimit))
	}
	if o.coolifyMaxInFlight < 1 {
		errs = append(errs, fmt.Errorf("--coolify-max-in-flight must be at least 1, got %d", o.coolifyMaxInFlight))
	}
	if o.reconcileTimeout < 5*time.Second {
		errs = append(errs, fmt.Errorf("--reconcile-timeout must be at least 5s (a Coolify call may take %s), got %s", coolify.DefaultCallBudget, o.reconcileTimeout))
	}
	if _, err := egress.ParsePrefixes(o.egressAllowedCIDRs); err != nil {
		errs = append(errs, fmt.Errorf("--egress-allowed-cidrs: %w", err))
	}
	if _, _, err := net.SplitHostPort(o.botAPIAddr); err != nil {
		errs = append(errs, fmt.Errorf("--bot-api-bind-address %q: %w", o.botAPIAddr, err))
	}
	if err := o.retention.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("--retention-*: %w", err))
	}
	if o.retentionInterval < time.Minute {
		errs = append(errs, fmt.Errorf("--retention-interval must be at least 1m, got %s", o.retentionInterval))
	}
	if err := o.eventQuota.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("--event-quota-*: %w", err))
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

// The manager reads the kube-system namespace once, for clusterIdentity: the namespaces rule of
// package controllers (get, list, watch, for shared pools' selectors) grants it.

// clusterNamePattern is a DNS label: readable in logs, safe in any tag.
var clusterNamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// clusterIdentity is this cluster's identity in every pool's Coolify tag: --cluster-name when
// given, else the uid of the kube-system namespace. That uid is unique per cluster, stable for
// the cluster's life (across manager upgrades, reinstalls and leader changes) and needs no
// configuration, so two clusters sharing a Coolify team are told apart by default. A cluster
// rebuilt from scratch gets a new uid: set --cluster-name to the old identity to keep it.
func clusterIdentity(ctx context.Context, r client.Reader, name string) (string, error) {
	if name != "" {
		return "name:" + name, nil
	}
	var ns corev1.Namespace
	if err := r.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, &ns); err != nil {
		return "", fmt.Errorf("reading the kube-system namespace for this cluster's identity (or set --cluster-name): %w", err)
	}
	return "uid:" + string(ns.UID), nil
}

// egressPolicy is where the manager may connect at URLs users configure (Coolify URLs).
func (o options) egressPolicy() egress.Policy {
	return egress.Policy{Allowed: o.egressAllowed, AllowPrivate: o.coolifyAllowPrivate}
}

// callbackPolicy is where Bot callbacks and webhook messages may go: public addresses, private
// ones with --callback-allow-private-networks, and the prefixes of --callback-allowed-cidrs,
// whatever they are (loopback only on a developer's machine: see the flag).
func (o options) callbackPolicy() egress.Policy {
	return egress.Policy{Allowed: o.callbackAllowed, AllowPrivate: o.callbackAllowPrivate}
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

	mgr, err := ctrl.NewManager(cfg, managerOptions(o))
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

// managerOptions are the manager's settings from the flags.
func managerOptions(o options) ctrl.Options {
	return ctrl.Options{
		Scheme: newScheme(),
		Cache: cache.Options{
			// Nothing reads managedFields, and they are a large share of every cached object:
			// with ten thousand Bots, tens of MiB, and more to copy on every read that copies.
			DefaultTransform: cache.TransformStripManagedFields(),
			// nil (every namespace) unless --watch-namespaces restricts the informers.
			DefaultNamespaces: o.hardening.cacheNamespaces(),
		},
		// No Secret is ever cached: anyone who may create a Secret could otherwise fill the
		// manager's memory, and an informer needs list and watch on every Secret. The few the
		// manager reads (credentials, slotEnvFrom, its own token Secrets) are read from the API
		// server when needed; this makes a Secret read through the manager's client do the same
		// instead of starting an informer behind its back.
		Client:                        client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		Metrics:                       o.hardening.metricsOptions(o.metricsAddr),
		HealthProbeBindAddress:        o.probeAddr,
		PprofBindAddress:              o.pprofAddr,
		LeaderElection:                o.leaderElect && o.runsControllers(), // the bot API alone needs no Lease
		LeaderElectionID:              "botpool-manager.botpool.dev",
		LeaderElectionNamespace:       o.leaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		Controller: config.Controller{MaxConcurrentReconciles: o.maxConcurrentReconciles, SkipNameValidation: &o.skipNameValidation,
			ReconciliationTimeout: o.reconcileTimeout},
	}
}

// openStore connects the store: Postgres when a database URL is given (migrated at start,
// under an advisory lock), else the embedded in-memory store.
func openStore(ctx context.Context, log logr.Logger, o options) (store.Store, error) {
	if o.databaseURL == "" {
		log.Info("No --database-url given: liveness and audit use the embedded in-memory store, lost on restart")
		return memory.New(), nil
	}
	st, err := postgres.New(ctx, o.databaseURL,
		postgres.WithRegisterer(o.registerer()), postgres.WithLogger(ctrl.Log.WithName("store")))
	if err != nil {
		return nil, fmt.Errorf("opening the Postgres store: %w", err)
	}
	log.Info("Using the Postgres store")
	return st, nil
}

// setupControllers registers the controllers with what only the manager has: this cluster's
// identity, one Coolify client per instance and user (one rate limiter) behind the pools'
// credentials, the callback egress policy and the real clock. It returns the controllers'
// record of Bot writes, which the bot API shares.
func setupControllers(ctx context.Context, mgr ctrl.Manager, st store.Store, o options) (*controllers.Controllers, error) {
	clk := clock.RealClock{}
	cluster, err := clusterIdentity(ctx, mgr.GetAPIReader(), o.clusterName)
	if err != nil {
		return nil, err
	}
	ctrl.Log.Info("Cluster identity for Coolify tags", "clusterID", cluster)
	registry := coolify.NewRegistry(o.coolifyRateLimit,
		coolify.WithMetrics(coolify.NewMetrics(o.registerer())), coolify.WithLogger(ctrl.Log.WithName("coolify")),
		coolify.WithEgress(o.egressPolicy()),
		coolify.WithInstanceLimits(coolify.InstanceLimits{MaxInFlight: o.coolifyMaxInFlight}))
	c, err := controllers.Setup(ctx, mgr, controllers.Deps{
		Connector: &controllers.SecretConnector{Reader: mgr.GetAPIReader(), Registry: registry, Clock: clk, RefreshAfter: time.Minute},
		Store:     st,
		Clock:     clk,
		Metrics:   controllers.NewMetrics(o.registerer()),
	}, controllers.Options{
		BotAPIURL: o.botAPIURL, ClusterID: cluster, ScheduleLead: o.scheduleLead,
		Callbacks: &callback.Options{
			Logger: ctrl.Log.WithName("callback"), Registerer: o.registerer(),
			Egress: o.callbackPolicy(),
		},
	})
	if err != nil {
		return nil, err
	}
	return c, nil
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

	api := botapi.Config{
		Addr:       o.botAPIAddr,
		Liveness:   botapi.WithEventQuota(st, o.eventQuota, clock.RealClock{}, o.registerer()),
		Clock:      clock.RealClock{},
		Log:        ctrl.Log.WithName("botapi"),
		Registerer: o.registerer(),

		// Empty: plain HTTP (see --bot-api-tls-cert-file).
		TLSCertFile: o.hardening.botAPITLSCertFile,
		TLSKeyFile:  o.hardening.botAPITLSKeyFile,
	}
	if o.runsControllers() {
		ctrls, err := setupControllers(ctx, mgr, st, o)
		if err != nil {
			return err
		}
		if pruner, ok := st.(store.Pruner); ok && o.retention.Enabled() {
			if err := mgr.Add(&store.RetentionJob{Store: pruner, Retention: o.retention, Interval: o.retentionInterval,
				Clock: clock.RealClock{}, Log: ctrl.Log.WithName("retention")}); err != nil {
				return fmt.Errorf("adding the retention job: %w", err)
			}
		}
		// In one process the bot API writes through the controllers' client: its Bot status
		// writes land in the record the Bot controller checks, which then waits for its cache
		// instead of judging (and patching) the version a report replaced.
		api.Client, api.Writes = ctrls.Client, ctrls.Writes
	} else {
		// Apart (--components=bot-api) there is no such record to share. The bot API keeps one
		// of its own writes, so that its next write to a bot it just wrote reads the bot first
		// instead of meeting a conflict. The Bot controller, in the other process, learns of
		// the bot API's writes only from its cache, as it already does of those of the bot API
		// on the other replicas of `all`: a pass on a version a report replaced judges the
		// past for a moment, and its status patch, which carries the version it read
		// (optimistic lock), is refused with 409. Nothing is overwritten; the pass is retried
		// (50ms, the controller's first backoff, as long as its cache wait), and the watch
		// event of the report brings the bot back with the current version. What changes is a
		// conflict logged and one request wasted, instead of a quiet wait. The bot API meets
		// the controllers' writes the same way: a patch refused with 409 is retried on the
		// bot read from the API server (binding.go, handlers.go).
		api.Writes = &cachelag.Tracker{}
	}
	if o.servesBotAPI() {
		if err := botapi.AddToManager(ctx, mgr, api); err != nil {
			return err
		}
	}

	log.Info("Starting manager", "components", o.components, "leaderElect", o.leaderElect && o.runsControllers(),
		"kubeAPIQPS", o.kubeAPIQPS, "kubeAPIBurst", o.kubeAPIBurst)
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
