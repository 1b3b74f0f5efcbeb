package botapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/botapi/botclient"
	"botpool.dev/botpool/internal/botfailures"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/internal/slottoken"
	"botpool.dev/botpool/store"
)

var (
	env      *kubetest.Env
	objCache cache.Cache
)

func TestMain(m *testing.M) {
	kubetest.Main(m, func(e *kubetest.Env) {
		env = e
		c, err := cache.New(e.Config, cache.Options{Scheme: e.Scheme})
		if err != nil {
			panic(err)
		}
		if err := IndexFields(context.Background(), c); err != nil {
			panic(err)
		}
		go func() { _ = c.Start(context.Background()) }()
		if !c.WaitForCacheSync(context.Background()) {
			panic("cache did not sync")
		}
		objCache = c
	})
}

// fakeLiveness records what the API writes to the store.
type fakeLiveness struct {
	mu     sync.Mutex
	beats  []store.Heartbeat
	events []store.BotEvent
	asks   []store.SlotAsk
	lefts  []store.SlotLeft
	err    error
}

func (f *fakeLiveness) RecordSlotLeft(_ context.Context, l store.SlotLeft) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lefts = append(f.lefts, l)
	return f.err
}

func (f *fakeLiveness) leftsOf(uid types.UID) []store.SlotLeft {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []store.SlotLeft
	for _, l := range f.lefts {
		if l.SlotUID == uid {
			out = append(out, l)
		}
	}
	return out
}

func (f *fakeLiveness) RecordSlotAsk(_ context.Context, a store.SlotAsk) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asks = append(f.asks, a)
	return f.err
}

func (f *fakeLiveness) asksOf(uid types.UID) []store.SlotAsk {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []store.SlotAsk
	for _, a := range f.asks {
		if a.SlotUID == uid {
			out = append(out, a)
		}
	}
	return out
}

func (f *fakeLiveness) RecordHeartbeat(_ context.Context, hb store.Heartbeat) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.beats = append(f.beats, hb)
	return f.err
}

func (f *fakeLiveness) AppendBotEvents(_ context.Context, events []store.BotEvent) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil && !errors.Is(f.err, store.ErrBuffered) {
		return f.err
	}
	f.events = append(f.events, events...)
	return f.err
}

func (f *fakeLiveness) beatsOf(uid types.UID) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, b := range f.beats {
		if b.BotUID == uid {
			n++
		}
	}
	return n
}

// harness is one bot API server over the shared envtest cache, with its own namespace.
type harness struct {
	t      testing.TB
	ns     string
	clock  *clocktesting.FakeClock
	live   *fakeLiveness
	logs   *bytes.Buffer
	url    string
	srv    *Server
	events *recordedEvents
}

func newHarness(t testing.TB, mutate ...func(*Config)) *harness {
	h := &harness{t: t, ns: env.Namespace(t), clock: clocktesting.NewFakeClock(time.Now()), live: &fakeLiveness{}, logs: &bytes.Buffer{}, events: &recordedEvents{}}
	var logMu sync.Mutex
	cfg := Config{
		Cache: objCache, Client: env.Client, APIReader: env.Client, Liveness: h.live, Clock: h.clock, Recorder: h.events,
		Log: funcr.New(func(prefix, args string) {
			logMu.Lock()
			defer logMu.Unlock()
			fmt.Fprintln(h.logs, prefix, args)
		}, funcr.Options{}),
	}
	for _, f := range mutate {
		f(&cfg)
	}
	h.srv = New(cfg)
	// The shared cache's informer wakes this server's waits until the test ends.
	must(t, h.srv.WatchBindings(t.Context(), objCache))
	srv := httptest.NewServer(h.srv.Handler())
	t.Cleanup(srv.Close)
	h.url = srv.URL
	return h
}

// slotFixture is a slot with its application, token (its Secret, its hash in the status) and
// (optionally) a bound bot and the binding credential its container claimed.
type slotFixture struct {
	slot  *v1.BotPoolSlot
	token string
	app   string
	cred  string
}

