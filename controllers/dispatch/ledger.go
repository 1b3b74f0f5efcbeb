package dispatch

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/index"
	"botpool.dev/botpool/controllers/internal/policy"
)

// bindingTTL bounds how long a binding of ours counts without the cache showing it.
const bindingTTL = 30 * time.Second

// waveBinding is a binding a wave wrote: when, the slot, and the version of it the cache
// showed before (the bind replaced it).
type waveBinding struct {
	at      time.Time
	slot    types.UID
	version string
}

// ended reports whether the binding is over though the cache never showed it: the bot's start
// failed after it (FailedSince), or the cache shows the slot in a version past the bind that
// names another bot or none, or no longer holds the slot. The cache showed the slot when the
// wave bound it and only moves forward, and a version other than the one the bind replaced is
// the bind's or a later one: the slot let the bot go. A slot lets a bot go without a new
// failed start when it takes an older one, naming a slot of its name deleted since, for its
// own (Bot.LeftSlot); held for the rest of bindingTTL, the bot, reserved and due, waited
// beside a free slot (the model check, seed 1579723300654347).
func (b waveBinding) ended(bot *v1.Bot, slots map[types.UID]*v1.BotPoolSlot) bool {
	if policy.FailedSince(bot, b.at) {
		return true
	}
	s, ok := slots[b.slot]
	if !ok {
		return true
	}
	return s.ResourceVersion != b.version && (s.Spec.BotRef == nil || s.Spec.BotRef.UID != bot.UID)
}

// slotsByUID indexes slots by uid.
func slotsByUID(slots []v1.BotPoolSlot) map[types.UID]*v1.BotPoolSlot {
	out := make(map[types.UID]*v1.BotPoolSlot, len(slots))
	for i := range slots {
		out[slots[i].UID] = &slots[i]
	}
	return out
}

// Ledger is what the bot controller (deciding reservations) and the dispatcher
// (binding ad-hoc bots beside them) share about each pool: a lock per pool, under which a
// decision and a binding wave exclude each other (so neither takes the slot the other just
// gave away, and one tenant's thousands of decisions never wait on another's), the grants
// written that the cache may not show yet, and the bindings likewise. The grants themselves
// live in the bots' Reserved conditions and status.reservation, and bindings in the slots'
// botRefs: a restart rebuilds it all from the cache. A nil ledger shares nothing (tests that
// build one controller alone).
type Ledger struct {
	mu      sync.Mutex // guards the maps
	pools   map[types.NamespacedName]*sync.Mutex
	pending map[types.UID]pendingGrant
	binds   map[types.UID]waveBinding
}

// pendingGrant is a grant this process decided, kept until the cache shows it or until.
type pendingGrant struct {
	bot   v1.Bot
	until time.Time
}

// pendingGrantTTL bounds how long a grant the cache does not show is counted: a status write
// that failed left no grant, and the bot is decided again.
const pendingGrantTTL = time.Minute

// PoolLock is the pool's lock (nil for a nil ledger).
func (l *Ledger) PoolLock(pool types.NamespacedName) *sync.Mutex {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pools == nil {
		l.pools = map[types.NamespacedName]*sync.Mutex{}
	}
	m := l.pools[pool]
	if m == nil {
		m = &sync.Mutex{}
		l.pools[pool] = m
	}
	return m
}

// WithPending adds to the cached bots of a pool the grants decided but not shown yet.
//
// A grant whose bot the cache no longer holds, holds as another object of that name, or holds
// in another pool, is dropped: the grant was decided on a bot the cache showed, and the cache never goes back, so
// that bot was deleted before its grant showed. Counted until pendingGrantTTL, it held the
// pool's queue beside a free slot for a meeting that will never come (the model check, seed
// 2295569671406997). c is the cache the grants were decided on; an error reading it keeps
// the grant.
func (l *Ledger) WithPending(ctx context.Context, c client.Reader, cached []v1.Bot, pool *v1.BotPool, now time.Time) []v1.Bot {
	if l == nil {
		return cached
	}
	key := types.NamespacedName{Namespace: pool.Namespace, Name: pool.Name}
	shown := map[types.UID]bool{}
	for i := range cached {
		if meta.FindStatusCondition(cached[i].Status.Conditions, v1.ConditionReserved) != nil {
			shown[cached[i].UID] = true
		}
	}
	l.mu.Lock()
	var mine []pendingGrant // this pool's grants not shown yet
	for uid, g := range l.pending {
		switch {
		case shown[uid] || now.After(g.until):
			delete(l.pending, uid)
		case g.bot.PoolKey() == key:
			mine = append(mine, g)
		}
	}
	l.mu.Unlock()
	out := cached
	for _, g := range mine {
		if grantVoid(ctx, c, &g.bot) {
			l.forget(g.bot.UID)
			continue
		}
		out = append(out, g.bot)
	}
	return out
}

