package index

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
)

// Cache indexes the controllers look objects up by.
const (
	// SlotPool indexes BotPoolSlots by spec.pool.
	SlotPool = "spec.pool"
	// BotPool indexes Bots by the pool the bot controller resolved, as PoolKey: its namespace
	// and name, for a pool may serve bots of other namespaces. List with BotsOf.
	BotPool = "status.poolKey"
	// SlotBotUID indexes BotPoolSlots by spec.botRef.uid: the slot a bot is bound to.
	SlotBotUID = "spec.botRef.uid"
	// BotDeduplication indexes the Bots that have not ended by policy.IndexedDeduplicationKey:
	// the bots that may share a deduplication key.
	BotDeduplication = "deduplication"
)

// PoolKey is the BotPool index's value for a pool.
func PoolKey(namespace, name string) string { return namespace + "/" + name }

// BotsOf selects the bots routed to the pool, of every namespace: list with it and no
// namespace option.
func BotsOf(pool *v1.BotPool) client.MatchingFields {
	return client.MatchingFields{BotPool: PoolKey(pool.Namespace, pool.Name)}
}

// Setup registers the controllers' cache indexes; call it before the cache starts.
func Setup(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &v1.BotPoolSlot{}, SlotPool, func(o client.Object) []string {
		return []string{o.(*v1.BotPoolSlot).Spec.Pool}
	}); err != nil {
		return err
	}
	if err := indexer.IndexField(ctx, &v1.BotPoolSlot{}, SlotBotUID, func(o client.Object) []string {
		if ref := o.(*v1.BotPoolSlot).Spec.BotRef; ref != nil {
			return []string{string(ref.UID)}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := indexer.IndexField(ctx, &v1.Bot{}, BotPool, func(o client.Object) []string {
		if pool := o.(*v1.Bot).PoolKey(); pool.Name != "" {
			return []string{PoolKey(pool.Namespace, pool.Name)}
		}
		return nil
	}); err != nil {
		return err
	}
	return indexer.IndexField(ctx, &v1.Bot{}, BotDeduplication, func(o client.Object) []string {
		b := o.(*v1.Bot)
		if b.Status.Phase.Terminal() {
			return nil // holds no key: a meeting's history need not be read for its next bot
		}
		if key := policy.IndexedDeduplicationKey(b); key != "" {
			return []string{key}
		}
		return nil
	})
}