func (h *harness) slot(name string) *slotFixture {
	h.t.Helper()
	ctx := context.Background()
	s := bt.MakeSlot(h.ns, name, "pool").Obj()
	must(h.t, env.Client.Create(ctx, s))
	token, err := slottoken.New()
	must(h.t, err)
	s.Status = v1.BotPoolSlotStatus{Phase: v1.SlotIdle, ApplicationUUID: "app-" + name + "-" + h.ns, TokenSHA256: slottoken.Hash([]byte(token))}
	must(h.t, env.Client.Status().Update(ctx, s))
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: slottoken.SecretName(name),
			Labels: map[string]string{v1.LabelSlotToken: "true", v1.LabelSlot: name}},
		Data: map[string][]byte{slottoken.Key: []byte(token)},
	}
	must(h.t, controllerutil.SetControllerReference(s, secret, env.Scheme))
	must(h.t, env.Client.Create(ctx, secret))
	f := &slotFixture{slot: s, token: token, app: s.Status.ApplicationUUID}
	h.synced(s) // the cache has seen the slot's status
	return f
}

func (h *harness) bot(name string, mutate ...func(*v1.Bot)) *v1.Bot {
	h.t.Helper()
	b := bt.MakeBot(h.ns, name).MeetingURL("https://meet.google.com/abc-defg-hij").DisplayName("Notetaker").Obj()
	must(h.t, env.Client.Create(context.Background(), b))
	b.Status.Phase = v1.BotDeploying
	for _, f := range mutate {
		f(b)
	}
	must(h.t, env.Client.Status().Update(context.Background(), b))
	h.synced(b)
	return b
}

// boundBot is a slot with a bot bound to it, and the client of the slot's container, which
// has claimed the binding (its config call): it sends the binding credential with bot calls.
func (h *harness) boundBot(slot, bot string, mutate ...func(*v1.Bot)) (*slotFixture, *v1.Bot, *botclient.Client) {
	h.t.Helper()
	f := h.slot(slot)
	b := h.bot(bot, mutate...)
	h.bind(f, b)
	c := h.client(f)
	cfg, err := c.Config(context.Background())
	must(h.t, err)
	f.cred = cfg.Credential
	h.eventually(func() error { // the claim is in the cache
		got := &v1.Bot{}
		if err := objCache.Get(context.Background(), client.ObjectKeyFromObject(b), got); err != nil {
			return err
		}
		if got.Status.Binding == nil {
			return errors.New("no claim in the cache yet")
		}
		return nil
	})
	return f, b, c
}

// bind writes the slot's botRef (as the bot controller does) and mirrors it into the bot.
func (h *harness) bind(f *slotFixture, b *v1.Bot) {
	h.t.Helper()
	ctx := context.Background()
	must(h.t, env.Client.Get(ctx, client.ObjectKeyFromObject(f.slot), f.slot))
	f.slot.Spec.BotRef = &v1.BotReference{Name: b.Name, UID: b.UID}
	must(h.t, env.Client.Update(ctx, f.slot))
	h.updateBotStatus(b, func(b *v1.Bot) { b.Status.SlotName = f.slot.Name; b.Status.ApplicationUUID = f.app })
	h.synced(f.slot)
}

func (h *harness) release(f *slotFixture) {
	h.t.Helper()
	ctx := context.Background()
	must(h.t, env.Client.Get(ctx, client.ObjectKeyFromObject(f.slot), f.slot))
	f.slot.Spec.BotRef = nil
	must(h.t, env.Client.Update(ctx, f.slot))
	h.synced(f.slot)
}

func (h *harness) updateBotStatus(b *v1.Bot, mutate func(*v1.Bot)) {
	h.t.Helper()
	ctx := context.Background()
	// The bot API may write the status meanwhile (a claim): read again and retry.
	must(h.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		mutate(b)
		return env.Client.Status().Update(ctx, b)
	}))
	h.synced(b)
}

