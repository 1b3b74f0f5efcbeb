package modelcheck

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// Tenants in the model (issue 33): a second namespace whose bots use pool alpha, shared with
// it by a namespace label that a person adds and removes, and, in some runs, a tenancy on
// alpha with per-tenant limits and guaranteed shares.
const (
	// tenantNamespace holds the tenant's bots; it has no pool of its own.
	tenantNamespace = "model-tenant"
	// tenantBotPrefix starts the names of its bots (botKey reads the namespace from it).
	tenantBotPrefix = "tbot-"
	// tenantLabel on tenantNamespace, set to "yes", is what alpha admits.
	tenantLabel = "model.botpool.dev/tenant"
)

// tenancyState is what the model remembers of the tenant: whether alpha is shared with it, and
// when its namespace was last admitted and dropped.
type tenancyState struct {
	// rng is the tenancy's own random stream: the runs of earlier seeds whose alpha is not
	// shared keep the rest of their world.
	rng       *rand.Rand
	shared    bool
	admitted  bool
	droppedAt time.Time
	changedAt time.Time // when the namespace was last admitted or dropped
}

// mayBeRefused reports whether the dispatcher may leave a bot of ns out of alpha's queue: the
// tenant namespace is not admitted, or was admitted again so lately that the cache may not
// show it yet.
func (w *world) mayBeRefused(ns string) bool {
	return ns == tenantNamespace && (!w.tenant.admitted || w.clk.Since(w.tenant.changedAt) <= maxCacheLag)
}

// shareAlpha shares pool alpha with the tenant namespace (in two runs of three) and gives it
// a tenancy (in half of those): the tenant and the pools' own namespace each with a random
// limit and guaranteed share within maxSlots.
func (w *world) shareAlpha() {
	w.tenant.rng = rand.New(rand.NewPCG(w.seed, 0x74656e616e74))
	rng := w.tenant.rng
	must(w.api.Create(w.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}))
	must(w.api.Create(w.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNamespace}}))
	if rng.IntN(3) == 0 {
		return
	}
	p := w.api.get(w.api.keyOf(w.pool("alpha"))).(*v1.BotPool)
	p.Spec.AllowedNamespaces = &v1.AllowedNamespaces{From: v1.NamespacesSelector,
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{tenantLabel: "yes"}}}
	if rng.IntN(2) == 0 {
		left := p.Spec.MaxSlots
		share := func(name string) v1.TenantPolicy {
			limit := int32(1 + rng.IntN(int(p.Spec.MaxSlots)))
			g := min(int32(rng.IntN(int(limit)+1)), left)
			left -= g
			return v1.TenantPolicy{Name: name, TenantShare: v1.TenantShare{Limit: ptr.To(limit), Guaranteed: g, Weight: int32(1 + rng.IntN(2))}}
		}
		p.Spec.Tenancy = &v1.Tenancy{Key: v1.TenantByNamespace, Tenants: []v1.TenantPolicy{share(tenantNamespace), share(namespace)}}
	}
	must(w.api.Update(w.ctx, p))
	w.pool("alpha").Spec.AllowedNamespaces, w.pool("alpha").Spec.Tenancy = p.Spec.AllowedNamespaces, p.Spec.Tenancy
	w.tenant.shared = true
	w.setAdmitted(true)
}

// setAdmitted labels the tenant namespace for alpha, or removes the label.
func (w *world) setAdmitted(admitted bool) {
	ns := &corev1.Namespace{}
	must(w.api.Get(w.ctx, types.NamespacedName{Name: tenantNamespace}, ns))
	ns.Labels = nil
	if admitted {
		ns.Labels = map[string]string{tenantLabel: "yes"}
	} else if w.tenant.admitted {
		w.tenant.droppedAt = w.clk.Now()
	}
	w.tenant.admitted, w.tenant.changedAt = admitted, w.clk.Now()
	must(w.api.Update(w.ctx, ns))
}

// toggleAdmission admits the tenant namespace to alpha, or drops it, as a person labelling
// namespaces would: about once in 300 steps, drawn from the tenancy's own stream after a
// step (afterStep), so the actions' draws stay those of earlier seeds.
func (w *world) toggleAdmission() {
	if !w.tenant.shared || w.tenant.rng.IntN(300) != 0 {
		return
	}
	w.setAdmitted(!w.tenant.admitted)
	w.note(fmt.Sprintf("tenant namespace admitted: %v", w.tenant.admitted))
	w.counts[fmt.Sprintf("tenancy: admitted %v", w.tenant.admitted)]++
}

