package controllers

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/fakeapi"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/coolify/sim"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/internal/simbot"
	"botpool.dev/botpool/internal/slottoken"
	"botpool.dev/botpool/store"
	"botpool.dev/botpool/store/memory"
	"botpool.dev/botpool/store/storetest"
)

// TestStandbyContainerThatHangsUpIsLost: a Ready slot's container that dies closes the
// connection of its wait; the bot API records the hang-up, and the slot, still Ready within
// standbyRejoinGrace, is Lost once the grace is over (the ask window is 75 s: only the hang-up
// can make it Lost 11 s on) and gets a fresh container.
func TestStandbyContainerThatHangsUpIsLost(t *testing.T) {
	cs := newContainers(t, simbot.Behaviour{PollEvery: 20 * time.Millisecond})
	sc := newScenario(t, "standbyhangup", sim.Config{Hooks: cs.hooks()}, func(p *v1.BotPool) {
		p.Spec.Standby = v1.StandbyRunning
	})
	sc.warm()
	first := sc.standbyReady()
	// The container dies: its pending wait's connection closes. The fake clock stands still
	// until the slot has seen the hang-up, so it is seen within the grace.
	cs.freeze(first.Status.ApplicationUUID)
	hung := sc.slot("Ready, its container's hang-up seen", func(s *v1.BotPoolSlot) bool {
		return strings.HasPrefix(s.Status.Message, hungUpMessage) || s.Status.Standby != v1.StandbyReady
	})
	if hung.Status.Standby != v1.StandbyReady || hung.Status.DeploymentUUID != first.Status.DeploymentUUID {
		t.Fatalf("within the grace the slot is %s (%s), want Ready on its container", hung.Status.Standby, hung.Status.Message)
	}
	clk.Step(standbyRejoinGrace + time.Second)
	var message string
	lost := sc.slot("Lost, redeploying", func(s *v1.BotPoolSlot) bool {
		if s.Status.Standby == v1.StandbyLost {
			message = s.Status.Message
		}
		return s.Status.Standby == v1.StandbyLost || s.Status.DeploymentUUID != first.Status.DeploymentUUID
	})
	if policy.IsFree(lost) {
		t.Fatalf("a slot whose container hung up is offered to bots: %+v", lost.Status)
	}
	if message != "" && !strings.Contains(message, "hung up its wait for work at") {
		t.Errorf("Lost for another reason: %s", message)
	}
	again := sc.standbyReady()
	cs.check()
	if again.Status.DeploymentUUID == first.Status.DeploymentUUID {
		t.Fatal("Ready again without a fresh deployment")
	}
}

// TestStandbyContainerThatAsksAgainAfterAHangUpStaysReady: a container whose wait's
// connection is cut (a proxy, a client timeout) asks again at once; its ask — within a second
// of its last one — clears the hang-up, and the slot stays Ready on the same container past
// the grace.
func TestStandbyContainerThatAsksAgainAfterAHangUpStaysReady(t *testing.T) {
	cs := newContainers(t, simbot.Behaviour{PollEvery: 20 * time.Millisecond})
	cut := &waitCutter{next: cs, inflight: map[*http.Request]*cutRequest{}}
	cs.b.HTTPClient = &http.Client{Timeout: 10 * time.Second, Transport: cut}
	sc := newScenario(t, "standbyrejoin", sim.Config{Hooks: cs.hooks()}, func(p *v1.BotPool) {
		p.Spec.Standby = v1.StandbyRunning
	})
	sc.warm()
	first := sc.standbyReady()
	app := first.Status.ApplicationUUID
	started := cs.list()
	if len(started) != 1 {
		t.Fatalf("%d containers started, want 1", len(started))
	}

	// Its wait is cut, and its next request held back until the slot has seen the hang-up:
	// the order is the test's, not the scheduler's.
	kubetest.Eventually(t, 10*time.Second, func() error {
		if !cut.cut(app) {
			return fmt.Errorf("no wait of %s in flight", app)
		}
		return nil
	})
	hung := sc.slot("Ready, its container's hang-up seen", func(s *v1.BotPoolSlot) bool {
		return strings.HasPrefix(s.Status.Message, hungUpMessage) || s.Status.Standby != v1.StandbyReady
	})
	if hung.Status.Standby != v1.StandbyReady {
		t.Fatalf("within the grace the slot is %s (%s), want Ready", hung.Status.Standby, hung.Status.Message)
	}
	cut.release()
	back := sc.slot("Ready, its container asking again", func(s *v1.BotPoolSlot) bool {
		return !strings.HasPrefix(s.Status.Message, hungUpMessage)
	})
	if back.Status.Standby != v1.StandbyReady || back.Status.DeploymentUUID != first.Status.DeploymentUUID {
		t.Fatalf("after its container asked again the slot is %s (%s) on deployment %s, want Ready on %s",
			back.Status.Standby, back.Status.Message, back.Status.DeploymentUUID, first.Status.DeploymentUUID)
	}
	asks, err := liveStore.LastSlotAsks(context.Background(), []types.UID{first.UID})
	if err != nil {
		t.Fatal(err)
	}
	if a := asks[first.UID]; !a.LeftAt.IsZero() {
		t.Fatalf("the ask after the hang-up did not clear it: %+v", a)
	}

	// Past the grace nothing changes: the container is back.
	clk.Step(standbyRejoinGrace + time.Second)
	bot := newBot(t, sc.ns, "afterblip", sc.pool.Name)
	kubetest.Eventually(t, 15*time.Second, func() error {
		cs.check()
		if b := sc.bot(bot.Name); b.Status.Phase != v1.BotDone || len(cs.served(bot.Name)) == 0 {
			return fmt.Errorf("bot %s is %s", b.Name, b.Status.Phase)
		}
		return nil
	})
	served := cs.served(bot.Name)
	if len(served) != 1 || served[0] != started[0] {
		t.Fatalf("bot %s was served by %d containers, want the one that asked again", bot.Name, len(served))
	}
}

