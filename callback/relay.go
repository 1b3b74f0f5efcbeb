package callback

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"botpool.dev/botpool/internal/promreg"
	"botpool.dev/botpool/store"
)

// Outcomes of webhook attempts, besides the notifier's.
const (
	resultRetry    = "retry"
	resultExpired  = "expired"
	resultDeferred = "deferred"
)

// Defaults of RelayOptions.
const (
	DefaultRelayPoll           = 5 * time.Second
	DefaultRelayLease          = 2 * time.Minute
	DefaultRelayBatch          = 100
	DefaultRelayBatchesPerPass = 10
	DefaultRelayBackoff        = 30 * time.Second
	DefaultRelayCap            = time.Hour
	DefaultRelayWindow         = 24 * time.Hour
)

// Sender takes one request of a message: the Notifier, whose fairness between namespaces and
// receivers, queue bounds, egress policy and timeouts thus apply to webhooks too. It must call the callback's Prepare
// just before the request and add the headers it returns (the signature), or drop the
// callback when Prepare says so; and call Done with the outcome.
type Sender interface {
	Enqueue(c Callback) bool
}

// RelayOptions configure a Relay; zero fields take the defaults.
type RelayOptions struct {
	Outbox  store.Outbox
	Sender  Sender
	Secrets SecretSource
	Clock   clock.WithTicker
	Logger  logr.Logger
	// Registerer receives the botpool_webhook_* metrics; nil registers none.
	Registerer prometheus.Registerer
	// Poll is how often the outbox is asked for due messages.
	Poll time.Duration
	// Lease is how long a claim lasts; a claim is sent only while a quarter of it remains, so
	// that quarter must exceed the notifier's RequestTimeout (30 s of the default 2 minutes,
	// against 10 s). A claim that waited longer in the notifier's queue is dropped unsent and
	// claimed again once the lease ends; a message claimed by a leader that died is sent again
	// as soon.
	Lease time.Duration
	// Batch bounds the messages one claim takes; MaxBatchesPerPass the claims of one poll, so
	// a relay sends at most Batch·MaxBatchesPerPass messages a Poll (1,000 every 5 s by
	// default) and a burst of phase changes does not wait for many polls.
	Batch, MaxBatchesPerPass int
	// BackoffBase and BackoffCap: a failed attempt waits as long as the message has existed,
	// at least BackoffBase, at most BackoffCap (Backoff).
	BackoffBase, BackoffCap time.Duration
	// Window is how long after its creation a failing message is still tried; after it the
	// message is given up (ErrGaveUp).
	Window time.Duration
	// OnOutcome, when set, is told of each finished attempt's bot, so the bot controller
	// records it in status.webhook; it must not block.
	OnOutcome func(namespace, name string)
}

// Relay sends the outbox's due messages, signed, one attempt per claim, and records each
// outcome back in the outbox, which keeps the retry schedule: with Postgres a message survives
// restarts and leader changes. It is a Runnable that needs leader election.
type Relay struct {
	opts    RelayOptions
	metrics *relayMetrics
}

// NewRelay builds a Relay; it sends nothing until Start.
func NewRelay(o RelayOptions) *Relay {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
	setDefault(&o.Poll, DefaultRelayPoll)
	setDefault(&o.Lease, DefaultRelayLease)
	setDefault(&o.Batch, DefaultRelayBatch)
	setDefault(&o.MaxBatchesPerPass, DefaultRelayBatchesPerPass)
	setDefault(&o.BackoffBase, DefaultRelayBackoff)
	setDefault(&o.BackoffCap, DefaultRelayCap)
	setDefault(&o.Window, DefaultRelayWindow)
	return &Relay{opts: o, metrics: newRelayMetrics(o.Registerer)}
}

// NeedLeaderElection: only the leader sends; a new leader claims what the old one left
// once its leases end.
func (r *Relay) NeedLeaderElection() bool { return true }

