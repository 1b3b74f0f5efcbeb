package botapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/internal/slottoken"
)

// recordedEvents is an events.EventRecorder that keeps what it was given.
type recordedEvents struct {
	mu     sync.Mutex
	events []string // "<Type> <Reason> <object name>: <note>"
}

func (r *recordedEvents) Eventf(regarding runtime.Object, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	name := ""
	if o, ok := regarding.(client.Object); ok {
		name = o.GetName()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf("%s %s %s: %s", eventtype, reason, name, fmt.Sprintf(note, args...)))
}

func (r *recordedEvents) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

// botCalls are the calls a binding credential authorizes, for bot name.
func botCalls(name string) [][2]string {
	return [][2]string{
		{"/v1/bots/" + name + "/heartbeat", ""},
		{"/v1/bots/" + name + "/status", `{"phase":"InCall"}`},
		{"/v1/bots/" + name + "/events", `{"events":[{"type":"log"}]}`},
	}
}

// TestBindingClaimedTwice: a binding is handed out once. A second config call is refused with
// 409 and leaves a Warning Event on the Bot and an audit row; the first credential keeps
// working, and no second one exists.
func TestBindingClaimedTwice(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	s, b, c := h.boundBot("pool-zoom-001", "standup")

	code, body := h.call("GET", "/v1/slots/"+s.app+"/config", s.token, "")
	wantStatus(t, "second claim", code, body, http.StatusConflict, "a binding is handed out once")
	if got := h.events.list(); len(got) != 1 || !strings.HasPrefix(got[0], "Warning "+v1.ReasonBindingClaimedTwice+" standup: ") {
		t.Errorf("events = %q, want one Warning %s on the bot", got, v1.ReasonBindingClaimedTwice)
	}
	h.live.mu.Lock()
	var audit int
	for _, e := range h.live.events {
		if e.Type == AuditBindingClaimRefused && e.BotUID == b.UID && strings.Contains(string(e.Data), s.slot.Name) {
			audit++
		}
	}
	h.live.mu.Unlock()
	if audit != 1 {
		t.Errorf("%d audit rows of the refused claim, want 1: %+v", audit, h.live.events)
	}
	var got v1.Bot
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(b), &got))
	if got.Status.Binding == nil || got.Status.Binding.CredentialSHA256 != slottoken.Hash([]byte(s.cred)) {
		t.Errorf("claim after the refused one = %+v, want the first credential's", got.Status.Binding)
	}
	if _, err := c.Heartbeat(ctx, "standup"); err != nil {
		t.Errorf("the first credential after a refused claim: %v", err)
	}
}

// TestBindingClaimedOnceUnderRace: concurrent config calls for one binding (a container and a
// copy of it, or two replicas' answers) hand it out exactly once: the claim is written with an
// optimistic lock on the Bot.
func TestBindingClaimedOnceUnderRace(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.SlotBurst = 100 })
	s := h.slot("pool-zoom-001")
	h.bind(s, h.bot("standup"))
	const callers = 6
	codes := make(chan int, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			code, _ := h.call("GET", "/v1/slots/"+s.app+"/config", s.token, "")
			codes <- code
		})
	}
	wg.Wait()
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	if got[http.StatusOK] != 1 || got[http.StatusConflict] != callers-1 {
		t.Fatalf("answers %v, want one 200 and %d 409", got, callers-1)
	}
}

// TestEndedBindingCredentialRefused: a binding credential is valid while the slot names its
// bot: released, rebound to another bot, or deleted, it authenticates nothing.
func TestEndedBindingCredentialRefused(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	s, _, c := h.boundBot("pool-zoom-001", "standup")
	if _, err := c.Heartbeat(ctx, "standup"); err != nil {
		t.Fatal(err)
	}
	h.release(s)
	for _, call := range botCalls("standup") {
		code, body := h.call("POST", call[0], s.cred, call[1])
		wantStatus(t, "released: "+call[0], code, body, http.StatusUnauthorized, "the binding of this credential has ended")
	}
	// The slot serves another bot now: the old credential gets nothing of it either.
	next := h.bot("next")
	h.bind(s, next)
	for _, name := range []string{"standup", "next"} {
		for _, call := range botCalls(name) {
			code, body := h.call("POST", call[0], s.cred, call[1])
			if code != http.StatusUnauthorized && code != http.StatusForbidden {
				t.Errorf("rebound slot, %s with the old credential: %d %s, want 401 or 403", call[0], code, body)
			}
		}
	}
}

