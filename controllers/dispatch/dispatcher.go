package dispatch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/index"
	"botpool.dev/botpool/controllers/internal/metrics"
	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/controllers/internal/tenancy"
	"botpool.dev/botpool/internal/cachelag"
)

// bindWorkers is how many binding writes a wave sends at once.
const bindWorkers = 16

// Dispatcher binds queued bots to free slots, one wave per pool: the head of the queue
// (priority, then queue time) gets the least recently used free slots, many at once. Each
// binding writes the slot's spec.botRef under the slot's resourceVersion, so a conflict means
// someone else changed the slot first and the bot waits for the next wave; the API server's
// rule on botRef refuses to rebind a bound slot. Waves run per pool, never two at once for
// one pool, and free slots and new waiters each trigger one.
type Dispatcher struct {
	// Client records the dispatcher's writes (cachelag.NewClient), so the slot and Bot
	// controllers wait for the cache past a binding or a position it wrote. The dispatcher
	// never asks whether a bot it read is stale, and must not skip one that is: its own
	// position writes make the waiting bots' cached versions stale, and a wave that skipped
	// them would bind a bot behind them (invariant 4). A free slot it read is another matter
	// (see freeSlots). A binding is written under the slot's version and loses the conflict if
	// the slot moved on, and bound and taken keep it from offering its own bindings again.
	Client  client.Client
	Clock   clock.PassiveClock
	Metrics *metrics.Metrics
	// Writes is the record Client keeps of the versions this process's writes replaced. The
	// dispatcher asks it about slots only (see freeSlots), never about bots (above), and with
	// Replaced, which leaves the record to the slot controller.
	Writes *cachelag.Tracker

	// bound remembers the bots this dispatcher bound that the cache may not show yet, so a
	// fast second wave never binds one bot twice (invariant 1).
	mu    sync.Mutex
	bound map[types.UID]waveBinding
	// taken remembers the slots those bindings went to, with the version the cache showed
	// then: while the cache still shows that version, the slot is not offered again, or the
	// head of the queue would be paired with it, lose the conflict, and wait while a bot
	// behind it got a slot that was free (invariant 4).
	taken map[types.UID]takenSlot
	// Reservations is shared with the bot controller: a wave runs under its pool's lock.
	Reservations *Ledger
	// Admission says whether a pool still admits a waiting bot's namespace: a bot of a
	// namespace the pool no longer admits is never bound (the bot controller sends it back to
	// Pending, PoolNotAllowed).
	Admission tenancy.Admission
	// drain tracks, per pool, how fast its queue moves: the basis of estimatedWait.
	drain map[types.NamespacedName]*drainRate
	// positioned is when each pool's queue positions were last written.
	positioned map[types.NamespacedName]time.Time
}

type takenSlot struct {
	version string
	at      time.Time
}

// drainRate is an exponentially weighted average of the time per binding while a pool has a
// backlog, so an estimate follows the pool's real turnaround, not a constant.
type drainRate struct {
	lastWave   time.Time
	perBinding time.Duration
}

// observe records a wave that bound n bots while others kept waiting.
func (d *Dispatcher) observe(pool types.NamespacedName, n int, backlog bool) {
	now := d.Clock.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.drain == nil {
		d.drain = map[types.NamespacedName]*drainRate{}
	}
	r := d.drain[pool]
	if r == nil {
		r = &drainRate{}
		d.drain[pool] = r
	}
	if backlog && !r.lastWave.IsZero() && n > 0 {
		sample := now.Sub(r.lastWave) / time.Duration(n)
		if r.perBinding == 0 {
			r.perBinding = sample
		} else {
			r.perBinding = (4*r.perBinding + sample) / 5
		}
	}
	if n > 0 {
		r.lastWave = now
	}
	if !backlog {
		r.lastWave = time.Time{} // an idle queue says nothing about the next wait
	}
}

func (d *Dispatcher) perBinding(pool types.NamespacedName) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r := d.drain[pool]; r != nil {
		return r.perBinding
	}
	return 0
}

