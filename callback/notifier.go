package callback

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"botpool.dev/botpool/internal/egress"
)

// Defaults of Options.
const (
	DefaultWorkers          = 16
	DefaultPerReceiver      = 2
	DefaultQueueCapacity    = 10000
	DefaultReceiverCapacity = 1000
	DefaultMaxAttempts      = 8
	DefaultBackoffBase      = time.Second
	DefaultBackoffCap       = 5 * time.Minute
	DefaultRequestTimeout   = 10 * time.Second
	DefaultDedupTTL         = time.Hour
	DefaultDedupSize        = 100000
)

var (
	// ErrRejected is wrapped by the Result error of a callback the receiver refused in a way
	// that retrying cannot fix (a 4xx other than 408 and 429, a redirect), whose URL is invalid,
	// or whose destination the egress policy refuses.
	ErrRejected = errors.New("callback rejected")
	// ErrGaveUp is wrapped by the Result error of a callback that still failed after
	// MaxAttempts attempts.
	ErrGaveUp = errors.New("callback attempts exhausted")
)

// Result is the final outcome of one callback, handed to OnResult and kept for DedupTTL for
// Notifier.Result.
type Result struct {
	Callback Callback
	// Err is nil after a 2xx, else wraps ErrRejected or ErrGaveUp.
	Err error
	// Attempts is how many requests were made (0 for an invalid URL).
	Attempts int
	// At is when the outcome was reached, on the notifier's clock.
	At time.Time
}

// Payload is the JSON body POSTed to the callback URL.
type Payload struct {
	Bot        string    `json:"bot"`
	Namespace  string    `json:"namespace"`
	UID        string    `json:"uid"`
	Phase      string    `json:"phase"`
	Reason     string    `json:"reason,omitempty"`
	Message    string    `json:"message,omitempty"`
	FinishedAt time.Time `json:"finishedAt"`
}

// Callback is one notification to deliver.
type Callback struct {
	// URL receives the POST; http or https.
	URL string
	// Namespace is the namespace of the bot the callback is about: workers and queue places are
	// shared between namespaces (see Options.QueueCapacity). Enqueue fills in Body.Namespace when
	// it is empty.
	Namespace string
	// Key identifies the notification (the bot's UID and phase): callbacks with the same key are
	// sent once, and it is sent as the Idempotency-Key header so receivers can drop repeats.
	// Enqueue fills in Body.UID + "/" + Body.Phase when it is empty.
	Key string
	// Body is marshalled as JSON.
	Body Payload
	// Raw, when set, is sent as the body instead of Body (which still names the bot for
	// OnResult): a signed message must be sent byte for byte as it was signed.
	Raw []byte
	// Headers are set on the request after the defaults, so they may replace the
	// Idempotency-Key (the outbox sends its message id there).
	Headers map[string]string
	// MaxAttempts, when positive, replaces Options.MaxAttempts for this callback: the outbox
	// dispatcher makes one attempt per claim and keeps the retry schedule itself.
	MaxAttempts int
	// Done, when set, is called with the final outcome on a worker, and makes the callback its
	// caller's: the outcome is neither remembered (Result) nor passed to Options.OnResult. It
	// must return quickly.
	Done func(Result)
	// Prepare, when set, is called on the worker just before each request, with the time: it
	// returns headers to add (a signature of the moment the request leaves), or false to drop
	// the callback unsent and without an outcome (its sender gave up on it meanwhile).
	Prepare func(now time.Time) (map[string]string, bool)
}

