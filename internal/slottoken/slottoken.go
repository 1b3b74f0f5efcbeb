// Package slottoken holds what the slot controller and the bot API agree on about a slot's
// token: the bearer token a slot's containers send to the bot API (as BOTPOOL_SLOT_TOKEN) to
// prove which slot they run in.
//
// The BotPoolSlot controller (package controllers) issues a token with New, keeps it in a Secret
// owned by the slot, named SecretName(slot), labelled with v1alpha1.LabelSlotToken and
// v1alpha1.LabelSlot, under the key Key, and records Hash(token) in the slot's
// status.tokenSHA256. The bot API (package botapi) hashes the token a request carries and finds
// the slot by that hash through a cache index; it never reads Secrets, so a Secret anyone else
// wrote, whatever its labels and owner references, authenticates nothing.
//
// The helpers live here rather than in botapi so that the controllers do not depend on the HTTP
// server to name a Secret or hash a token.
package slottoken

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
)

const (
	// Key is the key of the token in a slot's token Secret.
	Key = "token"
	// prefix makes leaked tokens recognisable to secret scanners.
	prefix = "bpt_"
)

// SecretName is the name of the token Secret of the slot named slot.
func SecretName(slot string) string { return slot + "-token" }

// New returns a fresh random slot token (256 bits).
func New() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// Hash is the hex SHA-256 of a token, as recorded in a slot's status.tokenSHA256.
func Hash(token []byte) string {
	sum := sha256.Sum256(token)
	return hex.EncodeToString(sum[:])
}
