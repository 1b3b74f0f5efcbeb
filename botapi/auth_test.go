package botapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/botapi/botclient"
	"botpool.dev/botpool/internal/slottoken"
)

// TestForgedTokenSecretIsRefused: whoever may create Secrets in the namespace can write one
// that looks like a slot's token Secret — the label, the slot's name, a controller reference to
// the slot — or overwrite the real one. Only the token whose hash the slot controller recorded
// in the slot's status authenticates.
func TestForgedTokenSecretIsRefused(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	s := h.slot("pool-zoom-001")
	forged, err := slottoken.New()
	must(t, err)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "pool-zoom-001-token-2",
			Labels: map[string]string{v1.LabelSlotToken: "true", v1.LabelSlot: s.slot.Name}},
		Data: map[string][]byte{slottoken.Key: []byte(forged)},
	}
	must(t, controllerutil.SetControllerReference(s.slot, secret, env.Scheme))
	must(t, env.Client.Create(ctx, secret))

	path := "/v1/slots/" + s.app + "/config"
	code, body := h.call("GET", path, forged, "")
	wantStatus(t, "a forged Secret's token", code, body, 401, "invalid token")

	// Overwriting the operator's Secret changes nothing either: the bot API never reads it.
	real := &corev1.Secret{}
	must(t, env.Client.Get(ctx, keyOf(h.ns, slottoken.SecretName(s.slot.Name)), real))
	real.Data[slottoken.Key] = []byte(forged)
	must(t, env.Client.Update(ctx, real))
	code, body = h.call("GET", path, forged, "")
	wantStatus(t, "a token written into the slot's Secret", code, body, 401, "invalid token")

	if _, err := h.client(s).Config(ctx); !errors.Is(err, botclient.ErrSlotFree) {
		t.Errorf("the issued token: %v, want the free slot's 404", err)
	}
}

// TestTokenHashSharedBySlotsIsRefused: the operator issues every slot a fresh token, so two
// slots recording one hash means someone copied a status; neither is served.
func TestTokenHashSharedBySlotsIsRefused(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	a := h.slot("pool-zoom-001")
	b := h.slot("pool-zoom-002")
	must(t, env.Client.Get(ctx, keyOf(h.ns, b.slot.Name), b.slot))
	b.slot.Status.TokenSHA256 = slottoken.Hash([]byte(a.token))
	must(t, env.Client.Status().Update(ctx, b.slot))
	h.synced(b.slot)
	code, body := h.call("GET", "/v1/slots/"+a.app+"/config", a.token, "")
	wantStatus(t, "a hash two slots record", code, body, 401, "invalid token")
}

// TestFailedAuthenticationsAreLimited: requests with bad tokens meet a limit per client
// address; past it they get 429 with Retry-After until the budget refills, while a good token
// from that address is served as ever (containers of several tenants share an address, and
// retired ones send replaced tokens).
func TestFailedAuthenticationsAreLimited(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.AuthFailureRate, c.AuthFailureBurst = 0.5, 3 })
	ctx := context.Background()
	s := h.slot("pool-zoom-001")
	path := "/v1/slots/" + s.app + "/config"
	for i := range 3 {
		code, body := h.call("GET", path, fmt.Sprintf("bpt_guess-%d", i), "")
		wantStatus(t, fmt.Sprintf("bad token %d, within the budget", i), code, body, 401, "invalid token")
	}
	code, retryAfter := h.callWithHeader("GET", path, "bpt_guess-3", "Retry-After")
	if code != http.StatusTooManyRequests || retryAfter != "2" {
		t.Errorf("bad token past the budget: %d, Retry-After %q; want 429, 2 (one failure at 0.5/s)", code, retryAfter)
	}
	code, _ = h.callWithHeader("GET", path, "", "Retry-After")
	if code != http.StatusTooManyRequests {
		t.Errorf("a request without a token from a limited address: %d, want 429", code)
	}
	if code, _ := h.callWithHeader("GET", path, s.token, "Retry-After"); code != http.StatusNotFound {
		t.Errorf("the valid token from a limited address: %d, want the free slot's 404", code)
	}
	h.clock.Step(2 * time.Second)
	if _, err := h.client(s).Config(ctx); !errors.Is(err, botclient.ErrSlotFree) {
		t.Errorf("after the budget refilled: %v, want the free slot's 404", err)
	}
	// Successes cost nothing: a slot's calls never use up its address's budget.
	for i := range 10 {
		if _, err := h.client(s).Config(ctx); !errors.Is(err, botclient.ErrSlotFree) {
			t.Fatalf("call %d with the valid token: %v", i, err)
		}
	}
}