// TestSlotTokenRefusedOnBotCalls: the slot's own token only claims.
func TestSlotTokenRefusedOnBotCalls(t *testing.T) {
	h := newHarness(t)
	s, b, _ := h.boundBot("pool-zoom-001", "standup")
	for _, call := range botCalls("standup") {
		code, body := h.call("POST", call[0], s.token, call[1])
		wantStatus(t, "slot token on "+call[0], code, body, http.StatusUnauthorized, "send the binding credential of the config answer")
	}
	if n := h.live.beatsOf(b.UID); n != 0 {
		t.Errorf("%d beats recorded with the slot token", n)
	}
}

// TestCredentialOfAnotherBotRefused: bot A's credential on bot B's routes.
func TestCredentialOfAnotherBotRefused(t *testing.T) {
	h := newHarness(t)
	a, _, _ := h.boundBot("pool-zoom-001", "alpha")
	_, beta, _ := h.boundBot("pool-zoom-002", "beta")
	for _, call := range botCalls("beta") {
		code, body := h.call("POST", call[0], a.cred, call[1])
		wantStatus(t, "alpha's credential on "+call[0], code, body, http.StatusForbidden, "does not authorize bot beta")
	}
	if n := h.live.beatsOf(beta.UID); n != 0 {
		t.Errorf("%d beats of beta recorded with alpha's credential", n)
	}
	// A made-up credential of the right shape, and one of another shape: 401, counted.
	forged, _ := newBindingCredential()
	for _, tok := range []string{forged, "bpb_short", "whatever"} {
		code, body := h.call("POST", "/v1/bots/beta/heartbeat", tok, "")
		wantStatus(t, "made-up credential "+tok[:4], code, body, http.StatusUnauthorized, "invalid token")
	}
}

// TestClaimBeforeTheCacheHasIt: the calls right after a claim may reach the replica before its
// cache shows the claim; the replica that made it remembers it.
func TestClaimBeforeTheCacheHasIt(t *testing.T) {
	h := newHarness(t)
	s := h.slot("pool-zoom-001")
	b := h.bot("standup")
	h.bind(s, b)
	cred, hash := newBindingCredential()
	// As claim does after its write, but without the write: the cache never sees this claim.
	h.srv.rememberIssued(b, v1.BindingClaim{SlotName: s.slot.Name, SlotUID: s.slot.UID, CredentialSHA256: hash})
	code, body := h.call("POST", "/v1/bots/standup/heartbeat", cred, "")
	wantStatus(t, "a claim the cache has not shown", code, body, http.StatusOK, "continue")
	other, _ := newBindingCredential()
	code, body = h.call("POST", "/v1/bots/standup/heartbeat", other, "")
	wantStatus(t, "a credential never issued", code, body, http.StatusUnauthorized, "invalid token")
}

// botlessCache is a cache that has not seen any Bot yet (its Bot informer lags the slots').
type botlessCache struct{ client.Reader }

func (c botlessCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*v1.Bot); ok {
		return apierrors.NewNotFound(v1.GroupVersion.WithResource("bots").GroupResource(), key.Name)
	}
	return c.Reader.Get(ctx, key, obj, opts...)
}

