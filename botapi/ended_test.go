package botapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/botapi/botclient"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/internal/slottoken"
)

// TestLeavingSlot: which free slots tell the container asking with their token to exit. Only
// those whose container the slot controller stops next; never a slot whose standby container
// waits for work, nor one whose bound bot decides.
func TestLeavingSlot(t *testing.T) {
	now := time.Now()
	slot := func() *bt.SlotWrapper { return bt.MakeSlot("ns", "pool-001", "pool").App("app-1") }
	for _, tc := range []struct {
		name  string
		slot  *v1.BotPoolSlot
		leave string // a part of the 410's message; "" for none
	}{
		{"Busy, its bot let go", slot().Phase(v1.SlotBusy).Obj(), "ended and let go of it"},
		{"Releasing", slot().Phase(v1.SlotReleasing).Obj(), "ended and let go of it"},
		{"Releasing the standby container a bot may have taken", slot().Phase(v1.SlotReleasing).Standby(v1.StandbyReady, now).Obj(), "ended and let go of it"},
		{"Deploying a bot's container, the bot gone", slot().Phase(v1.SlotDeploying).Deployment("dep-1", now).Obj(), "ended and let go of it"},
		{"Error", slot().Phase(v1.SlotError).Reason(string(v1.ReasonDeploymentFailed), "pull failed").Obj(), "failed (DeploymentFailed)"},
		{"Error of a standby container", slot().Phase(v1.SlotError).Standby(v1.StandbyStarting, now).Reason(string(v1.ReasonStandbyLost), "").Obj(), "failed (StandbyLost)"},
		{"being deleted", slot().Phase(v1.SlotIdle).Standby(v1.StandbyReady, now).Finalizers("f").Deleting(now).Obj(), "is being deleted"},

		{"Idle, no container", slot().Phase(v1.SlotIdle).Obj(), ""},
		{"Idle, a fresh standby container to start", slot().Phase(v1.SlotIdle).Standby(v1.StandbyStarting, now).Obj(), ""},
		{"Idle, a standby container waiting for work", slot().Phase(v1.SlotIdle).Standby(v1.StandbyReady, now).Obj(), ""},
		{"Idle, a standby container lost", slot().Phase(v1.SlotIdle).Standby(v1.StandbyLost, now).Obj(), ""},
		{"Deploying a fresh standby container", slot().Phase(v1.SlotDeploying).Standby(v1.StandbyStarting, now).Deployment("dep-1", now).Obj(), ""},
		{"Creating (the application again, the token kept)", slot().Phase(v1.SlotCreating).Obj(), ""},
		{"new", slot().Obj(), ""},
		// Bound: the bot decides (410 once it ended, its configuration before).
		{"Busy, bound", slot().Phase(v1.SlotBusy).BoundTo("standup", "uid-1").Obj(), ""},
		{"Error, bound", slot().Phase(v1.SlotError).BoundTo("standup", "uid-1").Obj(), ""},
		{"being deleted, bound", slot().Phase(v1.SlotBusy).BoundTo("standup", "uid-1").Finalizers("f").Deleting(now).Obj(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := leavingSlot(tc.slot)
			var ae *apiError
			switch {
			case tc.leave == "" && err != nil:
				t.Errorf("leavingSlot = %v, want nil: its container may wait for a bot", err)
			case tc.leave != "" && (!errors.As(err, &ae) || ae.code != http.StatusGone || !strings.Contains(ae.msg, tc.leave) || !strings.HasSuffix(ae.msg, "exit")):
				t.Errorf("leavingSlot = %v, want a 410 saying %q and exit", err, tc.leave)
			}
		})
	}
}

// setSlotStatus changes the slot's status as the slot controller would, and waits for the cache.
func (h *harness) setSlotStatus(f *slotFixture, mutate func(*v1.BotPoolSlotStatus)) {
	h.t.Helper()
	ctx := context.Background()
	must(h.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(f.slot), f.slot); err != nil {
			return err
		}
		mutate(&f.slot.Status)
		return env.Client.Status().Update(ctx, f.slot)
	}))
	h.synced(f.slot)
}