func TestFailureLimiterKeys(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	f := newFailureLimiter(1, 1)
	f.failed("192.0.2.1", now)
	if f.blocked("192.0.2.1", now) != time.Second {
		t.Errorf("an address past its budget is not blocked for 1s: %v", f.blocked("192.0.2.1", now))
	}
	if d := f.blocked("192.0.2.2", now); d != 0 {
		t.Errorf("another address is blocked (%v)", d)
	}
	if d := f.blocked("192.0.2.1", now.Add(time.Second)); d != 0 {
		t.Errorf("blocked after the budget refilled (%v)", d)
	}

	// Past maxFailureKeys addresses with drained budgets, new ones share one limiter: memory
	// stays bounded and the spray still meets a limit.
	for i := range maxFailureKeys {
		f.failed(fmt.Sprintf("k%d", i), now)
	}
	if len(f.byKey) != maxFailureKeys {
		t.Fatalf("%d limiters, want %d", len(f.byKey), maxFailureKeys)
	}
	f.failed("new-1", now)
	if len(f.byKey) != maxFailureKeys || f.blocked("new-2", now) == 0 {
		t.Errorf("past the bound: %d limiters, new address blocked %v; want %d and the overflow's limit", len(f.byKey), f.blocked("new-2", now), maxFailureKeys)
	}
	// Once budgets refill, their limiters are dropped to make room.
	later := now.Add(time.Minute)
	f.failed("new-3", later)
	if len(f.byKey) != 1 {
		t.Errorf("%d limiters after the others refilled, want 1", len(f.byKey))
	}
}

