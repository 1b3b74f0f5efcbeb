package botapi

import (
	"container/list"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/internal/promreg"
)

// Long-poll binding delivery: GET /v1/slots/{uuid}/config?wait=30s parks the request of a free
// slot's container until a bot is bound to the slot, and answers at once then, or 404 at the
// deadline. What wakes it is the binding itself, seen by this replica's informer on
// BotPoolSlots (WatchBindings): every replica serves waits, each woken by its own cache.
const (
	// MaxConfigWait is the longest wait a config request may ask for; a longer one is refused
	// with 400. A standby container that waits asks again at least this often, so its slot's
	// latest ask (store.SlotAsk) is never older than that while it waits.
	MaxConfigWait = 60 * time.Second
	// DefaultMaxWaiters bounds the config requests waiting at once on one replica. The places
	// are shared fairly among the namespaces that wait (see waiters.add).
	DefaultMaxWaiters = 4096
	// DefaultMaxWaitersPerNamespace bounds those of one namespace's slots, full replica or not.
	DefaultMaxWaitersPerNamespace = 1024
	// waitGrace bounds a wait in real time beyond its deadline, whatever the injected clock
	// says: a fake clock nobody steps must not park a request (and its goroutine) for ever.
	waitGrace = 5 * time.Second
	// writeTimeout is the HTTP server's: long enough for the longest wait and its answer.
	writeTimeout = MaxConfigWait + waitGrace + 15*time.Second
)

// parseWait reads the wait query parameter: absent (or empty) is no wait.
func parseWait(q url.Values) (time.Duration, error) {
	raw := q.Get("wait")
	if raw == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(raw)
	switch {
	case err != nil:
		return 0, errorf(http.StatusBadRequest, fmt.Sprintf("wait %q is not a duration: send wait=30s", raw))
	case d < 0 || d > MaxConfigWait:
		return 0, errorf(http.StatusBadRequest, fmt.Sprintf("wait %s is out of range: at most %s", raw, MaxConfigWait))
	}
	return d, nil
}

// Informers is where WatchBindings finds the informer on BotPoolSlots (a cache.Cache).
type Informers interface {
	GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error)
}

// WatchBindings wakes the config requests waiting for a slot whenever the slot changes in the
// informer (its binding written, its token replaced, the slot deleted); each then looks at the
// slot again in the cache, which the informer updated before it called us. The handler goes
// away when ctx ends. Start calls it with Config.Informers; a server served through Handler
// alone calls it itself, or its waits end at their deadlines only.
func (s *Server) WatchBindings(ctx context.Context, informers Informers) error {
	inf, err := informers.GetInformer(ctx, &v1.BotPoolSlot{})
	if err != nil {
		return fmt.Errorf("watching slots for the bot API's waits: %w", err)
	}
	wake := func(obj any) {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if m, err := meta.Accessor(obj); err == nil {
			s.waiters.wake(m.GetUID())
		}
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    wake,
		UpdateFunc: func(_, obj any) { wake(obj) },
		DeleteFunc: wake,
	})
	if err != nil {
		return fmt.Errorf("watching slots for the bot API's waits: %w", err)
	}
	go func() {
		<-ctx.Done()
		_ = inf.RemoveEventHandler(reg)
	}()
	return nil
}

// waiters are the config requests waiting on this replica, at most one per slot: a container
// holds one wait at a time, so a second request of the same slot takes the place of the first
// (which is answered 409): a connection that died without the server noticing never holds a
// fresh container back, and one slot's token cannot park more than one request per replica.
// At most perNamespace of one namespace's slots wait, and at most max in all; the places are
// shared fairly between namespaces (see add), so no tenant can keep another's standby
// containers out. A request refused is answered 503 with Retry-After.
type waiters struct {
	max          int
	perNamespace int
	gauge        prometheus.Gauge
	results      *prometheus.CounterVec

	mu          sync.Mutex
	bySlot      map[types.UID]*waiter
	byNamespace map[string]*list.List // the waiters of each namespace's slots, oldest first
}

type waiter struct {
	namespace string
	slot      types.UID
	elem      *list.Element // in byNamespace[namespace]
	wake      chan struct{} // the slot changed: look again
	replaced  chan struct{} // a newer request of the slot took this one's place
	evicted   chan struct{} // another namespace's request took this one's place (see add)
}