// freshContainer replaces the slot's token as the slot controller does once it stopped the
// container, in the same status write as phase and standby, and returns the fixture of the
// next container (the old fixture keeps the old token and credential).
func (h *harness) freshContainer(f *slotFixture, phase v1.SlotPhase, standby v1.StandbyState) *slotFixture {
	h.t.Helper()
	token, err := slottoken.New()
	must(h.t, err)
	h.setSlotStatus(f, func(st *v1.BotPoolSlotStatus) {
		st.TokenSHA256, st.Phase, st.Standby = slottoken.Hash([]byte(token)), phase, standby
	})
	return &slotFixture{slot: f.slot, token: token, app: f.app}
}

// wantExit checks that every call of the container of f — its config, waiting or not, with the
// slot token, its bot calls with the binding credential it claimed (f.cred, when it has one)
// — is answered 410 at once, with msg, and that the Go client reads it as ErrGone.
func (h *harness) wantExit(f *slotFixture, bot, msg string) {
	h.t.Helper()
	path := "/v1/slots/" + f.app + "/config"
	code, body := h.call("GET", path, f.token, "")
	wantStatus(h.t, "config", code, body, http.StatusGone, msg)
	// A wait is answered at once too: the fake clock never reaches its deadline, so a wait
	// that waited would end in 404 after waitGrace, in real time.
	code, body = h.call("GET", path+"?wait=30s", f.token, "")
	wantStatus(h.t, "config?wait=30s", code, body, http.StatusGone, msg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := h.client(f).WaitForBinding(ctx, 30*time.Second); !errors.Is(err, botclient.ErrGone) {
		h.t.Errorf("WaitForBinding: %v, want ErrGone", err)
	}
	if f.cred == "" {
		return
	}
	for _, call := range botCalls(bot) {
		code, body := h.call("POST", call[0], f.cred, call[1])
		wantStatus(h.t, call[0], code, body, http.StatusGone, "exit")
	}
	// A client without a configuration sends its token with the bot calls: here, the credential.
	c := botclient.New(h.url, f.app, f.cred, nil)
	if _, err := c.Heartbeat(h.t.Context(), bot); !errors.Is(err, botclient.ErrGone) {
		h.t.Errorf("Heartbeat: %v, want ErrGone", err)
	}
}

// TestEndedBotsContainerIsToldToExit: from the moment its bot ended until the slot replaced
// its token, the container of the bot is answered 410 on every call, in both standby modes:
// while the slot still names the bot (as before), after the slot let it go while it stops the
// container (before: 404, "ask again", and 401 on the bot calls), and on its bot calls after
// the token was replaced too. The next container, with the new token, waits for its bot.
func TestEndedBotsContainerIsToldToExit(t *testing.T) {
	t.Run("Stopped", func(t *testing.T) {
		h := newHarness(t)
		s, b, c := h.boundBot("pool-zoom-001", "standup")
		h.setSlotStatus(s, func(st *v1.BotPoolSlotStatus) { st.Phase = v1.SlotBusy })
		if _, err := c.ReportStatus(t.Context(), "standup", botclient.StatusReport{Phase: botclient.PhaseDone}); err != nil {
			t.Fatal(err)
		}
		must(t, env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b))
		h.synced(b)
		beats := h.live.beatsOf(b.UID)

		// Still bound: the config says so (410), the heartbeat says exit.
		code, body := h.call("GET", "/v1/slots/"+s.app+"/config", s.token, "")
		wantStatus(t, "bound, Done", code, body, http.StatusGone, "bot standup is Done: exit")
		if hb, err := c.Heartbeat(t.Context(), "standup"); err != nil || hb.Action != botclient.ActionExit {
			t.Errorf("heartbeat of a bound Done bot: %+v, %v; want exit", hb, err)
		}

		h.release(s) // the slot let go of the bot; it is still Busy until its next pass
		h.wantExit(s, "standup", "the bot of slot pool-zoom-001 ended and let go of it")
		h.setSlotStatus(s, func(st *v1.BotPoolSlotStatus) { st.Phase = v1.SlotReleasing }) // stopping the container
		h.wantExit(s, "standup", "ended and let go of it")
		if n := h.live.beatsOf(b.UID); n != beats+1 { // the bound heartbeat above, no more
			t.Errorf("%d beats of the ended bot, want %d: a 410 records none", n, beats+1)
		}

		next := h.freshContainer(s, v1.SlotIdle, "") // stopped; the next bot's container gets the new token
		code, body = h.call("GET", "/v1/slots/"+s.app+"/config", s.token, "")
		wantStatus(t, "the replaced token", code, body, http.StatusUnauthorized, "invalid token")
		for _, call := range botCalls("standup") {
			code, body := h.call("POST", call[0], s.cred, call[1])
			wantStatus(t, "the ended bot's credential after the token was replaced: "+call[0], code, body, http.StatusGone, "exit")
		}
		code, body = h.call("GET", "/v1/slots/"+s.app+"/config", next.token, "")
		wantStatus(t, "the new token", code, body, http.StatusNotFound, "no bot is bound to this slot yet")
	})

	t.Run("Running", func(t *testing.T) {
		h := newHarness(t)
		s := h.slot("pool-zoom-001")
		h.setSlotStatus(s, func(st *v1.BotPoolSlotStatus) { st.Standby = v1.StandbyReady })
		// The standby container waits for its bot, and takes it.
		cfg := h.claimWaiting(s, "standup")
		s.cred = cfg.Credential
		b := &v1.Bot{}
		must(t, env.Client.Get(t.Context(), client.ObjectKey{Namespace: h.ns, Name: "standup"}, b))
		h.setSlotStatus(s, func(st *v1.BotPoolSlotStatus) { st.Phase, st.Standby = v1.SlotBusy, "" })
		h.updateBotStatus(b, func(b *v1.Bot) { b.Status.Phase, b.Status.Reason = v1.BotFatal, v1.ReasonHeartbeatTimeout })

		h.release(s)
		h.wantExit(s, "standup", "ended and let go of it")

		// Stopped, a fresh standby container to start with a new token: it waits for work,
		// deployed or not; the old token is refused.
		next := h.freshContainer(s, v1.SlotIdle, v1.StandbyStarting)
		code, body := h.call("GET", "/v1/slots/"+s.app+"/config", next.token, "")
		wantStatus(t, "the fresh container, Idle", code, body, http.StatusNotFound, "no bot is bound to this slot yet")
		h.setSlotStatus(s, func(st *v1.BotPoolSlotStatus) { st.Phase = v1.SlotDeploying })
		code, body = h.call("GET", "/v1/slots/"+s.app+"/config", next.token, "")
		wantStatus(t, "the fresh container, Deploying", code, body, http.StatusNotFound, "no bot is bound to this slot yet")
		code, body = h.call("GET", "/v1/slots/"+s.app+"/config", s.token, "")
		wantStatus(t, "the replaced token", code, body, http.StatusUnauthorized, "invalid token")
		h.setSlotStatus(s, func(st *v1.BotPoolSlotStatus) { st.Phase, st.Standby = v1.SlotIdle, v1.StandbyReady })
		if cfg := h.claimWaiting(next, "retro"); cfg.Bot != "retro" {
			t.Errorf("the fresh container took %+v, want bot retro", cfg)
		}
	})

	t.Run("RunningEndedBeforeItStarted", func(t *testing.T) {
		// A bot bound to a Ready slot ended before it started: the slot says Releasing before
		// it lets go (the standby container may have taken the binding), then lets go.
		h := newHarness(t)
		s := h.slot("pool-zoom-001")
		h.setSlotStatus(s, func(st *v1.BotPoolSlotStatus) { st.Standby = v1.StandbyReady })
		cfg := h.claimWaiting(s, "standup")
		s.cred = cfg.Credential
		b := &v1.Bot{}
		must(t, env.Client.Get(t.Context(), client.ObjectKey{Namespace: h.ns, Name: "standup"}, b))
		h.updateBotStatus(b, func(b *v1.Bot) { b.Status.Phase, b.Status.Reason = v1.BotFatal, v1.ReasonStandbyLost })
		h.setSlotStatus(s, func(st *v1.BotPoolSlotStatus) { st.Phase = v1.SlotReleasing })
		code, body := h.call("GET", "/v1/slots/"+s.app+"/config", s.token, "")
		wantStatus(t, "Releasing, still bound", code, body, http.StatusGone, "bot standup is Fatal: exit")
		h.release(s)
		h.wantExit(s, "standup", "ended and let go of it")
	})
}