// waitCutter cuts the config waits of one application's container as a proxy or a network
// blip would: the client sees its connection reset and asks again (botclient retries), and
// the server sees its client gone. The next config request is held back until release.
type waitCutter struct {
	next http.RoundTripper

	mu       sync.Mutex
	app      string
	hold     chan struct{} // closed by release
	inflight map[*http.Request]*cutRequest
}

type cutRequest struct {
	app    string
	cancel context.CancelFunc
	cut    bool
}

// appOf returns the application of a config request that waits, "" for any other request.
func appOf(req *http.Request) string {
	rest, ok := strings.CutPrefix(req.URL.Path, "/v1/slots/")
	if !ok || req.URL.Query().Get("wait") == "" {
		return ""
	}
	app, ok := strings.CutSuffix(rest, "/config")
	if !ok {
		return ""
	}
	return app
}

func (c *waitCutter) RoundTrip(req *http.Request) (*http.Response, error) {
	app := appOf(req)
	if app == "" {
		return c.next.RoundTrip(req)
	}
	c.mu.Lock()
	hold := c.hold
	if c.app != app {
		hold = nil
	}
	c.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	ctx, cancel := context.WithCancel(req.Context())
	cr := &cutRequest{app: app, cancel: cancel}
	c.mu.Lock()
	c.inflight[req] = cr
	c.mu.Unlock()
	resp, err := c.next.RoundTrip(req.WithContext(ctx))
	c.mu.Lock()
	delete(c.inflight, req)
	wasCut := cr.cut
	c.mu.Unlock()
	if wasCut {
		if resp != nil {
			_ = resp.Body.Close()
		}
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return resp, err
}

// cut cuts the waits of app in flight and holds its next ones; false when none was in flight.
func (c *waitCutter) cut(app string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	found := false
	for _, cr := range c.inflight {
		if cr.app == app && !cr.cut {
			cr.cut, found = true, true
			cr.cancel()
		}
	}
	if found {
		c.app, c.hold = app, make(chan struct{})
	}
	return found
}

// release lets the held requests through.
func (c *waitCutter) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold != nil {
		close(c.hold)
		c.hold, c.app = nil, ""
	}
}

