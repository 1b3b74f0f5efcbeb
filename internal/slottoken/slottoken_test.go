package slottoken

import (
	"encoding/base64"
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		tok, err := New()
		if err != nil {
			t.Fatal(err)
		}
		body, ok := strings.CutPrefix(tok, prefix)
		if !ok {
			t.Fatalf("token %q lacks the %q prefix secret scanners recognise", tok, prefix)
		}
		raw, err := base64.RawURLEncoding.DecodeString(body)
		if err != nil || len(raw) != 32 {
			t.Fatalf("token %q: want 32 random bytes in unpadded base64url, got %d bytes (%v)", tok, len(raw), err)
		}
		if seen[tok] {
			t.Fatalf("token %q issued twice", tok)
		}
		seen[tok] = true
	}
}

func TestHash(t *testing.T) {
	// The recorded status.tokenSHA256 of existing slots was computed this way: the format may not
	// change, or every running container loses access.
	const want = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" // sha256("hello")
	if got := Hash([]byte("hello")); got != want {
		t.Fatalf("Hash(hello) = %s, want %s", got, want)
	}
	if Hash([]byte("a")) == Hash([]byte("b")) {
		t.Fatal("two tokens hash alike")
	}
}

func TestSecretName(t *testing.T) {
	// Existing slots' Secrets carry this name: changing it orphans their tokens.
	if got := SecretName("pool-abc12"); got != "pool-abc12-token" {
		t.Fatalf("SecretName = %q", got)
	}
}
