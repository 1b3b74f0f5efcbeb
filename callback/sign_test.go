package callback

import (
	"bytes"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// specSecret and the message below are the example of the Standard Webhooks specification
// (and of its reference libraries' tests).
const specSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func TestSignSpecVector(t *testing.T) {
	key, err := DecodeSecret([]byte(specSecret))
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"test": 2432232314}`)
	got := Sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), body)
	const want = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	if got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
}

func TestVerify(t *testing.T) {
	key := []byte("raw secret bytes")
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"phase":"Running"}`)
	headers := func(id string, ts time.Time, b []byte) http.Header {
		h := http.Header{}
		for k, v := range SignedHeaders(key, id, ts, b) {
			h.Set(k, v)
		}
		return h
	}
	tests := []struct {
		name string
		h    http.Header
		body []byte
		want error
	}{
		{"round trip", headers("m1", now, body), body, nil},
		{"several signatures, one matches", func() http.Header {
			h := headers("m1", now, body)
			h.Set(HeaderWebhookSignature, "v1,bm90IGl0 "+h.Get(HeaderWebhookSignature))
			return h
		}(), body, nil},
		{"tampered body", headers("m1", now, body), []byte(`{"phase":"Done"}`), ErrNoSignature},
		{"tampered timestamp", func() http.Header {
			h := headers("m1", now, body)
			h.Set(HeaderWebhookTimestamp, "1800000001")
			return h
		}(), body, ErrNoSignature},
		{"tampered id", func() http.Header {
			h := headers("m1", now, body)
			h.Set(HeaderWebhookID, "m2")
			return h
		}(), body, ErrNoSignature},
		{"too old", headers("m1", now.Add(-6*time.Minute), body), body, ErrTimestamp},
		{"from the future", headers("m1", now.Add(6*time.Minute), body), body, ErrTimestamp},
		{"no timestamp", func() http.Header {
			h := headers("m1", now, body)
			h.Del(HeaderWebhookTimestamp)
			return h
		}(), body, ErrTimestamp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := Verify(key, tt.h, tt.body, now, 5*time.Minute); !errors.Is(err, tt.want) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestDecodeSecret(t *testing.T) {
	if k, err := DecodeSecret([]byte("whsec_aGVsbG8=")); err != nil || string(k) != "hello" {
		t.Fatalf("whsec_ secret: %q %v", k, err)
	}
	if k, err := DecodeSecret([]byte("plain")); err != nil || string(k) != "plain" {
		t.Fatalf("raw secret: %q %v", k, err)
	}
	for _, bad := range []string{"whsec_!!!", "whsec_", ""} {
		if _, err := DecodeSecret([]byte(bad)); err == nil {
			t.Errorf("DecodeSecret(%q) = nil error", bad)
		}
	}
}

// TestDecodeSecretBoundsTheKey: a key of MaxKeyLen bytes is taken, raw or as whsec_ (line
// breaks included, as base64 wraps by default); a byte more, or a megabyte, is ErrKeyTooLarge.
func TestDecodeSecretBoundsTheKey(t *testing.T) {
	largest := bytes.Repeat([]byte{0xa5}, MaxKeyLen)
	wrapped := func(b []byte) string {
		enc := base64.StdEncoding.EncodeToString(b)
		var lines []string
		for len(enc) > 76 {
			lines, enc = append(lines, enc[:76]), enc[76:]
		}
		return secretPrefix + strings.Join(append(lines, enc), "\n") + "\n"
	}
	unpadded := secretPrefix + base64.RawStdEncoding.EncodeToString(bytes.Repeat([]byte{1}, MaxKeyLen+2))
	if len(unpadded)-len(secretPrefix) != base64.StdEncoding.EncodedLen(MaxKeyLen) {
		t.Fatalf("unpadded key of %d chars, want the padded length of the largest key", len(unpadded)-len(secretPrefix))
	}
	for _, c := range []struct {
		name, value string
		tooLarge    bool
	}{
		{"raw, largest", strings.Repeat("k", MaxKeyLen), false},
		{"whsec, largest", secretPrefix + base64.StdEncoding.EncodeToString(largest), false},
		{"whsec, largest, wrapped", wrapped(largest), false},
		{"raw, a byte more", strings.Repeat("k", MaxKeyLen+1), true},
		{"whsec, a byte more", secretPrefix + base64.StdEncoding.EncodeToString(append(largest, 1)), true},
		{"whsec, unpadded, two bytes more", unpadded, true},
		{"whsec, a megabyte", secretPrefix + base64.StdEncoding.EncodeToString(make([]byte, 1<<20)), true},
		{"raw, a megabyte", strings.Repeat("k", 1<<20), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			k, err := DecodeSecret([]byte(c.value))
			if c.tooLarge {
				if !errors.Is(err, ErrKeyTooLarge) {
					t.Fatalf("DecodeSecret = %d bytes, %v; want ErrKeyTooLarge", len(k), err)
				}
				return
			}
			if err != nil || len(k) != MaxKeyLen {
				t.Fatalf("DecodeSecret = %d bytes, %v; want the %d-byte key", len(k), err, MaxKeyLen)
			}
		})
	}
}