// synced waits until the cache holds obj's resourceVersion.
func (h *harness) synced(obj client.Object) {
	h.t.Helper()
	want := obj.GetResourceVersion()
	got := obj.DeepCopyObject().(client.Object)
	h.eventually(func() error {
		if err := objCache.Get(context.Background(), client.ObjectKeyFromObject(obj), got); err != nil {
			return err
		}
		if got.GetResourceVersion() != want {
			return fmt.Errorf("cache has %s, want %s", got.GetResourceVersion(), want)
		}
		return nil
	})
}

func (h *harness) eventually(check func() error) {
	h.t.Helper()
	kubetest.Eventually(h.t, 10*time.Second, check)
}

// call sends one request and returns the status code and body.
func (h *harness) call(method, path, token, body string) (int, string) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
	must(h.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	must(h.t, err)
	defer func() { _ = resp.Body.Close() }()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		h.t.Errorf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	return resp.StatusCode, buf.String()
}

func (h *harness) client(f *slotFixture) *botclient.Client {
	return botclient.New(h.url, f.app, f.token, nil)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantStatus(t testing.TB, what string, code int, body string, want int, wantBody string) {
	t.Helper()
	if code != want || !strings.Contains(body, wantBody) {
		t.Errorf("%s: got %d %s; want %d containing %q", what, code, strings.TrimSpace(body), want, wantBody)
	}
}

func TestConfig(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	s := h.slot("pool-google-meet-001")
	other := h.slot("pool-google-meet-002")
	path := "/v1/slots/" + s.app + "/config"

	code, body := h.call("GET", path, "", "")
	wantStatus(t, "no token", code, body, 401, "missing bearer token")
	code, body = h.call("GET", path, "bpt_not-a-token", "")
	wantStatus(t, "unknown token", code, body, 401, "invalid token")
	code, body = h.call("GET", path, other.token, "")
	wantStatus(t, "another slot's token", code, body, 403, "does not belong to application")

	_, err := h.client(s).Config(ctx)
	if !errors.Is(err, botclient.ErrSlotFree) {
		t.Fatalf("free slot: err = %v, want ErrSlotFree (404)", err)
	}

	b := h.bot("standup", func(b *v1.Bot) { b.Status.Platform = v1.PlatformGoogleMeet })
	h.bind(s, b)
	cfg, err := h.client(s).Config(ctx)
	must(t, err)
	want := botclient.Config{
		Bot: "standup", Namespace: h.ns, MeetingURL: "https://meet.google.com/abc-defg-hij", Platform: "google-meet",
		DisplayName: "Notetaker", MaxDuration: botclient.Duration(time.Hour),
		Leave: botclient.AutomaticLeave{
			WaitingRoomTimeout: botclient.Duration(10 * time.Minute), NoOneJoinedTimeout: botclient.Duration(10 * time.Minute),
			EveryoneLeftTimeout: botclient.Duration(30 * time.Second), InactivityTimeout: botclient.Duration(30 * time.Minute),
		},
		HeartbeatInterval: botclient.Duration(10 * time.Second),
	}
	cred := cfg.Credential
	cfg.Credential = ""
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("config =\n  %+v\nwant\n  %+v", cfg, want)
	}
	// The answer claimed the binding: a credential for this bot, its hash in the Bot's status.
	var claimed v1.Bot
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(b), &claimed))
	if c := claimed.Status.Binding; !strings.HasPrefix(cred, "bpb_") || len(cred) != bindingCredentialLen || c == nil ||
		c.CredentialSHA256 != slottoken.Hash([]byte(cred)) || c.SlotName != s.slot.Name || c.SlotUID != s.slot.UID ||
		!c.ClaimedAt.Time.Equal(h.clock.Now().Truncate(time.Second)) {
		t.Errorf("credential %q, claim %+v; want a bpb_ credential whose hash the Bot records with its slot", cred, claimed.Status.Binding)
	}
	if _, err := h.client(s).Config(ctx); !errors.Is(err, botclient.ErrConflict) {
		t.Errorf("a second config call for the binding: %v, want 409", err)
	}

	h.updateBotStatus(b, func(b *v1.Bot) { b.Status.Phase = v1.BotDone })
	_, err = h.client(s).Config(ctx)
	if !errors.Is(err, botclient.ErrGone) {
		t.Fatalf("finished bot: err = %v, want ErrGone (410)", err)
	}

	must(t, env.Client.Delete(ctx, b))
	h.eventually(func() error {
		if _, err := h.client(s).Config(ctx); !errors.Is(err, botclient.ErrGone) {
			return fmt.Errorf("deleted bot: err = %w, want ErrGone", err)
		}
		return nil
	})
}

