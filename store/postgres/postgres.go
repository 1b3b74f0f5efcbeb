// Package postgres is the store.Store on PostgreSQL (pgx/v5 pool). New connects, applies the
// embedded migrations under an advisory lock (goose) and starts two loops: the heartbeat
// flusher, which writes the beats of many bots in one statement (group commit), and the
// recovery loop, which takes over while the server is unreachable.
//
// During an outage nothing fails for lack of Postgres: writes go to a bounded buffer and return
// store.ErrBuffered, reads return store.ErrUnavailable, and the recovery loop pings with backoff,
// replays the buffer in order and only then reports the store available again. Only a server
// unreachable at start is an error (New fails fast: a wrong URL should not pass for an outage).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"botpool.dev/botpool/store"
)

// Defaults of the options.
const (
	DefaultBatchSize     = 512
	DefaultFlushInterval = 5 * time.Millisecond
	DefaultBufferLimit   = 10000
	DefaultMinBackoff    = 100 * time.Millisecond
	DefaultMaxBackoff    = 5 * time.Second
	DefaultWriteTimeout  = 5 * time.Second
	DefaultCloseTimeout  = 5 * time.Second
	// maxReplayFailures is how often the server may refuse a buffered write (a conflict that
	// coalescing made out of writes that were fine in their original order) before it is given
	// up; each replay pass retries it after the others.
	maxReplayFailures = 3
	// replayRows is how many append-only rows one replay statement carries.
	replayRows = 1000
)

var errClosed = errors.New("postgres store closed")

type config struct {
	clock         clock.WithTicker
	registerer    prometheus.Registerer
	log           logr.Logger
	batchSize     int
	flushInterval time.Duration
	bufferLimit   int
	minBackoff    time.Duration
	maxBackoff    time.Duration
	writeTimeout  time.Duration
	closeTimeout  time.Duration
	pruneBatch    int
	// sharedClock: clock is the one clock of every store of the deployment (no translation).
	sharedClock bool
}

// Option configures a Store.
type Option func(*config)

// WithClock sets the clock for timestamps, the flush interval and the recovery backoff.
func WithClock(c clock.WithTicker) Option { return func(o *config) { o.clock = c } }

// WithSharedClock says the store's clock is the one clock of every store that writes or reads
// these heartbeats (tests that run several stores, one after another, on one fake clock): beats
// are kept in it as they are, not translated into the database's time. Without it each store
// measures its offset to the database's clock when it opens; a fake clock stepped hours ahead
// of real time would give each store opened later another offset, and beats written before
// would read as younger than they are.
func WithSharedClock() Option { return func(o *config) { o.sharedClock = true } }

// WithRegisterer registers the store's metrics (botpool_store_*) with reg; nil registers nothing.
func WithRegisterer(reg prometheus.Registerer) Option { return func(o *config) { o.registerer = reg } }

// WithLogger sets where the store logs outages, recoveries and dropped writes.
func WithLogger(l logr.Logger) Option { return func(o *config) { o.log = l } }

// WithHeartbeatBatch bounds a heartbeat batch: it is written when it holds size bots or when
// its first beat has waited interval, whichever comes first.
func WithHeartbeatBatch(size int, interval time.Duration) Option {
	return func(o *config) { o.batchSize, o.flushInterval = max(size, 1), interval }
}

// WithBufferLimit bounds the transitions and events kept during an outage (oldest dropped).
func WithBufferLimit(n int) Option { return func(o *config) { o.bufferLimit = max(n, 1) } }

// WithRetryBackoff sets the recovery loop's backoff between pings.
func WithRetryBackoff(minDelay, maxDelay time.Duration) Option {
	return func(o *config) { o.minBackoff, o.maxBackoff = minDelay, max(minDelay, maxDelay) }
}

// WithWriteTimeout bounds one statement; a server that does not answer in time counts as down.
func WithWriteTimeout(d time.Duration) Option { return func(o *config) { o.writeTimeout = d } }