// grantVoid reports whether a grant decided on bot b holds nothing: the cache holds no bot of
// b's name, or another one, or b routed to another pool since (which drops its reservation).
// A bot the cache shows in no pool may be one routed and granted in the same pass whose status
// the cache does not show yet: its grant holds. The bot controller drops the grant of a bot its
// pool refuses (Drop).
func grantVoid(ctx context.Context, c client.Reader, b *v1.Bot) bool {
	live := &v1.Bot{}
	err := c.Get(ctx, client.ObjectKeyFromObject(b), live)
	if apierrors.IsNotFound(err) {
		return true
	}
	return err == nil && (live.UID != b.UID || live.PoolKey().Name != "" && live.PoolKey() != b.PoolKey())
}

// Drop forgets the grant of a bot not shown yet: the bot controller's, for a bot whose pool no
// longer serves it (refused, or routed to another): it holds no slot of that pool.
func (l *Ledger) Drop(uid types.UID) {
	if l != nil {
		l.forget(uid)
	}
}

// forget drops a grant not shown yet.
func (l *Ledger) forget(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pending, uid)
}

// Remember keeps a grant until the cache shows it (or pendingGrantTTL).
func (l *Ledger) Remember(bot *v1.Bot, now time.Time) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending == nil {
		l.pending = map[types.UID]pendingGrant{}
	}
	l.pending[bot.UID] = pendingGrant{bot: *bot.DeepCopy(), until: now.Add(pendingGrantTTL)}
}

// bound records a binding a wave wrote (kept bindingTTL: the cache shows it by then).
func (l *Ledger) bound(bot types.UID, b waveBinding) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.binds == nil {
		l.binds = map[types.UID]waveBinding{}
	}
	l.binds[bot] = b
}

// BoundIn is the bots of the pool bound to a slot by its botRef (the cache) or by a wave the
// cache may not show yet: what HoldsOf counts as bound whatever the bot's own phase says.
//
// A wave's binding that ended since is not one (waveBinding.ended): a bot whose start failed
// after it was bound, or whose slot let it go, is back in the queue, and holds nothing until
// bound again. Counted for the rest of bindingTTL, it held a slot it did not have, and the
// queue, that very bot at its head, waited beside a free slot (the model check, seeds
// 881256409367164 and 1579723300654347). bots are the pool's bots as the caller read them.
func (l *Ledger) BoundIn(ctx context.Context, c client.Reader, pool *v1.BotPool, bots []v1.Bot, now time.Time) (map[types.UID]bool, error) {
	var slots v1.BotPoolSlotList
	if err := c.List(ctx, &slots, client.InNamespace(pool.Namespace), client.MatchingFields{index.SlotPool: pool.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the pool's slots: %w", err)
	}
	out := map[types.UID]bool{}
	for i := range slots.Items {
		if ref := slots.Items[i].Spec.BotRef; ref != nil {
			out[ref.UID] = true
		}
	}
	if l == nil {
		return out, nil
	}
	byUID := slotsByUID(slots.Items)
	l.mu.Lock()
	defer l.mu.Unlock()
	for uid, b := range l.binds {
		if now.Sub(b.at) > bindingTTL {
			delete(l.binds, uid)
		}
	}
	for i := range bots {
		if b, ok := l.binds[bots[i].UID]; ok {
			if b.ended(&bots[i], byUID) {
				delete(l.binds, bots[i].UID)
			} else {
				out[bots[i].UID] = true
			}
		}
	}
	return out, nil
}
