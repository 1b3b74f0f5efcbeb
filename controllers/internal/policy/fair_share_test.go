package policy

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "botpool.dev/botpool/api/v1alpha1"
	bt "botpool.dev/botpool/internal/botpooltest"
)

var fairEpoch = time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)

// waiting is a queued bot of namespace ns, queued i seconds after the epoch.
func waiting(ns string, i int, prio int32) *v1.Bot {
	b := bt.MakeBot(ns, fmt.Sprintf("%s-%03d", ns, i)).Priority(prio).Phase(v1.BotQueued).Created(fairEpoch).Obj()
	b.Status.QueuedAt = &metav1.Time{Time: fairEpoch.Add(time.Duration(i) * time.Second)}
	return b
}

func names(bots []*v1.Bot) string {
	out := make([]string, len(bots))
	for i, b := range bots {
		out[i] = b.Name
	}
	return strings.Join(out, " ")
}

func tenantPool(maxSlots int32, tenants ...v1.TenantPolicy) *v1.BotPool {
	p := bt.MakePool("platform", "pool").MaxSlots(maxSlots).Obj()
	p.Spec.Tenancy = &v1.Tenancy{Key: v1.TenantByNamespace, Tenants: tenants}
	return p
}

func share(name string, guaranteed int32, limit *int32, weight int32) v1.TenantPolicy {
	return v1.TenantPolicy{Name: name, TenantShare: v1.TenantShare{Guaranteed: guaranteed, Limit: limit, Weight: weight}}
}

