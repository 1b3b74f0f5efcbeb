package bot

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/callback"
	"botpool.dev/botpool/controllers/internal/index"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/store/memory"
)

// signedReceiver verifies every request's signature with key as it arrives and keeps the
// bodies in order.
type signedReceiver struct {
	mu     sync.Mutex
	bodies []callback.PhaseEvent
	bad    []string
}

func newSignedReceiver(t *testing.T, clk *clocktesting.FakeClock, key []byte) (*httptest.Server, *signedReceiver) {
	sr := &signedReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		sr.mu.Lock()
		defer sr.mu.Unlock()
		if err := callback.Verify(key, r.Header, body, clk.Now(), 5*time.Minute); err != nil {
			sr.bad = append(sr.bad, err.Error())
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var ev callback.PhaseEvent
		_ = json.Unmarshal(body, &ev)
		sr.bodies = append(sr.bodies, ev)
	}))
	t.Cleanup(srv.Close)
	return srv, sr
}

func (sr *signedReceiver) phases() []string {
	sr.mu.Lock()
	defer sr.mu.Unlock()
	var out []string
	for _, b := range sr.bodies {
		out = append(out, b.Phase)
	}
	return out
}

// webhookRig runs the bot controller's webhook step over a fake client, a memory outbox and a
// real relay and notifier posting to a receiver that verifies signatures.
type webhookRig struct {
	t      *testing.T
	clk    *clocktesting.FakeClock
	r      *Reconciler
	relay  *callback.Relay
	sender *callback.Notifier
	outbox *memory.Outbox
	events *bt.Events
	bot    *v1.Bot
}

func newWebhookRig(t *testing.T, secret *corev1.Secret) (*webhookRig, *signedReceiver) {
	t.Helper()
	scheme := runtime.NewScheme()
	_ = v1.AddToScheme(scheme)
	_ = corev1.AddToScheme(scheme)
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	key, _ := callback.DecodeSecret([]byte(bt.WebhookKey))
	srv, sr := newSignedReceiver(t, clk, key)
	b := fake.NewClientBuilder().WithScheme(scheme)
	if secret != nil {
		b = b.WithObjects(secret)
	}
	c := b.Build()
	outbox := memory.NewOutbox(100)
	n := callback.New(callback.Options{Clock: clk, Egress: bt.AllowLoopback, Registerer: prometheus.NewRegistry()})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = n.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-stopped })
	rg := &webhookRig{t: t, clk: clk, outbox: outbox, events: &bt.Events{}}
	rg.r = &Reconciler{Client: c, Clock: clk, Recorder: rg.events, Webhooks: outbox, Secrets: c}
	rg.sender = n
	rg.relay = callback.NewRelay(callback.RelayOptions{Outbox: outbox, Sender: n, Secrets: WebhookSecrets{Reader: c}, Clock: clk})
	rg.bot = &v1.Bot{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "standup", UID: "uid-standup"},
		Spec: v1.BotSpec{Webhook: &v1.Webhook{URL: srv.URL + "/hook", Events: v1.WebhookEveryPhase,
			SecretRef: &v1.WebhookSecretRef{Name: "hook", Key: "secret"}}},
	}
	return rg, sr
}

// step runs the webhook step of a pass over the bot stored in phase p and emits its Events,
// as finish would after the write.
func (rg *webhookRig) step(p v1.BotPhase) *botScope {
	rg.bot.Status.Phase = p
	s := &botScope{bot: rg.bot}
	rg.r.webhook(context.Background(), s, rg.bot.DeepCopy())
	for _, ev := range s.events {
		ev()
	}
	return s
}

// doneRejected: the bot is Done and its receiver answers 410. The message is made, rejected
// (given up at once), and the passes the relay's wake-up brings record it.
func (rg *webhookRig) doneRejected() {
	rg.t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusGone) }))
	rg.t.Cleanup(srv.Close)
	rg.bot.Spec.Webhook.URL = srv.URL
	rg.step(v1.BotDone)
	rg.relay.Pass(context.Background())
	settled(rg.t, "the rejection", func() bool {
		s, _ := rg.outbox.OutboxSummary(context.Background(), rg.bot.UID, 0)
		return s.Failed == 1
	})
	rg.step(v1.BotDone)
	rg.step(v1.BotDone)
}