func TestHeartbeat(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	s, b, c := h.boundBot("pool-zoom-001", "standup")

	resp, err := c.Heartbeat(ctx, "standup")
	must(t, err)
	if resp != (botclient.HeartbeatResponse{Action: botclient.ActionContinue, LogLevel: "info"}) {
		t.Errorf("first beat = %+v, want continue/info", resp)
	}
	if n := h.live.beatsOf(b.UID); n != 1 {
		t.Errorf("store has %d beats of the bot, want 1", n)
	}

	// The bot's log level follows an annotation.
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(b), b))
	b.Annotations = map[string]string{v1.AnnotationLogLevel: "debug"}
	must(t, env.Client.Update(ctx, b))
	h.synced(b)
	resp, err = c.Heartbeat(ctx, "standup")
	must(t, err)
	if resp.LogLevel != "debug" {
		t.Errorf("log level = %q, want debug from the annotation", resp.LogLevel)
	}

	// Past maxDuration since it started: leave.
	h.updateBotStatus(b, func(b *v1.Bot) { b.Status.StartedAt = &metav1.Time{Time: h.clock.Now().Add(-59 * time.Minute)} })
	if resp, _ := c.Heartbeat(ctx, "standup"); resp.Action != botclient.ActionContinue {
		t.Errorf("59m into a 1h meeting: %s, want continue", resp.Action)
	}
	h.clock.Step(2 * time.Minute)
	if resp, _ := c.Heartbeat(ctx, "standup"); resp.Action != botclient.ActionLeave {
		t.Errorf("61m into a 1h meeting: %s, want leave", resp.Action)
	}

	// A store outage never fails the bot: the beat is answered normally, and the answer says
	// it waits for the database (liveness reads "unknown" meanwhile).
	h.live.err = store.ErrBuffered
	if resp, err := c.Heartbeat(ctx, "standup"); err != nil || !resp.Buffered || resp.Action != botclient.ActionLeave {
		t.Errorf("beat during a store outage: %+v, %v; want the action, marked buffered", resp, err)
	}
	// A beat the store did not take at all is a 503 the bot retries, not a silent 200.
	h.live.err = errors.New("store closed")
	code, body := h.call("POST", "/v1/bots/standup/heartbeat", s.cred, "")
	wantStatus(t, "beat the store refused", code, body, 503, "could not record this heartbeat")
	h.live.err = nil
	if resp, err := c.Heartbeat(ctx, "standup"); err != nil || resp.Buffered {
		t.Errorf("beat after the outage: %+v, %v; want a stored beat", resp, err)
	}

	// Another bot, never bound to this slot: forbidden.
	h.bot("intruder")
	if _, err := c.Heartbeat(ctx, "intruder"); !errors.Is(err, botclient.ErrForbidden) {
		t.Errorf("beat for another bot: %v, want 403", err)
	}
	if _, err := c.Heartbeat(ctx, "nobody"); !errors.Is(err, botclient.ErrForbidden) {
		t.Errorf("beat for a bot that does not exist: %v, want 403", err)
	}
	code, body = h.call("POST", "/v1/bots/standup/heartbeat", s.cred, `{"extra":true}`)
	wantStatus(t, "unknown field", code, body, 400, `unknown field \"extra\"`)

	// Released from the slot: the binding has ended, and its credential with it.
	before := h.live.beatsOf(b.UID)
	h.release(s)
	if _, err := c.Heartbeat(ctx, "standup"); !errors.Is(err, botclient.ErrUnauthorized) {
		t.Errorf("released bot: %v, want 401", err)
	}
	if h.live.beatsOf(b.UID) != before {
		t.Errorf("a beat with an ended binding's credential was recorded")
	}
	code, body = h.call("POST", "/v1/bots/standup/heartbeat", "", "")
	wantStatus(t, "no token", code, body, 401, "missing bearer token")
}