// Options configure a Notifier; zero fields take the defaults.
type Options struct {
	// Client sends the requests; when nil, a client with RequestTimeout as its timeout that
	// dials through Egress, ignores proxy settings and follows no redirects.
	Client *http.Client
	// Egress decides which addresses the default client may connect to. The zero policy
	// refuses loopback, link-local (cloud metadata), multicast and private addresses; a
	// refused destination is a permanent failure (ErrRejected wrapping egress.ErrRefused),
	// never retried. Ignored when Client is set.
	Egress egress.Policy
	// Clock schedules retries; the real clock when nil. Tests pass a fake clock.
	Clock clock.WithTicker
	// Logger receives one line per final failure and, at V(1), per retry and success.
	Logger logr.Logger
	// Registerer receives the botpool_callback_* metrics; nil registers none.
	Registerer prometheus.Registerer
	// Workers is how many requests may be in flight at once, over all receivers. A free worker
	// takes the namespace with the fewest requests in flight among those with a callback ready
	// (in turn among equals), then that namespace's receivers in turn: however many receivers a
	// namespace has, another namespace's ready callback gets the next worker that frees up.
	Workers int
	// PerReceiver is how many requests may be in flight at once to one receiver: the URL's host
	// and port, within the callback's namespace. A slow or black-holed receiver thus holds at
	// most PerReceiver workers and delays only its own namespace's callbacks.
	PerReceiver int
	// QueueCapacity bounds the callbacks held at once (queued, waiting for a retry or in flight);
	// Enqueue refuses beyond it. A namespace may hold at most QueueCapacity divided by the number
	// of namespaces holding callbacks plus one (half while it is alone), so another namespace
	// finds room however many receivers one floods.
	QueueCapacity int
	// ReceiverCapacity bounds the callbacks held at once for one receiver (of one namespace), so
	// a receiver that never answers cannot fill its namespace's share for the others.
	ReceiverCapacity int
	// MaxAttempts is how many requests a callback gets, the first one included.
	MaxAttempts int
	// BackoffBase and BackoffCap bound the delay before retry n: a random duration in
	// [0, min(BackoffCap, BackoffBase·2^(n-1))] ("full jitter", so receivers that came back are
	// not hit by every pending callback at the same instant).
	BackoffBase time.Duration
	BackoffCap  time.Duration
	// Jitter maps the backoff ceiling to the actual delay; uniform in [0, d] when nil. Tests
	// pass the identity to make delays exact.
	Jitter func(d time.Duration) time.Duration
	// RequestTimeout bounds one request, connection and response headers included.
	RequestTimeout time.Duration
	// DedupTTL and DedupSize bound the memory of finished keys that Enqueue ignores.
	DedupTTL  time.Duration
	DedupSize int
	// OnResult, when set, is called once per callback with its final outcome. It runs on a
	// worker, so it must return quickly (the manager uses it to wake the bot's reconcile). It
	// is not called for callbacks refused at Enqueue or abandoned at shutdown.
	OnResult func(Result)
}

// Notifier delivers callbacks in the background. Build it with New, add it to the manager
// (mgr.Add) and call Enqueue from reconcilers.
type Notifier struct {
	opts    Options
	clock   clock.WithTicker
	client  *http.Client
	log     logr.Logger
	metrics *metrics

	// wake tells the scheduler that the delay heap changed.
	wake    chan struct{}
	started atomic.Bool

	mu sync.Mutex
	// work is signalled when a callback becomes ready and broadcast at shutdown; idle workers
	// wait on it. A worker that finishes a request looks for the next one before it waits, so
	// a receiver dropping below PerReceiver needs no signal.
	work    *sync.Cond
	stopped bool
	active  map[string]*item   // queued, waiting for a retry or in flight
	tenants map[string]*tenant // namespaces holding at least one active callback
	ready   ring[*tenant]      // namespaces with ready callbacks, in turn (fair.go)
	delayed delayHeap          // callbacks waiting for their next attempt
	recent  *recentSet         // finished keys and their results
	// refusedAt is when a refusal was last logged, refused how many Enqueue refused since: a
	// full queue, or a namespace at its share, logs a line a minute rather than one per
	// reconcile of every finished bot.
	refusedAt time.Time
	refused   int
}

// item is a callback with its delivery state; attempts and due are guarded by Notifier.mu
// while the item sits in the heap and owned by the worker while it is in flight.
type item struct {
	cb       Callback
	rcv      *receiverQueue
	attempts int
	due      time.Time
}

// maxAttempts is the callback's own bound when it has one, else def.
func (it *item) maxAttempts(def int) int {
	if it.cb.MaxAttempts > 0 {
		return it.cb.MaxAttempts
	}
	return def
}