// Reconcile runs one binding wave for a pool.
func (d *Dispatcher) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	pool := &v1.BotPool{}
	if err := d.Client.Get(ctx, req.NamespacedName, pool); err != nil {
		if apierrors.IsNotFound(err) {
			d.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.DeletionTimestamp.IsZero() {
		// A deleted pool binds nothing more: its running bots are leaving (see the slot's drain).
		d.forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	free, lagging, err := d.freeSlots(ctx, pool)
	if err != nil {
		return ctrl.Result{}, err
	}
	v, err := d.view(ctx, pool)
	if err != nil {
		return ctrl.Result{}, err
	}
	// The order the free slots go in: the queue's own, or, in a pool with a tenancy, each
	// tenant's turn by its share (policy.FairOrder); limited are the bots whose tenant holds
	// its limit, which no slot goes to now.
	queue, limited := policy.FairOrder(pool, v.queue, v.usage, v.promises)
	waiting := v.waiting
	if lagging && len(queue) > len(free) {
		// A slot left out for a lagging cache may be free after all: look again once the
		// cache caught up (its update from free to free wakes no wave).
		defer func() {
			if err == nil && (res.RequeueAfter <= 0 || res.RequeueAfter > pass.CacheWait) {
				res.RequeueAfter = pass.CacheWait
			}
		}()
	}
	key := types.NamespacedName{Namespace: pool.Namespace, Name: pool.Name}
	n := min(len(free), len(queue))
	bound := 0
	if n > 0 {
		if bound, n, err = d.reservedWave(ctx, key, pool, queue[:n], free); err != nil {
			return ctrl.Result{}, err
		}
	}
	if n == 0 {
		return d.updatePositions(ctx, pool, queue, limited, waiting, 0)
	}
	if bound > 0 {
		ctrl.LoggerFrom(ctx).V(1).Info("Bound bots", "count", bound, "queued", len(queue)-bound)
	}
	d.observe(key, bound, len(queue) > bound)
	if bound < n {
		// Some slots were taken meanwhile: look again soon rather than wait for an event.
		return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	if len(queue) == bound && len(limited) == 0 {
		return ctrl.Result{}, nil
	}
	// The waiters' positions moved. While a queue drains, a wave per freed slot writing them
	// would cost more API writes than the bindings (the first ten places move every time) and
	// hold the pool's next wave: they are written at most every positionEvery, and by the
	// wave that follows a busy one (which binds nothing unless a slot came free meanwhile).
	if d.positionsDue(key) {
		return d.updatePositions(ctx, pool, queue[bound:], limited, waiting, positionEvery)
	}
	return ctrl.Result{RequeueAfter: positionEvery}, nil
}

// reservedWave binds the head of the queue that may be bound beside the pool's reservations
// (unreserved), under the pool's reservation lock: a wave and a reservation decision exclude
// each other, so neither gives away the slot the other just did. It returns how many it bound
// and how many it tried.
func (d *Dispatcher) reservedWave(ctx context.Context, key types.NamespacedName, pool *v1.BotPool, head []*v1.Bot, free []*v1.BotPoolSlot) (bound, n int, err error) {
	if m := d.Reservations.PoolLock(key); m != nil {
		m.Lock()
		defer m.Unlock()
	}
	if n, err = d.unreserved(ctx, pool, head, len(free)); err != nil || n == 0 {
		return 0, n, err
	}
	return d.wave(ctx, head[:n], pickSlots(head[:n], free, pool)), n, nil
}

// wave binds queue[i] to slots[i], all at once (bindWorkers in flight), and remembers the
// bindings until the cache shows them. It returns how many bots it bound.
func (d *Dispatcher) wave(ctx context.Context, queue []*v1.Bot, slots []*v1.BotPoolSlot) int {
	n := len(queue)
	var wg sync.WaitGroup
	sem := make(chan struct{}, bindWorkers)
	results := make([]error, n)
	versions := make([]string, n) // the version the cache showed of slots[i]
	at := make([]time.Time, n)    // when each binding was written, for its metrics
	for i := range n {
		versions[i] = slots[i].ResourceVersion
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i] = d.bind(ctx, slots[i], queue[i])
			at[i] = d.Clock.Now()
		}()
	}
	wg.Wait()
	now := d.Clock.Now()
	d.mu.Lock()
	if d.bound == nil {
		d.bound, d.taken = map[types.UID]waveBinding{}, map[types.UID]takenSlot{}
	}
	bound := 0
	for i, err := range results {
		switch {
		case err == nil:
			bound++
			b := waveBinding{at: now, slot: slots[i].UID, version: versions[i]}
			d.bound[queue[i].UID] = b
			d.Reservations.bound(queue[i].UID, b)
			d.taken[slots[i].UID] = takenSlot{version: versions[i], at: now}
			d.Metrics.Acquired(at[i].Sub(queue[i].CreationTimestamp.Time))
			d.Metrics.QueueWait(at[i].Sub(policy.QueuedAt(queue[i])))
			if policy.Reserved(queue[i]) {
				d.Metrics.ReservationBound(at[i].Sub(queue[i].Spec.StartTime.Time))
			}
		case lostSlot(err):
			// The slot changed under us (taken, or going away): the next wave retries.
		default:
			ctrl.LoggerFrom(ctx).Error(err, "Binding failed", "bot", queue[i].Name, "slot", slots[i].Name)
		}
	}
	d.mu.Unlock()
	return bound
}

// forget drops a deleted pool's drain rate and position time: per-pool state that would
// otherwise only grow as pools come and go.
func (d *Dispatcher) forget(pool types.NamespacedName) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.drain, pool)
	delete(d.positioned, pool)
}