// TestConfigOfABotTheCacheHasNotSeen: a binding seen before its Bot (a waiting request is woken
// by the slot's informer) is not "the bot is gone": the container gets its configuration.
func TestConfigOfABotTheCacheHasNotSeen(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Cache = botlessCache{objCache} })
	s := h.slot("pool-zoom-001")
	h.bind(s, h.bot("standup"))
	code, body := h.call("GET", "/v1/slots/"+s.app+"/config", s.token, "")
	wantStatus(t, "a bot only the API server has", code, body, http.StatusOK, `"bot":"standup"`)

	other := h.slot("pool-zoom-002")
	gone := h.bot("gone")
	h.bind(other, gone)
	must(t, env.Client.Delete(context.Background(), gone))
	code, body = h.call("GET", "/v1/slots/"+other.app+"/config", other.token, "")
	wantStatus(t, "a bot the API server has not either", code, body, http.StatusGone, "no longer exists")
}

// cancelOnClaim is a client whose status writes run as if the request that made them were
// cancelled at that moment (the manager stopping): it cancels cancelReq, then writes with the
// context it was given.
type cancelOnClaim struct {
	client.Client
	cancelReq context.CancelFunc
}

func (c cancelOnClaim) Status() client.SubResourceWriter {
	return cancelingWriter{c.Client.Status(), c.cancelReq}
}

type cancelingWriter struct {
	client.SubResourceWriter
	cancelReq context.CancelFunc
}

func (w cancelingWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	w.cancelReq()
	return w.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// TestClaimOutlivesItsRequest: a claim is written even when its request is cancelled while
// the write is on its way (the manager stopping cancels the requests it serves). Cut off, the
// write could land in the API server while the handler answered an error, and the container's
// retry would find its own binding handed out (409) and exit: the bot would be lost.
func TestClaimOutlivesItsRequest(t *testing.T) {
	reqCtx, cancelReq := context.WithCancel(context.Background())
	defer cancelReq()
	h := newHarness(t, func(c *Config) { c.Client = cancelOnClaim{Client: c.Client, cancelReq: cancelReq} })
	f := h.slot("pool-zoom-001")
	b := h.bot("standup")
	h.bind(f, b)

	req := httptest.NewRequestWithContext(reqCtx, http.MethodGet, "/v1/slots/"+f.app+"/config", nil)
	req.Header.Set("Authorization", "Bearer "+f.token)
	rec := httptest.NewRecorder()
	h.srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "bpb_") {
		t.Fatalf("config answered %d %s; want 200 with the binding credential", rec.Code, rec.Body.String())
	}
	var got v1.Bot
	must(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(b), &got))
	if got.Status.Binding == nil || got.Status.Binding.SlotUID != f.slot.UID {
		t.Fatalf("claim %+v, want the slot's", got.Status.Binding)
	}
}

// TestNoClaimOfABotThatWentBackToTheQueue: the bot's start failed in its slot, and the bot
// controller put it back in the queue (a retried start) while the slot still names it: a config
// call of that slot's container is answered 410 and claims nothing, so no container of the
// failed slot gets the meeting URL of a bot that will start elsewhere.
func TestNoClaimOfABotThatWentBackToTheQueue(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	f := h.slot("pool-zoom-001")
	b := h.bot("retried")
	h.bind(f, b)
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(f.slot), f.slot))
	f.slot.Status.Phase, f.slot.Status.Reason = v1.SlotError, string(v1.ReasonDeploymentFailed)
	must(t, env.Client.Status().Update(ctx, f.slot))
	h.synced(f.slot)
	h.updateBotStatus(b, func(b *v1.Bot) {
		b.Status.Phase, b.Status.SlotName, b.Status.ApplicationUUID = v1.BotQueued, "", ""
		b.Status.StartAttempts = []v1.StartAttempt{{SlotName: f.slot.Name, Reason: v1.ReasonDeploymentFailed, At: metav1.NewTime(time.Now())}}
	})

	code, body := h.call("GET", "/v1/slots/"+f.app+"/config", f.token, "")
	wantStatus(t, "config of a requeued bot", code, body, http.StatusGone, "went back to the queue")
	var got v1.Bot
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(b), &got))
	if got.Status.Binding != nil {
		t.Fatalf("the binding of a requeued bot was handed out: %+v", got.Status.Binding)
	}
}