func TestFairOrder(t *testing.T) {
	t.Run("no tenancy: the queue as it is", func(t *testing.T) {
		q := []*v1.Bot{waiting("a", 1, 0), waiting("b", 2, 0)}
		served, limited := FairOrder(bt.MakePool("platform", "pool").Obj(), q, nil, nil)
		if names(served) != "a-001 b-002" || len(limited) != 0 {
			t.Fatalf("served %q, limited %q", names(served), names(limited))
		}
	})
	t.Run("a shared pool without a tenancy: namespaces take turns, priority only within one", func(t *testing.T) {
		pool := bt.MakePool("platform", "pool").MaxSlots(10).SharedWith(nil).Obj()
		q := []*v1.Bot{waiting("a", 1, 0), waiting("a", 2, 0), waiting("b", 3, 1000), waiting("b", 4, 1000), waiting("a", 5, 50)}
		SortQueue(q)
		served, limited := FairOrder(pool, q, map[string]int32{"b": 1}, nil)
		// a holds none, b one: a first (its priority-50 bot heads its own order); then, holding
		// as many, the one whose next bot arrived first; b's priority buys no turn.
		if got := names(served); got != "a-005 a-001 b-003 a-002 b-004" || len(limited) != 0 {
			t.Fatalf("served %q, limited %q", got, names(limited))
		}
	})
	t.Run("below their guarantee first, the smallest fraction first", func(t *testing.T) {
		// a flooded first and holds 10 slots, b holds 1 of its 3, c 0 of its 2.
		var q []*v1.Bot
		for i := range 4 {
			q = append(q, waiting("a", i, 100))
		}
		q = append(q, waiting("b", 10, 0), waiting("b", 11, 0), waiting("b", 12, 0), waiting("c", 20, 0), waiting("c", 21, 0))
		SortQueue(q)
		pool := tenantPool(20, share("b", 3, nil, 1), share("c", 2, nil, 1))
		served, _ := FairOrder(pool, q, map[string]int32{"a": 10, "b": 1}, nil)
		// c 0/2 first; then b 1/3 against c 1/2: b; b 2/3 against c 1/2: c; b's last to its
		// guarantee; then borrowing: a (10+1)/1, b (3+1-3)/1, c (2+1-2)/1: b (queue order), c, b…
		want := "c-020 b-010 c-021 b-011 b-012 a-000 a-001 a-002 a-003"
		if got := names(served); got != want {
			t.Fatalf("served %q\n want %q", got, want)
		}
	})
	t.Run("a tenant at its limit waits, in its own order", func(t *testing.T) {
		q := []*v1.Bot{waiting("a", 1, 0), waiting("a", 2, 0), waiting("a", 3, 0), waiting("b", 4, 0)}
		pool := tenantPool(10, share("a", 0, ptr.To[int32](3), 1))
		served, limited := FairOrder(pool, q, map[string]int32{"a": 2}, nil)
		if names(served) != "b-004 a-001" || names(limited) != "a-002 a-003" { // b holds less
			t.Fatalf("served %q, limited %q", names(served), names(limited))
		}
	})
	t.Run("the defaults limit tenants not listed", func(t *testing.T) {
		pool := tenantPool(10)
		pool.Spec.Tenancy.Defaults = &v1.TenantShare{Limit: ptr.To[int32](1)}
		served, limited := FairOrder(pool, []*v1.Bot{waiting("a", 1, 0), waiting("a", 2, 0)}, nil, nil)
		if names(served) != "a-001" || names(limited) != "a-002" {
			t.Fatalf("served %q, limited %q", names(served), names(limited))
		}
	})
	t.Run("weights divide what is borrowed", func(t *testing.T) {
		var q []*v1.Bot
		for i := range 30 {
			q = append(q, waiting("a", i, 0), waiting("b", 100+i, 0))
		}
		SortQueue(q)
		pool := tenantPool(60, share("a", 0, nil, 2))
		served, _ := FairOrder(pool, q, nil, nil)
		count := map[string]int{}
		for _, b := range served[:30] {
			count[b.Namespace]++
		}
		if count["a"] != 20 || count["b"] != 10 {
			t.Fatalf("of the first 30 slots a got %d and b %d; want 20 and 10 (weights 2 and 1)", count["a"], count["b"])
		}
	})
	t.Run("a reservation first, within its tenant's limit", func(t *testing.T) {
		reserved := waiting("a", 5, 0)
		bt.Grant(reserved, fairEpoch)
		blocked := waiting("c", 6, 0)
		bt.Grant(blocked, fairEpoch)
		q := []*v1.Bot{waiting("b", 1, 0), reserved, blocked}
		SortQueue(q)
		pool := tenantPool(10, share("b", 5, nil, 1), share("c", 0, ptr.To[int32](1), 1))
		served, limited := FairOrder(pool, q, map[string]int32{"c": 1}, nil)
		if names(served) != "a-005 b-001" || names(limited) != "c-006" {
			t.Fatalf("served %q, limited %q", names(served), names(limited))
		}
	})
	t.Run("a tenant's reservations keep their room within its limit", func(t *testing.T) {
		pool := tenantPool(10, share("a", 0, ptr.To[int32](2), 1))
		adhoc := waiting("a", 1, 0) // maxDuration 1h: it would still run at the reservation's start
		other := waiting("b", 2, 0)
		leave := 15 * time.Second
		promises := &TenantPromises{Now: fairEpoch, Leave: leave,
			// One bound now, and the reservation's own window (HoldsOf counts both).
			Holds: map[string][]Hold{"a": {{From: fairEpoch.Add(-time.Minute), Until: fairEpoch.Add(time.Hour)},
				{From: fairEpoch.Add(30 * time.Minute), Until: fairEpoch.Add(90 * time.Minute)}}},
			Pending: map[string]map[types.UID]Hold{"a": {"r": {From: fairEpoch.Add(30 * time.Minute), Until: fairEpoch.Add(90 * time.Minute)}}}}
		served, limited := FairOrder(pool, []*v1.Bot{adhoc, other}, map[string]int32{"a": 1}, promises)
		if names(served) != "b-002" || names(limited) != "a-001" {
			t.Fatalf("served %q, limited %q; want a's ad-hoc bot kept off the room its reservation needs", names(served), names(limited))
		}
		// A meeting short enough to end before the reservation's start fits.
		adhoc.Spec.MaxDuration = "10m"
		promises.Holds["a"] = promises.Holds["a"][:2]
		served, _ = FairOrder(pool, []*v1.Bot{adhoc, other}, map[string]int32{"a": 1}, promises)
		if !strings.Contains(names(served), "a-001") {
			t.Fatalf("served %q; want a's 10-minute bot served", names(served))
		}
	})
	t.Run("a label names the tenant of the pool's own bots, the namespace any other's", func(t *testing.T) {
		own := waiting("platform", 1, 0)
		own.Labels = map[string]string{"example.com/customer": "acme"}
		foreign := waiting("team-a", 2, 0)
		foreign.Labels = map[string]string{"example.com/customer": "acme"}
		pool := tenantPool(10, share("acme", 0, ptr.To[int32](1), 1))
		pool.Spec.Tenancy.Key, pool.Spec.Tenancy.Label = v1.TenantByLabel, "example.com/customer"
		if got := TenantOf(pool, own); got != "acme" {
			t.Errorf("own bot's tenant %q", got)
		}
		if got := TenantOf(pool, foreign); got != "team-a" {
			t.Errorf("foreign bot's tenant %q; want its namespace, not the label it claims", got)
		}
		served, _ := FairOrder(pool, []*v1.Bot{own, foreign}, map[string]int32{"acme": 0}, nil)
		if names(served) != "platform-001 team-a-002" {
			t.Fatalf("served %q: the foreign bot must not count against acme's limit", names(served))
		}
	})
}