// claimWaiting has the container of f wait for its bot (a long-poll), binds a new bot to the
// slot, and returns the configuration the wait was answered with.
func (h *harness) claimWaiting(f *slotFixture, bot string) botclient.Config {
	h.t.Helper()
	ch := h.waitCall(h.t.Context(), f, "30s")
	h.waiting(1)
	h.bind(f, h.bot(bot))
	a := receive(h.t, ch, 20*time.Second)
	wantStatus(h.t, "the waiting container", a.code, a.body, http.StatusOK, `"bot":"`+bot+`"`)
	var cfg botclient.Config
	must(h.t, json.Unmarshal([]byte(a.body), &cfg))
	return cfg
}

// TestConfigWaitEndsWhenTheSlotStopsItsContainer: a container waiting for work whose slot is
// to stop it (its slot failed, or is being deleted: a pool scaled down) is told to exit at
// once, not at its deadline.
func TestConfigWaitEndsWhenTheSlotStopsItsContainer(t *testing.T) {
	h := newHarness(t)
	failed, deleted := h.slot("pool-zoom-001"), h.slot("pool-zoom-002")
	for _, f := range []*slotFixture{failed, deleted} {
		h.setSlotStatus(f, func(st *v1.BotPoolSlotStatus) { st.Standby = v1.StandbyReady })
	}
	ch := h.waitCall(t.Context(), failed, "30s")
	h.waiting(1)
	h.setSlotStatus(failed, func(st *v1.BotPoolSlotStatus) {
		st.Phase, st.Reason = v1.SlotError, string(v1.ReasonStandbyLost)
	})
	a := receive(t, ch, 20*time.Second)
	wantStatus(t, "the slot failed", a.code, a.body, http.StatusGone, "slot pool-zoom-001 failed (StandbyLost): its container stops; exit")

	ch = h.waitCall(t.Context(), deleted, "30s")
	h.waiting(1)
	ctx := t.Context()
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(deleted.slot), deleted.slot))
	deleted.slot.Finalizers = append(deleted.slot.Finalizers, "botpool.dev/test")
	must(t, env.Client.Update(ctx, deleted.slot))
	must(t, env.Client.Delete(ctx, deleted.slot))
	a = receive(t, ch, 20*time.Second)
	wantStatus(t, "the slot is being deleted", a.code, a.body, http.StatusGone, "slot pool-zoom-002 is being deleted")
	h.waiting(0)
	if n := h.waitResults("gone"); n != 2 {
		t.Errorf("%v waits ended gone, want 2", n)
	}
}