// Start polls the outbox until ctx ends.
func (r *Relay) Start(ctx context.Context) error {
	t := r.opts.Clock.NewTicker(r.opts.Poll)
	defer t.Stop()
	for {
		r.Pass(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// Pass claims the due messages and hands them to the sender, batch after batch while batches
// come back full and the sender takes some of them, up to MaxBatchesPerPass; it returns how
// many it handed over. Outcomes arrive later, on the sender's workers.
//
// A message that cannot go now (the notifier's queue, its namespace's share of it or its
// receiver's queue is full; its signing Secret is gone) is recorded as due again later, so the
// next claim of the pass does not return it, and does not end the pass: one tenant's refused
// message would otherwise cut every other tenant's burst to one batch a poll. Only a batch of which nothing could go ends it: namespaces take turns in
// a claim, so one tenant fills a batch alone only when no one else has a message due.
func (r *Relay) Pass(ctx context.Context) int {
	now := r.opts.Clock.Now()
	r.observeBacklog(ctx, now)
	keys := passKeys{}
	sent := 0
	for range r.opts.MaxBatchesPerPass {
		ms, err := r.opts.Outbox.ClaimMessages(ctx, now, r.opts.Lease, r.opts.Batch)
		if err != nil {
			r.opts.Logger.Error(err, "Claiming webhook messages")
			return sent
		}
		r.read(ctx, keys, ms)
		taken := 0
		for _, m := range ms {
			if r.send(ctx, m, now, keys) {
				taken++
			}
		}
		sent += taken
		if len(ms) < r.opts.Batch || taken == 0 {
			break // nothing more is due, or nothing could go: the next poll goes on
		}
	}
	return sent
}

func (r *Relay) observeBacklog(ctx context.Context, now time.Time) {
	st, err := r.opts.Outbox.OutboxStats(ctx, now)
	if err != nil {
		return
	}
	r.metrics.pending.Set(float64(st.Pending))
	age := 0.0
	if !st.OldestDue.IsZero() {
		age = now.Sub(st.OldestDue).Seconds()
	}
	r.metrics.oldestDue.Set(age)
}

// send hands one claimed attempt to the sender. It is signed when the request leaves, not
// when it was claimed (a receiver's replay tolerance of a few minutes must not count the time
// it queued behind others), and not sent at all when it could outlast its claim: the lease
// ends, the message is claimed again and sent with the next attempt, whose outcome alone counts.
func (r *Relay) send(ctx context.Context, m store.OutboxMessage, now time.Time, keys passKeys) bool {
	var key []byte
	if m.SecretName != "" {
		var err error
		if key, err = keys.key(m); err != nil {
			// The Secret may be created or labelled later: a failed attempt, retried.
			r.record(ctx, m, fmt.Errorf("signing secret: %w", err), now)
			return false
		}
	}
	claimEnds := now.Add(r.opts.Lease)
	cb := Callback{
		URL: m.URL, Namespace: m.Namespace, Key: fmt.Sprintf("%s#%d", m.ID, m.Attempts), Raw: m.Payload, MaxAttempts: 1,
		Headers: map[string]string{"Idempotency-Key": m.ID, HeaderWebhookID: m.ID},
		Body:    Payload{Bot: m.Name, Namespace: m.Namespace, UID: string(m.BotUID), Phase: m.Phase},
		Prepare: func(at time.Time) (map[string]string, bool) {
			if at.Add(r.opts.Lease / 4).After(claimEnds) {
				r.metrics.deliveries.WithLabelValues(resultExpired).Inc()
				return nil, false
			}
			r.metrics.attempts.Inc()
			if key == nil {
				return nil, true
			}
			return SignedHeaders(key, m.ID, at, m.Payload), true
		},
		Done: func(res Result) { r.record(context.WithoutCancel(ctx), m, res.Err, r.opts.Clock.Now()) },
	}
	if !r.opts.Sender.Enqueue(cb) {
		// Not an attempt of the receiver: tried again at the next poll, without backoff.
		r.finish(ctx, m, store.OutboxOutcome{State: store.OutboxPending, NextAttemptAt: now.Add(r.opts.Poll),
			Error: "the callback queue is full (the notifier's, this namespace's share of it or its receiver's)"}, resultDeferred)
		return false
	}
	return true
}

// record turns an attempt's outcome into the message's next state: delivered, given up
// (rejected, or failing past the window) or due again after the backoff.
func (r *Relay) record(ctx context.Context, m store.OutboxMessage, err error, now time.Time) {
	out := store.OutboxOutcome{State: store.OutboxDelivered}
	result := resultSuccess
	switch {
	case err == nil:
	case errors.Is(err, ErrRejected):
		out, result = store.OutboxOutcome{State: store.OutboxFailed, Error: err.Error()}, resultRejected
	case now.Sub(m.CreatedAt) >= r.opts.Window:
		out = store.OutboxOutcome{State: store.OutboxFailed, Error: fmt.Sprintf("%v after %s of retries: %v", ErrGaveUp, r.opts.Window, err)}
		result = resultFailed
	default:
		out = store.OutboxOutcome{State: store.OutboxPending, NextAttemptAt: now.Add(r.Backoff(now.Sub(m.CreatedAt))), Error: err.Error()}
		result = resultRetry
	}
	r.finish(ctx, m, out, result)
	if out.State == store.OutboxFailed {
		r.opts.Logger.Error(err, "Webhook message given up", "id", m.ID, "bot", types.NamespacedName{Namespace: m.Namespace, Name: m.Name})
	}
}

// finish records the outcome of m's claimed attempt, fenced by its attempt number, and wakes
// its bot.
func (r *Relay) finish(ctx context.Context, m store.OutboxMessage, out store.OutboxOutcome, result string) {
	out.Attempt = m.Attempts
	r.metrics.deliveries.WithLabelValues(result).Inc()
	if ferr := r.opts.Outbox.FinishAttempt(ctx, m.ID, out); ferr != nil {
		// The lease ends and the message is claimed again: at least once.
		r.opts.Logger.Error(ferr, "Recording a webhook attempt", "id", m.ID)
		return
	}
	if r.opts.OnOutcome != nil {
		r.opts.OnOutcome(m.Namespace, m.Name)
	}
}

// Backoff is the wait after a failed attempt of a message that has existed for age: as long
// again, at least BackoffBase and at most BackoffCap, so attempts come at 0, 30 s, 1 min,
// 2 min, 4 min… then hourly. By age, not by a count of attempts: claims that sent nothing (the
// notifier's queue full, a claim dropped as it ran out) do not stretch the wait. No jitter:
// the retries of many messages already spread with their creation times, and the cap keeps a
// dead receiver to one attempt per message an hour.
func (r *Relay) Backoff(age time.Duration) time.Duration {
	return min(max(age, r.opts.BackoffBase), r.opts.BackoffCap)
}

type relayMetrics struct {
	deliveries *prometheus.CounterVec
	attempts   prometheus.Counter
	pending    prometheus.Gauge
	oldestDue  prometheus.Gauge
}

func newRelayMetrics(reg prometheus.Registerer) *relayMetrics {
	m := &relayMetrics{
		deliveries: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botpool_webhook_attempts_by_result_total",
			Help: "Webhook attempts by outcome: success, retry (failed, tried again), rejected, failed (given up), expired (not sent: the claim would have ended first; claimed and sent again) and deferred (the notifier's queue was full; tried at the next poll).",
		}, []string{"result"})),
		attempts: promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "botpool_webhook_attempts_total",
			Help: "Webhook requests made (counted as each request leaves the notifier).",
		})),
		pending: promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "botpool_webhook_outbox_pending",
			Help: "Webhook messages in the outbox neither delivered nor given up.",
		})),
		oldestDue: promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "botpool_webhook_outbox_oldest_due_seconds",
			Help: "How long the longest-waiting webhook message the relay could send now (its bot's first pending one, due, not being sent) has been due; 0 when none is.",
		})),
	}
	for _, r := range []string{resultSuccess, resultRetry, resultRejected, resultFailed, resultExpired, resultDeferred} {
		m.deliveries.WithLabelValues(r)
	}
	return m
}
