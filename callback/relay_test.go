package callback

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/internal/pgtest"
	"botpool.dev/botpool/store"
	"botpool.dev/botpool/store/memory"
	"botpool.dev/botpool/store/postgres"
)

const relaySecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// secrets is a SecretSource holding one Secret, team-a/hook, whose key "secret" is relaySecret
// unless value is set; err, when set, refuses every read.
type secrets struct {
	mu    sync.Mutex
	err   error
	value []byte
}

func (s *secrets) WebhookKeys(_ context.Context, ns, name string, keys []string) ([]SigningKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	if ns != "team-a" || name != "hook" {
		return nil, fmt.Errorf("no Secret %s/%s", ns, name)
	}
	value := []byte(relaySecret)
	if s.value != nil {
		value = s.value
	}
	out := make([]SigningKey, len(keys))
	for i, k := range keys {
		if k != "secret" {
			out[i].Err = fmt.Errorf("no key %s/%s[%s]", ns, name, k)
			continue
		}
		out[i].Key, out[i].Err = DecodeSecret(value)
	}
	return out, nil
}

// relayEnv is a relay over a memory outbox, a started notifier and one receiver, on one fake
// clock.
type relayEnv struct {
	clk     *clocktesting.FakeClock
	outbox  store.Outbox
	secrets *secrets
	rcv     *receiver
	relay   *Relay
	stop    func()
	// outcomes counts the attempts whose outcome the relay recorded (OnOutcome).
	outcomes atomic.Int32
}

func newRelayEnv(t *testing.T, outbox store.Outbox, clk *clocktesting.FakeClock, respond func(int, http.ResponseWriter, *http.Request)) *relayEnv {
	t.Helper()
	e := &relayEnv{clk: clk, outbox: outbox, secrets: &secrets{}, rcv: newReceiver(t, respond)}
	e.start(t)
	return e
}

