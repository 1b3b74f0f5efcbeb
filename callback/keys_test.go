package callback

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/store/memory"
)

// secretStore is a SecretSource over Secrets held as namespace/name → key → value, counting
// the reads of each Secret; a Secret it does not hold is refused.
type secretStore struct {
	mu      sync.Mutex
	secrets map[string]map[string][]byte
	reads   map[string]int
}

func newSecretStore() *secretStore {
	return &secretStore{secrets: map[string]map[string][]byte{}, reads: map[string]int{}}
}

func (s *secretStore) put(ns, name, key string, value []byte) {
	ref := ns + "/" + name
	if s.secrets[ref] == nil {
		s.secrets[ref] = map[string][]byte{}
	}
	s.secrets[ref][key] = value
}

func (s *secretStore) WebhookKeys(_ context.Context, ns, name string, keys []string) ([]SigningKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ref := ns + "/" + name
	s.reads[ref]++
	data, ok := s.secrets[ref]
	if !ok {
		return nil, fmt.Errorf("no Secret %s", ref)
	}
	out := make([]SigningKey, len(keys))
	for i, k := range keys {
		v, ok := data[k]
		if !ok {
			out[i].Err = fmt.Errorf("no key %s[%s]", ref, k)
			continue
		}
		out[i].Key, out[i].Err = DecodeSecret(v)
	}
	return out, nil
}

// largestKey is a whsec_ key of MaxKeyLen bytes, its own for each seed.
func largestKey(seed string) []byte {
	raw := bytes.Repeat([]byte(seed), MaxKeyLen/len(seed)+1)[:MaxKeyLen]
	return []byte(secretPrefix + base64.StdEncoding.EncodeToString(raw))
}

// TestRelayReadsEachSecretOncePerPass: 300 messages in three batches, of two namespaces, name
// two keys of their namespace's Secret, or of a Secret that does not exist: a pass reads each
// Secret once, and signs each message with its own namespace's and key's key. It read a
// Secret once per key it was named with.
func TestRelayReadsEachSecretOncePerPass(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	outbox := memory.NewOutbox(100)
	src := newSecretStore()
	want := map[string][]byte{} // bot namespace/name → its key, decoded
	for _, ns := range []string{"team-a", "team-b"} {
		for _, k := range []string{"secret", "rotated"} {
			src.put(ns, "hook", k, largestKey(ns+k))
		}
		for i := range 150 {
			ref := &v1.WebhookSecretRef{Name: "hook", Key: []string{"secret", "rotated"}[i%2]}
			if i%10 >= 8 {
				ref.Name = "gone" // with both keys, in every batch
			}
			m := tenantMessage(t, outbox, clk.Now(), ns, i, "https://hooks.example/"+ns, ref)
			if ref.Name == "hook" {
				want[ns+"/"+m.Name], _ = DecodeSecret(largestKey(ns + ref.Key))
			}
		}
	}
	held := &heldSender{}
	relay := NewRelay(RelayOptions{Outbox: outbox, Sender: held, Secrets: src, Clock: clk})
	if n := relay.Pass(context.Background()); n != 240 {
		t.Fatalf("handed over %d, want the 240 messages whose Secret exists", n)
	}
	for _, ref := range []string{"team-a/hook", "team-b/hook", "team-a/gone", "team-b/gone"} {
		if n := src.reads[ref]; n != 1 {
			t.Errorf("Secret %s read %d times in a pass, want once", ref, n)
		}
	}
	for _, cb := range held.held {
		headers, send := cb.Prepare(clk.Now())
		h := http.Header{}
		for k, v := range headers {
			h.Set(k, v)
		}
		if err := Verify(want[cb.Body.Namespace+"/"+cb.Body.Bot], h, cb.Raw, clk.Now(), time.Second); !send || err != nil {
			t.Fatalf("%s/%s: sent %v, signature %v; want it signed with its own key", cb.Body.Namespace, cb.Body.Bot, send, err)
		}
	}
}

// TestRelayReadsASecretAgainOnlyForANewKey: a key of a Secret first named by a later batch of
// the pass is read then (once more), and the keys read before stay in use.
func TestRelayReadsASecretAgainOnlyForANewKey(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	outbox := memory.NewOutbox(100)
	src := newSecretStore()
	want := map[string][]byte{}
	for i, k := range []string{"secret", "secret", "rotated", "secret"} { // batches of 2
		src.put("team-a", "hook", k, largestKey(k))
		m := tenantMessage(t, outbox, clk.Now(), "team-a", i, "https://hooks.example/a", &v1.WebhookSecretRef{Name: "hook", Key: k})
		want[m.Name], _ = DecodeSecret(largestKey(k))
	}
	held := &heldSender{}
	relay := NewRelay(RelayOptions{Outbox: outbox, Sender: held, Secrets: src, Clock: clk, Batch: 2})
	if n := relay.Pass(context.Background()); n != 4 {
		t.Fatalf("handed over %d, want 4", n)
	}
	if n := src.reads["team-a/hook"]; n != 2 {
		t.Errorf("Secret read %d times, want twice: for the first batch, and for the key the second names first", n)
	}
	for _, cb := range held.held {
		headers, _ := cb.Prepare(clk.Now())
		h := http.Header{}
		for k, v := range headers {
			h.Set(k, v)
		}
		if err := Verify(want[cb.Body.Bot], h, cb.Raw, clk.Now(), time.Second); err != nil {
			t.Errorf("%s: %v, want it signed with the key it names", cb.Body.Bot, err)
		}
	}
}

