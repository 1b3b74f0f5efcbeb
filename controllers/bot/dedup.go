package bot

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/index"
	"botpool.dev/botpool/controllers/internal/policy"
)

// endDuplicate ends a queued bot whose deduplication key another bot of its pool holds
// (policy.Holder), Fatal with reason Duplicate and a message naming that bot; it reports
// whether it did. It decides under the pool's lock, the one a binding wave holds: a wave
// either bound its bots before (and the ledger says so: the bound one holds) or binds after,
// from a cache that shows at least the bots seen here, and so names the same holder. Only
// bots of the pool (status.pool) count, the ones the dispatcher sees. A bot alone with its key
// (the usual case) takes no lock.
func (r *Reconciler) endDuplicate(ctx context.Context, bot *v1.Bot, pool *v1.BotPool) (bool, error) {
	key := policy.DeduplicationKey(bot, pool)
	if key == "" || !policy.HoldsKeys(bot) {
		return false, nil
	}
	same, err := r.sameKey(ctx, bot, pool, key)
	if err != nil || len(same) < 2 {
		return false, err
	}
	if m := r.Reservations.PoolLock(types.NamespacedName{Namespace: pool.Namespace, Name: pool.Name}); m != nil {
		m.Lock()
		defer m.Unlock()
		if same, err = r.sameKey(ctx, bot, pool, key); err != nil {
			return false, err
		}
	}
	bound, err := r.Reservations.BoundIn(ctx, r.Client, pool, same, r.Clock.Now())
	if err != nil {
		return false, err
	}
	ptrs := make([]*v1.Bot, len(same))
	for i := range same {
		ptrs[i] = &same[i]
	}
	holder := policy.Holder(ptrs, func(b *v1.Bot) bool { return bound[b.UID] || b.Status.SlotName != "" })
	if holder == nil || holder.UID == bot.UID {
		return false, nil
	}
	r.fail(bot, v1.ReasonDuplicate, fmt.Sprintf("Bot %s holds this meeting in pool %s (deduplication key %s): one bot per meeting; this one ends",
		holder.Name, pool.Name, key))
	return true, nil
}

// sameKey is this bot (this pass's copy: its status.pool and phase are set already) and the
// other bots of the pool that have its deduplication key and have not ended, as the cache
// shows them (the index leaves ended bots out).
func (r *Reconciler) sameKey(ctx context.Context, bot *v1.Bot, pool *v1.BotPool, key string) ([]v1.Bot, error) {
	var list v1.BotList
	if err := r.Client.List(ctx, &list, client.InNamespace(bot.Namespace), client.MatchingFields{index.BotDeduplication: key},
		client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the bots of deduplication key %s: %w", key, err)
	}
	same := []v1.Bot{*bot}
	for i := range list.Items {
		c := &list.Items[i]
		if c.UID != bot.UID && c.PoolKey() == bot.PoolKey() && policy.DeduplicationKey(c, pool) == key {
			same = append(same, *c) // a shallow copy: read, never written
		}
	}
	return same, nil
}