// TestFairOrderRules checks FairOrder's promises on random queues: every bot once, no tenant
// past its limit, each tenant's bots in queue order, and every slot handed to a tenant at or
// above its guarantee only when no tenant below its own waits.
func TestFairOrderRules(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 33))
	for run := range 500 {
		nt := 1 + rng.IntN(5)
		var tenants []v1.TenantPolicy
		usage := map[string]int32{}
		for i := range nt {
			name := fmt.Sprintf("t%d", i)
			var limit *int32
			if rng.IntN(2) == 0 {
				limit = ptr.To(int32(rng.IntN(8)))
			}
			g := int32(rng.IntN(4))
			if limit != nil && g > *limit {
				g = *limit
			}
			tenants = append(tenants, share(name, g, limit, int32(1+rng.IntN(3))))
			usage[name] = int32(rng.IntN(5))
		}
		pool := tenantPool(40, tenants...)
		var q []*v1.Bot
		for i := range rng.IntN(40) {
			q = append(q, waiting(fmt.Sprintf("t%d", rng.IntN(nt)), i, int32(rng.IntN(3))))
		}
		SortQueue(q)
		served, limited := FairOrder(pool, q, usage, nil)
		if len(served)+len(limited) != len(q) {
			t.Fatalf("run %d: %d served and %d limited of %d", run, len(served), len(limited), len(q))
		}
		held := map[string]int32{}
		for k, v := range usage {
			held[k] = v
		}
		last := map[string]int{} // position in q of each tenant's last served bot
		pos := map[*v1.Bot]int{}
		for i, b := range q {
			pos[b] = i
		}
		for i, b := range served {
			tn := TenantOf(pool, b)
			sh := ShareOf(pool, tn)
			if held[tn] >= sh.Limit {
				t.Fatalf("run %d: slot %d went to %s holding %d of its limit %d", run, i, tn, held[tn], sh.Limit)
			}
			if p, ok := last[tn]; ok && pos[b] < p {
				t.Fatalf("run %d: %s's bots out of queue order", run, tn)
			}
			last[tn] = pos[b]
			if held[tn] >= sh.Guaranteed {
				// Nobody below its guarantee may wait with room left.
				for _, w := range served[i+1:] {
					wt := TenantOf(pool, w)
					ws := ShareOf(pool, wt)
					if held[wt] < ws.Guaranteed && held[wt] < ws.Limit {
						t.Fatalf("run %d: slot %d went to %s (at or above its guarantee) while %s held %d of its guarantee %d",
							run, i, tn, wt, held[wt], ws.Guaranteed)
					}
				}
			}
			held[tn]++
		}
	}
}