// positionEvery bounds how often a draining queue's positions are written.
const positionEvery = time.Second

// positionsDue reports whether a wave that bound bots should write the queue's positions.
func (d *Dispatcher) positionsDue(pool types.NamespacedName) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Clock.Since(d.positioned[pool]) >= positionEvery
}

// freeSlots lists the pool's Idle, unbound slots on servers that take bots (server_state.go),
// least recently used first. It leaves out a
// slot the cache shows free in a version a write of this process replaced (the slot
// controller found its application gone, say): a binding built on it would lose the conflict,
// and while the head of the queue waited for the next wave, a bot behind it paired with a slot
// that was really free would be bound first (invariant 4). lagging says one was left out.
func (d *Dispatcher) freeSlots(ctx context.Context, pool *v1.BotPool) (free []*v1.BotPoolSlot, lagging bool, err error) {
	var slots v1.BotPoolSlotList
	if err := d.Client.List(ctx, &slots, client.InNamespace(pool.Namespace), client.MatchingFields{index.SlotPool: pool.Name}); err != nil {
		return nil, false, err
	}
	now := d.Clock.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	for uid, t := range d.taken {
		if now.Sub(t.at) > bindingTTL {
			delete(d.taken, uid) // the cache shows it by now, or never will
		}
	}
	for i := range slots.Items {
		s := &slots.Items[i]
		if t, ok := d.taken[s.UID]; ok {
			if t.version == s.ResourceVersion {
				continue // bound by us; the cache does not show it yet
			}
			delete(d.taken, s.UID)
		}
		if !policy.Offered(s, pool) {
			continue
		}
		if d.Writes.Replaced(s.UID, s.ResourceVersion) {
			lagging = true
			continue
		}
		free = append(free, s)
	}
	policy.SortSlots(free)
	return free, lagging, nil
}

// Queue lists the pool's waiting bots, of every namespace it admits, in service order,
// leaving out those of a namespace it no longer admits, those bound already
// (by the cache's index, or by a wave of ours the cache does not show yet), those whose
// deduplication key another bot holds (policy.Holder: the bot controller ends them), and
// those that wait for their parameters (v1.Bot.ParametersHeld), which it returns apart as
// waiting: they keep no place in the queue until they can be bound. The bots are the cache's
// own objects, not copies: a pool with thousands of waiters runs a wave per freed slot, and
// copying every bot each time dominated the operator's CPU and memory. Whoever writes one
// copies it first.
func (d *Dispatcher) Queue(ctx context.Context, pool *v1.BotPool) (queue, waiting []*v1.Bot, err error) {
	v, err := d.view(ctx, pool)
	return v.queue, v.waiting, err
}

// queueView is what a wave reads of a pool's bots: its queue and the bots that wait for their
// parameters (see Queue), and how many slots each tenant holds (usage; for a pool with a
// tenancy: the bots bound to its slots, by the cache or by a wave of ours the cache does not
// show yet, that have not ended).
type queueView struct {
	queue, waiting []*v1.Bot
	usage          map[string]int32
	// promises is what the tenants' pending reservations ask of their limits (a pool with a
	// tenancy; nil when none has one).
	promises *policy.TenantPromises
}