// TestWebhookEveryPhaseSignedInOrder: each phase the controller sees becomes one message,
// delivered signed and in order; a pass in the same phase makes none; status.webhook follows.
func TestWebhookEveryPhaseSignedInOrder(t *testing.T) {
	rg, sr := newWebhookRig(t, bt.WebhookSecret("team-a", "hook", true))
	phases := []v1.BotPhase{v1.BotPending, v1.BotQueued, v1.BotQueued, v1.BotDone}
	for _, p := range phases {
		rg.step(p)
		rg.relay.Pass(context.Background())
		settled(t, "the message's outcome", func() bool {
			s, _ := rg.outbox.OutboxSummary(context.Background(), rg.bot.UID, 0)
			return s.Pending == 0
		})
	}
	if got := strings.Join(sr.phases(), ","); got != "Pending,Queued,Done" {
		t.Fatalf("receiver got %q, want Pending,Queued,Done (bad signatures: %v)", got, sr.bad)
	}
	rg.step(v1.BotDone) // the wake-up's pass records the outcome
	st := rg.bot.Status.Webhook
	if st == nil || st.Sequence != 3 || st.Delivered != 3 || st.DeliveredPhase != v1.BotDone || st.Pending != 0 || st.Failures != 0 {
		t.Fatalf("status.webhook = %+v", st)
	}
}