func TestHeartbeatLeaveAndExit(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	_, b, c := h.boundBot("pool-zoom-001", "leaver")

	// Deleting the Bot (held by a finalizer, as the controller's) asks it to leave.
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(b), b))
	b.Finalizers = []string{"botpool.dev/test"}
	must(t, env.Client.Update(ctx, b))
	must(t, env.Client.Delete(ctx, b))
	h.eventually(func() error {
		if resp, _ := c.Heartbeat(ctx, "leaver"); resp.Action != botclient.ActionLeave {
			return fmt.Errorf("deleting bot: %s, want leave", resp.Action)
		}
		return nil
	})
	// Once terminal: exit.
	h.updateBotStatus(b, func(b *v1.Bot) { b.Status.Phase = v1.BotDone })
	if resp, _ := c.Heartbeat(ctx, "leaver"); resp.Action != botclient.ActionExit {
		t.Errorf("finished bot: %s, want exit", resp.Action)
	}
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(b), b))
	b.Finalizers = nil
	must(t, env.Client.Update(ctx, b))
	// Gone entirely, still named by the slot: its credential authenticates nothing (401).
	h.eventually(func() error {
		if resp, err := c.Heartbeat(ctx, "leaver"); !errors.Is(err, botclient.ErrUnauthorized) {
			return fmt.Errorf("deleted bot: %+v %w, want 401", resp, err)
		}
		return nil
	})
}

