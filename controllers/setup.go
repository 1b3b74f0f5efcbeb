package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/callback"
	"botpool.dev/botpool/controllers/bot"
	"botpool.dev/botpool/controllers/dispatch"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/deploygate"
	"botpool.dev/botpool/controllers/internal/index"
	"botpool.dev/botpool/controllers/internal/metrics"
	"botpool.dev/botpool/controllers/internal/tenancy"
	poolctrl "botpool.dev/botpool/controllers/pool"
	slotctrl "botpool.dev/botpool/controllers/slot"
	"botpool.dev/botpool/internal/cachelag"
	"botpool.dev/botpool/store"
	"botpool.dev/botpool/store/memory"
)

// Store is what the controllers keep outside Kubernetes: heartbeats, the projection and the
// audit log of slot transitions.
type Store interface {
	slotctrl.Store
	bot.Liveness
}

// The controllers' Coolify access, as their callers name it (main.go, the model check, the
// bot API's tests): the narrow API the controllers call, what hands each pool its client, and
// the connector that reads a pool's credentials from its Secret (package coolifyview).
type (
	CoolifyAPI      = coolifyview.CoolifyAPI
	Connector       = coolifyview.Connector
	SecretConnector = coolifyview.SecretConnector
)

// The slot phases' rule, as the model check names it when it checks the audit log: whether a
// slot may move from one phase to another, and the error a refused move fails its pass with
// (package slot).
var ErrIllegalSlotTransition = slotctrl.ErrIllegalTransition

// SlotTransitionAllowed reports whether a slot may move from one phase to the other.
func SlotTransitionAllowed(from, to v1.SlotPhase) bool { return slotctrl.TransitionAllowed(from, to) }

// NewMetrics registers the controllers' Prometheus series on reg (nil: registered nowhere),
// for Deps.Metrics.
func NewMetrics(reg prometheus.Registerer) *metrics.Metrics { return metrics.New(reg) }

// Deps are the systems the controllers talk to. The manager builds the real ones; the envtest
// suites and the model check hand in their fakes, so all three wire the controllers through
// Setup and cannot drift apart.
type Deps struct {
	// Client, APIReader and Indexer default to the manager's. The model check hands in its own
	// cache and API server, as it drives the reconcilers itself on a manager it never starts.
	Client    client.Client
	APIReader client.Reader
	Indexer   client.FieldIndexer

	// Connector hands out each pool's Coolify client.
	Connector Connector
	Store     Store
	Clock     clock.WithTicker
	// Recorder defaults to the manager's recorder named "botpool".
	Recorder events.EventRecorder
	// Metrics defaults to series registered nowhere.
	Metrics *metrics.Metrics
}

// Options are the controllers' settings.
type Options struct {
	// BotAPIURL is what slots' containers get as BOTPOOL_API_URL.
	BotAPIURL string
	// ClusterID is this cluster's identity, part of every pool tag (see ClusterPoolTag).
	ClusterID string
	// ScheduleLead is how long before its startTime a scheduled bot joins the queue.
	ScheduleLead time.Duration
	// Callbacks configures the notifier of finished bots' callbackURLs, run by the manager;
	// nil delivers no callbacks. Setup fills in its Clock and OnResult.
	Callbacks *callback.Options

	// OrphanCheck, GateRetry and AppCheck override DefaultAppCheck and DefaultGateRetry
	// (tests shorten them); Jitter replaces math/rand for the poll jitter (the model check
	// makes it follow its seed).
	OrphanCheck, GateRetry, AppCheck time.Duration
	Jitter                           func() float64
}

// Controllers are the reconcilers Setup registered, for callers that drive them by hand (the
// model check) or share their state (the bot API).
type Controllers struct {
	Pools      *poolctrl.Reconciler
	Slots      *slotctrl.Reconciler
	Bots       *bot.Reconciler
	Dispatcher *dispatch.Dispatcher
	// Writes remembers the versions the controllers' writes replaced (every write goes through
	// Client, which records them); the bot API, the other writer of a Bot's status, writes
	// through Client too when it runs in the same process (main.go's run says what changes
	// when it does not).
	Writes *cachelag.Tracker
	// Client is the client every controller writes through: deps.Client, recording in Writes.
	Client client.Client
}

