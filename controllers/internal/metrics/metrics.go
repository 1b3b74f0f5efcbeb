package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/internal/botfailures"
	"botpool.dev/botpool/internal/promreg"
)

// Metrics are the controllers' Prometheus series.
type Metrics struct {
	poolSlots       *prometheus.GaugeVec
	poolQueued      *prometheus.GaugeVec
	slotTransitions *prometheus.CounterVec
	recoveries      *prometheus.CounterVec
	toBusy          prometheus.Histogram
	acquire         prometheus.Histogram
	waited          prometheus.Histogram
	poolStandby     *prometheus.GaugeVec
	poolMinIdle     *prometheus.GaugeVec
	poolReserved    *prometheus.GaugeVec
	poolTenants     *prometheus.GaugeVec
	reservedLate    prometheus.Histogram
	standbyLost     prometheus.Counter
	// PoolStalled and botsFailed feed the chart's alerts (docs/runbooks.md).
	PoolStalled *prometheus.GaugeVec
	BotsFailed  *prometheus.CounterVec
	// Deferred counts requests a controller parked because their namespace held all its
	// places (tenant_share.go).
	Deferred *prometheus.CounterVec
}

// New creates the series and registers them with reg (nil: none), reusing series
// already registered under the same names.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		poolSlots: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "botpool_pool_slots",
			Help: "Slots of a pool by phase.",
		}, []string{"namespace", "pool", "phase"}),
		poolQueued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "botpool_pool_queued_bots",
			Help: "Bots waiting for a slot of a pool.",
		}, []string{"namespace", "pool"}),
	}
	m.slotTransitions = promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "botpool_slot_transitions_total",
		Help: "Slot phase transitions.",
	}, []string{"from", "to", "reason"}))
	m.Deferred = promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "botpool_reconciles_deferred_total",
		Help: "Requests a controller parked because their namespace held all its places (its share and the shared pool); each runs when a place is handed on to it.",
	}, []string{"controller"}))
	m.recoveries = promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "botpool_slot_recoveries_total",
		Help: "Slots sent to Error and recovered, by reason.",
	}, []string{"reason"}))
	m.toBusy = promreg.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "botpool_slot_time_to_busy_seconds",
		Help:    "Time from a slot's deploy request to its container running.",
		Buckets: []float64{1, 2, 5, 10, 20, 30, 45, 60, 90, 120, 300, 600, 900},
	}))
	m.acquire = promreg.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "botpool_bot_acquire_seconds",
		Help:    "Time from a Bot's creation to its binding to a slot.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 20),
	}))
	m.waited = promreg.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "botpool_bot_queue_wait_seconds",
		Help:    "Time a Bot waited in its pool's queue before it was bound.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 18),
	}))
	m.poolStandby = promreg.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "botpool_pool_standby_slots",
		Help: "Free slots of a pool with standby Running, by the state of their container (ready: it asks for work; starting).",
	}, []string{"namespace", "pool", "state"}))
	m.poolMinIdle = promreg.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "botpool_pool_min_idle",
		Help: "The minIdle in force of a pool: spec.minIdle, or more while a warmSchedule window is open.",
	}, []string{"namespace", "pool"}))
	m.poolReserved = promreg.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "botpool_pool_reservations",
		Help: "Granted reservations of a pool not bound yet (pending), and those whose slot it keeps free now (warming).",
	}, []string{"namespace", "pool", "state"}))
	m.reservedLate = promreg.Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "botpool_bot_reservation_bind_delay_seconds",
		Help:    "Time from a reserved Bot's startTime to its binding: a promise kept is within a second.",
		Buckets: []float64{0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600},
	}))
	m.standbyLost = promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "botpool_standby_lost_total",
		Help: "Standby containers that stopped asking for work (crashed, restarting, unreachable) and were replaced.",
	}))
	m.PoolStalled = promreg.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "botpool_pool_stalled",
		Help: "1 while a pool's Stalled condition is True (progress needs a human: its reason is on the condition), else 0.",
	}, []string{"namespace", "pool"}))
	m.poolTenants = promreg.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "botpool_tenant_bots",
		Help: "Bots of a tenant of a pool with a tenancy, bound to its slots (bound) or waiting (waiting): the tenants of the pool's status.tenants (at most 32).",
	}, []string{"namespace", "pool", "tenant", "state"}))
	m.BotsFailed = botfailures.Register(reg)
	m.poolSlots = promreg.Register(reg, m.poolSlots)
	m.poolQueued = promreg.Register(reg, m.poolQueued)
	return m
}

