package botapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"botpool.dev/botpool/store"
)

func events(uid, namespace string, n, size int) []store.BotEvent {
	out := make([]store.BotEvent, n)
	for i := range out {
		out[i] = store.BotEvent{BotUID: types.UID(uid), Namespace: namespace, Type: "log", Data: []byte(`"` + strings.Repeat("x", max(size-5, 0)) + `"`)}
	}
	return out
}

// TestEventQuota spends one bot's quota and then its namespace's: the refusals name the scope
// and when to retry, other bots and namespaces are not affected, and the quota refills with
// the (fake) clock.
func TestEventQuota(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	live := &fakeLiveness{}
	reg := prometheus.NewRegistry()
	q := WithEventQuota(live, EventQuota{BotEvents: 10, BotBytes: 1 << 30, NamespaceEvents: 30, NamespaceBytes: 1 << 30, Window: 10 * time.Second}, clk, reg)
	ctx := context.Background()

	// Bot a may send its burst (100 events: one full request at least), then no more.
	if err := q.AppendBotEvents(ctx, events("a", "team-a", 100, 10)); err != nil {
		t.Fatal(err)
	}
	err := q.AppendBotEvents(ctx, events("a", "team-a", 10, 10))
	var qe *QuotaError
	if !errors.As(err, &qe) || qe.Scope != "bot" || qe.RetryAfter != time.Second {
		t.Fatalf("bot over its quota: %v, want a bot QuotaError retrying after 1s", err)
	}
	// Bot b, same namespace: its own quota is fresh, the namespace has 300 in all.
	if err := q.AppendBotEvents(ctx, events("b", "team-a", 100, 10)); err != nil {
		t.Fatal(err)
	}
	if err := q.AppendBotEvents(ctx, events("c", "team-a", 100, 10)); err != nil {
		t.Fatal(err)
	}
	err = q.AppendBotEvents(ctx, events("d", "team-a", 100, 10))
	if !errors.As(err, &qe) || qe.Scope != "namespace" {
		t.Fatalf("namespace over its quota: %v, want a namespace QuotaError", err)
	}
	// Another namespace is not affected by team-a's traffic.
	if err := q.AppendBotEvents(ctx, events("e", "team-b", 100, 10)); err != nil {
		t.Fatalf("another namespace: %v", err)
	}
	if got := len(live.events); got != 400 {
		t.Fatalf("the store got %d events, want the 400 accepted", got)
	}
	var m dto.Metric
	must(t, q.(*quotaLiveness).throttled.WithLabelValues("bot").Write(&m))
	if n := m.GetCounter().GetValue(); n != 1 {
		t.Fatalf("throttled{scope=bot} = %v, want 1", n)
	}

	// A refused batch takes nothing: a second later bot a may send 10 again.
	clk.Step(time.Second)
	if err := q.AppendBotEvents(ctx, events("a", "team-a", 10, 10)); err != nil {
		t.Fatalf("after a second: %v", err)
	}
}

// TestEventQuotaBytes bounds the volume, not only the count; a batch the store did not take is
// given back.
func TestEventQuotaBytes(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	live := &fakeLiveness{}
	q := WithEventQuota(live, EventQuota{BotBytes: 64 << 10, Window: time.Second}, clk, nil)
	ctx := context.Background()
	// The burst is at least one request of the largest size (768 KiB here).
	for range 48 {
		if err := q.AppendBotEvents(ctx, events("a", "ns", 1, 16<<10)); err != nil {
			t.Fatal(err)
		}
	}
	err := q.AppendBotEvents(ctx, events("a", "ns", 1, 16<<10))
	var qe *QuotaError
	if !errors.As(err, &qe) || qe.RetryAfter != 250*time.Millisecond {
		t.Fatalf("over the byte quota: %v, want a QuotaError retrying after 250ms", err)
	}

	clk.Step(time.Second) // 64 KiB back
	live.err = errors.New("store down")
	for range 2 {
		// Refused by the store twice; the quota is given back each time.
		if err := q.AppendBotEvents(ctx, events("a", "ns", 1, 48<<10)); err == nil || errors.As(err, &qe) {
			t.Fatalf("store failure: %v, want the store's error", err)
		}
	}
	live.err = nil
	if err := q.AppendBotEvents(ctx, events("a", "ns", 1, 48<<10)); err != nil {
		t.Fatalf("after the store's failures: %v, want the quota intact", err)
	}
}

func TestEventQuotaValidate(t *testing.T) {
	if err := (EventQuota{BotEvents: -1, Window: time.Second}).Validate(); err == nil {
		t.Error("negative rate accepted")
	}
	if err := (EventQuota{}).Validate(); err == nil {
		t.Error("zero window accepted")
	}
	if err := (EventQuota{BotEvents: 0, Window: time.Second}).Validate(); err != nil {
		t.Errorf("unlimited quota refused: %v", err)
	}
}

// TestEventQuotaAnswers429 checks what the bot sees: a 429 naming the quota, with Retry-After.
func TestEventQuotaAnswers429(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Liveness = WithEventQuota(c.Liveness, EventQuota{BotEvents: 1, Window: time.Second}, c.Clock, nil)
	})
	s, _, _ := h.boundBot("pool-zoom-001", "standup")
	body := `{"events":[` + strings.Repeat(`{"type":"log"},`, 99) + `{"type":"log"}]}`
	code, msg := h.call("POST", "/v1/bots/standup/events", s.cred, body)
	wantStatus(t, "first burst", code, msg, http.StatusAccepted, "accepted")
	req, _ := http.NewRequest("POST", h.url+"/v1/bots/standup/events", strings.NewReader(`{"events":[{"type":"log"}]}`))
	req.Header.Set("Authorization", "Bearer "+s.cred)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("over the quota: %d, Retry-After %q; want 429 with Retry-After 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}
