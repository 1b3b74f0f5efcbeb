package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"botpool.dev/botpool/internal/egress"
)

// TestCallbackPolicy: Bot callbacks and webhooks refuse loopback by default, and a receiver on
// this machine gets nothing; --callback-allowed-cidrs with the loopback prefixes (what the
// demo passes with --webhook-url) lets them reach it, and nothing else besides.
func TestCallbackPolicy(t *testing.T) {
	t.Setenv("BOTPOOL_DATABASE_URL", "")
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(receiver.Close)
	post := func(p egress.Policy) error {
		c := &http.Client{Transport: p.Transport()}
		resp, err := c.Post(receiver.URL, "application/json", nil)
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	}
	loopback := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}
	refused := []netip.Addr{netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fe80::1")}

	defaults, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range append(loopback, refused...) {
		if err := defaults.callbackPolicy().Check(ip); !errors.Is(err, egress.ErrRefused) {
			t.Errorf("default policy, %s: %v, want refused", ip, err)
		}
	}
	if err := post(defaults.callbackPolicy()); !errors.Is(err, egress.ErrRefused) {
		t.Errorf("default policy, POST to %s: %v, want refused", receiver.URL, err)
	}

	demo, err := parseFlags([]string{"--callback-allowed-cidrs=127.0.0.0/8,::1/128"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range loopback {
		if err := demo.callbackPolicy().Check(ip); err != nil {
			t.Errorf("loopback allowed, %s: %v", ip, err)
		}
	}
	for _, ip := range refused {
		if err := demo.callbackPolicy().Check(ip); !errors.Is(err, egress.ErrRefused) {
			t.Errorf("loopback allowed, %s: %v, want refused still", ip, err)
		}
	}
	if err := post(demo.callbackPolicy()); err != nil {
		t.Errorf("loopback allowed, POST to %s: %v", receiver.URL, err)
	}
	// Coolify's egress is its own: the callbacks' exception does not widen it.
	if p := demo.egressPolicy(); len(p.Allowed) != 0 {
		t.Errorf("Coolify egress with --callback-allowed-cidrs: %+v, want no exception", p)
	}
}
