// Package botapi is the HTTP API that meeting-bot containers call: they fetch their bot's
// configuration, send heartbeats and report their phase and events. The operator never calls
// the containers; every replica of the manager serves this API (it needs no leadership), or
// every replica of a process running it alone (--components=bot-api, under the role of
// setup.go's markers), and heartbeats go to the store, not to the API server.
//
// Auth is two-fold. A per-slot bearer token the slot controller issued (kept in a Secret owned
// by the slot, its hash recorded in the slot's status) fetches the configuration of the bot
// bound to that slot, once per binding; that answer carries a credential for that bot only
// (its hash recorded in the Bot's status.binding), which heartbeats, status reports and events
// require, valid while the binding lasts. See binding.go and docs/botapi.md.
package botapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
	kevents "k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"botpool.dev/botpool/botapi/botclient"
	"botpool.dev/botpool/internal/cachelag"
	"botpool.dev/botpool/store"
)

// Liveness is the part of the store the bot API writes to.
type Liveness interface {
	RecordHeartbeat(ctx context.Context, hb store.Heartbeat) error
	AppendBotEvents(ctx context.Context, events []store.BotEvent) error
	// RecordSlotAsk records a config call of a slot's container (see recordAsk).
	RecordSlotAsk(ctx context.Context, ask store.SlotAsk) error
	// RecordSlotLeft records a slot's container hanging up its wait (see recordLeft).
	RecordSlotLeft(ctx context.Context, left store.SlotLeft) error
}

// Config holds what a Server needs.
type Config struct {
	// Addr is the listen address, e.g. ":8082".
	Addr string
	// TLSCertFile and TLSKeyFile, when set, make the API serve HTTPS only, with that PEM key
	// pair, reloaded when the files change (a renewed kubernetes.io/tls Secret); empty serves
	// plain HTTP.
	TLSCertFile, TLSKeyFile string
	// Cache answers reads; it must have the indexes of IndexFields.
	Cache client.Reader
	// Informers, when set, is the cache whose informer on BotPoolSlots wakes the config
	// requests that wait for a binding (Start calls WatchBindings with it); AddToManager sets
	// the manager's. Without it a wait ends at its deadline only.
	Informers Informers
	// MaxWaiters bounds the config requests waiting at once on this replica (default
	// DefaultMaxWaiters). Once they are all taken, a namespace holding fewer waits than another
	// by two or more takes the place of that one's newest wait (answered 404, as a wait that
	// ran out), so every namespace keeps at least its fair share; otherwise a request that asks
	// to wait is answered 503. See waiters.add.
	MaxWaiters int
	// MaxWaitersPerNamespace bounds those of one namespace's slots, full replica or not
	// (default DefaultMaxWaitersPerNamespace); past it a request of that namespace that asks to
	// wait is answered 503.
	MaxWaitersPerNamespace int
	// CatchUp is how long a request with an unknown binding credential waits for the cache
	// to show a claim another replica may have just written (default DefaultCatchUp; negative
	// waits not at all, for a cache that never lags behind the writes it is shown).
	CatchUp time.Duration
	// Client writes Bot status. It should record the versions its writes replace in Writes
	// (cachelag.NewClient, as controllers.Setup's Client does), so the Bot controller waits
	// for the cache after a report instead of judging the version the report replaced.
	Client client.Client
	// APIReader reads past the cache, to retry a status patch that lost a conflict.
	APIReader client.Reader
	// Writes, shared with the bot controller, remembers the bot versions this process's writes
	// replaced: a status patch is built on a fresh read instead of a cached version it would
	// only conflict with, and the controller waits for the cache after ours. nil remembers
	// nothing.
	Writes   *cachelag.Tracker
	Liveness Liveness
	// Recorder receives the Warning Event of a binding claimed twice; nil records none.
	// AddToManager sets the manager's recorder named "botpool".
	Recorder kevents.EventRecorder
	Clock    clock.PassiveClock
	Log      logr.Logger
	// Registerer receives the API's metrics; nil registers none.
	Registerer prometheus.Registerer

	// HeartbeatInterval is what bots are told to beat at (default 10s).
	HeartbeatInterval time.Duration
	// SlotRate and SlotBurst limit the requests of one slot's container (default 20/s, 40).
	SlotRate  rate.Limit
	SlotBurst int
	// AuthFailureRate and AuthFailureBurst limit the failed authentications of one client
	// address (an IPv6 /64); past them a request from it whose token does not authenticate
	// gets 429 instead of 401 until the budget refills (default 1/s, 30). A valid token is
	// never refused for its address.
	AuthFailureRate  rate.Limit
	AuthFailureBurst int

	// sleep pauses before looking again for a binding credential the cache may not show yet;
	// nil is sleepReal. A test counts or holds the pauses instead.
	sleep func(ctx context.Context, d time.Duration) error
}

