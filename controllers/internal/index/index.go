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
	// BotPool indexes Bots by status.pool, the pool the bot controller resolved.
	BotPool = "status.pool"
	// SlotBotUID indexes BotPoolSlots by spec.botRef.uid: the slot a bot is bound to.
	SlotBotUID = "spec.botRef.uid"
	// BotDeduplication indexes the Bots that have not ended by policy.IndexedDeduplicationKey:
	// the bots that may share a deduplication key.
	BotDeduplication = "deduplication"
)

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
		if pool := o.(*v1.Bot).Status.Pool; pool != "" {
			return []string{pool}
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
