package botapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// A slot's token lives in a Secret owned by the slot, named TokenSecretName(slot), labelled with
// v1alpha1.LabelSlotToken and v1alpha1.LabelSlot, under the key TokenKey; the slot controller
// creates it and records the token's SHA-256 in the slot's status.tokenSHA256. The bot API
// finds the slot by that hash through a cache index and never reads Secrets: a Secret anyone
// else wrote, whatever its labels and owner references, authenticates nothing.
const (
	// TokenKey is the Secret key holding the token.
	TokenKey = "token"
	// tokenPrefix makes leaked tokens recognisable to secret scanners.
	tokenPrefix = "bpt_"

	indexTokenHash = "status.tokenSHA256"
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

// TokenHash is the hex SHA-256 of a token, as recorded in a slot's status.tokenSHA256.
func TokenHash(token []byte) string {
	sum := sha256.Sum256(token)
	return hex.EncodeToString(sum[:])
}

// IndexFields registers the cache indexes the bot API looks things up by: slots by their
// application uuid and by the hash of the token the operator issued them. Call it before the
// cache starts.
func IndexFields(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &v1.BotPoolSlot{}, indexAppUUID, func(o client.Object) []string {
		if uuid := o.(*v1.BotPoolSlot).Status.ApplicationUUID; uuid != "" {
			return []string{uuid}
		}
		return nil
	}); err != nil {
		return err
	}
	return indexer.IndexField(ctx, &v1.BotPoolSlot{}, indexTokenHash, func(o client.Object) []string {
		if h := o.(*v1.BotPoolSlot).Status.TokenSHA256; h != "" {
			return []string{h}
		}
		return nil
	})
}
