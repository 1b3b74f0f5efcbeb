package modelcheck

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/botapi"
	"botpool.dev/botpool/controllers"
	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/coolify/sim"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/store/memory"
)

const (
	namespace = "model"
	// heartbeatInterval is what the bot API tells bots (its default).
	heartbeatInterval = 10 * time.Second
	// maxCacheLag is how much model time the cache may fall behind: the manager's informers
	// lag by milliseconds, far below the controllers' own memory of their writes (the
	// dispatcher's 30 s, the deploy gate's minute).
	maxCacheLag = time.Second
)

var epoch = time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)

// world is one run of the model: the API server, the manager's cache, Coolify, the store,
// the bot containers, the operator's in-memory state and what the checker remembers.
type world struct {
	seed uint64
	rng  *rand.Rand
	clk  *clocktesting.FakeClock
	ctx  context.Context

	scheme  *runtime.Scheme
	api     *apiServer
	cache   *informerCache
	sim     *sim.Sim
	fixture sim.Fixture
	coolify *inProcess
	store   *flakyStore
	// postgres says the store survives restarts and may be down (else it is the embedded one).
	postgres bool
	op       *operator
	log      *ringLog

	pools []*v1.BotPool // as last written
	// ceiling is how many slots a pool may hold: maxSlots, or more right after maxSlots was
	// lowered below the slots it had, coming down as they go (invariant 2).
	ceiling map[string]int
	perPool map[string]int       // slots per pool after the last step
	lowered map[string]time.Time // pool → when a person last lowered its maxSlots
	images  map[string]string    // platform → image
	bots    int                  // bots created so far (names are never reused)

	cmu        sync.Mutex
	containers map[string]*container // running containers by application uuid
	standby    standbyRecord         // what containers were given: invariant 12
	srv        serverRecord          // the servers and their ceilings: invariants 13–15
	tpl        templateRecord        // the pools' templates and the registry: invariant 16
	lastStart  map[string]time.Time  // application uuid → last container start
	// deletedByHand are the applications a person deleted in Coolify: a deployment in flight
	// may still report finished for them, without a container.
	deletedByHand map[string]bool
	// slotsDeletedByHand are the slots (by uid) a person deleted with kubectl.
	slotsDeletedByHand map[types.UID]bool

	// Ground truth the checks compare with.
	beats      map[string]time.Time // bot name → last heartbeat the bot API accepted
	bindAt     map[string]time.Time // slot name → when its current botRef was written
	binds      []bindEvent          // bindings written since the last dispatch check
	botTimers  map[string]time.Time // bot name → when its last reconcile asked to run again
	faults     faults
	tenant     tenancyState // the tenant namespace and pool alpha: invariants 18–20
	lastLagged time.Time    // when the cache was last fully in sync

	step       int
	counts     map[string]int
	history    []string // the last actions, for a failure report
	detail     string   // what the current action acted on
	violations []string
	deleted    []objKey // keys of objects that are gone, for stale reconciles
	writes     int
	// roundWrites names the first writes since a settle round began, and what they changed,
	// for its report; settling says a settle runs.
	roundWrites []string
	settling    bool
	byHand      bool // the write in progress is a person's, not the operator's
}

type bindEvent struct {
	slot, pool, bot string
	uid             types.UID
	at              time.Time
}

// operator is what a manager holds in memory; a restart replaces all of it. The checker's own
// tests swap in broken reconcilers to show that the checks catch them.
type operator struct {
	pools, slots, bots, disp reconcile.Reconciler
	botAPI                   http.Handler
}

