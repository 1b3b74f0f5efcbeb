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

	"k8s.io/apimachinery/pkg/types"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
	slotctrl "botpool.dev/botpool/controllers/slot"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/internal/simbot"
)

// TestStandbyContainerThatHangsUpIsLost: a Ready slot's container that dies closes the
// connection of its wait; the bot API records the hang-up, and the slot, still Ready within
// StandbyRejoinGrace, is Lost once the grace is over (the ask window is 75 s: only the hang-up
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
		return strings.HasPrefix(s.Status.Message, slotctrl.HungUpMessage) || s.Status.Standby != v1.StandbyReady
	})
	if hung.Status.Standby != v1.StandbyReady || hung.Status.DeploymentUUID != first.Status.DeploymentUUID {
		t.Fatalf("within the grace the slot is %s (%s), want Ready on its container", hung.Status.Standby, hung.Status.Message)
	}
	clk.Step(slotctrl.StandbyRejoinGrace + time.Second)
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
		return strings.HasPrefix(s.Status.Message, slotctrl.HungUpMessage) || s.Status.Standby != v1.StandbyReady
	})
	if hung.Status.Standby != v1.StandbyReady {
		t.Fatalf("within the grace the slot is %s (%s), want Ready", hung.Status.Standby, hung.Status.Message)
	}
	cut.release()
	back := sc.slot("Ready, its container asking again", func(s *v1.BotPoolSlot) bool {
		return !strings.HasPrefix(s.Status.Message, slotctrl.HungUpMessage)
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
	clk.Step(slotctrl.StandbyRejoinGrace + time.Second)
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