// TestWebhookSecretNotAllowed: a Secret without the opt-in label makes no message, says why in
// status.webhook.lastError and one Warning Event, and the message goes once it is labelled.
func TestWebhookSecretNotAllowed(t *testing.T) {
	rg, sr := newWebhookRig(t, bt.WebhookSecret("team-a", "hook", false))
	s := rg.step(v1.BotQueued)
	rg.step(v1.BotQueued)
	if st := rg.bot.Status.Webhook; st == nil || st.Sequence != 0 || !strings.Contains(st.LastError, v1.LabelAllowWebhookSigning) {
		t.Fatalf("status.webhook = %+v, want no message and the label in lastError", st)
	}
	if n := rg.events.Count(v1.ReasonWebhookSecretNotAllowed); n != 1 {
		t.Fatalf("%d %s Events, want 1", n, v1.ReasonWebhookSecretNotAllowed)
	}
	if s.requeue != webhookRecheck {
		t.Errorf("requeue %s, want %s", s.requeue, webhookRecheck)
	}
	sec := bt.WebhookSecret("team-a", "hook", true)
	if err := rg.r.Client.Update(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	rg.step(v1.BotQueued)
	rg.relay.Pass(context.Background())
	settled(t, "delivery", func() bool { return len(sr.phases()) == 1 })
}

// TestWebhookSecretMissing: no Secret (none is ever read from another namespace) is a
// WebhookSecretNotFound Warning.
func TestWebhookSecretMissing(t *testing.T) {
	rg, _ := newWebhookRig(t, nil)
	rg.step(v1.BotQueued)
	if n := rg.events.Count(v1.ReasonWebhookSecretNotFound); n != 1 {
		t.Fatalf("%d %s Events, want 1", n, v1.ReasonWebhookSecretNotFound)
	}
}

// TestWebhookSecretTooLarge: a key larger than callback.MaxKeyLen decoded makes no message, says
// so in status.webhook.lastError and one WebhookSecretInvalid Warning, and the message goes once
// the key is replaced by one of the largest size allowed.
func TestWebhookSecretTooLarge(t *testing.T) {
	sec := bt.WebhookSecret("team-a", "hook", true)
	sec.Data["secret"] = []byte("whsec_" + base64.StdEncoding.EncodeToString(make([]byte, callback.MaxKeyLen+1)))
	rg, _ := newWebhookRig(t, sec)
	rg.step(v1.BotQueued)
	rg.step(v1.BotQueued)
	if st := rg.bot.Status.Webhook; st == nil || st.Sequence != 0 || !strings.Contains(st.LastError, callback.ErrKeyTooLarge.Error()) {
		t.Fatalf("status.webhook = %+v, want no message and the size limit in lastError", st)
	}
	if n := rg.events.Count(v1.ReasonWebhookSecretInvalid); n != 1 {
		t.Fatalf("%d %s Events, want 1", n, v1.ReasonWebhookSecretInvalid)
	}
	sec.Data["secret"] = []byte("whsec_" + base64.StdEncoding.EncodeToString(make([]byte, callback.MaxKeyLen)))
	if err := rg.r.Client.Update(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	rg.step(v1.BotQueued)
	if st := rg.bot.Status.Webhook; st.Sequence != 1 || st.Pending != 1 {
		t.Fatalf("status.webhook = %+v, want the message made", st)
	}
}

// TestWebhookGivenUpIsAWarning: a message the receiver rejects shows in status.webhook and as
// one WebhookFailed Warning.
func TestWebhookGivenUpIsAWarning(t *testing.T) {
	rg, _ := newWebhookRig(t, bt.WebhookSecret("team-a", "hook", true))
	rg.doneRejected()
	if st := rg.bot.Status.Webhook; st.Failures != 1 || !strings.Contains(st.LastError, "410") {
		t.Fatalf("status.webhook = %+v", st)
	}
	if n := rg.events.Count(v1.ReasonWebhookFailed); n != 1 {
		t.Fatalf("%d %s Events, want 1", n, v1.ReasonWebhookFailed)
	}
}

// TestWebhookLostStatusWrite: the status write that counted a message is lost (a conflict
// with the bot API): the next pass finds the phase's message in the outbox and makes no second
// one; the next phase gets the next number, never one already used.
func TestWebhookLostStatusWrite(t *testing.T) {
	rg, _ := newWebhookRig(t, bt.WebhookSecret("team-a", "hook", true))
	rg.step(v1.BotQueued)
	rg.bot.Status.Webhook = nil // the write is lost
	rg.step(v1.BotQueued)
	sum, _ := rg.outbox.OutboxSummary(context.Background(), rg.bot.UID, 0)
	if sum.LastSeq != 1 || sum.Pending != 1 {
		t.Fatalf("outbox %+v after a pass that lost its write, want the one message", sum)
	}
	if st := rg.bot.Status.Webhook; st == nil || st.Sequence != 1 || st.Phase != v1.BotQueued || st.Pending != 1 {
		t.Fatalf("status.webhook %+v, want the message counted again", st)
	}
	lost := *rg.bot.Status.Webhook
	rg.step(v1.BotFatal) // made, and its write lost again
	rg.bot.Status.Webhook = &lost
	rg.step(v1.BotDone) // the bot API had stored Done meanwhile
	sum, _ = rg.outbox.OutboxSummary(context.Background(), rg.bot.UID, 0)
	if sum.LastSeq != 3 || sum.LastPhase != string(v1.BotDone) || sum.Pending != 3 {
		t.Fatalf("outbox %+v, want Fatal as 2 and Done as 3", sum)
	}
}

// TestWebhookSendsTheStoredPhase: a pass that moves the bot on (here to Fatal) sends the phase
// it read (Deploying), with that phase's reason and message; the new one is the next pass's,
// once written.
func TestWebhookSendsTheStoredPhase(t *testing.T) {
	rg, _ := newWebhookRig(t, bt.WebhookSecret("team-a", "hook", true))
	rg.bot.Status.Phase, rg.bot.Status.Message = v1.BotDeploying, "deploying on srv-1"
	stored := rg.bot.DeepCopy()
	rg.bot.Status.Phase, rg.bot.Status.Reason = v1.BotFatal, v1.ReasonDeploymentFailed
	rg.r.webhook(context.Background(), &botScope{bot: rg.bot}, stored)
	ms, err := rg.outbox.ClaimMessages(context.Background(), rg.clk.Now(), time.Minute, 10)
	if err != nil || len(ms) != 1 {
		t.Fatalf("claimed %v, %v", ms, err)
	}
	var ev callback.PhaseEvent
	if err := json.Unmarshal(ms[0].Payload, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Phase != string(v1.BotDeploying) || ev.Reason != "" || ev.Message != "deploying on srv-1" || ms[0].Phase != string(v1.BotDeploying) {
		t.Fatalf("message %+v (phase %s), want the stored Deploying", ev, ms[0].Phase)
	}
	if st := rg.bot.Status.Webhook; st == nil || st.Phase != v1.BotDeploying || st.Sequence != 1 {
		t.Fatalf("status.webhook %+v", st)
	}
}

// TestWebhookCountersNeverGoDown: the outbox forgot the bot's finished messages (the memory
// outbox restarted; retention on Postgres): status.webhook keeps its counts, and the next
// message is numbered after the last one the status knows, so its id is new.
func TestWebhookCountersNeverGoDown(t *testing.T) {
	rg, sr := newWebhookRig(t, bt.WebhookSecret("team-a", "hook", true))
	for _, p := range []v1.BotPhase{v1.BotQueued, v1.BotInCall} {
		rg.step(p)
		rg.relay.Pass(context.Background())
		settled(t, "delivery", func() bool {
			s, _ := rg.outbox.OutboxSummary(context.Background(), rg.bot.UID, 0)
			return s.Pending == 0
		})
		rg.step(p)
	}
	rg.outbox = memory.NewOutbox(100)
	rg.r.Webhooks = rg.outbox
	rg.relay = callback.NewRelay(callback.RelayOptions{Outbox: rg.outbox, Sender: rg.sender, Secrets: WebhookSecrets{Reader: rg.r.Client}, Clock: rg.clk})
	rg.step(v1.BotDone)
	st := rg.bot.Status.Webhook
	if st.Sequence != 3 || st.Delivered != 2 || st.CountedSequence != 2 || st.DeliveredPhase != v1.BotInCall || st.Pending != 1 {
		t.Fatalf("status.webhook %+v, want 2 delivered kept and Done as 3 pending", st)
	}
	rg.relay.Pass(context.Background())
	settled(t, "delivery", func() bool { return len(sr.phases()) == 3 })
	rg.step(v1.BotDone)
	if st := rg.bot.Status.Webhook; st.Delivered != 3 || st.CountedSequence != 3 || st.DeliveredPhase != v1.BotDone || st.Pending != 0 {
		t.Fatalf("status.webhook %+v: want the 2 forgotten and the new one counted, through 3", st)
	}
}

// settled waits on kubetest.Eventually until cond holds: the relay's sends run on the notifier's
// workers, so their outcomes come in real time.
func settled(t *testing.T, what string, cond func() bool) {
	t.Helper()
	kubetest.Eventually(t, kubetest.MinEventually, func() error {
		if !cond() {
			return fmt.Errorf("still waiting for %s", what)
		}
		return nil
	})
}

// TestWebhookDeletedBotSendsItsLastPhase: a bot deleted right after it was stored Fatal (say
// by automation cleaning up failed bots) gets its final message before its finalizer goes.
func TestWebhookDeletedBotSendsItsLastPhase(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	_ = v1.AddToScheme(scheme)
	bot := bt.MakeBot("team-a", "standup").UID("uid-standup").Finalizers(v1.FinalizerBot).Phase(v1.BotFatal).Obj()
	bot.Status.Reason = v1.ReasonHeartbeatTimeout
	bot.Spec.Webhook = &v1.Webhook{URL: "https://hooks.example.com/x", Events: v1.WebhookFinal}
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&v1.Bot{}).WithObjects(bot).
		WithIndex(&v1.BotPoolSlot{}, index.SlotBotUID, func(o client.Object) []string {
			if ref := o.(*v1.BotPoolSlot).Spec.BotRef; ref != nil {
				return []string{string(ref.UID)}
			}
			return nil
		}).Build()
	if err := c.Delete(ctx, bot); err != nil {
		t.Fatal(err)
	}
	outbox := memory.NewOutbox(100)
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	r := &Reconciler{Client: c, Clock: clk, Recorder: &bt.Events{}, Store: bt.NopLiveness{}, Webhooks: outbox}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(bot)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(bot), &v1.Bot{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the bot is still there (%v): its finalizer should be gone", err)
	}
	sum, err := outbox.OutboxSummary(ctx, bot.UID, 0)
	if err != nil || sum.LastPhase != string(v1.BotFatal) || sum.Pending != 1 {
		t.Fatalf("outbox %+v, %v: want the Fatal message", sum, err)
	}
}

// TestWebhookFailureAfterTheOutboxForgot: the outbox lost the bot's older messages (a restart
// of the in-memory one); a new message given up still counts and still says so in an Event.
func TestWebhookFailureAfterTheOutboxForgot(t *testing.T) {
	rg, _ := newWebhookRig(t, bt.WebhookSecret("team-a", "hook", true))
	rg.bot.Status.Webhook = &v1.WebhookStatus{Sequence: 2, Phase: v1.BotInCall, CountedSequence: 2, Delivered: 1, Failures: 1}
	rg.doneRejected()
	if st := rg.bot.Status.Webhook; st.Sequence != 3 || st.Failures != 2 || st.Delivered != 1 || st.CountedSequence != 3 {
		t.Fatalf("status.webhook %+v, want message 3 counted as the second failure", st)
	}
	if n := rg.events.Count(v1.ReasonWebhookFailed); n != 1 {
		t.Fatalf("%d %s Events, want 1", n, v1.ReasonWebhookFailed)
	}
}