// tenantBot makes a new bot of the tenant namespace, for zoom: named alpha with its namespace,
// or no pool at all (alpha is the only zoom pool shared with it).
func (w *world) tenantBot(b *v1.Bot) {
	b.Namespace, b.Name = tenantNamespace, tenantBotPrefix+b.Name
	b.Spec.PoolRef = nil
	if w.tenant.rng.IntN(2) == 0 {
		b.Spec.PoolRef = &v1.PoolReference{Namespace: namespace, Name: "alpha"}
	}
}

// checkTenantBinding checks a binding a wave wrote: invariant 18, no tenant holds more of the
// pool than its limit (counting the bots bound to its slots that have not ended, after the
// wave), and invariant 19, a bot of the tenant namespace is bound only while the pool admits
// it (or within the cache's lag after it was dropped).
func (w *world) checkTenantBinding(e bindEvent) {
	bot := w.liveBot(e.bot)
	if bot == nil || bot.UID != e.uid {
		return
	}
	if bot.Namespace == tenantNamespace && !w.tenant.admitted && e.at.Sub(w.tenant.droppedAt) > maxCacheLag {
		w.violate("invariant 19: tenant bot %s bound to slot %s %s after its namespace was dropped from pool %s",
			bot.Name, e.slot, e.at.Sub(w.tenant.droppedAt), e.pool)
	}
	pool := w.livePool(e.pool)
	if pool.Spec.Tenancy == nil {
		return
	}
	tenant := tenantOf(pool, bot)
	if held, limit := heldBy(pool, w.liveBots(), w.liveSlots())[tenant], limitOf(pool, tenant); held > limit {
		w.violate("invariant 18: tenant %q holds %d slots of pool %s after bot %s was bound to %s; its limit is %d",
			tenant, held, pool.Name, bot.Name, e.slot, limit)
	}
	w.counts["tenancy: binding checked"]++
}

// checkTenantViews: invariant 20, nothing of the pools' namespace in a tenant bot's status:
// no Coolify application, and no slot's message (which may quote the pool's Coolify).
func (w *world) checkTenantViews(bots []v1.Bot, slots []v1.BotPoolSlot) {
	for i := range bots {
		b := &bots[i]
		if b.Namespace != tenantNamespace {
			continue
		}
		if b.Status.ApplicationUUID != "" {
			w.violate("invariant 20: tenant bot %s shows the pool's application %s", b.Name, b.Status.ApplicationUUID)
		}
		for _, a := range b.Status.StartAttempts {
			for j := range slots {
				if m := slots[j].Status.Message; m != "" && a.Message == m {
					w.violate("invariant 20: tenant bot %s repeats slot %s's message %q", b.Name, slots[j].Name, m)
				}
			}
		}
	}
}

// tenantOf is the model's own reading of a bot's tenant in the pool (docs/tenancy.md): its
// namespace; with key Label, the label's value for a bot of the pool's namespace.
func tenantOf(pool *v1.BotPool, b *v1.Bot) string {
	if t := pool.Spec.Tenancy; t != nil && t.Key == v1.TenantByLabel && b.Namespace == pool.Namespace {
		return b.Labels[t.Label]
	}
	return b.Namespace
}

// limitOf is the model's own reading of a tenant's limit: its policy's, else the defaults',
// else none (math.MaxInt32).
func limitOf(pool *v1.BotPool, tenant string) int32 {
	limit := int32(math.MaxInt32)
	t := pool.Spec.Tenancy
	if t == nil {
		return limit
	}
	share := t.Defaults
	for i := range t.Tenants {
		if t.Tenants[i].Name == tenant {
			share = &t.Tenants[i].TenantShare
		}
	}
	if share != nil && share.Limit != nil {
		limit = *share.Limit
	}
	return limit
}

// heldBy counts, per tenant, the bots bound to the pool's slots that have not ended nor gone
// back to the queue from a failed slot that still names them (Bot.LeftSlot).
func heldBy(pool *v1.BotPool, bots []v1.Bot, slots []v1.BotPoolSlot) map[string]int32 {
	byUID := map[types.UID]*v1.Bot{}
	for i := range bots {
		byUID[bots[i].UID] = &bots[i]
	}
	out := map[string]int32{}
	for i := range slots {
		if s := &slots[i]; s.Spec.Pool == pool.Name && s.Spec.BotRef != nil {
			if b := byUID[s.Spec.BotRef.UID]; b != nil && !b.Status.Phase.Terminal() && !b.LeftSlot(s) {
				out[tenantOf(pool, b)]++
			}
		}
	}
	return out
}

