package controllers

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/botapi"
	"botpool.dev/botpool/callback"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/metrics"
	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/coolify/sim"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/internal/egress"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/store"
	"botpool.dev/botpool/store/memory"
)

var (
	env *kubetest.Env
	// clk is the controllers' and the simulator's clock: tests step it to pass Coolify's
	// minutes (pulls, grace periods, timeouts) in no time.
	clk = clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
	// coolifySim is the Coolify every test pool talks to, unless a test gives its pool its own.
	coolifySim *sim.Server
	fixture    sim.Fixture
	connector  = &fakeConnector{errs: map[string]error{}, apis: map[string]coolify.API{}}
	liveStore  = memory.New(memory.WithClock(clk))
	// managerStore is the store runManager wires in: liveStore, unless a test (the soak, on
	// Postgres) swaps in another for its run and puts liveStore back when it ends.
	managerStore store.Store = liveStore
	// suiteMetrics are the series of every manager the suite runs (registered nowhere).
	suiteMetrics = metrics.New(suiteRegistry)
	// suiteRegistry holds suiteMetrics, for tests that read the series (their labels).
	suiteRegistry = prometheus.NewRegistry()
)

// botAPIAddr is where the suite's bot API listens, the same across manager restarts.
var botAPIAddr = func() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}()

// suiteCluster is the suite's cluster identity: every pool tag of the suite carries it, as in a
// manager (which takes the kube-system namespace's uid by default).
const suiteCluster = "uid:envtest"

// testRegistry hands out clients without a practical rate limit: the simulator's own limit
// is off, and tests about rate limits build their own. Its egress policy lets through only
// loopback, where the simulators listen, as the manager's --egress-allowed-cidrs would.
var testRegistry = coolify.NewRegistry(1_000_000, coolify.WithEgress(loopbackOnly))

// loopbackOnly is an egress policy that allows the simulators' loopback addresses.
var loopbackOnly = egress.Policy{Allowed: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}

func TestMain(m *testing.M) {
	kubetest.Main(m, func(e *kubetest.Env) {
		env = e
		if err := startManager(e); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	})
}

// startManager runs the controllers under test against the envtest API server for the whole
// package; tests isolate themselves by namespace.
func startManager(e *kubetest.Env) error {
	coolifySim = newSim(sim.Config{})
	fixture = coolifySim.SeedDefault()
	// Tests share this server one after another, and deployments one leaves in flight would
	// hold the next one's back in the deploy gate's per-server bound: it runs what it is asked
	// to (tests of a server's capacity give their pool a server of its own).
	coolifySim.SetServerCapacity(fixture.ServerUUID, 100, 100)
	return runManager(e)
}

// manager is the running manager's stop function and the channel closed when it stopped.
var manager struct {
	stop context.CancelFunc
	done chan struct{}
}

// restartManager stops the operator and starts a new one, with empty caches and no memory of
// what the old one was doing, as after a crash or a leader change. The store and the
// simulators keep their state, as Postgres and Coolify would.
func restartManager(t *testing.T) {
	t.Helper()
	manager.stop()
	<-manager.done
	if err := runManager(env); err != nil {
		t.Fatal(err)
	}
}

// suiteScheduleLead is the suite manager's --schedule-lead.
const suiteScheduleLead = time.Minute

func runManager(e *kubetest.Env) error {
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:     e.Scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptrTo(true), MaxConcurrentReconciles: 8},
	})
	if err != nil {
		return err
	}
	c, err := Setup(context.Background(), mgr, Deps{
		Connector: connector, Store: managerStore, Clock: clk, Recorder: discardEvents{}, Metrics: suiteMetrics,
	}, Options{
		BotAPIURL: "http://" + botAPIAddr, ClusterID: suiteCluster, ScheduleLead: suiteScheduleLead,
		// Receivers are httptest servers, on loopback.
		Callbacks:   &callback.Options{BackoffBase: time.Second, BackoffCap: 5 * time.Second, Egress: bt.AllowLoopback},
		OrphanCheck: 100 * time.Millisecond, GateRetry: 50 * time.Millisecond, AppCheck: 100 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	// The bot API, as in the manager: slots' containers (simulated bots) call it.
	if err := botapi.AddToManager(context.Background(), mgr, botapi.Config{
		Addr: botAPIAddr, Client: c.Client, Writes: c.Writes, Liveness: managerStore, Clock: clk, Log: ctrl.Log.WithName("botapi"),
	}); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	manager.stop, manager.done = cancel, make(chan struct{})
	go func() {
		defer close(manager.done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager stopped:", err)
		}
	}()
	return nil
}

func ptrTo[T any](v T) *T { return &v }

// simSeed gives every simulator its own uuids: the store's projection, shared by the tests,
// refuses one application uuid for two slots.
var simSeed atomic.Uint64

// newSim starts a simulator on the suite's clock, with its rate limit off.
func newSim(cfg sim.Config) *sim.Server {
	cfg.Clock = clk
	cfg.RandSeed = simSeed.Add(1)
	if cfg.RateLimit == 0 {
		cfg.RateLimit = -1
	}
	if cfg.DeleteDelay == 0 {
		// The suite's clock moves only when a test steps it, and a deleted slot waits for
		// Coolify's background deletion: without a step it would wait for good.
		cfg.DeleteDelay = -1
	}
	return sim.Start(sim.New(cfg))
}

// fakeConnector answers ForPool with a per-pool error, else a per-pool Coolify, else the
// suite's simulator.
type fakeConnector struct {
	mu   sync.Mutex
	errs map[string]error       // by pool name
	apis map[string]coolify.API // by pool name
}

func (f *fakeConnector) ForPool(_ context.Context, pool *v1.BotPool) (coolifyview.CoolifyAPI, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.errs[pool.Name]; err != nil {
		return nil, err
	}
	if api := f.apis[pool.Name]; api != nil {
		return api, nil
	}
	return testRegistry.Client(coolifySim.URL, fixture.Token)
}

func (f *fakeConnector) fail(pool string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs[pool] = err
}

func (f *fakeConnector) LastKnown(pool types.NamespacedName) coolifyview.CoolifyAPI {
	f.mu.Lock()
	defer f.mu.Unlock()
	if api := f.apis[pool.Name]; api != nil {
		return api
	}
	return nil
}

// use gives a pool its own Coolify.
func (f *fakeConnector) use(pool string, api coolify.API) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.apis[pool] = api
}