func TestStatus(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	_, b, c := h.boundBot("pool-zoom-001", "standup")

	for _, phase := range []string{"JoiningCall", "InWaitingRoom", "InCall", "InCall", "CallEnded"} {
		resp, err := c.ReportStatus(ctx, "standup", botclient.StatusReport{Phase: phase})
		if err != nil || resp.Phase != phase {
			t.Fatalf("report %s: %+v, %v", phase, resp, err)
		}
	}
	// A report is a sign of life: the write that stores it says so too (no write of the
	// controller's after it), and the store agrees.
	var got v1.Bot
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(b), &got))
	if c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionAlive); c == nil || c.Status != metav1.ConditionTrue ||
		c.Reason != v1.ReasonHeartbeatReceived || got.Status.StartedAt == nil || got.Status.LastHeartbeat == nil {
		t.Errorf("after the reports Alive = %v, startedAt %v, lastHeartbeat %v; want True, both set", c, got.Status.StartedAt, got.Status.LastHeartbeat)
	}
	if n := h.live.beatsOf(b.UID); n != 5 {
		t.Errorf("the store has %d beats of the reporting bot, want one per report (5)", n)
	}
	if _, err := c.ReportStatus(ctx, "standup", botclient.StatusReport{Phase: "JoiningCall"}); !errors.Is(err, botclient.ErrConflict) {
		t.Errorf("going back to JoiningCall: %v, want 409", err)
	}
	start := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	done := botclient.StatusReport{Phase: "Done", RecordingLocation: "s3://recordings/standup.mp4",
		SpeakerTimeframes: []botclient.SpeakerTimeframe{{Speaker: "Ann", Start: start, End: start.Add(time.Minute)}}}
	if _, err := c.ReportStatus(ctx, "standup", done); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReportStatus(ctx, "standup", botclient.StatusReport{Phase: "Done"}); err != nil {
		t.Errorf("repeating Done: %v, want 200", err)
	}
	if _, err := c.ReportStatus(ctx, "standup", botclient.StatusReport{Phase: "Fatal"}); !errors.Is(err, botclient.ErrConflict) {
		t.Errorf("Fatal after Done: %v, want 409", err)
	}

	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(b), &got))
	if got.Status.Phase != v1.BotDone || got.Status.RecordingLocation != done.RecordingLocation || got.Status.FinishedAt == nil {
		t.Errorf("status after Done = %+v", got.Status)
	}

	wantFinished(t, &got, metav1.ConditionTrue)
	if len(h.live.events) != 1 || h.live.events[0].Type != "speakerTimeframes" || h.live.events[0].BotUID != b.UID {
		t.Errorf("speaker timeframes were not stored as one event: %+v", h.live.events)
	}

	// Fatal carries the bot's reason; another bot's status is forbidden.
	s2, b2, c2 := h.boundBot("pool-zoom-002", "kicked")
	// A run so short that the controller never mirrored the binding: the report records it.
	h.updateBotStatus(b2, func(b *v1.Bot) { b.Status.SlotName, b.Status.ApplicationUUID = "", "" })
	if _, err := c2.ReportStatus(ctx, "kicked", botclient.StatusReport{Phase: "Fatal", Reason: "RemovedFromMeeting", Message: "host removed the bot"}); err != nil {
		t.Fatal(err)
	}
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(b2), &got))
	if got.Status.Phase != v1.BotFatal || got.Status.Reason != "RemovedFromMeeting" || got.Status.Message != "host removed the bot" {
		t.Errorf("status after Fatal = %+v", got.Status)
	}
	if got.Status.SlotName != s2.slot.Name || got.Status.ApplicationUUID != s2.app {
		t.Errorf("the bot that ran in %s (%s) records slot %q (%q)", s2.slot.Name, s2.app, got.Status.SlotName, got.Status.ApplicationUUID)
	}
	wantFinished(t, &got, metav1.ConditionFalse)
	// botpool_bots_failed_total counts the reported Fatal once (not the refused one after Done).
	if n := testutil.ToFloat64(h.srv.metrics.failed.WithLabelValues(botfailures.Reported)); n != 1 {
		t.Errorf("botpool_bots_failed_total{reason=%q} = %v, want 1", botfailures.Reported, n)
	}
	if _, err := c2.ReportStatus(ctx, "standup", botclient.StatusReport{Phase: "InCall"}); !errors.Is(err, botclient.ErrForbidden) {
		t.Errorf("status of another slot's bot: %v, want 403", err)
	}

	code, body := h.call("POST", "/v1/bots/kicked/status", s2.cred, `{"phase":"Dancing"}`)
	wantStatus(t, "unknown phase", code, body, 400, "is not one a bot reports")
	code, body = h.call("POST", "/v1/bots/kicked/status", s2.cred, "")
	wantStatus(t, "empty body", code, body, 400, "empty body")
}

// wantFinished checks the conditions the write that ended the bot carries: Ready (ready),
// Bound False, both Finished, and no Alive.
func wantFinished(t *testing.T, b *v1.Bot, ready metav1.ConditionStatus) {
	t.Helper()
	r := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionReady)
	bound := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionBound)
	if r == nil || r.Status != ready || r.Reason != v1.ReasonFinished || bound == nil || bound.Status != metav1.ConditionFalse ||
		meta.FindStatusCondition(b.Status.Conditions, v1.ConditionAlive) != nil {
		t.Errorf("conditions of a bot that ended %s: %+v; want Ready=%s and Bound=False (Finished), no Alive", b.Status.Phase, b.Status.Conditions, ready)
	}
}

