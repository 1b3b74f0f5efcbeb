package controllers

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/callback"
	"botpool.dev/botpool/coolify/sim"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// TestWebhookEveryPhaseThroughTheManager runs the manager's wiring end to end: a bot asking
// for every phase gets one signed POST per phase the controller saw, in the bot's phase order,
// each a new webhook-id; the receiver's first answer is a 503, so the first message is tried
// again (same id) on the relay's backoff, and the ones after it wait for it. status.webhook
// ends with every message delivered, the last one Done.
func TestWebhookEveryPhaseThroughTheManager(t *testing.T) {
	key, _ := callback.DecodeSecret([]byte(bt.WebhookKey))
	var mu sync.Mutex
	var ids, phases, refused []string
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		// The fake clock runs ahead of the header's stamp as the test steps it: the tolerance
		// is the test's whole run, the signature is what is checked.
		if err := callback.Verify(key, r.Header, body, clk.Now(), 24*time.Hour); err != nil {
			refused = append(refused, err.Error())
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		ids = append(ids, r.Header.Get(callback.HeaderWebhookID))
		if len(ids) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var ev callback.PhaseEvent
		_ = json.Unmarshal(body, &ev)
		phases = append(phases, ev.Phase)
	}))
	defer receiver.Close()

	sc := newScenario(t, "webhooks", sim.Config{})
	secret := bt.WebhookSecret("team-a", "hook", true)
	secret.Namespace = sc.ns
	if err := env.Client.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	bot, _ := sc.running("hooked", func(b *v1.Bot) {
		b.Spec.Webhook = &v1.Webhook{URL: receiver.URL + "/hook", Events: v1.WebhookEveryPhase,
			SecretRef: &v1.WebhookSecretRef{Name: secret.Name, Key: "secret"}}
	})
	finish(t, bot)
	done := waitBot(t, bot, "every message delivered", func(b *v1.Bot) bool {
		step(5 * time.Second) // the relay polls, and backs off, on the fake clock
		w := b.Status.Webhook
		return w != nil && w.DeliveredPhase == v1.BotDone && w.Pending == 0 && int64(w.Delivered) == w.Sequence
	})

	mu.Lock()
	defer mu.Unlock()
	t.Logf("received %v with ids %v; status.webhook %+v", phases, ids, done.Status.Webhook)
	if len(refused) > 0 {
		t.Fatalf("the receiver refused signatures: %v", refused)
	}
	if len(phases) < 2 || phases[len(phases)-1] != string(v1.BotDone) || int64(len(phases)) != done.Status.Webhook.Sequence {
		t.Fatalf("received phases %v, status.webhook %+v: want one per message, the last Done", phases, done.Status.Webhook)
	}
	order := []v1.BotPhase{v1.BotPending, v1.BotScheduled, v1.BotQueued, v1.BotDeploying, v1.BotJoiningCall,
		v1.BotInWaitingRoom, v1.BotInCall, v1.BotLeaving, v1.BotCallEnded, v1.BotDone}
	last := -1
	for _, p := range phases {
		i := slices.Index(order, v1.BotPhase(p))
		if i <= last {
			t.Fatalf("received phases %v: not in the bot's phase order", phases)
		}
		last = i
	}
	if ids[0] != ids[1] {
		t.Errorf("the retry of the refused message came with id %s, want %s (ids %v)", ids[1], ids[0], ids)
	}
	if distinct := slices.Compact(slices.Clone(ids[1:])); len(distinct) != len(phases) {
		t.Errorf("ids %v: want one per delivered message", ids)
	}
	if done.Status.Webhook.Failures != 0 || done.Status.Webhook.LastError != "" {
		t.Errorf("status.webhook %+v: want no failures, and the 503 forgotten once delivered", done.Status.Webhook)
	}
}

// TestWebhookScheduledBotSaysSo: a bot scheduled hours ahead waits, and its webhook hears of it
// at once (Scheduled), not only when the bot enters the queue. Unsigned: no secretRef.
func TestWebhookScheduledBotSaysSo(t *testing.T) {
	var mu sync.Mutex
	var phases []string
	var signed bool
	receiver := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		var ev callback.PhaseEvent
		_ = json.NewDecoder(r.Body).Decode(&ev)
		mu.Lock()
		defer mu.Unlock()
		phases = append(phases, ev.Phase)
		signed = signed || r.Header.Get(callback.HeaderWebhookSignature) != ""
	}))
	defer receiver.Close()
	sc := newScenario(t, "scheduled-hook", sim.Config{})
	start := metav1.NewTime(clk.Now().Add(3 * time.Hour))
	bot := newBot(t, sc.ns, "later", sc.pool.Name, func(b *v1.Bot) {
		b.Spec.StartTime = &start
		b.Spec.Webhook = &v1.Webhook{URL: receiver.URL, Events: v1.WebhookEveryPhase}
	})
	waitBot(t, bot, "Scheduled, its message delivered", func(b *v1.Bot) bool {
		step(5 * time.Second) // the relay polls on the fake clock
		w := b.Status.Webhook
		return b.Status.Phase == v1.BotScheduled && w != nil && w.DeliveredPhase == v1.BotScheduled
	})
	mu.Lock()
	defer mu.Unlock()
	if len(phases) == 0 || phases[len(phases)-1] != string(v1.BotScheduled) || slices.Contains(phases, string(v1.BotQueued)) {
		t.Fatalf("received %v, want Scheduled last and nothing of the queue yet", phases)
	}
	if signed {
		t.Error("a webhook without a secretRef was signed")
	}
}