// WithCloseTimeout bounds how long Close tries to write what is still buffered.
func WithCloseTimeout(d time.Duration) Option { return func(o *config) { o.closeTimeout = d } }

// Store is the Postgres store.Store.
type Store struct {
	cfg  config
	pool *pgxpool.Pool
	m    *metrics
	// where names the server in messages (host:port/database, no credentials).
	where string

	mu        sync.Mutex
	available bool
	since     time.Time
	lastErr   string
	closed    bool
	// setupPending: the server was unreachable when the store opened; recovery sets it up
	// (setUp) before the first statement.
	setupPending bool
	buf          *buffer
	batches      []*beatBatch // heartbeats waiting for the flusher, oldest first; the last one is open

	flushKick   chan struct{}
	recoverKick chan struct{}
	done        chan struct{}
	stopReplay  context.CancelFunc // interrupts a replay in progress at Close
	replayCtx   context.Context
	wg          sync.WaitGroup

	// offset is the database's clock minus this replica's (nanoseconds, whole microseconds):
	// heartbeats are stored in the database's time and read back in the reader's, so replicas
	// whose clocks disagree judge liveness alike (see clock.go).
	offset atomic.Int64
}

var (
	_ store.Store  = (*Store)(nil)
	_ store.Pruner = (*Store)(nil)
)

// New connects to dsn, migrates the schema and starts the store. A server that cannot be
// reached now (a connection failure, not a refusal such as a wrong password) is an outage that
// began before the start: the store opens unavailable and migrates once the server answers.
// An outage never fails a caller.
func New(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	cfg := config{
		clock:         clock.RealClock{},
		log:           logr.Discard(),
		batchSize:     DefaultBatchSize,
		flushInterval: DefaultFlushInterval,
		bufferLimit:   DefaultBufferLimit,
		minBackoff:    DefaultMinBackoff,
		maxBackoff:    DefaultMaxBackoff,
		writeTimeout:  DefaultWriteTimeout,
		closeTimeout:  DefaultCloseTimeout,
		pruneBatch:    DefaultPruneBatch,
	}
	for _, o := range opts {
		o(&cfg)
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parsing the database URL: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("opening the database pool: %w", err)
	}
	s := &Store{
		cfg:         cfg,
		pool:        pool,
		where:       fmt.Sprintf("%s:%d/%s", pcfg.ConnConfig.Host, pcfg.ConnConfig.Port, pcfg.ConnConfig.Database),
		available:   true,
		since:       cfg.clock.Now(),
		buf:         newBuffer(cfg.bufferLimit),
		flushKick:   make(chan struct{}, 1),
		recoverKick: make(chan struct{}, 1),
		done:        make(chan struct{}),
	}
	s.replayCtx, s.stopReplay = context.WithCancel(context.Background())
	sctx, cancel := context.WithTimeout(ctx, 10*cfg.writeTimeout) // a server that hangs is unreachable
	err = s.setUp(sctx)
	cancel()
	if err != nil {
		if classify(err) != kindConnection {
			pool.Close() // refused for good: a password, a schema it cannot migrate
			return nil, err
		}
		// Unreachable now, as in an outage: the store starts unavailable (liveness unknown,
		// writes buffered) and sets itself up when the server answers, instead of the manager
		// exiting and restarting in a loop while every controller waits.
		s.available, s.lastErr, s.setupPending = false, err.Error(), true
		cfg.log.Info("Postgres unreachable at start: the store starts unavailable, as in an outage, and migrates once it answers",
			"at", s.where, "error", err.Error())
	}
	s.m = newMetrics(s)
	if err := s.m.register(cfg.registerer); err != nil {
		pool.Close()
		return nil, err
	}
	s.wg.Add(2)
	go s.flushLoop()
	go s.recoverLoop()
	if s.setupPending {
		s.recoverKick <- struct{}{}
	}
	return s, nil
}