// TestStatusDoesNotOverwriteAConcurrentChange: the cache still says InCall, but the
// controller has failed the bot meanwhile; the report must be checked against that.
func TestStatusDoesNotOverwriteAConcurrentChange(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	_, b, _ := h.boundBot("pool-zoom-001", "racer", func(b *v1.Bot) { b.Status.Phase = v1.BotInCall })

	stale := &v1.Bot{}
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(b), stale))
	h.updateBotStatus(b, func(b *v1.Bot) { b.Status.Phase = v1.BotFatal; b.Status.Reason = v1.ReasonHeartbeatTimeout })

	srv := New(Config{Cache: objCache, Client: env.Client, APIReader: env.Client, Liveness: h.live, Clock: h.clock})
	_, err := srv.applyStatus(ctx, stale, nil, botclient.StatusReport{Phase: "CallEnded"})
	var ae *apiError
	if !errors.As(err, &ae) || ae.code != http.StatusConflict {
		t.Fatalf("applying CallEnded over a Fatal the cache had not seen: %v, want 409", err)
	}
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(b), b))
	if b.Status.Phase != v1.BotFatal || b.Status.Reason != v1.ReasonHeartbeatTimeout {
		t.Errorf("the controller's Fatal was overwritten: %+v", b.Status)
	}
}

func TestEvents(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	s, _, c := h.boundBot("pool-zoom-001", "standup")

	resp, err := c.SendEvents(ctx, "standup",
		botclient.Event{Type: "participant.joined", Data: json.RawMessage(`{"name":"Ann"}`)},
		botclient.Event{Type: "log", At: h.clock.Now().Add(time.Hour), Data: json.RawMessage(`"from the future"`)})
	if err != nil || resp.Accepted != 2 {
		t.Fatalf("events: %+v, %v", resp, err)
	}
	if len(h.live.events) != 2 || h.live.events[1].At != h.clock.Now() {
		t.Errorf("stored events = %+v (a timestamp far in the future is replaced by now)", h.live.events)
	}
	// Nor may a bot backdate its events without limit: not before its Bot existed.
	resp, err = c.SendEvents(ctx, "standup",
		botclient.Event{Type: "log", At: h.clock.Now().Add(-24 * time.Hour), Data: json.RawMessage(`"from yesterday"`)},
		botclient.Event{Type: "log", At: h.clock.Now().Add(-time.Second), Data: json.RawMessage(`"a second ago"`)})
	if err != nil || resp.Accepted != 2 {
		t.Fatalf("events: %+v, %v", resp, err)
	}
	if got := h.live.events[2:]; len(got) != 2 || !got[0].At.Equal(h.clock.Now()) || !got[1].At.Equal(h.clock.Now().Add(-time.Second)) {
		t.Errorf("stored events = %+v (a time before the bot existed is replaced by now; a recent one kept)", got)
	}
	// Data the JSON decoder takes but the store cannot keep is the bot's to fix: 400, not a 503
	// it would send again forever.
	code, body := h.call("POST", "/v1/bots/standup/events", s.cred, `{"events":[{"type":"log","data":"a\u0000b"}]}`)
	wantStatus(t, "NUL in data", code, body, 400, "NUL character")
	h.live.err = fmt.Errorf("%w: insert_events: untranslatable character", store.ErrInvalid)
	code, body = h.call("POST", "/v1/bots/standup/events", s.cred, `{"events":[{"type":"log"}]}`)
	wantStatus(t, "data the store refused", code, body, 400, "the store refused these events")
	h.live.err = nil

	code, body = h.call("POST", "/v1/bots/standup/events", s.cred, `{"events":[]}`)
	wantStatus(t, "no events", code, body, 400, "between 1 and 100")
	big := `{"events":[` + strings.Repeat(`{"type":"log","data":"`+strings.Repeat("x", 10000)+`"},`, 60) + `{"type":"log"}]}`
	code, body = h.call("POST", "/v1/bots/standup/events", s.cred, big)
	wantStatus(t, "huge body", code, body, 413, "body larger than")

	req, _ := http.NewRequest("POST", h.url+"/v1/bots/standup/events", strings.NewReader(`{"events":[{"type":"log"}]}`))
	req.Header.Set("Authorization", "Bearer "+s.cred)
	req.Header.Set("Content-Type", "text/plain")
	r, err := http.DefaultClient.Do(req)
	must(t, err)
	_ = r.Body.Close()
	if r.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain body: %d, want 415", r.StatusCode)
	}

	h.bot("other")
	if _, err := c.SendEvents(ctx, "other", botclient.Event{Type: "log"}); !errors.Is(err, botclient.ErrForbidden) {
		t.Errorf("events for another bot: %v, want 403", err)
	}

	// A store that cannot take the events says so, with Retry-After, instead of dropping them.
	h.live.err = errors.New("connection refused")
	code, body = h.call("POST", "/v1/bots/standup/events", s.cred, `{"events":[{"type":"log"}]}`)
	wantStatus(t, "store failure", code, body, 503, "retry later")
}

