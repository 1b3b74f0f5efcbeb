package pool

import (
	"sort"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
)

// tenantStatuses is status.tenants and status.tenantCount of a pool with tenants
// (policy.Tenancy): per tenant, its bots bound to the pool's slots (the slots' botRefs, of
// bots that have not ended) and those waiting in its queue, with its limit and guarantee. The
// list keeps at most v1.MaxTenantStatuses tenants: those held at their limit first (their bots
// read their TenantLimit reason here), then the busiest, then by name. servable is how many of
// the waiting bots a slot could serve: each tenant's up to the room its limit leaves.
func tenantStatuses(pool *v1.BotPool, slots []v1.BotPoolSlot, bots []v1.Bot) (list []v1.TenantStatus, count int32, servable int) {
	if policy.Tenancy(pool) == nil {
		return nil, 0, 0
	}
	byUID := make(map[types.UID]*v1.Bot, len(bots))
	for i := range bots {
		byUID[bots[i].UID] = &bots[i]
	}
	counts := map[string]*v1.TenantStatus{}
	of := func(name string) *v1.TenantStatus {
		t := counts[name]
		if t == nil {
			share := policy.ShareOf(pool, name)
			t = &v1.TenantStatus{Name: name, Guaranteed: share.Guaranteed}
			if share.Limited {
				t.Limit = ptr.To(share.Limit)
			}
			counts[name] = t
		}
		return t
	}
	for i := range slots {
		if ref := slots[i].Spec.BotRef; ref != nil {
			if b := byUID[ref.UID]; b != nil && !b.Status.Phase.Terminal() && !b.LeftSlot(&slots[i]) {
				of(policy.TenantOf(pool, b)).Bound++
			}
		}
	}
	for i := range bots {
		if b := &bots[i]; b.Status.Phase == v1.BotQueued {
			of(policy.TenantOf(pool, b)).Waiting++
		}
	}
	out := make([]v1.TenantStatus, 0, len(counts))
	for _, t := range counts {
		out = append(out, *t)
		room := t.Waiting
		if t.Limit != nil {
			room = min(room, max(0, *t.Limit-t.Bound))
		}
		servable += int(room)
	}
	held := func(t *v1.TenantStatus) bool { return policy.Held(*t) }
	sort.Slice(out, func(i, j int) bool {
		a, b := &out[i], &out[j]
		if held(a) != held(b) {
			return held(a)
		}
		if a.Bound+a.Waiting != b.Bound+b.Waiting {
			return a.Bound+a.Waiting > b.Bound+b.Waiting
		}
		return a.Name < b.Name
	})
	n := int32(len(out))
	if len(out) > v1.MaxTenantStatuses {
		out = out[:v1.MaxTenantStatuses]
	}
	return out, n, servable
}
