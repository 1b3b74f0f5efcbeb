package callback

import (
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

var (
	// ErrNoSignature: the request carries no v1 signature matching the secret.
	ErrNoSignature = errors.New("no matching webhook signature")
	// ErrTimestamp: the webhook-timestamp is missing, invalid or outside the tolerance.
	ErrTimestamp = errors.New("webhook timestamp missing or outside the tolerance")
)

// DecodeSecret reads a signing secret as kept in a Secret's key: "whsec_" followed by
// base64 is decoded, as Standard Webhooks libraries do; anything else is used as raw bytes.
// Surrounding whitespace is ignored (a Secret made with --from-file keeps the newline).
func DecodeSecret(v []byte) ([]byte, error) {
	s := strings.TrimSpace(string(v))
	if !strings.HasPrefix(s, secretPrefix) {
		if s == "" {
			return nil, errors.New("empty webhook secret")
		}
		return []byte(s), nil
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, secretPrefix))
	if err != nil {
		// Not the decoder's error: where the base64 breaks says something about the key.
		return nil, fmt.Errorf("webhook secret starts with %s but the rest is not base64", secretPrefix)
	}
	if len(key) == 0 {
		return nil, errors.New("empty webhook secret")
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