func (m *Metrics) ObservePool(p *v1.BotPool) {
	var c v1.SlotCounts
	if p.Status.Slots != nil {
		c = *p.Status.Slots
	}
	for phase, n := range map[v1.SlotPhase]int32{
		v1.SlotCreating: c.Creating, v1.SlotIdle: c.Idle, v1.SlotDeploying: c.Deploying,
		v1.SlotBusy: c.Busy, v1.SlotReleasing: c.Releasing, v1.SlotError: c.Error,
	} {
		m.poolSlots.WithLabelValues(p.Namespace, p.Name, string(phase)).Set(float64(n))
	}
	m.poolQueued.WithLabelValues(p.Namespace, p.Name).Set(float64(p.Status.Queued))
	m.poolStandby.WithLabelValues(p.Namespace, p.Name, "ready").Set(float64(c.Ready))
	m.poolStandby.WithLabelValues(p.Namespace, p.Name, "starting").Set(float64(c.Starting))
	m.poolMinIdle.WithLabelValues(p.Namespace, p.Name).Set(float64(p.Status.MinIdle))
	var r v1.ReservationStatus
	if p.Status.Reservations != nil {
		r = *p.Status.Reservations
	}
	m.poolReserved.WithLabelValues(p.Namespace, p.Name, "pending").Set(float64(r.Pending))
	m.poolReserved.WithLabelValues(p.Namespace, p.Name, "warming").Set(float64(r.Warming))
	stalled := 0.0
	if meta.IsStatusConditionTrue(p.Status.Conditions, v1.ConditionStalled) {
		stalled = 1
	}
	m.PoolStalled.WithLabelValues(p.Namespace, p.Name).Set(stalled)
	// The tenants of the status only, so a pool's series stay bounded; one that left the list
	// is gone.
	m.poolTenants.DeletePartialMatch(prometheus.Labels{"namespace": p.Namespace, "pool": p.Name})
	for _, t := range p.Status.Tenants {
		m.poolTenants.WithLabelValues(p.Namespace, p.Name, t.Name, "bound").Set(float64(t.Bound))
		m.poolTenants.WithLabelValues(p.Namespace, p.Name, t.Name, "waiting").Set(float64(t.Waiting))
	}
}

func (m *Metrics) ForgetPool(namespace, name string) {
	labels := prometheus.Labels{"namespace": namespace, "pool": name}
	m.poolSlots.DeletePartialMatch(labels)
	m.poolQueued.DeletePartialMatch(labels)
	m.poolStandby.DeletePartialMatch(labels)
	m.poolMinIdle.DeletePartialMatch(labels)
	m.poolReserved.DeletePartialMatch(labels)
	m.PoolStalled.DeletePartialMatch(labels)
	m.poolTenants.DeletePartialMatch(labels)
}

func (m *Metrics) SlotTransition(from, to, reason string) {
	m.slotTransitions.WithLabelValues(from, to, reason).Inc()
}

func (m *Metrics) StandbyLostOne() { m.standbyLost.Inc() }

func (m *Metrics) DeferredOne(controller string) {
	if m != nil {
		m.Deferred.WithLabelValues(controller).Inc()
	}
}

func (m *Metrics) Recovery(reason string) { m.recoveries.WithLabelValues(reason).Inc() }

func (m *Metrics) TimeToBusy(d time.Duration) { m.toBusy.Observe(d.Seconds()) }

func (m *Metrics) Acquired(d time.Duration) { m.acquire.Observe(d.Seconds()) }

func (m *Metrics) QueueWait(d time.Duration) { m.waited.Observe(d.Seconds()) }

func (m *Metrics) ReservationBound(d time.Duration) { m.reservedLate.Observe(max(d, 0).Seconds()) }
func (m *Metrics) BotFailed(reason v1.BotReason)    { m.BotsFailed.WithLabelValues(string(reason)).Inc() }