// newWorld builds a world; pools creates its pools (nil: the randomized pools of a run).
func newWorld(seed uint64, pools func(*world)) *world {
	w := &world{
		seed: seed, rng: rand.New(rand.NewPCG(seed, 0x6d6f64656c)), clk: clocktesting.NewFakeClock(epoch),
		images: map[string]string{}, containers: map[string]*container{}, lastStart: map[string]time.Time{}, deletedByHand: map[string]bool{}, slotsDeletedByHand: map[types.UID]bool{},
		beats: map[string]time.Time{}, bindAt: map[string]time.Time{}, botTimers: map[string]time.Time{},
		counts: map[string]int{}, log: newRingLog(400), ceiling: map[string]int{}, lowered: map[string]time.Time{},
	}
	w.ctx = ctrl.LoggerInto(context.Background(), logr.New(&ringSink{r: w.log, clk: w.clk}))
	w.tpl.init()

	w.scheme = runtime.NewScheme()
	must(clientgoscheme.AddToScheme(w.scheme))
	must(v1.AddToScheme(w.scheme))
	w.api = &apiServer{scheme: w.scheme, clk: w.clk, dirty: map[objKey]bool{}, truth: newObjectSet(), onWrite: w.onWrite}
	w.cache = newInformerCache(w.api)
	// The plain object tracker: the default one keeps managedFields, which the controllers
	// never read, at many times the cost of every write.
	w.api.WithWatch = fake.NewClientBuilder().WithScheme(w.scheme).
		WithObjectTracker(clienttesting.NewObjectTracker(w.scheme, serializer.NewCodecFactory(w.scheme).UniversalDecoder())).
		WithStatusSubresource(&v1.Bot{}, &v1.BotPoolSlot{}, &v1.BotPool{}).
		WithGlobalResourceVersionCounter().Build()

	w.sim = sim.New(sim.Config{
		Clock: w.clk, RateLimit: -1, RandSeed: seed,
		Hooks: sim.Hooks{OnStart: w.containerStarted, OnStop: w.containerStopped, OnPull: w.pullStarted, OnPulled: w.pulled, OnCleanup: w.cleaned},
	})
	w.fixture = w.sim.SeedDefault()
	w.coolify = &inProcess{sim: w.sim, clk: w.clk, seed: seed}
	w.store = &flakyStore{mem: memory.New(memory.WithClock(w.clk))}
	w.postgres = w.rng.IntN(2) == 0

	if pools == nil {
		pools = (*world).createPools
	}
	pools(w)
	w.op = w.newOperator()
	w.cache.syncAll()
	return w
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// createPools creates the run's pools with randomized sizes and timings: two pools of one
// platform (they share slot names) and one of another.
func (w *world) createPools() {
	w.images[string(v1.PlatformZoom)] = "ghcr.io/example/zoom-bot"
	w.images[string(v1.PlatformGoogleMeet)] = "ghcr.io/example/meet-bot"
	if w.rng.IntN(2) == 0 {
		w.sim.WarmImage(w.fixture.ServerUUID, w.images[string(v1.PlatformZoom)], "latest")
	}
	specs := []struct {
		name     string
		platform v1.Platform
	}{{"alpha", v1.PlatformZoom}, {"beta", v1.PlatformZoom}, {"gamma", v1.PlatformGoogleMeet}}
	for _, s := range specs {
		maxSlots := int32(1 + w.rng.IntN(4))
		minIdle := int32(w.rng.IntN(int(min(maxSlots, 2)) + 1))
		if w.rng.IntN(2) == 0 {
			minIdle = 0
		}
		w.addPool(s.name, s.platform, maxSlots, minIdle, int32(1+w.rng.IntN(3)), w.timing())
	}
	w.standbyPools()
	w.serverPools()
	w.shareAlpha()
}

// addPool creates a pool as the API server stores it, defaults filled in.
func (w *world) addPool(name string, platform v1.Platform, maxSlots, minIdle, maxDeploying int32, timing v1.Timing) {
	if w.images[string(platform)] == "" {
		w.images[string(platform)] = "ghcr.io/example/" + string(platform) + "-bot"
	}
	p := bt.MakePool(namespace, name).Platform(platform).Image(w.images[string(platform)], "latest").
		Placement(w.fixture.ProjectUUID, w.fixture.ServerUUID, w.fixture.EnvironmentName).
		MaxSlots(maxSlots).MinIdle(minIdle).MaxConcurrentDeployments(maxDeploying).
		Queue("5m", "10m").Timing(timing).Obj()
	must(w.api.Create(w.ctx, p))
	w.pools = append(w.pools, p)
	w.ceiling[name] = int(maxSlots)
}

// timing is the pool timing the API server would default, with some timers shortened so that
// a run of the model passes through the stale-deploying and recovery paths often.
func (w *world) timing() v1.Timing {
	pick := func(a, b v1.Duration) v1.Duration {
		if w.rng.IntN(2) == 0 {
			return a
		}
		return b
	}
	skips := int32(w.rng.IntN(4))
	return v1.Timing{
		DeploymentPollInterval: "15s", DeployGracePeriod: pick("3m", "1m"),
		DeploymentTimeout: pick("25m", "6m"), DeployingTimeout: pick("15m", "2m"),
		HeartbeatFreshness: pick("5m", "90s"), HeartbeatGracePeriod: "30s",
		HeartbeatTimeout: pick("5m", "2m"), LeaveGracePeriod: "15s",
		MaxSkippedRecoveries: &skips, MaxRecoveryAttempts: int32(1 + w.rng.IntN(3)),
	}
}

func (w *world) pool(name string) *v1.BotPool {
	for _, p := range w.pools {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// newOperator builds the in-memory half of the manager, as a (re)start does: new
// reconcilers, dispatcher, deploy gate, bulk reader, Coolify client and connector, bot API
// server. controllers.Setup wires them as in main.go, on a manager that is never started, so
// each controller's setup runs (and notes the start time the liveness rules count from).
func (w *world) newOperator() *operator {
	api, err := coolify.New("http://coolify.model", sim.DefaultToken,
		coolify.WithHTTPClient(&http.Client{Transport: w.coolify}), coolify.WithClock(retryClock{w.clk}),
		coolify.WithLimiter(coolify.NewLimiter(0)))
	must(err)
	conn := &bt.Connector[controllers.CoolifyAPI]{API: api} // one Coolify for every pool, remembered as SecretConnector does
	c := cachedClient{apiServer: w.api, cache: w.cache}
	mgr, err := ctrl.NewManager(&rest.Config{Host: "https://127.0.0.1:1"}, ctrl.Options{
		Scheme: w.scheme, Logger: logr.Discard(), Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", Controller: config.Controller{SkipNameValidation: ptrTo(true)},
	})
	must(err)
	// A new manager indexes its new cache; the model's cache stands in for it and only
	// carries its objects over.
	w.cache.resetIndexes()
	ctrls, err := controllers.Setup(w.ctx, mgr, controllers.Deps{
		Client: c, APIReader: w.api, Indexer: w.cache,
		Connector: conn, Store: w.store, Clock: w.clk, Recorder: bt.DiscardEvents{},
	}, controllers.Options{
		BotAPIURL: "http://botapi.model", ScheduleLead: 2 * time.Minute, Jitter: w.rng.Float64,
	})
	must(err)
	must(botapi.IndexFields(w.ctx, w.cache))
	op := &operator{pools: ctrls.Pools, slots: ctrls.Slots, bots: ctrls.Bots, disp: ctrls.Dispatcher}
	// No catch-up for unknown binding credentials: it would wait in real time for a cache the
	// model moves in steps (a container beating for a deleted bot would cost a second each).
	op.botAPI = botapi.New(botapi.Config{Cache: c, Client: ctrls.Client, APIReader: w.api, Writes: ctrls.Writes, Liveness: w.store,
		Clock: w.clk, Log: logr.Discard(), HeartbeatInterval: heartbeatInterval, CatchUp: -1}).Handler()
	return op
}

func ptrTo[T any](v T) *T { return &v }

// restart throws away everything the manager holds in memory, as a crash or a change of
// leader does. The API server, Coolify and the bot containers carry on; the store survives
// only when it is Postgres; the new manager's informers start from a full list.
func (w *world) restart() {
	w.cache.syncAll()
	w.lastLagged = w.clk.Now()
	w.postgres = w.rng.IntN(2) == 0
	if !w.postgres {
		w.store.reset(memory.New(memory.WithClock(w.clk)))
	}
	w.op = w.newOperator()
}

// Reading the API server's truth.

// liveBots lists the stored bots by name. The copies are shallow (the checks run after every
// step and only read): never modify what they point to.
func (w *world) liveBots() []v1.Bot {
	objs := w.api.liveOf(kindBot)
	out := make([]v1.Bot, len(objs))
	for i, o := range objs {
		out[i] = *o.(*v1.Bot)
	}
	return out
}

// liveSlots lists the stored slots by name, as shallow copies like liveBots.
func (w *world) liveSlots() []v1.BotPoolSlot {
	objs := w.api.liveOf(kindSlot)
	out := make([]v1.BotPoolSlot, len(objs))
	for i, o := range objs {
		out[i] = *o.(*v1.BotPoolSlot)
	}
	return out
}

func (w *world) liveBot(name string) *v1.Bot {
	if o := w.api.live(botKey(name)); o != nil {
		return o.(*v1.Bot).DeepCopy()
	}
	return nil
}

func (w *world) liveSlot(name string) *v1.BotPoolSlot {
	if o := w.api.live(slotKey(name)); o != nil {
		return o.(*v1.BotPoolSlot).DeepCopy()
	}
	return nil
}

// botKey is the bot named name: a tenant's (tenantNamespace) when its name says so
// (tenantBot), else of the pools' namespace. Bot names are never reused, in either.
func botKey(name string) objKey {
	ns := namespace
	if strings.HasPrefix(name, tenantBotPrefix) {
		ns = tenantNamespace
	}
	return objKey{kind: kindBot, NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
}

func slotKey(name string) objKey {
	return objKey{kind: kindSlot, NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}}
}

// slotOf returns the live slot bound to uid, if any.
func slotOf(slots []v1.BotPoolSlot, uid types.UID) *v1.BotPoolSlot {
	for i := range slots {
		if ref := slots[i].Spec.BotRef; ref != nil && ref.UID == uid {
			return &slots[i]
		}
	}
	return nil
}

// gcTokens deletes the token Secrets whose slot is gone, as Kubernetes' garbage collector
// does with owned objects.
func (w *world) gcTokens() {
	for _, o := range w.api.liveOf(kindSecret) {
		s := o.(*corev1.Secret).DeepCopy()
		owner := metav1.GetControllerOf(s)
		if owner == nil {
			continue
		}
		if sl := w.liveSlot(owner.Name); sl == nil || sl.UID != owner.UID {
			_ = w.api.Delete(w.ctx, s)
		}
	}
}

// ringLog keeps the controllers' last log lines for a failure report.
type ringLog struct {
	mu    sync.Mutex
	lines []string
	next  int
}

func newRingLog(n int) *ringLog { return &ringLog{lines: make([]string, 0, n)} }

func (r *ringLog) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lines) < cap(r.lines) {
		r.lines = append(r.lines, s)
		return
	}
	r.lines[r.next] = s
	r.next = (r.next + 1) % len(r.lines)
}

func (r *ringLog) dump() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append(append([]string{}, r.lines[r.next:]...), r.lines[:r.next]...)
	return strings.Join(out, "\n")
}

// ringSink is a logr.LogSink writing to a ringLog (level 1 and below).
type ringSink struct {
	r      *ringLog
	clk    *clocktesting.FakeClock
	name   string
	values []any
}

func (s *ringSink) Init(logr.RuntimeInfo)  {}
func (s *ringSink) Enabled(level int) bool { return level <= 1 }
func (s *ringSink) Info(_ int, msg string, kv ...any) {
	s.r.add(fmt.Sprintf("%s %s %s %v %v", s.clk.Now().Format("15:04:05.000"), s.name, msg, s.values, kv))
}
func (s *ringSink) Error(err error, msg string, kv ...any) {
	s.r.add(fmt.Sprintf("%s %s ERROR %s: %v %v %v", s.clk.Now().Format("15:04:05.000"), s.name, msg, err, s.values, kv))
}
func (s *ringSink) WithValues(kv ...any) logr.LogSink {
	c := *s
	c.values = append(append([]any{}, s.values...), kv...)
	return &c
}
func (s *ringSink) WithName(name string) logr.LogSink {
	c := *s
	c.name = strings.TrimPrefix(s.name+"/"+name, "/")
	return &c
}