// New builds a Notifier; it sends nothing until Start.
func New(opts Options) *Notifier {
	setDefault(&opts.RequestTimeout, DefaultRequestTimeout)
	if opts.Client == nil {
		opts.Client = &http.Client{
			Timeout:   opts.RequestTimeout,
			Transport: opts.Egress.Transport(),
			// A redirected POST turns into a GET, possibly to another host: treat 3xx as a
			// receiver error instead of following it.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = logr.Discard()
	}
	setDefault(&opts.Workers, DefaultWorkers)
	setDefault(&opts.PerReceiver, DefaultPerReceiver)
	setDefault(&opts.QueueCapacity, DefaultQueueCapacity)
	setDefault(&opts.ReceiverCapacity, DefaultReceiverCapacity)
	setDefault(&opts.MaxAttempts, DefaultMaxAttempts)
	setDefault(&opts.BackoffBase, DefaultBackoffBase)
	setDefault(&opts.BackoffCap, DefaultBackoffCap)
	setDefault(&opts.DedupTTL, DefaultDedupTTL)
	setDefault(&opts.DedupSize, DefaultDedupSize)
	if opts.Jitter == nil {
		opts.Jitter = fullJitter
	}
	n := &Notifier{
		opts:    opts,
		clock:   opts.Clock,
		client:  opts.Client,
		log:     opts.Logger,
		metrics: newMetrics(opts.Registerer),
		wake:    make(chan struct{}, 1),
		active:  map[string]*item{},
		tenants: map[string]*tenant{},
		recent:  newRecentSet(opts.DedupTTL, opts.DedupSize),
	}
	n.work = sync.NewCond(&n.mu)
	return n
}

func setDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

func fullJitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d) + 1))
}

// refusalLogEvery spaces the log lines of refused callbacks.
const refusalLogEvery = time.Minute

// Enqueue accepts c for delivery and returns at once. It returns true when c is queued or is a
// duplicate of a callback queued, in flight or finished within DedupTTL, and false when the
// queue, its namespace's share of the queue or its receiver's queue is full: the caller must try
// again later (the bot controller requeues the bot, the relay reschedules the message).
func (n *Notifier) Enqueue(c Callback) bool {
	if c.Key == "" {
		c.Key = c.Body.UID + "/" + c.Body.Phase
	}
	if c.Namespace == "" {
		c.Namespace = c.Body.Namespace
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.active[c.Key]; ok {
		return true
	}
	now := n.clock.Now()
	if n.recent.contains(c.Key, now) {
		return true
	}
	key := receiverKey(c.URL)
	t := n.tenants[c.Namespace]
	var rcv *receiverQueue
	if t != nil {
		rcv = t.receivers[key]
	}
	if limit := n.full(t, rcv); limit != "" {
		n.metrics.deliveries.WithLabelValues(resultDropped).Inc()
		n.metrics.refusals.WithLabelValues(limit).Inc()
		if n.refused++; now.Sub(n.refusedAt) >= refusalLogEvery {
			n.log.Info("Callback refused, its sender tries again later", "limit", limit, "namespace", c.Namespace,
				"receiver", key, "key", c.Key, "refusals", n.refused, "capacity", n.opts.QueueCapacity,
				"namespaceShare", n.namespaceShare(), "receiverCapacity", n.opts.ReceiverCapacity)
			n.refusedAt, n.refused = now, 0
		}
		return false
	}
	rcv = n.holder(c.Namespace, key)
	rcv.held++
	rcv.tenant.held++
	it := &item{cb: c, rcv: rcv}
	n.active[c.Key] = it
	n.metrics.queueDepth.Set(float64(len(n.active)))
	n.makeReady(it)
	return true
}

// RequestTimeout is how long one request may take (Options.RequestTimeout with its default).
func (n *Notifier) RequestTimeout() time.Duration { return n.opts.RequestTimeout }

// Result returns the final outcome of the callback with key, while it is remembered (DedupTTL).
// The bot controller records it on the Bot, which is what keeps the callback from being sent
// again after the memory expires or the process restarts.
func (n *Notifier) Result(key string) (Result, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.recent.get(key, n.clock.Now())
}

// NeedLeaderElection makes the manager run the Notifier on the leader only, so two replicas
// do not both send a callback.
func (n *Notifier) NeedLeaderElection() bool { return true }

// Start runs the workers and the retry scheduler until ctx ends; it implements
// manager.Runnable. Callbacks not delivered by then are abandoned: the queue is in memory.
func (n *Notifier) Start(ctx context.Context) error {
	if !n.started.CompareAndSwap(false, true) {
		return errors.New("callback notifier already started")
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		<-ctx.Done()
		n.mu.Lock()
		n.stopped = true
		n.work.Broadcast()
		n.mu.Unlock()
	})
	for range n.opts.Workers {
		wg.Go(func() { n.worker(ctx) })
	}
	wg.Go(func() { n.schedule(ctx) })
	wg.Wait()

	n.mu.Lock()
	pending := len(n.active)
	n.mu.Unlock()
	if pending > 0 {
		n.log.Info("Callback notifier stopped with undelivered callbacks", "pending", pending)
	}
	return nil
}