func newWaiters(max, perNamespace int, reg prometheus.Registerer) *waiters {
	w := &waiters{
		max:          max,
		perNamespace: perNamespace,
		bySlot:       map[types.UID]*waiter{},
		byNamespace:  map[string]*list.List{},
		gauge: promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "botpool_botapi_config_waiters",
			Help: "Config requests waiting for a binding on this replica.",
		})),
		results: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "botpool_botapi_config_waits_total",
			Help: "Ended config waits by result: bound (a binding woke it), timeout (404 at the deadline), replaced (a newer request of the slot), " +
				"evicted (404 early: a namespace under its fair share took its place), gone (410: the slot or its token went, or the slot stops its container), cancelled (the client left), " +
				"refused (too many waiting).",
		}, []string{"result"})),
	}
	return w
}

// add registers a wait for slot (of namespace), taking the place of the slot's earlier one,
// which therefore never counts twice; when it refuses, it answers why.
//
// Sharing a full replica. Past max waits in all, a new wait of namespace N takes the place of
// the newest wait of the namespace V that holds the most, when V holds at least two more than
// N (so V still holds at least as many afterwards); otherwise it is refused. The wait evicted
// ends as one that ran out (404: ask again), so its container simply asks again; asked again, it
// is refused for as long as its namespace holds more than the others, and takes a place when one
// frees up or the others stop asking. Each eviction makes the counts strictly more even (the sum
// of their squares drops), so evictions cannot go round in circles. The guarantee: a namespace
// that keeps asking holds at least its fair share, max / (the namespaces waiting, itself
// counted), rounded down, or all it asks for if that is less (and never more than
// perNamespace): were it below that share with every other namespace within one of its count,
// the replica could not be full. So a namespace's first wait always gets in while fewer than max
// namespaces wait. The newest wait is the one evicted because it has waited least.
func (ws *waiters) add(namespace string, slot types.UID) (*waiter, error) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if old, ok := ws.bySlot[slot]; ok {
		close(old.replaced)
		ws.remove(old)
	} else if err := ws.admit(namespace); err != nil {
		ws.results.WithLabelValues("refused").Inc()
		return nil, err
	}
	w := &waiter{namespace: namespace, slot: slot, wake: make(chan struct{}, 1), replaced: make(chan struct{}), evicted: make(chan struct{})}
	ws.bySlot[slot] = w
	l := ws.byNamespace[namespace]
	if l == nil {
		l = list.New()
		ws.byNamespace[namespace] = l
	}
	w.elem = l.PushBack(w)
	ws.gauge.Set(float64(len(ws.bySlot)))
	return w, nil
}

// admit makes room for one more wait of namespace, evicting another namespace's when the
// replica is full and that is fair (see add), or says why it refuses. ws.mu is held.
func (ws *waiters) admit(namespace string) error {
	retry := time.Second
	mine := ws.count(namespace)
	if mine >= ws.perNamespace {
		return &apiError{code: http.StatusServiceUnavailable, retryAfter: retry,
			msg: fmt.Sprintf("too many requests of namespace %s wait for a bot on this replica (at most %d a namespace); ask again", namespace, ws.perNamespace)}
	}
	if len(ws.bySlot) < ws.max {
		return nil
	}
	most, biggest := "", 0
	for ns, l := range ws.byNamespace {
		// Ties go to the first name, so that the choice does not depend on the map's order.
		if n := l.Len(); n > biggest || (n == biggest && ns < most) {
			most, biggest = ns, n
		}
	}
	if biggest < mine+2 {
		return &apiError{code: http.StatusServiceUnavailable, retryAfter: retry,
			msg: fmt.Sprintf("too many requests wait for a bot on this replica (at most %d, shared between namespaces; namespace %s holds %d, no other holds two more); ask again",
				ws.max, namespace, mine)}
	}
	victim := ws.byNamespace[most].Back().Value.(*waiter)
	close(victim.evicted)
	ws.remove(victim)
	return nil
}

// count is how many waits of namespace's slots there are. ws.mu is held.
func (ws *waiters) count(namespace string) int {
	if l := ws.byNamespace[namespace]; l != nil {
		return l.Len()
	}
	return 0
}