// TestStandbyHangUpInOnePass drives single passes of a Ready standby slot whose container's
// ask shows a hang-up: within standbyRejoinGrace it stays Ready and looks again just after the
// grace; past it the slot is Lost, saying when its container hung up; an ask after the hang-up
// (which clears it) keeps it Ready.
func TestStandbyHangUpInOnePass(t *testing.T) {
	const ns, name, app = "ns", "pool-zoom-001", "app-1"
	const token = "bpt_current"
	deployed := time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)
	asked := deployed.Add(9 * time.Second)
	hungUp := asked.Add(20 * time.Second)
	pass := func(t *testing.T, at time.Time, record func(store.Store), bound ...*v1.Bot) (*v1.BotPoolSlot, time.Duration) {
		t.Helper()
		fclk := clocktesting.NewFakeClock(at)
		pool := bt.MakePool(ns, "pool").UID("pool-uid").MaxSlots(1).Image("bot", "1").Standby(v1.StandbyRunning).Obj()
		slot := bt.MakeSlot(ns, name, "pool").UID("slot-uid").Finalizers(v1.FinalizerSlot).Token(slottoken.Hash([]byte(token))).App(app).
			Phase(v1.SlotIdle).Since(deployed.Add(8 * time.Second)).Obj()
		since := metav1.NewTime(deployed)
		slot.Status.Standby, slot.Status.StandbySince, slot.Status.DeploymentUUID = v1.StandbyReady, &since, "dep-1"
		slot.Status.Message = "Standby container asks for work"
		st := memory.New(memory.WithClock(fclk))
		record(st)
		objs := []client.Object{pool, slot}
		for _, bot := range bound {
			slot.Spec.BotRef = &v1.BotReference{Name: bot.Name, UID: bot.UID}
			objs = append(objs, bot)
		}
		c := fakeapi.New(t, interceptor.Funcs{}, objs...)
		api := &bt.Coolify{
			ListApplicationsFn: func(context.Context, string) ([]coolify.Application, error) {
				return []coolify.Application{{UUID: app, Name: name}}, nil
			},
			SetDescriptionFn: func(context.Context, string, string) error { return nil },
		}
		r := onePassSlots(c, c, fclk, api, st)
		key := client.ObjectKeyFromObject(slot)
		res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
		if err != nil {
			t.Fatal(err)
		}
		var got v1.BotPoolSlot
		if err := c.Get(context.Background(), key, &got); err != nil {
			t.Fatal(err)
		}
		return &got, res.RequeueAfter
	}
	ask := storetest.Ask("slot-uid", ns, token, asked)
	ask.Name = name
	hangUp := func(st store.Store) {
		if err := st.RecordSlotAsk(context.Background(), ask); err != nil {
			t.Fatal(err)
		}
		if err := st.RecordSlotLeft(context.Background(), storetest.Left("slot-uid", token, asked, hungUp)); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("within the grace it stays Ready and looks again after it", func(t *testing.T) {
		got, requeue := pass(t, hungUp.Add(2*time.Second), hangUp)
		if got.Status.Standby != v1.StandbyReady || !strings.HasPrefix(got.Status.Message, hungUpMessage) {
			t.Fatalf("standby %s (%s), want Ready, saying its container hung up", got.Status.Standby, got.Status.Message)
		}
		if left := standbyRejoinGrace - 2*time.Second; requeue <= 0 || requeue > left+time.Second {
			t.Errorf("looks again in %s, want just after the grace (%s)", requeue, left)
		}
	})
	t.Run("past the grace it is Lost", func(t *testing.T) {
		got, _ := pass(t, hungUp.Add(standbyRejoinGrace+time.Second), hangUp)
		want := "hung up its wait for work at " + hungUp.Format(time.RFC3339)
		if got.Status.Standby != v1.StandbyLost || !strings.Contains(got.Status.Message, want) || got.Status.DeploymentUUID != "" {
			t.Fatalf("standby %s (%s), want Lost saying %q", got.Status.Standby, got.Status.Message, want)
		}
	})
	// A bot bound to the slot just after its container hung up (within the grace, while it
	// was still offered): past the grace, with no claim, it fails now instead of after the
	// 75 s ask window; a claim by the container keeps it.
	boundBot := func(claimed bool) *v1.Bot {
		bot := bt.MakeBot(ns, "bot").UID("bot-uid").PoolRef("pool").Obj()
		v1.SetCondition(&bot.Status.Conditions, metav1.Condition{Type: v1.ConditionBound, Status: metav1.ConditionTrue, Reason: v1.ReasonBound}, hungUp.Add(time.Second))
		if claimed {
			bot.Status.Binding = &v1.BindingClaim{SlotName: name, SlotUID: "slot-uid", ClaimedAt: metav1.NewTime(hungUp.Add(2 * time.Second)), CredentialSHA256: "x"}
		}
		return bot
	}
	t.Run("a bot bound to a container that hung up fails past the grace", func(t *testing.T) {
		got, _ := pass(t, hungUp.Add(standbyRejoinGrace+time.Second), hangUp, boundBot(false))
		if got.Status.Phase != v1.SlotError || got.Status.Reason != string(v1.ReasonStandbyLost) || !strings.Contains(got.Status.Message, "it will not take bot bot") {
			t.Fatalf("slot %s %s (%s), want Error StandbyLost: the container will not take the bot", got.Status.Phase, got.Status.Reason, got.Status.Message)
		}
	})
	t.Run("a bot bound within the grace waits for it", func(t *testing.T) {
		got, requeue := pass(t, hungUp.Add(5*time.Second), hangUp, boundBot(false))
		if got.Status.Phase != v1.SlotIdle || requeue <= 0 || requeue > standbyRejoinGrace {
			t.Fatalf("slot %s (%s), looks again in %s; want Idle, again just after the grace", got.Status.Phase, got.Status.Message, requeue)
		}
	})
	t.Run("a claimed bot is not failed for its container's hang-up", func(t *testing.T) {
		got, _ := pass(t, hungUp.Add(standbyRejoinGrace+time.Second), hangUp, boundBot(true))
		if got.Status.Phase == v1.SlotError {
			t.Fatalf("slot failed (%s): the container claimed the bot", got.Status.Message)
		}
	})
	t.Run("an ask after the hang-up keeps it Ready", func(t *testing.T) {
		got, _ := pass(t, hungUp.Add(time.Minute), func(st store.Store) {
			hangUp(st)
			again := ask
			again.At = hungUp.Add(100 * time.Millisecond)
			if err := st.RecordSlotAsk(context.Background(), again); err != nil {
				t.Fatal(err)
			}
		})
		if got.Status.Standby != v1.StandbyReady {
			t.Fatalf("standby %s (%s), want Ready", got.Status.Standby, got.Status.Message)
		}
	})
}
