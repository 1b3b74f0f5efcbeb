package callback

import (
	"net/url"
	"slices"
	"strings"
)

// Fairness between namespaces, then between receivers.
//
// Every active callback belongs to a receiver of a namespace (a tenant): the receiver is the
// URL's host and port within the callback's namespace, so a host that several namespaces use is
// one receiver per namespace and none of them waits behind another's backlog there. The bounds
// that protect one receiver (PerReceiver in flight, ReceiverCapacity held) apply per namespace.
//
// Workers: a free worker takes the namespace, among those with a callback that can go now, that
// has the fewest requests in flight (namespaces with as few take turns), then that namespace's
// receivers in turn. A namespace therefore holds more than an equal share of the workers only
// while no other namespace has a callback ready, and a namespace with one ready gets the next
// worker that frees up: within one request timeout, however many receivers another has.
//
// Queue: a namespace may hold at most QueueCapacity / (namespaces holding callbacks + 1), its own
// included (half the queue while it is alone, a third when two hold some…), so a namespace that
// holds none finds room however many receivers another floods.

// tenant is one namespace's callbacks; guarded by Notifier.mu.
type tenant struct {
	name      string
	receivers map[string]*receiverQueue // its receivers holding at least one active callback
	ready     ring[*receiverQueue]      // its receivers with ready callbacks, in turn
	inFlight  int
	held      int  // active callbacks: ready, waiting for a retry or in flight
	inOrder   bool // listed in Notifier.ready
}

// receiverQueue is one namespace's callbacks to one receiver; guarded by Notifier.mu.
type receiverQueue struct {
	key      string
	tenant   *tenant
	ready    []*item // due now, oldest first
	inFlight int
	held     int  // active callbacks: ready, waiting for a retry or in flight
	inOrder  bool // listed in tenant.ready
}

// ring is a round-robin list: its members take turns from next.
type ring[T any] struct {
	members []T
	next    int
}

// at is the index of the i-th member from the turn.
func (r *ring[T]) at(i int) int { return (r.next + i) % len(r.members) }

// served passes the turn on from members[idx], which was just served, and drops it when it has
// nothing more ready.
func (r *ring[T]) served(idx int, drop bool) {
	r.next = idx + 1
	if drop {
		r.members = slices.Delete(r.members, idx, idx+1)
		r.next = idx // the member after it moved into its place
	}
	if len(r.members) > 0 {
		r.next %= len(r.members)
	} else {
		r.next = 0
	}
}

// receiverKey names a callback's receiver within its namespace: the URL's host and port,
// lowercased. Callbacks with an unparsable URL share one key; they fail at once without a
// request.
func receiverKey(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Host)
}

// Values of the limit label of refusals_total: the bound a refused callback met.
const (
	limitReceiver  = "receiver"  // its receiver holds ReceiverCapacity
	limitNamespace = "namespace" // its namespace holds its share of QueueCapacity
	limitQueue     = "queue"     // the notifier holds QueueCapacity
)

// full is the bound a new callback of namespace t to receiver r would exceed, "" when there is
// room (t or r nil when it holds nothing yet). n.mu is held.
func (n *Notifier) full(t *tenant, r *receiverQueue) string {
	switch {
	case r != nil && r.held >= n.opts.ReceiverCapacity:
		return limitReceiver
	case t != nil && t.held >= n.namespaceShare():
		return limitNamespace
	case len(n.active) >= n.opts.QueueCapacity:
		return limitQueue
	}
	return ""
}

// namespaceShare is how many callbacks a namespace that holds some may hold: an equal share of
// QueueCapacity between the namespaces holding callbacks and one more, for a namespace that
// holds none yet. n.mu is held.
func (n *Notifier) namespaceShare() int {
	return max(1, n.opts.QueueCapacity/(len(n.tenants)+1))
}

// holder returns the receiver for key in namespace ns, made (with its tenant) when absent.
// n.mu is held.
func (n *Notifier) holder(ns, key string) *receiverQueue {
	t := n.tenants[ns]
	if t == nil {
		t = &tenant{name: ns, receivers: map[string]*receiverQueue{}}
		n.tenants[ns] = t
	}
	r := t.receivers[key]
	if r == nil {
		r = &receiverQueue{key: key, tenant: t}
		t.receivers[key] = r
	}
	return r
}

// makeReady puts it at the end of its receiver's ready queue and wakes a worker; n.mu is held.
func (n *Notifier) makeReady(it *item) {
	r := it.rcv
	t := r.tenant
	r.ready = append(r.ready, it)
	if !r.inOrder {
		r.inOrder = true
		t.ready.members = append(t.ready.members, r)
	}
	if !t.inOrder {
		t.inOrder = true
		n.ready.members = append(n.ready.members, t)
	}
	n.work.Signal()
}

// take hands out the next ready callback, nil when none can go (none is ready, or every receiver
// with one has PerReceiver requests in flight): from the namespace with the fewest requests in
// flight among those with a callback that can go, the first from the turn among equals; within
// it, from its receivers in turn. n.mu is held.
func (n *Notifier) take() *item {
	var best *tenant
	bestIdx, rcvIdx := -1, -1
	for i := range len(n.ready.members) {
		idx := n.ready.at(i)
		t := n.ready.members[idx]
		if best != nil && t.inFlight >= best.inFlight {
			continue // cannot come before the one found
		}
		if j := t.sendable(n.opts.PerReceiver); j >= 0 {
			best, bestIdx, rcvIdx = t, idx, j
			if t.inFlight == 0 {
				break // none has fewer
			}
		}
	}
	if best == nil {
		return nil
	}
	r := best.ready.members[rcvIdx]
	it := r.ready[0]
	r.ready[0] = nil
	r.ready = r.ready[1:]
	r.inFlight++
	best.inFlight++
	r.inOrder = len(r.ready) > 0
	best.ready.served(rcvIdx, !r.inOrder)
	best.inOrder = len(best.ready.members) > 0
	n.ready.served(bestIdx, !best.inOrder)
	return it
}

// sendable is the index in t.ready of the first receiver from the turn with fewer than
// perReceiver requests in flight, -1 when none has. A namespace has at most Workers requests in
// flight, so this looks at no more than Workers/perReceiver + 1 receivers.
func (t *tenant) sendable(perReceiver int) int {
	for i := range len(t.ready.members) {
		if idx := t.ready.at(i); t.ready.members[idx].inFlight < perReceiver {
			return idx
		}
	}
	return -1
}

// release ends a request of it's receiver; done says it left the notifier (delivered, failed
// for good, or abandoned) rather than waiting for a retry. n.mu is held.
func (n *Notifier) release(it *item, done bool) {
	r := it.rcv
	t := r.tenant
	r.inFlight--
	t.inFlight--
	if !done {
		return
	}
	delete(n.active, it.cb.Key)
	n.metrics.queueDepth.Set(float64(len(n.active)))
	if r.held--; r.held == 0 {
		delete(t.receivers, r.key)
	}
	if t.held--; t.held == 0 {
		delete(n.tenants, t.name)
	}
}