func (n *Notifier) worker(ctx context.Context) {
	for {
		n.mu.Lock()
		var it *item
		for !n.stopped {
			if it = n.take(); it != nil {
				break
			}
			n.work.Wait()
		}
		n.mu.Unlock()
		if it == nil {
			return
		}
		n.process(ctx, it)
	}
}

// process makes one attempt and decides what follows: done, or back to the delay heap. A
// failing receiver therefore never holds a worker between attempts.
func (n *Notifier) process(ctx context.Context, it *item) {
	var extra map[string]string
	if it.cb.Prepare != nil {
		var send bool
		if extra, send = it.cb.Prepare(n.clock.Now()); !send {
			n.mu.Lock()
			n.release(it, true)
			n.mu.Unlock()
			return
		}
	}
	it.attempts++
	res := n.attempt(ctx, it, extra)
	log := n.log.WithValues("key", it.cb.Key, "url", redactURL(it.cb.URL), "attempt", it.attempts)
	errorLog := log.Error
	if it.cb.Done != nil {
		// Its owner decides what a failure means (the relay retries for a day) and logs it.
		errorLog = func(err error, msg string, kv ...any) { log.V(1).Info(msg, append(kv, "error", err.Error())...) }
	}
	switch {
	case res.err == nil:
		log.V(1).Info("Callback delivered")
		n.finish(it, nil, resultSuccess)
	case ctx.Err() != nil:
		// Shutting down: the request was cut by us, not refused by the receiver.
		n.mu.Lock()
		n.release(it, true)
		n.mu.Unlock()
	case !res.retryable:
		errorLog(res.err, "Callback rejected, not retrying")
		n.finish(it, fmt.Errorf("%w: %w", ErrRejected, res.err), resultRejected)
	case it.attempts >= it.maxAttempts(n.opts.MaxAttempts):
		errorLog(res.err, "Callback failed, giving up")
		n.finish(it, fmt.Errorf("%w after %d attempts: %w", ErrGaveUp, it.attempts, res.err), resultFailed)
	default:
		delay := n.backoff(it.attempts, res.retryAfter)
		log.V(1).Info("Callback attempt failed, retrying", "delay", delay, "error", res.err.Error())
		n.retryAfter(it, delay)
	}
}

// finish records the outcome and remembers the key, whatever the outcome: a rejected or
// exhausted callback is not retried by the reconciler's next Enqueue either.
func (n *Notifier) finish(it *item, err error, result string) {
	res := Result{Callback: it.cb, Err: err, Attempts: it.attempts, At: n.clock.Now()}
	n.mu.Lock()
	n.release(it, true)
	if it.cb.Done == nil {
		n.recent.add(it.cb.Key, res, res.At)
	}
	n.mu.Unlock()
	n.metrics.deliveries.WithLabelValues(result).Inc()
	switch {
	case it.cb.Done != nil:
		it.cb.Done(res)
	case n.opts.OnResult != nil:
		n.opts.OnResult(res)
	}
}

// backoff is the delay before the attempt after attempt n: the receiver's Retry-After when it
// sent one, else exponential backoff with full jitter; both capped by BackoffCap.
func (n *Notifier) backoff(attempt int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, n.opts.BackoffCap)
	}
	ceiling := n.opts.BackoffCap
	if shift := attempt - 1; shift < 32 {
		if d := n.opts.BackoffBase << shift; d > 0 && d < ceiling {
			ceiling = d
		}
	}
	return n.opts.Jitter(ceiling)
}