// start runs a fresh notifier and relay, as a new leader would.
func (e *relayEnv) start(t *testing.T) {
	n := New(Options{Clock: e.clk, Egress: allowLoopback, Registerer: prometheus.NewRegistry()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = n.Start(ctx); close(done) }()
	e.stop = func() { cancel(); <-done }
	t.Cleanup(e.stop)
	e.relay = NewRelay(RelayOptions{
		Outbox: e.outbox, Sender: n, Secrets: e.secrets, Clock: e.clk, Registerer: prometheus.NewRegistry(),
		BackoffBase: 30 * time.Second, BackoffCap: time.Minute, Window: 150 * time.Second,
		OnOutcome: func(string, string) { e.outcomes.Add(1) },
	})
}

func phaseBot(phase v1.BotPhase) *v1.Bot {
	return &v1.Bot{
		ObjectMeta: metav1.ObjectMeta{Name: "standup", Namespace: "team-a", UID: "u1"},
		Status:     v1.BotStatus{Phase: phase},
	}
}

var signedHook = &v1.Webhook{Events: v1.WebhookEveryPhase, SecretRef: &v1.WebhookSecretRef{Name: "hook", Key: "secret"}}

func (e *relayEnv) add(t *testing.T, seq int64, phase v1.BotPhase) store.OutboxMessage {
	t.Helper()
	w := *signedHook
	w.URL = e.rcv.url()
	m := PhaseMessage(phaseBot(phase), &w, seq, e.clk.Now())
	if err := e.outbox.AddMessage(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	return m
}

func (e *relayEnv) summary(t *testing.T) store.OutboxSummary {
	t.Helper()
	s, err := e.outbox.OutboxSummary(context.Background(), "u1", 0)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func verifyAll(t *testing.T, rc *receiver, now time.Time) []PhaseEvent {
	t.Helper()
	key, _ := DecodeSecret([]byte(relaySecret))
	var out []PhaseEvent
	for i := range rc.count() {
		r := rc.request(i)
		if err := Verify(key, r.header, r.body, now, 5*time.Minute); err != nil {
			t.Errorf("request %d: %v", i, err)
		}
		if r.header.Get("Idempotency-Key") != r.header.Get(HeaderWebhookID) {
			t.Errorf("request %d: Idempotency-Key %q differs from webhook-id %q", i, r.header.Get("Idempotency-Key"), r.header.Get(HeaderWebhookID))
		}
		var ev PhaseEvent
		if err := json.Unmarshal(r.body, &ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

func TestRelayEveryPhaseSignedInOrder(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	e := newRelayEnv(t, memory.NewOutbox(100), clk, statuses(204))
	phases := []v1.BotPhase{v1.BotQueued, v1.BotInCall, v1.BotDone}
	for i, p := range phases {
		e.add(t, int64(i+1), p)
	}
	for i := range phases {
		e.relay.Pass(context.Background())
		waitFor(t, "delivery", func() bool { return e.summary(t).Delivered == i+1 })
	}
	evs := verifyAll(t, e.rcv, clk.Now())
	if len(evs) != 3 {
		t.Fatalf("received %d messages, want 3", len(evs))
	}
	for i, ev := range evs {
		if ev.Phase != string(phases[i]) || ev.Sequence != int64(i+1) || ev.Type != "bot.phase" {
			t.Errorf("message %d = %+v, want phase %s sequence %d", i, ev, phases[i], i+1)
		}
	}
	if s := e.summary(t); s.DeliveredPhase != "Done" || s.Pending != 0 {
		t.Errorf("summary %+v", s)
	}
}

// waitSettled waits until the outbox holds no claim: the attempt's outcome is recorded.
func waitSettled(t *testing.T, e *relayEnv, want func(store.OutboxSummary) bool) {
	t.Helper()
	waitFor(t, "the attempt's outcome", func() bool { return want(e.summary(t)) })
}

func TestRelayBackoffAndGiveUp(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	e := newRelayEnv(t, memory.NewOutbox(100), clk, statuses(503))
	e.add(t, 1, v1.BotQueued)
	// Each failure waits the message's age, at least 30 s (base), at most 1 min (cap): attempts
	// at 0, 30 s, 1 min, 2 min, 3 min; the window (150 s) is over at the fifth, which gives the
	// message up.
	for i, at := range []time.Duration{0, 30 * time.Second, time.Minute, 2 * time.Minute, 3 * time.Minute} {
		clk.SetTime(epoch.Add(at - time.Second))
		if at > 0 && e.relay.Pass(context.Background()) != 0 {
			t.Fatalf("attempt %d sent a second early", i+1)
		}
		clk.SetTime(epoch.Add(at))
		if n := e.relay.Pass(context.Background()); n != 1 {
			t.Fatalf("attempt %d at %s: handed over %d", i+1, at, n)
		}
		waitFor(t, "the attempt's outcome", func() bool { return e.outcomes.Load() == int32(i+1) })
		if e.rcv.count() != i+1 {
			t.Fatalf("attempt %d: the receiver got %d requests", i+1, e.rcv.count())
		}
		if s := e.summary(t); i < 4 && (s.Pending != 1 || !strings.Contains(s.LastError, "503")) {
			t.Fatalf("after attempt %d: summary %+v, want pending with the 503", i+1, s)
		}
	}
	if s := e.summary(t); s.Failed != 1 {
		t.Fatalf("summary %+v, want given up", s)
	}
	if s := e.summary(t); !strings.Contains(s.LastError, ErrGaveUp.Error()) {
		t.Fatalf("summary %+v, want given up", s)
	}
	clk.Step(24 * time.Hour)
	if n := e.relay.Pass(context.Background()); n != 0 {
		t.Fatalf("a given-up message was sent again")
	}
	verifyAll(t, e.rcv, clk.Now().Add(-24*time.Hour))
}

func TestRelayRejectedIsGivenUpAtOnce(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	e := newRelayEnv(t, memory.NewOutbox(100), clk, statuses(400))
	e.add(t, 1, v1.BotDone)
	e.relay.Pass(context.Background())
	waitSettled(t, e, func(s store.OutboxSummary) bool { return s.Failed == 1 })
	if s := e.summary(t); e.rcv.count() != 1 || !strings.Contains(s.LastError, ErrRejected.Error()) || !strings.Contains(s.LastError, "400") {
		t.Fatalf("%d requests, summary %+v: want one request, rejected with its 400", e.rcv.count(), s)
	}
	clk.Step(time.Hour)
	if n := e.relay.Pass(context.Background()); n != 0 {
		t.Fatal("a rejected message was sent again")
	}
}

func TestRelaySecretRefusedIsRetried(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	e := newRelayEnv(t, memory.NewOutbox(100), clk, statuses(204))
	e.secrets.err = errors.New("Secret hook lacks the label")
	e.add(t, 1, v1.BotQueued)
	if n := e.relay.Pass(context.Background()); n != 0 {
		t.Fatalf("sent %d without the secret", n)
	}
	if s := e.summary(t); s.Pending != 1 || !strings.Contains(s.LastError, "lacks the label") {
		t.Fatalf("summary %+v", s)
	}
	e.secrets.mu.Lock()
	e.secrets.err = nil
	e.secrets.mu.Unlock()
	clk.Step(30 * time.Second)
	e.relay.Pass(context.Background())
	waitSettled(t, e, func(s store.OutboxSummary) bool { return s.Delivered == 1 })
	verifyAll(t, e.rcv, clk.Now())
}

// A key made larger than MaxKeyLen after its message was made is refused when the message is
// to be sent: an attempt that failed, retried, and sent once the key is fixed.
func TestRelayKeyEditedTooLargeIsRefused(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	e := newRelayEnv(t, memory.NewOutbox(100), clk, statuses(204))
	e.add(t, 1, v1.BotQueued)
	e.secrets.value = []byte("whsec_" + base64.StdEncoding.EncodeToString(make([]byte, MaxKeyLen+1)))
	if n := e.relay.Pass(context.Background()); n != 0 {
		t.Fatalf("sent %d with a key over the limit", n)
	}
	if s := e.summary(t); s.Pending != 1 || !strings.Contains(s.LastError, ErrKeyTooLarge.Error()) {
		t.Fatalf("summary %+v, want pending with the size limit", s)
	}
	e.secrets.mu.Lock()
	e.secrets.value = nil
	e.secrets.mu.Unlock()
	clk.Step(30 * time.Second)
	e.relay.Pass(context.Background())
	waitSettled(t, e, func(s store.OutboxSummary) bool { return s.Delivered == 1 })
	verifyAll(t, e.rcv, clk.Now())
}

// A new leader (a new relay and notifier over the same outbox) delivers what the old one was
// retrying, and claims again a message whose claimer died, after its lease. With Postgres the
// new leader is also a new process: the old store is closed and a new one opened on the
// database, and the message is still there with its attempts, error and bytes.
func TestRelayRestartMidRetry(t *testing.T) {
	for _, c := range []struct {
		name string
		open func(t *testing.T, clk *clocktesting.FakeClock) (outbox store.Outbox, restart func() store.Outbox)
	}{
		{"memory", func(*testing.T, *clocktesting.FakeClock) (store.Outbox, func() store.Outbox) {
			o := memory.NewOutbox(100)
			return o, func() store.Outbox { return o }
		}},
		{"postgres", openPostgresOutbox},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(epoch)
			outbox, restart := c.open(t, clk)
			e := newRelayEnv(t, outbox, clk, statuses(503, 204))
			sent := e.add(t, 1, v1.BotDone)
			e.relay.Pass(context.Background())
			waitSettled(t, e, func(s store.OutboxSummary) bool { return s.LastError != "" })
			e.stop()
			// The dying leader had claimed it again and never reported: the lease holds it.
			clk.Step(30 * time.Second)
			if ms, err := e.outbox.ClaimMessages(context.Background(), clk.Now(), DefaultRelayLease, 10); err != nil || len(ms) != 1 {
				t.Fatalf("claim by the dying leader: %v %v", ms, err)
			}
			e.outbox = restart()
			e.start(t)
			if n := e.relay.Pass(context.Background()); n != 0 {
				t.Fatal("claimed under the old leader's lease")
			}
			clk.Step(DefaultRelayLease)
			e.relay.Pass(context.Background())
			waitSettled(t, e, func(s store.OutboxSummary) bool { return s.Delivered == 1 })
			if e.rcv.count() != 2 {
				t.Fatalf("receiver got %d requests, want 2", e.rcv.count())
			}
			verifyAll(t, e.rcv, clk.Now())
			for i := range 2 {
				r := e.rcv.request(i)
				if id := r.header.Get(HeaderWebhookID); id != sent.ID || string(r.body) != string(sent.Payload) {
					t.Errorf("request %d: id %s body %s, want the message's id %s and bytes", i, id, r.body, sent.ID)
				}
			}
		})
	}
}

// openPostgresOutbox opens a Postgres store on a throwaway server; restart closes it and opens
// another on the same database, as a new manager process would. Both keep the fake clock's
// times as they are (WithSharedClock).
func openPostgresOutbox(t *testing.T, clk *clocktesting.FakeClock) (store.Outbox, func() store.Outbox) {
	dsn := pgtest.StartT(t).NewDatabase(t)
	open := func() *postgres.Store {
		s, err := postgres.New(context.Background(), dsn, postgres.WithClock(clk), postgres.WithSharedClock())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	first := open()
	return first, func() store.Outbox {
		if err := first.Close(); err != nil {
			t.Fatal(err)
		}
		return open()
	}
}

// heldSender keeps what it is given, for a test to play the notifier's worker by hand.
type heldSender struct{ held []Callback }

func (h *heldSender) Enqueue(c Callback) bool { h.held = append(h.held, c); return true }

// A message is signed when its request leaves, not when it was claimed; one that waited in the
// notifier's queue until its claim nearly ran out is dropped unsent, and the next claim's
// attempt is the one that counts: the late outcome of the first changes nothing.
func TestRelaySignsWhenSentAndDropsAClaimThatRanOut(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	outbox := memory.NewOutbox(100)
	held := &heldSender{}
	relay := NewRelay(RelayOptions{Outbox: outbox, Sender: held, Secrets: &secrets{}, Clock: clk})
	w := *signedHook
	w.URL = "https://hooks.example/standup"
	m := PhaseMessage(phaseBot(v1.BotDone), &w, 1, clk.Now())
	if err := outbox.AddMessage(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	relay.Pass(context.Background())
	if n := len(held.held); n != 1 {
		t.Fatalf("%d callbacks handed over, want 1", n)
	}
	first := held.held[0]

	// Queued for most of the lease: dropped, and the message is claimed again after it.
	clk.Step(DefaultRelayLease*3/4 + time.Second)
	if _, send := first.Prepare(clk.Now()); send {
		t.Fatal("a claim with less than a quarter of its lease left was sent")
	}
	clk.Step(DefaultRelayLease / 4)
	relay.Pass(context.Background())
	if len(held.held) != 2 {
		t.Fatalf("%d callbacks handed over, want the message claimed again", len(held.held))
	}
	second := held.held[1]
	sentAt := clk.Now().Add(20 * time.Second) // it waits 20 s in the queue, then leaves
	headers, send := second.Prepare(sentAt)
	if !send {
		t.Fatal("a fresh claim was dropped")
	}
	key, _ := DecodeSecret([]byte(relaySecret))
	h := http.Header{}
	for k, v := range headers {
		h.Set(k, v)
	}
	h.Set(HeaderWebhookID, m.ID)
	if h.Get(HeaderWebhookTimestamp) != strconv.FormatInt(sentAt.Unix(), 10) {
		t.Errorf("signed at %s, want the send time %d", h.Get(HeaderWebhookTimestamp), sentAt.Unix())
	}
	if err := Verify(key, h, m.Payload, sentAt, time.Second); err != nil {
		t.Errorf("signature: %v", err)
	}
	// The first claim's outcome arrives late: ignored; the second's counts.
	first.Done(Result{Err: ErrRejected})
	if s, _ := outbox.OutboxSummary(context.Background(), m.BotUID, 0); s.Failed != 0 || s.Pending != 1 {
		t.Fatalf("summary %+v after the first claim's late outcome, want still pending", s)
	}
	second.Done(Result{})
	if s, _ := outbox.OutboxSummary(context.Background(), m.BotUID, 0); s.Delivered != 1 {
		t.Fatalf("summary %+v after the second claim's outcome, want delivered", s)
	}
}

// A pass claims batch after batch while they come back full, up to MaxBatchesPerPass; a batch
// of which the sender took nothing ends the pass.
func TestRelayPassTakesSeveralBatches(t *testing.T) {
	clk := clocktesting.NewFakeClock(epoch)
	outbox := memory.NewOutbox(100)
	for i := range 7 {
		tenantMessage(t, outbox, clk.Now(), "team-a", i, "https://hooks.example/x", nil)
	}
	held := &heldSender{}
	relay := NewRelay(RelayOptions{Outbox: outbox, Sender: held, Secrets: &secrets{}, Clock: clk, Batch: 2, MaxBatchesPerPass: 3})
	if n := relay.Pass(context.Background()); n != 6 || len(held.held) != 6 {
		t.Fatalf("one pass handed over %d (%d held), want 3 full batches of 2", n, len(held.held))
	}
	if n := relay.Pass(context.Background()); n != 1 {
		t.Fatalf("the next pass handed over %d, want the last message", n)
	}

	full := memory.NewOutbox(100)
	for i := range 7 {
		tenantMessage(t, full, clk.Now(), "team-a", i, "https://full.example/hook", nil)
	}
	relay = NewRelay(RelayOptions{Outbox: full, Sender: &refusingSender{refuse: "https://full.example/hook"}, Secrets: &secrets{}, Clock: clk, Batch: 2, MaxBatchesPerPass: 3})
	relay.Pass(context.Background())
	if ms, _ := full.ClaimMessages(context.Background(), clk.Now(), DefaultRelayLease, 10); len(ms) != 5 {
		t.Fatalf("%d messages left unclaimed, want 5: a pass whose first batch went nowhere claims no more", len(ms))
	}
}

// refusingSender holds what it takes and refuses every callback to refuse's URL, as a
// notifier whose queue for that receiver is full.
type refusingSender struct {
	heldSender
	refuse string
}

func (s *refusingSender) Enqueue(c Callback) bool {
	if c.URL == s.refuse {
		return false
	}
	return s.heldSender.Enqueue(c)
}

// tenantMessage adds bot i of namespace ns's message to url, signed with the key ref names
// (nil: unsigned).
func tenantMessage(t *testing.T, outbox store.Outbox, at time.Time, ns string, i int, url string, ref *v1.WebhookSecretRef) store.OutboxMessage {
	t.Helper()
	b := phaseBot(v1.BotDone)
	b.Namespace, b.Name, b.UID = ns, fmt.Sprint("bot-", i), types.UID(fmt.Sprintf("%s-%d", ns, i))
	w := v1.Webhook{URL: url, Events: v1.WebhookFinal, SecretRef: ref}
	m := PhaseMessage(b, &w, 1, at)
	if err := outbox.AddMessage(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	return m
}

// One tenant's message that cannot go now (its receiver's queue is full, or its signing Secret
// is gone) is recorded as due later and the pass goes on: another tenant's burst of 900 is
// handed over in one poll. It was cut to the 99 others of the first batch.
func TestRelayRefusedMessageDoesNotCutAnotherTenantsBurst(t *testing.T) {
	for _, c := range []struct {
		name   string
		secret *v1.WebhookSecretRef
		reason string
	}{
		{"receiver queue full", nil, "queue is full"},
		{"signing Secret gone", &v1.WebhookSecretRef{Name: "deleted", Key: "secret"}, "no Secret"},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(epoch)
			outbox := memory.NewOutbox(100)
			refused := tenantMessage(t, outbox, clk.Now(), "team-a", 0, "https://full.example/hook", c.secret)
			for i := range 900 {
				tenantMessage(t, outbox, clk.Now(), "team-b", i, "https://hooks.example/b", nil)
			}
			sender := &refusingSender{refuse: "https://full.example/hook"}
			relay := NewRelay(RelayOptions{Outbox: outbox, Sender: sender, Secrets: &secrets{}, Clock: clk})
			if n := relay.Pass(context.Background()); n != 900 || len(sender.held) != 900 {
				t.Fatalf("one pass handed over %d (%d held), want team-b's 900", n, len(sender.held))
			}
			for _, cb := range sender.held {
				if cb.Namespace != "team-b" {
					t.Fatalf("handed over %q's message", cb.Namespace)
				}
			}
			s, err := outbox.OutboxSummary(context.Background(), refused.BotUID, 0)
			if err != nil || s.Pending != 1 || !strings.Contains(s.LastError, c.reason) {
				t.Fatalf("team-a's message: %+v %v, want pending with %q", s, err, c.reason)
			}
			// Its claim was released, not left to run out: due again well within the lease.
			clk.Step(DefaultRelayBackoff)
			if ms, err := outbox.ClaimMessages(context.Background(), clk.Now(), DefaultRelayLease, 10); err != nil || len(ms) != 1 || ms[0].ID != refused.ID {
				t.Fatalf("claimed %v %v after %s, want team-a's message again", ms, err, DefaultRelayBackoff)
			}
		})
	}
}