func TestRateLimitPerSlot(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.SlotRate, c.SlotBurst = 1, 3 })
	ctx := context.Background()
	s, _, c := h.boundBot("pool-zoom-001", "chatty")
	quiet := h.slot("pool-zoom-002")
	h.clock.Step(time.Second) // the bucket, which the claim drew on, is full again

	for i := range 3 {
		if _, err := c.Heartbeat(ctx, "chatty"); err != nil {
			t.Fatalf("beat %d within the burst: %v", i, err)
		}
	}
	code, body := h.call("POST", "/v1/bots/chatty/heartbeat", s.cred, "")
	wantStatus(t, "over the burst", code, body, 429, "too many requests")
	// Another slot is not affected; time refills the bucket.
	if _, err := h.client(quiet).Config(ctx); !errors.Is(err, botclient.ErrSlotFree) {
		t.Errorf("another slot: %v, want its own answer (404)", err)
	}
	h.clock.Step(time.Second)
	if _, err := c.Heartbeat(ctx, "chatty"); err != nil {
		t.Errorf("after a second: %v", err)
	}
}

// TestTokenOfAnEarlierSlotIsRefused: a slot deleted and created again under the same name
// must not accept the token of its predecessor, whose Secret lingers until garbage collection.
func TestTokenOfAnEarlierSlotIsRefused(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	old := h.slot("pool-zoom-001")
	must(t, env.Client.Delete(ctx, old.slot))
	h.eventually(func() error {
		return client.IgnoreNotFound(objCache.Get(ctx, client.ObjectKeyFromObject(old.slot), &v1.BotPoolSlot{}))
	})
	successor := bt.MakeSlot(h.ns, "pool-zoom-001", "pool").Obj()
	must(t, env.Client.Create(ctx, successor))
	successor.Status = v1.BotPoolSlotStatus{Phase: v1.SlotIdle, ApplicationUUID: old.app}
	must(t, env.Client.Status().Update(ctx, successor))
	h.synced(successor)
	code, body := h.call("GET", "/v1/slots/"+old.app+"/config", old.token, "")
	wantStatus(t, "the predecessor's token", code, body, 401, "invalid token")
}

func TestTokensNeverLogged(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	s, _, c := h.boundBot("pool-zoom-001", "standup")
	h.live.err = errors.New("connection refused") // forces error logs on events and beats
	_, _ = c.SendEvents(ctx, "standup", botclient.Event{Type: "log"})
	_, _ = c.Heartbeat(ctx, "standup")
	_, _ = h.call("GET", "/v1/slots/"+s.app+"/config", s.token+"x", "")
	if h.logs.Len() == 0 {
		t.Fatal("expected error logs to inspect")
	}
	if logs := h.logs.String(); strings.Contains(logs, s.token) || strings.Contains(logs, s.token[:20]) ||
		strings.Contains(logs, s.cred) || strings.Contains(logs, s.cred[:20]) {
		t.Fatalf("a token appears in the logs:\n%s", h.logs.String())
	}
}
