package botapi

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"k8s.io/utils/clock"

	"botpool.dev/botpool/internal/promreg"
	"botpool.dev/botpool/store"
)

// EventQuota bounds the events one bot and one namespace may store: without it, one slot's
// container could push tens of MiB/s into the database that every tenant's liveness depends
// on. Rates are per second, with a burst of Window's worth (never less than one request of the
// largest size the API takes); a zero rate is unlimited.
type EventQuota struct {
	BotEvents       float64 // events per second per bot
	BotBytes        float64 // bytes of event data per second per bot
	NamespaceEvents float64 // events per second per namespace
	NamespaceBytes  float64 // bytes of event data per second per namespace
	Window          time.Duration
}

// Validate checks the quota's settings.
func (q EventQuota) Validate() error {
	for name, v := range map[string]float64{"bot events": q.BotEvents, "bot bytes": q.BotBytes,
		"namespace events": q.NamespaceEvents, "namespace bytes": q.NamespaceBytes} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("event quota: %s per second must be a finite number, 0 or more (0: unlimited), got %v", name, v)
		}
	}
	if q.Window <= 0 {
		return fmt.Errorf("event quota: the window must be positive, got %s", q.Window)
	}
	return nil
}

// QuotaError is a batch of events refused because a quota is spent; RetryAfter is when it
// would fit.
type QuotaError struct {
	Scope      string // "bot" or "namespace"
	RetryAfter time.Duration
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("event quota of this %s spent: send fewer or smaller events, and retry after %s", e.Scope, e.RetryAfter.Round(time.Second))
}

// quotaLiveness applies an EventQuota before the store.
type quotaLiveness struct {
	Liveness
	quota     EventQuota
	clock     clock.PassiveClock
	throttled *prometheus.CounterVec

	mu         sync.Mutex
	bots       map[string]*buckets
	namespaces map[string]*buckets
}

// buckets are one key's limiters: events and bytes.
type buckets struct{ events, bytes *rate.Limiter }

// pruneBucketsAbove is the number of keys past which idle ones are dropped.
const pruneBucketsAbove = 1024

// WithEventQuota wraps a Liveness so AppendBotEvents refuses, with a *QuotaError, what goes
// beyond q; heartbeats pass untouched. The handlers answer a QuotaError with 429 and
// Retry-After.
func WithEventQuota(next Liveness, q EventQuota, clk clock.PassiveClock, reg prometheus.Registerer) Liveness {
	if clk == nil {
		clk = clock.RealClock{}
	}
	throttled := promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "botpool_botapi_events_throttled_total",
		Help: "Event requests refused with 429 because a bot's or a namespace's event quota was spent, by scope.",
	}, []string{"scope"}))
	return &quotaLiveness{Liveness: next, quota: q, clock: clk, throttled: throttled,
		bots: map[string]*buckets{}, namespaces: map[string]*buckets{}}
}

func (q *quotaLiveness) newBuckets(events, bytes float64) *buckets {
	limiter := func(r float64, atLeast int) *rate.Limiter {
		if r == 0 {
			return rate.NewLimiter(rate.Inf, 0)
		}
		burst := max(int(r*q.quota.Window.Seconds()), atLeast)
		return rate.NewLimiter(rate.Limit(r), burst)
	}
	// One request of the largest size must always fit the burst, or it would never pass.
	return &buckets{events: limiter(events, maxEventsPerRequest), bytes: limiter(bytes, maxStatusBody+maxEventsBody)}
}

func (q *quotaLiveness) bucketsFor(m map[string]*buckets, key string, events, bytes float64, now time.Time) *buckets {
	b, ok := m[key]
	if !ok {
		if len(m) >= pruneBucketsAbove {
			for k, old := range m { // full buckets hold nothing a fresh one would not
				if old.events.TokensAt(now) >= float64(old.events.Burst()) && old.bytes.TokensAt(now) >= float64(old.bytes.Burst()) {
					delete(m, k)
				}
			}
		}
		b = q.newBuckets(events, bytes)
		m[key] = b
	}
	return b
}

// AppendBotEvents takes the batch from the bot's and the namespace's quotas, all or nothing,
// and gives it back when the store did not take the events (the bot sends them again).
func (q *quotaLiveness) AppendBotEvents(ctx context.Context, events []store.BotEvent) error {
	if len(events) == 0 {
		return q.Liveness.AppendBotEvents(ctx, events)
	}
	size := 0
	for _, e := range events {
		size += len(e.Type) + len(e.Data)
	}
	now := q.clock.Now()
	q.mu.Lock()
	bot := q.bucketsFor(q.bots, string(events[0].BotUID), q.quota.BotEvents, q.quota.BotBytes, now)
	ns := q.bucketsFor(q.namespaces, events[0].Namespace, q.quota.NamespaceEvents, q.quota.NamespaceBytes, now)
	type take struct {
		scope string
		r     *rate.Reservation
	}
	takes := []take{
		{"bot", bot.events.ReserveN(now, len(events))}, {"bot", bot.bytes.ReserveN(now, size)},
		{"namespace", ns.events.ReserveN(now, len(events))}, {"namespace", ns.bytes.ReserveN(now, size)},
	}
	var refused *QuotaError
	for _, t := range takes {
		if d := t.r.DelayFrom(now); d > 0 && (refused == nil || d > refused.RetryAfter) {
			refused = &QuotaError{Scope: t.scope, RetryAfter: d}
		}
	}
	if refused != nil {
		for _, t := range takes {
			t.r.CancelAt(now)
		}
		q.mu.Unlock()
		q.throttled.WithLabelValues(refused.Scope).Inc()
		return refused
	}
	q.mu.Unlock()

	err := q.Liveness.AppendBotEvents(ctx, events)
	if !store.Accepted(err) {
		q.mu.Lock()
		for _, t := range takes {
			t.r.CancelAt(q.clock.Now())
		}
		q.mu.Unlock()
	}
	return err
}
