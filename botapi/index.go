package botapi

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// A request's token is hashed (slottoken.Hash) and looked up among the slots' recorded
// status.tokenSHA256 through a cache index; the bot API never reads the token Secrets the slot
// controller writes: a Secret anyone else wrote, whatever its labels and owner references,
// authenticates nothing. See package slottoken for what a slot token is.
const (
	indexTokenHash   = "status.tokenSHA256"
	indexAppUUID     = "status.applicationUUID"
	indexBindingHash = "status.binding.credentialSHA256"
)

// IndexFields registers the cache indexes the bot API looks things up by: slots by their
// application uuid and by the hash of the token the operator issued them, bots by the hash of
// the binding credential the bot API handed out (status.binding, written by the bot API
// alone). Call it before the cache starts.
func IndexFields(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &v1.BotPoolSlot{}, indexAppUUID, func(o client.Object) []string {
		if uuid := o.(*v1.BotPoolSlot).Status.ApplicationUUID; uuid != "" {
			return []string{uuid}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := indexer.IndexField(ctx, &v1.BotPoolSlot{}, indexTokenHash, func(o client.Object) []string {
		if h := o.(*v1.BotPoolSlot).Status.TokenSHA256; h != "" {
			return []string{h}
		}
		return nil
	}); err != nil {
		return err
	}
	return indexer.IndexField(ctx, &v1.Bot{}, indexBindingHash, func(o client.Object) []string {
		if c := o.(*v1.Bot).Status.Binding; c != nil && c.CredentialSHA256 != "" {
			return []string{c.CredentialSHA256}
		}
		return nil
	})
}