// remove forgets the wait w. ws.mu is held.
func (ws *waiters) remove(w *waiter) {
	delete(ws.bySlot, w.slot)
	if l := ws.byNamespace[w.namespace]; l != nil {
		l.Remove(w.elem)
		if l.Len() == 0 {
			delete(ws.byNamespace, w.namespace)
		}
	}
}

// done removes w, unless a newer wait of the slot already took its place (or another
// namespace's did), and counts how the wait ended.
func (ws *waiters) done(w *waiter, result string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.bySlot[w.slot] == w {
		ws.remove(w)
	}
	ws.gauge.Set(float64(len(ws.bySlot)))
	ws.results.WithLabelValues(result).Inc()
}

func (ws *waiters) wake(slot types.UID) {
	ws.mu.Lock()
	w := ws.bySlot[slot]
	ws.mu.Unlock()
	if w == nil {
		return
	}
	select {
	case w.wake <- struct{}{}:
	default: // already woken: it will look once more
	}
}

// awaitBinding parks a free slot's config request until the slot is bound, its token no longer
// names it, the slot is to stop its container (leavingSlot), or the wait is over; it returns
// the slot as the cache has it then. A client that hangs up meanwhile is recorded as gone
// (recordLeft): its container died, most likely.
func (s *Server) awaitBinding(r *http.Request, slot *v1.BotPoolSlot, wait time.Duration) (*v1.BotPoolSlot, error) {
	since := s.cfg.Clock.Now()
	w, err := s.waiters.add(slot.Namespace, slot.UID)
	if err != nil {
		return nil, err
	}
	result := "cancelled"
	defer func() { s.waiters.done(w, result) }()

	ctx, cancel := context.WithTimeout(r.Context(), wait+waitGrace)
	defer cancel()
	deadline, stop := s.timer(wait)
	defer stop()
	hash := slot.Status.TokenSHA256
	for {
		// Looked at after registering, and again after each wake: a binding written between the
		// first read and the registration is not missed.
		cur, err := s.slotByHash(ctx, hash)
		if err != nil || cur.UID != slot.UID {
			result = "gone"
			return nil, errorf(http.StatusGone, "this slot's token no longer names a slot (the slot was deleted, or its container replaced): exit")
		}
		if err := leavingSlot(cur); err != nil {
			result = "gone"
			return nil, err
		}
		if cur.Spec.BotRef != nil {
			result = "bound"
			return cur, nil
		}
		select {
		case <-w.wake:
		case <-w.replaced:
			result = "replaced"
			return nil, errorf(http.StatusConflict, "a newer config request of this slot's container waits in this one's place")
		case <-w.evicted:
			// Answered as a wait that ran out (404): the container asks again, as it always
			// does, and is not told to back off or exit for another namespace's sake.
			result = "evicted"
			return cur, nil
		case <-deadline:
			result = "timeout"
			return cur, nil
		case <-ctx.Done():
			if r.Context().Err() != nil {
				if clientLeft(r) {
					s.recordLeft(context.WithoutCancel(r.Context()), slot, since)
				}
				return nil, &apiError{code: http.StatusServiceUnavailable, msg: "the request ended before a bot was bound"}
			}
			result = "timeout"
			return cur, nil
		}
	}
}

// baseContextKey holds, in the context of every request Start serves, the server's own
// context: the one whose end shuts the server down.
type baseContextKey struct{}

// clientLeft reports whether r's context ended because its client went away (its connection
// closed, or a proxy's did), not because the server shuts down: Start's context ends every
// request's with it, and a replica stopping says nothing about the containers that waited on
// it (they ask again, on another one).
func clientLeft(r *http.Request) bool {
	if r.Context().Err() == nil {
		return false
	}
	base, _ := r.Context().Value(baseContextKey{}).(context.Context)
	return base == nil || base.Err() == nil
}

// timer fires after d on the injected clock when it has timers (a fake clock in tests), else in
// real time.
func (s *Server) timer(d time.Duration) (<-chan time.Time, func()) {
	if c, ok := s.cfg.Clock.(clock.Clock); ok {
		t := c.NewTimer(d)
		return t.C(), func() { t.Stop() }
	}
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}
