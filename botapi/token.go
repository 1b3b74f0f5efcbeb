package botapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// A slot's token lives in a Secret owned by the slot, named SecretName(slot), labelled with
// v1alpha1.LabelSlotToken and v1alpha1.LabelSlot, under the key TokenKey. The slot controller
// creates it; the bot API finds it by the token's hash through a cache index.
const (
	// TokenKey is the Secret key holding the token.
	TokenKey = "token"
	// tokenPrefix makes leaked tokens recognisable to secret scanners.
	tokenPrefix = "bpt_"

	indexTokenHash = "botpool.dev/token-sha256"
	indexAppUUID   = "status.applicationUUID"
)

// TokenSecretName is the name of a slot's token Secret.
func TokenSecretName(slot string) string { return slot + "-token" }

// NewToken returns a random slot token (256 bits).
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

func tokenHash(token []byte) string {
	sum := sha256.Sum256(token)
	return hex.EncodeToString(sum[:])
}

// IndexFields registers the cache indexes the bot API looks things up by: slots by their
// application uuid and token Secrets by the hash of their token. Call it before the cache
// starts.
func IndexFields(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &v1.BotPoolSlot{}, indexAppUUID, func(o client.Object) []string {
		if uuid := o.(*v1.BotPoolSlot).Status.ApplicationUUID; uuid != "" {
			return []string{uuid}
		}
		return nil
	}); err != nil {
		return err
	}
	return indexer.IndexField(ctx, &corev1.Secret{}, indexTokenHash, func(o client.Object) []string {
		s := o.(*corev1.Secret)
		if s.Labels[v1.LabelSlotToken] != "true" || len(s.Data[TokenKey]) == 0 {
			return nil
		}
		return []string{tokenHash(s.Data[TokenKey])}
	})
}