// discardEvents drops events (tests read the audit log and statuses instead), but first checks them as the real recorder would: it calls
// GetObjectKind on both objects, which panics on a typed nil. The reconcilers recover that
// panic as an error, so the misuse is kept for checkInvariants to fail on.
type discardEvents struct{}

var eventMisuse atomic.Value // string: the first event the real recorder would have panicked on

func (discardEvents) Eventf(regarding, related runtime.Object, _, reason, _, note string, args ...any) {
	defer func() {
		if p := recover(); p != nil {
			eventMisuse.CompareAndSwap(nil, fmt.Sprintf("event %s: %v", reason, p))
		}
	}()
	regarding.GetObjectKind()
	if related != nil {
		related.GetObjectKind()
	}
	eventTaps.See([]byte(reason + " " + fmt.Sprintf(note, args...)))
	if o, ok := regarding.(metav1.Object); ok {
		if log, ok := eventLogs.Load(o.GetNamespace()); ok {
			log.(*eventLog).add(recordedEvent{Reason: reason, Note: fmt.Sprintf(note, args...), Related: related})
		}
	}
}

// eventLogs holds the eventLog of each namespace a test records the Events of.
var eventLogs sync.Map

// recordedEvent is an Event the manager emitted about an object of a recorded namespace.
type recordedEvent struct {
	Reason, Note string
	Related      runtime.Object
}

// eventLog is the Events of one namespace's objects, as the recorder was given them.
type eventLog struct {
	mu     sync.Mutex
	events []recordedEvent
}

func (l *eventLog) add(e recordedEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

// All is a copy of the Events recorded so far.
func (l *eventLog) All() []recordedEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]recordedEvent(nil), l.events...)
}

// recordEvents records the Events about objects of namespace ns until t ends.
func recordEvents(t testing.TB, ns string) *eventLog {
	l := &eventLog{}
	eventLogs.Store(ns, l)
	t.Cleanup(func() { eventLogs.Delete(ns) })
	return l
}

// eventTaps are shown every Event's reason and message (watchEvents).
var eventTaps kubetest.Taps

// watchEvents watches the Events of every manager of the suite for needle until t ends.
func watchEvents(t testing.TB, needle string) *kubetest.Watch { return eventTaps.Watch(t, needle) }

// Builders.

func newPool(ns, name string, mutate ...func(*v1.BotPool)) *v1.BotPool {
	p := bt.MakePool(ns, name).Placement(fixture.ProjectUUID, fixture.ServerUUID, fixture.EnvironmentName).
		// Polls run every 20ms of real time; what they decide depends on the fake clock.
		Timing(v1.Timing{DeploymentPollInterval: "20ms"}).Obj()
	for _, f := range mutate {
		f(p)
	}
	return p
}

// newBot creates a Bot for pool, as a user would; the bot controller routes and queues it and
// the dispatcher binds it.
func newBot(t testing.TB, ns, name, pool string, mutate ...func(*v1.Bot)) *v1.Bot {
	t.Helper()
	b := bt.MakeBot(ns, name).PoolRef(pool).Obj()
	for _, f := range mutate {
		f(b)
	}
	if err := env.Client.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return b
}

// slotOf waits until a slot is bound to bot and returns it.
func slotOf(t testing.TB, bot *v1.Bot) *v1.BotPoolSlot {
	t.Helper()
	var slot *v1.BotPoolSlot
	kubetest.Eventually(t, 15*time.Second, func() error {
		for _, s := range listSlots(t, bot.Namespace) {
			if s.Spec.BotRef != nil && s.Spec.BotRef.UID == bot.UID {
				slot = &s
				return nil
			}
		}
		return fmt.Errorf("bot %s is bound to no slot", bot.Name)
	})
	return slot
}

// waitPhases waits until the namespace's slots are in exactly these phases.
func waitPhases(t testing.TB, ns string, want map[v1.SlotPhase]int) {
	t.Helper()
	waitPhasesThen(t, ns, want, func() {})
}

// waitPhasesPolling is waitPhases for what a deployment the test stepped past leads to: each
// look that finds the phases short moves the clock on a deployment poll (nextPoll).
func waitPhasesPolling(t testing.TB, ns string, want map[v1.SlotPhase]int) {
	t.Helper()
	waitPhasesThen(t, ns, want, func() { nextPoll() })
}

func waitPhasesThen(t testing.TB, ns string, want map[v1.SlotPhase]int, short func()) {
	t.Helper()
	kubetest.Eventually(t, 15*time.Second, func() error {
		got := map[v1.SlotPhase]int{}
		for _, s := range listSlots(t, ns) {
			got[s.Status.Phase]++
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			short()
			return fmt.Errorf("slot phases %v, want %v", got, want)
		}
		return nil
	})
}

func listSlots(t testing.TB, ns string) []v1.BotPoolSlot {
	t.Helper()
	var l v1.BotPoolSlotList
	if err := env.Client.List(context.Background(), &l, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return l.Items
}