// Server is the bot API.
type Server struct {
	cfg     Config
	metrics *metrics

	mu       sync.Mutex
	limiters map[types.UID]*rate.Limiter
	asked    map[types.UID]askMark // the last ask recorded per slot (see recordAsk)
	left     map[types.UID]askMark // the last hang-up recorded per slot (see recordLeft)
	// refused holds, per bot, the parameters refusal given last (see parametersOf): a
	// container asking again within parametersRetry gets it without another Secret read.
	refused map[types.UID]refusal
	issued  map[string]issued // binding credentials this replica issued, by hash

	waiters *waiters

	// authFailures is checked before a request's token is: unauthenticated callers meet a
	// limit too, not only the slots.
	authFailures *failureLimiter
}

// New returns a server; call Start (or use Handler) to serve.
func New(cfg Config) *Server {
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 10 * time.Second
	}
	if cfg.SlotRate <= 0 {
		cfg.SlotRate, cfg.SlotBurst = 20, 40
	}
	if cfg.AuthFailureRate <= 0 {
		cfg.AuthFailureRate, cfg.AuthFailureBurst = 1, 30
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.MaxWaiters <= 0 {
		cfg.MaxWaiters = DefaultMaxWaiters
	}
	if cfg.MaxWaitersPerNamespace <= 0 {
		cfg.MaxWaitersPerNamespace = DefaultMaxWaitersPerNamespace
	}
	if cfg.CatchUp == 0 {
		cfg.CatchUp = DefaultCatchUp
	}
	if cfg.sleep == nil {
		cfg.sleep = sleepReal
	}
	return &Server{cfg: cfg, metrics: newMetrics(cfg.Registerer), limiters: map[types.UID]*rate.Limiter{},
		asked: map[types.UID]askMark{}, left: map[types.UID]askMark{}, refused: map[types.UID]refusal{}, issued: map[string]issued{}, waiters: newWaiters(cfg.MaxWaiters, cfg.MaxWaitersPerNamespace, cfg.Registerer),
		authFailures: newFailureLimiter(cfg.AuthFailureRate, cfg.AuthFailureBurst)}
}

// Handler returns the API's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	// Waiting requests are measured apart: their latency is the wait for a binding.
	config, configWait := s.instrument("config", s.handleConfig), s.instrument("configWait", s.handleConfig)
	notFound := func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: see the bot API in the README")
	}
	mux.HandleFunc("GET /v1/slots/{appUUID}/config", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			// A GET pattern serves HEAD too, and the answer to a HEAD has no body: it would
			// claim the binding and drop its credential. It is answered as any method the API
			// lacks (docs/botapi.openapi.yaml lists the routes).
			notFound(w, r)
			return
		}
		if r.URL.Query().Get("wait") != "" {
			configWait.ServeHTTP(w, r)
			return
		}
		config.ServeHTTP(w, r)
	})
	mux.Handle("POST /v1/bots/{name}/heartbeat", s.instrument("heartbeat", s.handleHeartbeat))
	mux.Handle("POST /v1/bots/{name}/status", s.instrument("status", s.handleStatus))
	mux.Handle("POST /v1/bots/{name}/events", s.instrument("events", s.handleEvents))
	mux.HandleFunc("/", notFound)
	return mux
}