// servable leaves out of a pool's queued bots those that may wait beside a free slot: a
// tenant's whose namespace the pool does not admit (the bot controller sends them back to
// Pending), and, in a pool with a tenancy, those whose tenant holds its limit, or would with
// its granted reservations not bound yet.
func (w *world) servable(q, bots []v1.Bot, slots []v1.BotPoolSlot, pool string) []v1.Bot {
	p := w.livePool(pool)
	var held, promised map[string]int32
	if p.Spec.Tenancy != nil {
		held, promised = heldBy(p, bots, slots), promisedBy(p, bots, slots)
	}
	out := q[:0:0]
	for i := range q {
		b := &q[i]
		switch {
		case w.mayBeRefused(b.Namespace):
			w.counts["tenancy: queued while dropped"]++
		case held != nil && held[tenantOf(p, b)] >= limitOf(p, tenantOf(p, b)):
			w.counts["tenancy: queued at its limit"]++
		case held != nil && !isReserved(b) && held[tenantOf(p, b)]+promised[tenantOf(p, b)] >= limitOf(p, tenantOf(p, b)):
			// Its tenant's granted reservations need the room it would take (TenantPromises).
			w.counts["tenancy: queued for its tenant's reservations"]++
		default:
			out = append(out, *b)
		}
	}
	return out
}

// promisedBy counts, per tenant, its granted reservations in the pool not bound yet (one back
// in the queue from a failed slot that still names it among them: Bot.LeftSlot).
func promisedBy(pool *v1.BotPool, bots []v1.Bot, slots []v1.BotPoolSlot) map[string]int32 {
	out := map[string]int32{}
	for i := range bots {
		b := &bots[i]
		if b.Status.Pool != pool.Name || !isReserved(b) || b.Status.Phase.Terminal() {
			continue
		}
		if s := slotOf(slots, b.UID); s == nil || b.LeftSlot(s) {
			out[tenantOf(pool, b)]++
		}
	}
	return out
}

// checkGuarantees: invariant 21 for the bindings one dispatch wrote on a synced cache (so the
// dispatcher's count of each tenant's slots was the model's, held): no binding went to a
// tenant at or above its guaranteed share (unless it had a reservation) while a bot of a
// tenant below its own, with room under its limit beside its own reservations not bound yet,
// was left waiting.
func (w *world) checkGuarantees(pool string, waiting []v1.Bot, held map[string]int32, binds []bindEvent) {
	p := w.livePool(pool)
	if p.Spec.Tenancy == nil || len(binds) == 0 {
		return
	}
	guaranteed := func(tenant string) int32 {
		t := p.Spec.Tenancy
		share := t.Defaults
		for i := range t.Tenants {
			if t.Tenants[i].Name == tenant {
				share = &t.Tenants[i].TenantShare
			}
		}
		if share == nil || share == t.Defaults {
			return 0 // the defaults guarantee nothing
		}
		return min(share.Guaranteed, limitOf(p, tenant))
	}
	promised := promisedBy(p, w.liveBots(), w.liveSlots())
	served := map[types.UID]bool{}
	got := map[string]int32{}
	byUID := map[types.UID]*v1.Bot{}
	for i := range waiting {
		byUID[waiting[i].UID] = &waiting[i]
	}
	for _, e := range binds {
		served[e.uid] = true
		if b := byUID[e.uid]; b != nil {
			got[tenantOf(p, b)]++
		}
	}
	for _, e := range binds {
		x := byUID[e.uid]
		if x == nil || isReserved(x) {
			continue
		}
		tx := tenantOf(p, x)
		if held[tx]+got[tx]-1 < guaranteed(tx) {
			continue // every binding of its tenant in the wave was within its guarantee
		}
		for i := range waiting {
			y := &waiting[i]
			ty := tenantOf(p, y)
			if served[y.UID] || ty == tx || w.mayBeRefused(y.Namespace) {
				continue
			}
			if !isReserved(y) && held[ty]+got[ty]+promised[ty] >= limitOf(p, ty) {
				continue // its tenant's own reservations need the room it would take
			}
			if h := held[ty] + got[ty]; h < guaranteed(ty) && h < limitOf(p, ty) {
				w.violate("invariant 21: in pool %s tenant %q (holding %d, guaranteed %d) got slot %s for bot %s while bot %s of tenant %q, below its guarantee (%d of %d), waited",
					pool, tx, held[tx]+got[tx], guaranteed(tx), e.slot, x.Name, y.Name, ty, h, guaranteed(ty))
				return
			}
		}
	}
	w.counts["tenancy: guarantees checked"]++
}