// setUp reaches the server, migrates the schema and measures the clock offset: what the store
// needs before its first statement, at New or, when the server was unreachable then, before
// it turns available.
func (s *Store) setUp(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("connecting to Postgres at %s: %w", s.where, err)
	}
	if err := migrate(ctx, s.pool); err != nil {
		return fmt.Errorf("migrating the schema of %s: %w", s.where, err)
	}
	if s.cfg.sharedClock {
		return nil // the offset stays 0: the injected clock is the one clock
	}
	if err := s.syncClock(ctx); err != nil {
		return fmt.Errorf("reading the clock of %s: %w", s.where, err)
	}
	return nil
}

// Status implements store.Store.
func (s *Store) Status() store.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return store.Status{
		Available: s.available,
		Since:     s.since,
		Buffered:  s.buf.len(),
		Dropped:   s.buf.dropped,
		LastError: s.lastErr,
	}
}

// Close implements store.Store: it writes the pending heartbeat batch, tries for a while to
// write what the outage buffer holds, and closes the pool. What could not be written is
// reported as an ErrUnavailable error, and lost.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.done)
	s.stopReplay()
	s.wg.Wait() // the flusher writes (or buffers) its last batch before it returns

	var err error
	if s.Status().Buffered > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.closeTimeout)
		err = s.recover(ctx)
		cancel()
	}
	s.pool.Close()
	s.m.unregister(s.cfg.registerer)
	if n := s.Status().Buffered; n > 0 {
		return fmt.Errorf("%w: %d buffered writes lost at close: %w", store.ErrUnavailable, n, err)
	}
	return nil
}

// write runs one statement of a direct write, or buffers the write when Postgres is down. An
// outage discovered by the statement itself buffers the write too: the caller gets ErrBuffered,
// never a connection error.
func (s *Store) write(ctx context.Context, op string, bufferIt func(*buffer), exec func(context.Context) error) error {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return errClosed
	case !s.available:
		// Also while replaying: a write must not overtake the buffered writes before it.
		bufferIt(s.buf)
		s.mu.Unlock()
		return store.ErrBuffered
	}
	s.mu.Unlock()

	err := s.exec(ctx, op, exec)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return err // the caller gave up: not an outage
	}
	switch kind := classify(err); kind {
	case kindConnection:
		s.mu.Lock()
		s.markUnavailableLocked(err)
		bufferIt(s.buf)
		s.mu.Unlock()
		return store.ErrBuffered
	case kindConflict:
		return conflictError(err)
	case kindInvalid:
		return fmt.Errorf("%w: %s: %w", store.ErrInvalid, op, err)
	default:
		return fmt.Errorf("%s: %w", op, err)
	}
}

// exec runs one statement under the write timeout, counting it and its failures.
func (s *Store) exec(ctx context.Context, op string, exec func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.writeTimeout)
	defer cancel()
	s.m.statements.WithLabelValues(op).Inc()
	err := exec(ctx)
	if err != nil {
		s.m.errors.WithLabelValues(classify(err).String()).Inc()
	}
	return err
}

// read runs a query unless the store is known to be down; connection failures become
// ErrUnavailable ("unknown"), never an answer.
func (s *Store) read(ctx context.Context, op string, query func(context.Context) error) error {
	s.mu.Lock()
	closed, available := s.closed, s.available
	s.mu.Unlock()
	switch {
	case closed:
		return errClosed
	case !available:
		return store.ErrUnavailable
	}
	err := s.exec(ctx, op, query)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return err
	case classify(err) == kindConnection:
		s.mu.Lock()
		s.markUnavailableLocked(err)
		s.mu.Unlock()
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	default:
		return fmt.Errorf("%s: %w", op, err)
	}
}

// markUnavailableLocked records an outage and wakes the recovery loop. s.mu must be held.
func (s *Store) markUnavailableLocked(err error) {
	s.lastErr = err.Error()
	if !s.available {
		return
	}
	s.available = false
	s.since = s.cfg.clock.Now()
	s.cfg.log.Info("Postgres unreachable, buffering writes", "error", err.Error())
	select {
	case s.recoverKick <- struct{}{}:
	default:
	}
}
