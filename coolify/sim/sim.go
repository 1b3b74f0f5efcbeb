// Package sim is an in-process Coolify v4 API for tests, benchmarks and the demo. It serves the
// endpoints a bot pool uses with the semantics docs/coolify.md describes: abilities, the API
// switch, the per-user rate limit, strict bodies, asynchronous deletes, deployment queues
// with per-server concurrency and a shared worker pool, image caches against a registry whose
// tags move (PushImage) and Coolify's Docker cleanup that prunes them (on each server's
// schedule, and after stops and deletes that do not turn it off), lagging container status,
// env preview twins, server health (unreachable or unusable servers, lost containers), and
// fault injection.
//
// Time comes from an injected clock and every simulated duration is divided by Config.Speed.
// State advances lazily: each request, Tick and Advance run every event that is due, in time
// order, so a test with a fake clock is deterministic. Start also runs a background ticker so
// hooks fire in real time for the demo.
package sim

import (
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"sort"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Defaults of Config; the durations are those of a real Coolify before Speed applies.
const (
	DefaultVersion     = "4.3.11"
	DefaultRateLimit   = 200
	DefaultWorkers     = 4
	DefaultColdPull    = 7 * time.Minute
	DefaultWarmPull    = 5 * time.Second
	DefaultComposeUp   = 3 * time.Second
	DefaultStatusLag   = 30 * time.Second
	DefaultDeleteDelay = 10 * time.Second
	DefaultStopDelay   = 2 * time.Second
	DefaultQueueLimit  = 25
	DefaultConcurrent  = 2
	tickInterval       = 10 * time.Millisecond
)

// DefaultPullFailAfter is how long a pull takes to fail: Docker asks the registry for the
// manifest first, so an unknown tag or a refused login is known within seconds.
const DefaultPullFailAfter = 5 * time.Second

// Config tunes the simulator. Zero values take the defaults above; a negative duration means
// at once (done by the next request, even on a clock that does not move).
type Config struct {
	Clock clock.Clock
	// Speed divides every simulated duration (pulls, status lag, deletes): 1000 turns a
	// 7-minute pull into 420 ms. The rate-limit window is not scaled.
	Speed   float64
	Version string
	// RateLimit is requests per minute per user; negative disables it.
	RateLimit int
	// Workers is the instance-wide number of deployment workers.
	Workers     int
	ColdPull    time.Duration
	WarmPull    time.Duration
	ComposeUp   time.Duration
	StatusLag   time.Duration
	DeleteDelay time.Duration
	StopDelay   time.Duration
	// PullFailAfter is when a failing pull (FailPulls, FailPullsOn) fails, counted from the
	// pull's start, and never later than the pull would have taken.
	PullFailAfter time.Duration
	// APIDisabled starts the instance with the API switched off, as on a fresh install.
	APIDisabled bool
	// RandSeed seeds fault injection.
	RandSeed uint64
	Hooks    Hooks
}

// Hooks are called when a simulated container starts or stops, or a pull starts, outside the
// simulator's lock, from the goroutine that advanced time (a request handler or the ticker):
// keep them short or start a goroutine. Hooks may call the simulator. Two goroutines
// advancing at once can run their hooks concurrently: Container.Seq and PullInfo.Seq give the
// true order.
type Hooks struct {
	OnStart func(Container)
	OnStop  func(Container)
	// OnPull is called when a deployment starts its image pull (a worker took it).
	OnPull func(PullInfo)
	// OnPulled is called when a deployment's pull put its image in the server's cache: the
	// pull and compose up finished (a failed or cancelled deployment never calls it). At is
	// that moment.
	OnPulled func(PullInfo)
	// OnCleanup is called after each run of a server's Docker cleanup (cleanup.go).
	OnCleanup func(CleanupInfo)
}

// PullInfo describes the start of a deployment's image pull.
type PullInfo struct {
	DeploymentUUID string
	AppUUID        string
	AppName        string
	ServerUUID     string
	// Ref is the image reference pulled ("image:tag"); Digest is the registry's digest of it
	// as the pull started (PushImage changes it).
	Ref    string
	Digest string
	// Cold is true when the server's cache did not hold that digest: the pull downloads the
	// image (ColdPull) instead of checking it (WarmPull).
	Cold bool
	// At is the simulated time the pull started; Seq orders it among container changes.
	At  time.Time
	Seq uint64
}

// Container describes a simulated container at a start or stop.
type Container struct {
	AppUUID    string
	AppName    string
	ServerUUID string
	Image      string
	// Env holds the application's non-preview variables.
	Env map[string]string
	// CPUs and Memory are the limits the container runs with (limits_cpus and limits_memory
	// as the deployment that started it read them; "" for none).
	CPUs   string
	Memory string
	// Reason is "deployed", "stopped", "crashed", "crash-loop", "deleted", "redeployed" or
	// "lost" (LoseServerContainers).
	Reason string
	// At is the simulated time of the change; Seq increases with every change of any app.
	At  time.Time
	Seq uint64
}

// Sim is the simulator. Build it with New, seed it, serve it with Start or as an http.Handler.
type Sim struct {
	cfg Config
	clk clock.Clock

	mu         sync.Mutex
	rng        *rand.Rand
	nextID     int
	seq        int
	hookSeq    uint64
	lastTick   time.Time
	events     eventQueue
	hooks      []func()
	apiEnabled bool

	servers  map[string]*server
	projects map[string]*project
	tokens   map[string]*token
	apps     map[string]*app
	deploys  map[string]*deployment
	// registry holds how many times each image reference was pushed (PushImage): its digest
	// follows from the count, so a tag that was never pushed has a digest too.
	registry map[string]int
	order    []*deployment            // every deployment, in creation order
	active   []*deployment            // the queued and in-progress ones
	byApp    map[string][]*deployment // per app, oldest first
	workers  int                      // busy workers
	limits   map[string]*window

	faults    map[string]*Fault
	outage    bool
	pullFails map[pullKey]int
	crashes   map[string]Crash

	counts map[string]map[int]int
	log    []Request
}

// New builds an empty simulator.
func New(cfg Config) *Sim {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Speed <= 0 {
		cfg.Speed = 1
	}
	def := func(d *time.Duration, v time.Duration) {
		switch {
		case *d == 0:
			*d = v
		case *d < 0:
			*d = 0 // at once: the next request sees it done
		}
	}
	def(&cfg.ColdPull, DefaultColdPull)
	def(&cfg.WarmPull, DefaultWarmPull)
	def(&cfg.ComposeUp, DefaultComposeUp)
	def(&cfg.StatusLag, DefaultStatusLag)
	def(&cfg.DeleteDelay, DefaultDeleteDelay)
	def(&cfg.StopDelay, DefaultStopDelay)
	def(&cfg.PullFailAfter, DefaultPullFailAfter)
	if cfg.Version == "" {
		cfg.Version = DefaultVersion
	}
	if cfg.RateLimit == 0 {
		cfg.RateLimit = DefaultRateLimit
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	return &Sim{
		cfg: cfg, clk: cfg.Clock, rng: rand.New(rand.NewPCG(cfg.RandSeed, 0x5eed)),
		lastTick: cfg.Clock.Now(), apiEnabled: !cfg.APIDisabled,
		servers: map[string]*server{}, projects: map[string]*project{}, tokens: map[string]*token{},
		apps: map[string]*app{}, registry: map[string]int{}, deploys: map[string]*deployment{}, byApp: map[string][]*deployment{}, limits: map[string]*window{},
		faults: map[string]*Fault{}, pullFails: map[pullKey]int{}, crashes: map[string]Crash{},
		counts: map[string]map[int]int{},
	}
}

// scaled turns a simulated duration into clock time.
func (s *Sim) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) / s.cfg.Speed)
}