func (d *Dispatcher) view(ctx context.Context, pool *v1.BotPool) (v queueView, err error) {
	var bots v1.BotList
	if err := d.Client.List(ctx, &bots, index.BotsOf(pool), client.UnsafeDisableDeepCopy); err != nil {
		return v, err
	}
	var bound v1.BotPoolSlotList
	if err := d.Client.List(ctx, &bound, client.InNamespace(pool.Namespace), client.MatchingFields{index.SlotPool: pool.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return v, err
	}
	held := map[types.UID]bool{}
	holder := map[types.UID]*v1.BotPoolSlot{} // the slot whose botRef names each held bot
	for i := range bound.Items {
		if ref := bound.Items[i].Spec.BotRef; ref != nil {
			held[ref.UID], holder[ref.UID] = true, &bound.Items[i]
		}
	}
	admitted, err := d.admitted(ctx, pool, bots.Items)
	if err != nil {
		return v, err
	}
	if policy.Tenancy(pool) != nil {
		v.usage = map[string]int32{}
	}
	if pool.Spec.Tenancy != nil {
		if v.promises, err = d.tenantPromises(ctx, pool, bots.Items, holder); err != nil {
			return v, err
		}
	}
	now := d.Clock.Now()
	slots := slotsByUID(bound.Items)
	d.mu.Lock()
	for uid, w := range d.bound {
		if held[uid] || now.Sub(w.at) > bindingTTL {
			delete(d.bound, uid) // the cache shows it now, or it never will
		}
	}
	keys, holders := d.holders(pool, bots.Items, held)
	for i := range bots.Items {
		b := &bots.Items[i]
		if w, ok := d.bound[b.UID]; ok {
			// A binding of ours the cache never showed may have ended already: the bot is
			// back in the queue. Held for the rest of bindingTTL, it waited beside the free
			// slots (the model check, seeds 2061190406384971 and 1579723300654347).
			if !w.ended(b, slots) {
				if v.usage != nil && !b.Status.Phase.Terminal() {
					v.usage[policy.TenantOf(pool, b)]++
				}
				continue
			}
			delete(d.bound, b.UID)
		}
		if held[b.UID] && v.usage != nil && !b.Status.Phase.Terminal() && !b.LeftSlot(holder[b.UID]) {
			// A namespace dropped since holds its slots too; a bot back in the queue from a
			// failed slot that has not let go yet holds nothing.
			v.usage[policy.TenantOf(pool, b)]++
		}
		if !admitted[b.Namespace] {
			continue
		}
		// A Queued bot whose binding was claimed went back to the queue and then had its
		// binding taken by a container of the slot it left: the bot controller ends it, and it
		// is never bound again (claimedWhileQueued).
		if b.Status.Phase != v1.BotQueued || !b.DeletionTimestamp.IsZero() || held[b.UID] || b.Status.Binding != nil {
			continue
		}
		switch key, keyed := keys[b.UID]; {
		case keyed && holders[key] != b.UID:
			// Another bot holds its key: never bound, and ended by the bot controller.
		case b.ParametersHeld():
			v.waiting = append(v.waiting, b)
		default:
			v.queue = append(v.queue, b)
		}
	}
	d.mu.Unlock()
	policy.SortQueue(v.queue)
	return v, nil
}

// tenantPromises is what each tenant's granted reservations not yet bound (the cache's, and
// the ledger's not shown yet) ask of its limit: its bots' holds and its pending windows; nil
// when no tenant has one. A bot back in the queue from a failed slot that still names it
// (holder: the slot naming each bot) holds nothing of its tenant's, as in the usage.
func (d *Dispatcher) tenantPromises(ctx context.Context, pool *v1.BotPool, cached []v1.Bot, holder map[types.UID]*v1.BotPoolSlot) (*policy.TenantPromises, error) {
	now := d.Clock.Now()
	bots := d.Reservations.WithPending(ctx, d.Client, cached, pool, now)
	bound, err := d.Reservations.BoundIn(ctx, d.Client, pool, cached, now)
	if err != nil {
		return nil, err
	}
	for i := range bots {
		if s := holder[bots[i].UID]; s != nil && bots[i].LeftSlot(s) {
			delete(bound, bots[i].UID)
		}
	}
	leave := pool.Spec.Timing.LeaveGracePeriod.OrDefault(v1.DefaultLeaveGracePeriod)
	var p *policy.TenantPromises
	for i := range bots {
		b := &bots[i]
		if !policy.Reserved(b) || !policy.WaitsForSlot(b.Status.Phase) || b.Status.Phase.Terminal() || bound[b.UID] {
			continue
		}
		if p == nil {
			p = &policy.TenantPromises{Holds: map[string][]policy.Hold{}, Pending: map[string]map[types.UID]policy.Hold{}, Now: now, Leave: leave}
		}
		t := policy.TenantOf(pool, b)
		if p.Pending[t] == nil {
			p.Pending[t] = map[types.UID]policy.Hold{}
		}
		w := b.Status.Reservation
		p.Pending[t][b.UID] = policy.Hold{From: w.From.Time, Until: w.Until.Add(leave)}
	}
	if p == nil {
		return nil, nil
	}
	byTenant := map[string][]v1.Bot{}
	for i := range bots {
		if t := policy.TenantOf(pool, &bots[i]); p.Pending[t] != nil {
			byTenant[t] = append(byTenant[t], bots[i])
		}
	}
	for t, mine := range byTenant {
		p.Holds[t] = policy.HoldsOf(mine, bound, "", now, leave)
	}
	return p, nil
}

// admitted says, of the namespaces of bots, which the pool admits (each read once a wave).
func (d *Dispatcher) admitted(ctx context.Context, pool *v1.BotPool, bots []v1.Bot) (map[string]bool, error) {
	out := map[string]bool{pool.Namespace: true}
	for i := range bots {
		ns := bots[i].Namespace
		if _, seen := out[ns]; seen {
			continue
		}
		ok, err := d.Admission.Admits(ctx, pool, ns)
		if err != nil {
			return nil, err
		}
		out[ns] = ok
	}
	return out, nil
}

// holders is the deduplication key of each of the pool's bots that has one (keys), and per key
// the bot that holds it (policy.Holder), counting as bound the bots held by a slot (held) and
// by a wave of ours the cache does not show yet. Each key is computed once a wave, and is the
// bot's namespace's: bots of two tenants sent to one meeting are no duplicates of each other,
// and neither may learn of the other through its end. The caller holds d.mu.
func (d *Dispatcher) holders(pool *v1.BotPool, bots []v1.Bot, held map[types.UID]bool) (keys map[types.UID]string, holders map[string]types.UID) {
	byKey := map[string][]*v1.Bot{}
	for i := range bots {
		if key := policy.DeduplicationKey(&bots[i], pool); key != "" {
			key = bots[i].Namespace + "/" + key
			if keys == nil {
				keys = map[types.UID]string{}
			}
			keys[bots[i].UID] = key
			byKey[key] = append(byKey[key], &bots[i])
		}
	}
	if len(byKey) == 0 {
		return nil, nil
	}
	bound := func(b *v1.Bot) bool {
		_, ours := d.bound[b.UID]
		return held[b.UID] || ours
	}
	holders = make(map[string]types.UID, len(byKey))
	for key, bots := range byKey {
		if h := policy.Holder(bots, bound); h != nil {
			holders[key] = h.UID
		}
	}
	return keys, holders
}

// pickSlots chooses the slot each bot at the head of the queue takes, from the free slots
// (least recently used first, at least as many as the bots): a bot whose earlier starts failed
// takes the first one on a server none of them failed on, when there is one, else the first
// left; the others take the rest in order. Which bots are bound is the queue's alone (all of
// head are): the preference only says which of the free slots a retried bot gets.
func pickSlots(head []*v1.Bot, free []*v1.BotPoolSlot, pool *v1.BotPool) []*v1.BotPoolSlot {
	picked := make([]*v1.BotPoolSlot, len(head))
	used := make([]bool, len(free))
	for i, b := range head {
		if len(b.Status.StartAttempts) == 0 {
			continue
		}
		failed := map[string]bool{}
		for _, a := range b.Status.StartAttempts {
			failed[a.Server] = true
		}
		for j, sl := range free {
			if !used[j] && !failed[policy.AttemptServer(b, sl, pool)] {
				picked[i], used[j] = sl, true
				break
			}
		}
	}
	j := 0
	for i := range picked {
		if picked[i] != nil {
			continue
		}
		for used[j] {
			j++
		}
		picked[i], used[j] = free[j], true
	}
	return picked
}

// bind writes the slot's botRef with its resourceVersion as a precondition; the caller
// remembers the binding.
func (d *Dispatcher) bind(ctx context.Context, slot *v1.BotPoolSlot, bot *v1.Bot) error {
	patch := client.MergeFromWithOptions(slot.DeepCopy(), client.MergeFromWithOptimisticLock{})
	slot.Spec.BotRef = v1.ReferenceTo(bot, slot.Namespace)
	return d.Client.Patch(ctx, slot, patch)
}

// lostSlot reports whether a bind failed because the slot was not what the cache showed:
// taken, changed or going away.
func lostSlot(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsInvalid(err) || apierrors.IsNotFound(err)
}

// updatePositions writes the queue positions that moved materially (see PositionChanged),
// with the wait the pool's observed drain rate predicts for each. A bot whose tenant holds its
// limit (limited) gets its place among its tenant's waiting bots (those still in the served
// order first) and no estimate: its turn comes when one of its tenant's meetings ends, which
// no drain rate of the pool predicts. The writes go out
// bindWorkers at a time: a wave holds its pool until they are done, and a slot freed
// meanwhile waits for the next wave, so they must not take a round trip each.
//
// A write refused for a conflict (the bot changed since the cache showed it: its finalizer was
// just added, say) is tried again by another wave soon; the result asks for it, else for a
// wave after next (0: none).
func (d *Dispatcher) updatePositions(ctx context.Context, p *v1.BotPool, queue, limited, waiting []*v1.Bot, next time.Duration) (ctrl.Result, error) {
	pool := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	d.mu.Lock()
	if d.positioned == nil {
		d.positioned = map[types.NamespacedName]time.Time{}
	}
	d.positioned[pool] = d.Clock.Now()
	d.mu.Unlock()
	per := d.perBinding(pool)
	var g errgroup.Group
	g.SetLimit(bindWorkers)
	var conflicts atomic.Bool
	// A limited bot's place among its tenant's waiting bots: after those of its tenant still in
	// the served order, which go first.
	within := map[string]int32{}
	if len(limited) > 0 {
		for _, b := range queue {
			within[policy.TenantOf(p, b)]++
		}
	}
	all := append(append(queue[:len(queue):len(queue)], limited...), waiting...)
	for i, b := range all {
		pos, estimate := int32(i+1), per > 0 && i < len(queue)
		switch {
		case i >= len(queue)+len(limited):
			pos = 0 // waits for its parameters: no place
		case i >= len(queue):
			tenant := policy.TenantOf(p, b)
			within[tenant]++
			pos = within[tenant]
		}
		// No estimate for a bot that waits for its parameters or its tenant: one it still
		// carries from its time in the queue goes.
		unestimated := i >= len(queue)
		stale := unestimated && b.Status.EstimatedWait != nil
		if !policy.PositionChanged(b.Status.QueuePosition, pos) && !stale {
			continue
		}
		g.Go(func() error {
			patch := client.MergeFromWithOptions(b.DeepCopy(), client.MergeFromWithOptimisticLock{})
			b := b.DeepCopy() // b is the cache's: write a copy
			b.Status.QueuePosition = pos
			switch {
			case estimate:
				b.Status.EstimatedWait = &metav1.Duration{Duration: (time.Duration(pos) * per).Round(time.Second)}
			case unestimated:
				b.Status.EstimatedWait = nil
			}
			err := d.Client.Status().Patch(ctx, b, patch)
			if apierrors.IsConflict(err) {
				conflicts.Store(true)
				return nil
			}
			return client.IgnoreNotFound(err)
		})
	}
	if err := g.Wait(); err != nil {
		return ctrl.Result{}, err
	}
	if conflicts.Load() {
		next = positionRetry
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// positionRetry: how soon a wave tries again the positions a conflict refused.
const positionRetry = 100 * time.Millisecond