// TestRelayHoldsEachKeyOnce: after a pass hands over 1,000 messages signed with keys of the
// largest size allowed, the heap holds about those keys and no more: one key when the messages
// share a Secret, a thousand (1,000 KiB) when each names its own; keys above the limit are
// refused and not held at all. Measured against the same pass of unsigned messages.
func TestRelayHoldsEachKeyOnce(t *testing.T) {
	const n = 1000
	shared, own, tooLarge := newSecretStore(), newSecretStore(), newSecretStore()
	shared.put("team-a", "hook", "secret", largestKey("shared"))
	huge := []byte(secretPrefix + base64.StdEncoding.EncodeToString(make([]byte, 64<<10)))
	for i := range n {
		own.put("team-a", fmt.Sprint("hook-", i), "secret", largestKey(fmt.Sprint(i, "-")))
		tooLarge.put("team-a", fmt.Sprint("hook-", i), "secret", huge)
	}
	// grows is how much the live heap grew over one pass of n messages of which secretOf names
	// the Secret (key "secret"; "" for unsigned), and how many it handed over.
	grows := func(src SecretSource, secretOf func(i int) string) (int64, int) {
		clk := clocktesting.NewFakeClock(epoch)
		outbox := memory.NewOutbox(100)
		for i := range n {
			var ref *v1.WebhookSecretRef
			if name := secretOf(i); name != "" {
				ref = &v1.WebhookSecretRef{Name: name, Key: "secret"}
			}
			tenantMessage(t, outbox, clk.Now(), "team-a", i, "https://hooks.example/h", ref)
		}
		held := &heldSender{held: make([]Callback, 0, n)}
		relay := NewRelay(RelayOptions{Outbox: outbox, Sender: held, Secrets: src, Clock: clk})
		before := liveHeap()
		sent := relay.Pass(context.Background())
		after := liveHeap()
		runtime.KeepAlive(held)
		runtime.KeepAlive(outbox)
		return int64(after) - int64(before), sent
	}
	base, sent := grows(nil, func(int) string { return "" })
	if sent != n {
		t.Fatalf("handed over %d unsigned messages, want %d", sent, n)
	}
	oneKey, sent := grows(shared, func(int) string { return "hook" })
	if sent != n {
		t.Fatalf("handed over %d messages sharing a Secret, want %d", sent, n)
	}
	ownKeys, sent := grows(own, func(i int) string { return fmt.Sprint("hook-", i) })
	if sent != n {
		t.Fatalf("handed over %d messages with their own Secrets, want %d", sent, n)
	}
	refused, sent := grows(tooLarge, func(i int) string { return fmt.Sprint("hook-", i) })
	if sent != 0 {
		t.Errorf("handed over %d messages with keys above the limit", sent)
	}
	// The stores stay live through every measurement, so none of them is freed inside another's.
	runtime.KeepAlive(shared)
	runtime.KeepAlive(own)
	runtime.KeepAlive(tooLarge)
	t.Logf("heap growth over a pass of %d messages: unsigned %d KiB, one shared key %d KiB, a key each %d KiB, keys above the limit %d KiB",
		n, base>>10, oneKey>>10, ownKeys>>10, refused>>10)
	// A copy of the key per message would add n·MaxKeyLen (1,000 KiB) to the shared case.
	if d := oneKey - base; d > 256<<10 {
		t.Errorf("messages sharing one key grew the heap %d KiB more than unsigned ones, want one key's worth", d>>10)
	}
	// n distinct keys are n·MaxKeyLen; twice that leaves room for their slices and the map.
	if d := ownKeys - base; d > 2*n*MaxKeyLen {
		t.Errorf("messages with a key each grew the heap %d KiB more than unsigned ones, want about %d KiB", d>>10, n*MaxKeyLen>>10)
	}
	// Refused, nothing is handed over (the pass ends with the first batch, of which nothing
	// went): the growth is the errors the outbox recorded.
	if refused > 2<<20 {
		t.Errorf("a pass over keys above the limit grew the heap %d KiB, want them refused and not held", refused>>10)
	}
}

// liveHeap is the heap in use after a collection: what is still referenced.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