func (s *Sim) id() int { s.nextID++; return s.nextID }

// uuid makes a Coolify-looking identifier (lowercase letters and digits).
func (s *Sim) uuid() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 24)
	for i := range b {
		b[i] = alphabet[s.rng.IntN(len(alphabet))]
	}
	return string(b)
}

// Server is a running simulator over HTTP.
type Server struct {
	*Sim
	// URL is the instance address, without /api/v1.
	URL  string
	http *httptest.Server
	stop chan struct{}
	done chan struct{}
}

// Start serves s on a local port and ticks it in the background so hooks fire on time.
func Start(s *Sim) *Server {
	srv := &Server{Sim: s, http: httptest.NewServer(s), stop: make(chan struct{}), done: make(chan struct{})}
	srv.URL = srv.http.URL
	go func() {
		defer close(srv.done)
		t := time.NewTicker(tickInterval)
		defer t.Stop()
		for {
			select {
			case <-srv.stop:
				return
			case <-t.C:
				s.Tick()
			}
		}
	}()
	return srv
}

// Close stops the ticker and the HTTP server.
func (srv *Server) Close() {
	close(srv.stop)
	<-srv.done
	srv.http.Close()
}

// Tick runs every event that is due now.
func (s *Sim) Tick() {
	s.mu.Lock()
	s.advance()
	hooks := s.takeHooks()
	s.mu.Unlock()
	runHooks(hooks)
}

// Advance steps a fake clock (one with a Step method, like k8s.io/utils/clock/testing) and
// runs what became due. It panics with a real clock.
func (s *Sim) Advance(d time.Duration) {
	st, ok := s.clk.(interface{ Step(time.Duration) })
	if !ok {
		panic(fmt.Sprintf("sim: Advance needs a steppable clock, have %T", s.clk))
	}
	st.Step(d)
	s.Tick()
}

func (s *Sim) takeHooks() []func() {
	h := s.hooks
	s.hooks = nil
	return h
}

func runHooks(hooks []func()) {
	for _, h := range hooks {
		h()
	}
}

// SetAPIEnabled flips the instance's API switch.
func (s *Sim) SetAPIEnabled(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.apiEnabled = on
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
