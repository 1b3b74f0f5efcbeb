package callback

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks (https://www.standardwebhooks.com) headers.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// secretPrefix marks a Standard Webhooks secret: base64 after it.
const secretPrefix = "whsec_"

// MaxKeyLen bounds a signing key, decoded. Standard Webhooks keys are 24 to 64 bytes, and
// HMAC-SHA256 first hashes a key longer than its 64-byte block down to 32 bytes, so a longer
// key is no stronger; 1 KiB leaves room for any key generator while keys stay small beside
// the messages that use them: the relay holds one per Secret key a pass reads, at most 1 MiB
// for a pass of 1,000 messages each naming its own. Without a bound, a tenant's 200 messages
// with 1 MiB keys held 200 MiB of a 512 MiB manager.
const MaxKeyLen = 1024

// ErrKeyTooLarge: a signing key longer than MaxKeyLen once decoded.
var ErrKeyTooLarge = fmt.Errorf("webhook secret is larger than %d bytes once decoded (Standard Webhooks keys are 24 to 64 bytes)", MaxKeyLen)

var (
	// ErrNoSignature: the request carries no v1 signature matching the secret.
	ErrNoSignature = errors.New("no matching webhook signature")
	// ErrTimestamp: the webhook-timestamp is missing, invalid or outside the tolerance.
	ErrTimestamp = errors.New("webhook timestamp missing or outside the tolerance")
)

// DecodeSecret reads a signing secret as kept in a Secret's key: "whsec_" followed by
// base64 is decoded, as Standard Webhooks libraries do; anything else is used as raw bytes.
// Surrounding whitespace is ignored (a Secret made with --from-file keeps the newline). A key
// longer than MaxKeyLen is refused (ErrKeyTooLarge), before any copy or decoding of it. The
// key returned never shares memory with v, so holding it does not hold the Secret read.
func DecodeSecret(v []byte) ([]byte, error) {
	v = bytes.TrimSpace(v)
	enc, encoded := bytes.CutPrefix(v, []byte(secretPrefix))
	if !encoded {
		switch {
		case len(v) == 0:
			return nil, errors.New("empty webhook secret")
		case len(v) > MaxKeyLen:
			return nil, ErrKeyTooLarge
		}
		return bytes.Clone(v), nil
	}
	// Twice the base64 of the largest key: room for the line breaks the decoder skips (base64
	// wraps at 76 by default), while a megabyte of it is refused without being decoded.
	if len(enc) > 2*base64.StdEncoding.EncodedLen(MaxKeyLen) {
		return nil, ErrKeyTooLarge
	}
	key := make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
	n, err := base64.StdEncoding.Decode(key, enc)
	if err != nil {
		// Not the decoder's error: where the base64 breaks says something about the key.
		return nil, fmt.Errorf("webhook secret starts with %s but the rest is not base64", secretPrefix)
	}
	switch key = key[:n]; {
	case n == 0:
		return nil, errors.New("empty webhook secret")
	case n > MaxKeyLen:
		return nil, ErrKeyTooLarge
	}
	return key, nil
}

// Sign returns the webhook-signature value of a message: "v1," and the base64 HMAC-SHA256,
// keyed by the decoded secret, of id "." unix-seconds "." body.
func Sign(key []byte, id string, ts time.Time, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + strconv.FormatInt(ts.Unix(), 10) + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// SignedHeaders are the three Standard Webhooks headers of a message sent at ts.
func SignedHeaders(key []byte, id string, ts time.Time, body []byte) map[string]string {
	return map[string]string{
		HeaderWebhookID:        id,
		HeaderWebhookTimestamp: strconv.FormatInt(ts.Unix(), 10),
		HeaderWebhookSignature: Sign(key, id, ts, body),
	}
}

// Verify checks a received message as a receiver should: the timestamp within tolerance of
// now (replay protection), and one of the space-separated v1 signatures equal, in constant
// time, to the one computed from the raw body. key is the decoded secret (DecodeSecret).
func Verify(key []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	id := h.Get(HeaderWebhookID)
	sec, err := strconv.ParseInt(h.Get(HeaderWebhookTimestamp), 10, 64)
	if id == "" || err != nil {
		return ErrTimestamp
	}
	ts := time.Unix(sec, 0)
	if d := now.Sub(ts); d > tolerance || d < -tolerance {
		return ErrTimestamp
	}
	want := Sign(key, id, ts, body)
	for _, sig := range strings.Fields(h.Get(HeaderWebhookSignature)) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	return ErrNoSignature
}