func TestClientKey(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7:40000":               "192.0.2.7",
		"[::ffff:192.0.2.7]:40000":      "192.0.2.7",
		"[2001:db8:1:2:aaaa::1]:40000":  "2001:db8:1:2::/64",
		"[2001:db8:1:2:bbbb:cccc::9]:1": "2001:db8:1:2::/64",
		"not-an-address":                "not-an-address",
		"[2001:db8:1:3::1%eth0]:40000":  "2001:db8:1:3::/64",
	} {
		if got := clientKey(in); got != want {
			t.Errorf("clientKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func keyOf(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

// callWithHeader sends one request and returns the status code and one header of the answer.
func (h *harness) callWithHeader(method, path, token, header string) (int, string) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, nil)
	must(h.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	must(h.t, err)
	_ = resp.Body.Close()
	return resp.StatusCode, resp.Header.Get(header)
}

// pauses is a Config.sleep that counts the catch-up pauses and holds each until released
// (hold), or returns at once.
type pauses struct {
	mu      sync.Mutex
	n       int
	hold    bool
	began   chan struct{} // one value per pause begun, when holding
	release chan struct{} // closed to release held pauses
}

func newPauses(hold bool) *pauses {
	return &pauses{hold: hold, began: make(chan struct{}, 16), release: make(chan struct{})}
}

func (p *pauses) sleep(ctx context.Context, _ time.Duration) error {
	p.mu.Lock()
	p.n++
	p.mu.Unlock()
	if !p.hold {
		return nil
	}
	p.began <- struct{}{}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-p.release:
		return nil
	}
}

func (p *pauses) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// TestUnknownCredentialPastTheFailureLimitIsRefusedAtOnce: an unknown binding credential gives
// the cache a moment (another replica may have claimed it an instant ago), but only when its
// address is within its failure budget: past it, 429 at once, without a pause.
func TestUnknownCredentialPastTheFailureLimitIsRefusedAtOnce(t *testing.T) {
	p := newPauses(false)
	h := newHarness(t, func(c *Config) { c.AuthFailureRate, c.AuthFailureBurst, c.sleep = 0.5, 2, p.sleep })
	unknown, _ := newBindingCredential()
	code, body := h.call("POST", "/v1/bots/standup/heartbeat", unknown, "")
	wantStatus(t, "an unknown credential within the budget", code, body, http.StatusUnauthorized, "invalid token")
	if n := p.count(); n != len(catchUpPauses(DefaultCatchUp)) {
		t.Fatalf("%d catch-up pauses within the budget, want %d", n, len(catchUpPauses(DefaultCatchUp)))
	}
	code, body = h.call("POST", "/v1/bots/standup/heartbeat", "bpb_made-up", "")
	wantStatus(t, "the budget's last failure", code, body, http.StatusUnauthorized, "invalid token")

	before := p.count()
	code, retryAfter := h.callWithHeader("POST", "/v1/bots/standup/heartbeat", unknown, "Retry-After")
	if code != http.StatusTooManyRequests || retryAfter != "2" {
		t.Errorf("an unknown credential past the budget: %d, Retry-After %q; want 429, 2", code, retryAfter)
	}
	if n := p.count() - before; n != 0 {
		t.Errorf("%d catch-up pauses for an address past its budget, want none", n)
	}
}

// TestCatchUpsHoldTheFailureBudget: the requests of one address giving the cache a moment hold
// its failure budget meanwhile, so that many sent at once cannot all wait: past the budget the
// next one is refused at once. A credential found meanwhile costs the budget nothing.
func TestCatchUpsHoldTheFailureBudget(t *testing.T) {
	p := newPauses(true)
	h := newHarness(t, func(c *Config) { c.AuthFailureRate, c.AuthFailureBurst, c.sleep = 0.5, 2, p.sleep })
	first, _ := newBindingCredential()
	second, _ := newBindingCredential()
	answers := make(chan int, 2)
	for _, cred := range []string{first, second} {
		go func() {
			code, _ := h.callWithHeader("POST", "/v1/bots/standup/heartbeat", cred, "Retry-After")
			answers <- code
		}()
		<-p.began // this one waits for the cache
	}
	third, _ := newBindingCredential()
	thirds := make(chan int, 1)
	go func() {
		code, _ := h.callWithHeader("POST", "/v1/bots/standup/heartbeat", third, "Retry-After")
		thirds <- code
	}()
	select {
	case code := <-thirds:
		if code != http.StatusTooManyRequests {
			t.Errorf("a third unknown credential while two wait for the cache: %d, want 429", code)
		}
	case <-p.began:
		t.Error("a third unknown credential waits for the cache too, past the budget two waiting ones hold")
	}
	close(p.release)
	for range 2 {
		if code := <-answers; code != http.StatusUnauthorized {
			t.Errorf("an unknown credential after its pauses: %d, want 401", code)
		}
	}
}

// lagCache is a cache that has not seen a claim yet the first time it is asked for it (another
// replica made it an instant ago).
type lagCache struct {
	client.Reader
	mu   sync.Mutex
	seen map[string]bool
}

func (c *lagCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	for _, o := range opts {
		if m, ok := o.(client.MatchingFields); ok && m[indexBindingHash] != "" {
			c.mu.Lock()
			seen := c.seen[m[indexBindingHash]]
			c.seen[m[indexBindingHash]] = true
			c.mu.Unlock()
			if !seen {
				return nil
			}
		}
	}
	return c.Reader.List(ctx, list, opts...)
}

// TestCredentialFoundAfterAPauseCostsNoFailure: a binding credential the cache shows after a
// pause is a success, served and not counted against its address's failure budget.
func TestCredentialFoundAfterAPauseCostsNoFailure(t *testing.T) {
	p := newPauses(false)
	h := newHarness(t, func(c *Config) {
		c.AuthFailureRate, c.AuthFailureBurst, c.sleep = 0.5, 1, p.sleep
		c.Cache = &lagCache{Reader: objCache, seen: map[string]bool{}}
	})
	s, _, _ := h.boundBot("pool-zoom-001", "standup")
	h.srv.mu.Lock()
	clear(h.srv.issued) // as if another replica had made the claim
	h.srv.mu.Unlock()
	code, body := h.call("POST", "/v1/bots/standup/heartbeat", s.cred, "")
	wantStatus(t, "a credential the cache shows after a pause", code, body, http.StatusOK, "continue")
	if p.count() != 1 {
		t.Errorf("%d pauses, want 1", p.count())
	}
	code, body = h.call("POST", "/v1/bots/standup/heartbeat", "bpb_made-up", "")
	wantStatus(t, "the budget's one failure", code, body, http.StatusUnauthorized, "invalid token")
	code, body = h.call("POST", "/v1/bots/standup/heartbeat", "bpb_made-up", "")
	wantStatus(t, "past the budget", code, body, http.StatusTooManyRequests, "invalid tokens")
}