// Setup registers the controllers on mgr, with what they share: one bulk reader of Coolify
// applications, one deploy gate, one record of Bot writes, the cache indexes and the callback
// notifier. The manager (main.go), the envtest suites and the model check all call it.
func Setup(ctx context.Context, mgr ctrl.Manager, deps Deps, o Options) (*Controllers, error) {
	if deps.Connector == nil || deps.Store == nil || deps.Clock == nil {
		return nil, errors.New("controllers.Setup: Connector, Store and Clock are required")
	}
	if deps.Client == nil {
		deps.Client = mgr.GetClient()
	}
	if deps.APIReader == nil {
		deps.APIReader = mgr.GetAPIReader()
	}
	if deps.Indexer == nil {
		deps.Indexer = mgr.GetFieldIndexer()
	}
	if deps.Recorder == nil {
		deps.Recorder = mgr.GetEventRecorder("botpool")
	}
	if deps.Metrics == nil {
		deps.Metrics = metrics.New(nil)
	}
	if err := index.Setup(ctx, deps.Indexer); err != nil {
		return nil, fmt.Errorf("indexing for the controllers: %w", err)
	}

	clk := deps.Clock
	bulk := &coolifyview.BulkReader{Clock: clk}
	writes := &cachelag.Tracker{}
	wc := cachelag.NewClient(deps.Client, writes) // no write can forget to record itself
	reservations := &dispatch.Ledger{}
	gate := &deploygate.Gate{Clock: clk}
	c := &Controllers{Writes: writes, Client: wc,
		Pools: &poolctrl.Reconciler{
			Client: wc, APIReader: deps.APIReader, Connector: deps.Connector, Coolify: bulk, Gate: gate,
			Clock: clk, Recorder: deps.Recorder, Metrics: deps.Metrics, ClusterID: o.ClusterID,
			OrphanCheck: o.OrphanCheck, BotAPIURL: o.BotAPIURL,
		},
		Slots: &slotctrl.Reconciler{
			Client: wc, APIReader: deps.APIReader, Connector: deps.Connector, Store: deps.Store, Writes: writes,
			Clock: clk, Recorder: deps.Recorder, Metrics: deps.Metrics, Coolify: bulk, Gate: gate,
			BotAPIURL: o.BotAPIURL, ClusterID: o.ClusterID, Jitter: o.Jitter,
			GateRetry: o.GateRetry, AppCheck: o.AppCheck,
		},
		Bots: &bot.Reconciler{
			Client: wc, Clock: clk, Recorder: deps.Recorder, Store: deps.Store, Metrics: deps.Metrics,
			ScheduleLead: o.ScheduleLead, Writes: writes, Reservations: reservations, Secrets: deps.APIReader,
			Admission: tenancy.Admission{Reader: wc},
		},
		Dispatcher: &dispatch.Dispatcher{Client: wc, Clock: clk, Metrics: deps.Metrics, Writes: writes, Reservations: reservations,
			Admission: tenancy.Admission{Reader: wc}},
	}
	// The gate wakes the slots it refused when a deployment ends; the slot controller watches
	// the channel. A full channel skips wake-ups (the gate retry covers them).
	wake := make(chan event.GenericEvent, 1024)
	c.Slots.Gate.Wake, c.Slots.GateWake = wake, wake
	if o.Callbacks != nil {
		// The notifier reports each outcome to the Bot controller, the one writer of
		// status.callback, through this channel; see docs/callbacks.md.
		done := make(chan event.GenericEvent, 1024)
		opts := *o.Callbacks
		opts.Clock = clk
		opts.OnResult = WakeOnCallback(done)
		notifier := callback.New(opts)
		if err := mgr.Add(notifier); err != nil {
			return nil, fmt.Errorf("adding the callback notifier: %w", err)
		}
		c.Bots.Callbacks, c.Bots.CallbackDone = notifier, done

		// Webhook messages go through the store's outbox when it keeps one (durable with
		// Postgres), else through an in-memory outbox lost on restart; the relay sends them
		// through the same notifier and wakes the bot, the one writer of status.webhook.
		outbox, ok := deps.Store.(store.Outbox)
		if !ok {
			outbox = memory.NewOutbox(memory.DefaultHistoryLimit)
		}
		relay := callback.NewRelay(callback.RelayOptions{
			Outbox: outbox, Sender: notifier, Secrets: bot.WebhookSecrets{Reader: deps.APIReader}, Clock: clk,
			// A claim is sent while a quarter of its lease is left: that quarter must outlast a
			// request, or a slow answer would be sent again under the next claim.
			Lease:  max(callback.DefaultRelayLease, 5*notifier.RequestTimeout()),
			Logger: mgr.GetLogger().WithName("webhooks"), Registerer: opts.Registerer,
			OnOutcome: func(namespace, name string) {
				select {
				case done <- event.GenericEvent{Object: &v1.Bot{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}}:
				default: // the bot's webhookRecheck records it
				}
			},
		})
		if err := mgr.Add(relay); err != nil {
			return nil, fmt.Errorf("adding the webhook relay: %w", err)
		}
		c.Bots.Webhooks = outbox
	}

	if err := setupPoolController(mgr, c.Pools); err != nil {
		return nil, fmt.Errorf("setting up the BotPool controller: %w", err)
	}
	if err := setupSlotController(mgr, c.Slots); err != nil {
		return nil, fmt.Errorf("setting up the BotPoolSlot controller: %w", err)
	}
	if err := setupBotController(mgr, c.Bots); err != nil {
		return nil, fmt.Errorf("setting up the Bot controller: %w", err)
	}
	if err := setupDispatcher(mgr, c.Dispatcher); err != nil {
		return nil, fmt.Errorf("setting up the dispatcher: %w", err)
	}
	return c, nil
}