// Start serves until ctx ends, then shuts down gracefully. It implements manager.Runnable.
func (s *Server) Start(ctx context.Context) error {
	srv := &http.Server{
		Addr:              s.cfg.Addr,
		Handler:           s.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      writeTimeout, // a config request may wait up to MaxConfigWait

		IdleTimeout:    90 * time.Second,
		MaxHeaderBytes: 16 << 10,
		// Every request's context carries ctx, so a wait that ends with it can tell the
		// server's shutdown from its client hanging up (clientLeft).
		BaseContext: func(net.Listener) context.Context { return context.WithValue(ctx, baseContextKey{}, ctx) },
	}
	if s.cfg.Informers != nil {
		if err := s.WatchBindings(ctx, s.cfg.Informers); err != nil {
			return err
		}
	}
	serve := srv.ListenAndServe
	if s.cfg.TLSCertFile != "" {
		// Read the key pair now, so a missing or bad one stops the manager at start; the
		// watcher then swaps in a renewed pair for new connections.
		certs, err := certwatcher.New(s.cfg.TLSCertFile, s.cfg.TLSKeyFile)
		if err != nil {
			return fmt.Errorf("loading the bot API's TLS certificate: %w", err)
		}
		go func() {
			if err := certs.Start(ctx); err != nil {
				s.cfg.Log.Error(err, "Watching the bot API's TLS certificate failed; serving the one loaded last")
			}
		}()
		srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.GetCertificate}
		serve = func() error { return srv.ListenAndServeTLS("", "") }
	}
	errc := make(chan error, 1)
	go func() { errc <- serve() }()
	s.cfg.Log.Info("Serving the bot API", "addr", s.cfg.Addr, "tls", s.cfg.TLSCertFile != "")
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// NeedLeaderElection is false: every replica serves the bot API.
func (s *Server) NeedLeaderElection() bool { return false }

// apiError is an answer other than 2xx, with a message for the bot's logs.
type apiError struct {
	code       int
	msg        string
	retryAfter time.Duration
}

func (e *apiError) Error() string { return e.msg }

func errorf(code int, msg string) *apiError { return &apiError{code: code, msg: msg} }

// handlerFunc returns the answer's status code and body, or an error.
type handlerFunc func(w http.ResponseWriter, r *http.Request) (int, any, error)

func (s *Server) instrument(endpoint string, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := s.cfg.Clock.Now()
		code, body, err := h(w, r)
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) {
				// Not the bot's fault: say so without internals, log the details.
				s.cfg.Log.Error(err, "Bot API request failed", "endpoint", endpoint, "path", r.URL.Path)
				ae = errorf(http.StatusServiceUnavailable, "the operator could not complete the request; retry later")
				ae.retryAfter = time.Second
			}
			if ae.retryAfter > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(int(ae.retryAfter.Round(time.Second)/time.Second)))
			}
			code = ae.code
			writeError(w, ae.code, ae.msg)
		} else {
			writeJSON(w, code, body)
		}
		s.metrics.observe(endpoint, code, s.cfg.Clock.Since(start))
	})
}

func writeJSON(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, botclient.ErrorResponse{Error: msg})
}

// pruneAbove is the number of per-slot limiters past which idle ones are dropped.
const pruneAbove = 1024

// allow applies the per-slot rate limit.
func (s *Server) allow(slot types.UID) bool {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.limiters[slot]
	if !ok {
		if len(s.limiters) >= pruneAbove {
			s.pruneLimiters(now)
		}
		l = rate.NewLimiter(s.cfg.SlotRate, s.cfg.SlotBurst)
		s.limiters[slot] = l
	}
	return l.AllowN(now, 1)
}

// pruneLimiters drops the limiters whose bucket is full again: they hold no state a fresh one
// would not, so the map stays as small as the set of recently active slots.
func (s *Server) pruneLimiters(now time.Time) {
	for uid, l := range s.limiters {
		if l.TokensAt(now) >= float64(s.cfg.SlotBurst) {
			delete(s.limiters, uid)
		}
	}
}