// TestEndedBindingOfADeletedBot: a bot deleted during its meeting is told to leave; once the
// slot let it go (its leave grace over), its credential is answered 410, as for a bot that
// ended. A binding that ended while its bot did not (the slot was deleted) stays a 401.
func TestEndedBindingOfADeletedBot(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	s, b, c := h.boundBot("pool-zoom-001", "standup")
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(b), b))
	b.Finalizers = append(b.Finalizers, "botpool.dev/test")
	must(t, env.Client.Update(ctx, b))
	must(t, env.Client.Delete(ctx, b))
	h.eventually(func() error {
		if hb, err := c.Heartbeat(ctx, "standup"); err != nil || hb.Action != botclient.ActionLeave {
			return fmt.Errorf("heartbeat of a deleted bot: %+v, %w; want leave", hb, err)
		}
		return nil
	})
	h.setSlotStatus(s, func(st *v1.BotPoolSlotStatus) { st.Phase = v1.SlotBusy })
	h.release(s)
	h.wantExit(s, "standup", "ended and let go of it")
	for _, call := range botCalls("standup") {
		code, body := h.call("POST", call[0], s.cred, call[1])
		wantStatus(t, call[0], code, body, http.StatusGone, "bot standup was deleted and slot pool-zoom-001 let go of it: exit")
	}

	// The slot deleted under a bot that has not ended: its credential is refused (401).
	other, _, oc := h.boundBot("pool-zoom-002", "retro")
	must(t, env.Client.Delete(ctx, other.slot))
	h.eventually(func() error {
		if _, err := oc.Heartbeat(ctx, "retro"); !errors.Is(err, botclient.ErrUnauthorized) {
			return fmt.Errorf("the slot deleted: %w, want 401", err)
		}
		return nil
	})
}
