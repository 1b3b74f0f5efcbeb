package policy

import (
	"math"
	"time"

	"k8s.io/apimachinery/pkg/types"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// Tenancy is the tenancy the pool's queue is served by: its spec.tenancy; for a pool shared
// with other namespaces without one, each namespace a tenant with no limit but maxSlots, no
// guarantee and weight 1, so the namespaces take turns by what they hold and no tenant's
// spec.priority (its own to set) puts its bots ahead of another's; nil for a pool of its own
// namespace's bots alone.
func Tenancy(pool *v1.BotPool) *v1.Tenancy {
	if t := pool.Spec.Tenancy; t != nil {
		return t
	}
	if Shared(pool) {
		return &sharedTenancy
	}
	return nil
}

var sharedTenancy = v1.Tenancy{Key: v1.TenantByNamespace}

// TenantOf is the tenant a bot counts as in the pool's tenancy (Tenancy): its namespace; with
// key Label, the value of the tenancy's label for a bot of the pool's own namespace (a bot of
// another namespace counts as its namespace whatever its labels say, so no namespace can
// spend another tenant's share). "" when the pool has no tenancy.
func TenantOf(pool *v1.BotPool, bot *v1.Bot) string {
	t := Tenancy(pool)
	switch {
	case t == nil:
		return ""
	case t.Key == v1.TenantByLabel && bot.Namespace == pool.Namespace:
		return bot.Labels[t.Label]
	}
	return bot.Namespace
}

// Share is a tenant's share of a pool with its defaults filled in: a limit (NoLimit when it has
// none of its own: the pool's maxSlots bounds it, and a pool whose maxSlots was lowered below
// its slots serves from those it still has, tenant or not), a guarantee (at most the limit)
// and a weight of at least 1.
type Share struct {
	Limit, Guaranteed, Weight int32
	// Limited says the limit is the tenant's own (or the defaults'), not NoLimit.
	Limited bool
}

// NoLimit is the limit of a tenant that has none of its own.
const NoLimit = math.MaxInt32

// ShareOf is the tenant's share of the pool: its own policy, else the tenancy's defaults, else
// no limit, no guarantee, weight 1.
func ShareOf(pool *v1.BotPool, tenant string) Share {
	s := Share{Limit: NoLimit, Weight: 1}
	t := Tenancy(pool)
	if t == nil {
		return s
	}
	policy := t.Defaults
	for i := range t.Tenants {
		if t.Tenants[i].Name == tenant {
			policy = &t.Tenants[i].TenantShare
			break
		}
	}
	if policy == nil {
		return s
	}
	if policy.Limit != nil {
		s.Limit, s.Limited = *policy.Limit, true
	}
	if policy != t.Defaults { // the defaults guarantee nothing (the API server refuses it)
		s.Guaranteed = min(policy.Guaranteed, s.Limit)
	}
	if policy.Weight > 0 {
		s.Weight = policy.Weight
	}
	return s
}

// FairOrder is the order in which the pool's free slots go to the bots of queue (sorted by
// QueueLess), given how many slots each tenant holds (usage): served, every bot that can be
// served before its tenant reaches its limit, in the order the next free slots go to them; and
// limited, the rest, each tenant's in its own order. A pool without a tenancy serves its queue
// as it is (its own namespace's alone: Tenancy).
//
// The rule, slot by slot (the tenants' holdings grow as the order is built):
//
//  1. a bot with a granted reservation first, in queue order: its slot was promised;
//  2. then the tenants holding fewer slots than their guaranteed share, the one holding the
//     smallest fraction of it first;
//  3. then every other tenant, the one that would borrow the least beyond its guarantee per
//     unit of weight first: (held + 1 − guaranteed) / weight, Kueue's fair sharing of what
//     the guarantees leave;
//  4. ties go to the tenant whose next bot arrived first (its queue time, then creation and
//     name: not its priority, which each tenant sets for its own bots), and within a tenant
//     the queue's order holds (reservation, priority, arrival).
//
// A tenant at its limit is served no more, nor one whose next bot would take room its own
// granted reservations need (promises): their bots are limited. Nothing here takes a slot
// from a running bot: the holdings only grow, so borrowed slots come back as meetings end.
func FairOrder(pool *v1.BotPool, queue []*v1.Bot, usage map[string]int32, promises *TenantPromises) (served, limited []*v1.Bot) {
	if Tenancy(pool) == nil {
		return queue, nil
	}
	type tenant struct {
		name  string
		share Share
		held  int32
		bots  []*v1.Bot // its waiting bots in queue order
		next  int       // its next bot to serve
		// kept says its next bot would take room its own granted reservations need (promises):
		// it gets no slot in this order, and its later bots wait behind it.
		kept bool
	}
	tenants := map[string]*tenant{}
	var names []string // in the order their first bot comes in the queue
	for _, b := range queue {
		name := TenantOf(pool, b)
		t := tenants[name]
		if t == nil {
			t = &tenant{name: name, share: ShareOf(pool, name), held: usage[name]}
			tenants[name] = t
			names = append(names, name)
		}
		t.bots = append(t.bots, b)
	}
	served = make([]*v1.Bot, 0, len(queue))
	// A bot with a reservation first, in queue order (they sort to its front).
	for _, b := range queue {
		if !Reserved(b) {
			break
		}
		name := TenantOf(pool, b)
		t := tenants[name]
		if t.held < t.share.Limit && t.bots[t.next] == b {
			served = append(served, b)
			t.held++
			t.next++
			promises.take(name, b)
		}
	}
	for {
		var best *tenant
		for _, name := range names {
			t := tenants[name]
			if t.next >= len(t.bots) || t.held >= t.share.Limit || t.kept {
				continue
			}
			if b := t.bots[t.next]; !Reserved(b) && !promises.keeps(name, b, t.share.Limit) {
				t.kept = true
				continue
			}
			if best == nil || fairBefore(t.held, t.share, t.bots[t.next], best.held, best.share, best.bots[best.next]) {
				best = t
			}
		}
		if best == nil {
			break
		}
		served = append(served, best.bots[best.next])
		promises.take(best.name, best.bots[best.next])
		best.held++
		best.next++
	}
	for _, name := range names {
		t := tenants[name]
		limited = append(limited, t.bots[t.next:]...)
	}
	return served, limited
}

// fairBefore reports whether tenant a (holding ha slots, its next bot ba) comes before tenant
// b for the next free slot (FairOrder's rules 2 to 4). Fractions are compared by
// cross-multiplying, in int64: no rounding decides a turn.
func fairBefore(ha int32, sa Share, ba *v1.Bot, hb int32, sb Share, bb *v1.Bot) bool {
	belowA, belowB := ha < sa.Guaranteed, hb < sb.Guaranteed
	if belowA != belowB {
		return belowA
	}
	var l, r int64
	if belowA {
		l, r = int64(ha)*int64(sb.Guaranteed), int64(hb)*int64(sa.Guaranteed) // ha/Ga against hb/Gb
	} else {
		l, r = int64(ha+1-sa.Guaranteed)*int64(sb.Weight), int64(hb+1-sb.Guaranteed)*int64(sa.Weight)
	}
	if l != r {
		return l < r
	}
	return arrivedBefore(ba, bb)
}

// Held reports whether a tenant has more bots in the pool than its limit lets hold a slot:
// some of its waiting bots wait for its own meetings to end (TenantLimit). It stays so while a
// meeting ends and the next bot takes its slot, so a tenant queueing far past its limit does
// not flip its waiting bots' reason, a status write each, at every meeting's end.
func Held(t v1.TenantStatus) bool {
	return t.Limit != nil && t.Waiting > 0 && t.Bound+t.Waiting > *t.Limit
}

// TenantHeld reports whether the pool's status says the tenant is held (Held): the reason a
// bot of it waits (TenantLimit), and its limit.
func TenantHeld(pool *v1.BotPool, tenant string) (int32, bool) {
	for _, t := range pool.Status.Tenants {
		if t.Name == tenant && Held(t) {
			return *t.Limit, true
		}
	}
	return 0, false
}

// TenantPromises is what the tenants' granted reservations not yet bound ask of their limits:
// per tenant, what its bots hold (HoldsOf) and its pending reservations' windows. A bot of a
// tenant is served only if, as long as its meeting may last, each of the tenant's pending
// reservations still finds room within the tenant's limit (KeepsReservations): a reservation
// granted within the limit is served at its start. nil: no tenant has one.
type TenantPromises struct {
	Holds   map[string][]Hold
	Pending map[string]map[types.UID]Hold
	Now     time.Time
	Leave   time.Duration
}

// keeps reports whether binding b now leaves its tenant's pending reservations their room.
func (p *TenantPromises) keeps(tenant string, b *v1.Bot, limit int32) bool {
	if p == nil || len(p.Pending[tenant]) == 0 {
		return true
	}
	until := p.Now.Add(b.Spec.MaxDuration.OrDefault(v1.DefaultMaxDuration) + p.Leave)
	return KeepsReservations(p.Holds[tenant], p.Pending[tenant], p.Now, until, int(limit))
}

// take records b bound now: its meeting holds from now, and a reservation of its own promises
// nothing more.
func (p *TenantPromises) take(tenant string, b *v1.Bot) {
	if p == nil || len(p.Pending[tenant]) == 0 {
		return
	}
	if _, promised := p.Pending[tenant][b.UID]; promised {
		delete(p.Pending[tenant], b.UID)
		return // its window is among the holds already
	}
	p.Holds[tenant] = append(p.Holds[tenant], Hold{From: p.Now, Until: p.Now.Add(b.Spec.MaxDuration.OrDefault(v1.DefaultMaxDuration) + p.Leave)})
}
