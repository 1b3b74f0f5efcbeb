package botapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"botpool.dev/botpool/internal/slottoken"
	"botpool.dev/botpool/store"
)

type answer struct {
	code int
	body string
	at   time.Time
}

// waitCall sends a config request that waits, in the background.
func (h *harness) waitCall(ctx context.Context, f *slotFixture, wait string) <-chan answer {
	out := make(chan answer, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url+"/v1/slots/"+f.app+"/config?wait="+wait, nil)
		if err != nil {
			out <- answer{code: -1, body: err.Error()}
			return
		}
		req.Header.Set("Authorization", "Bearer "+f.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- answer{code: -1, body: err.Error(), at: time.Now()}
			return
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		out <- answer{code: resp.StatusCode, body: string(body), at: time.Now()}
	}()
	return out
}

// waiting waits until n requests wait on the server.
func (h *harness) waiting(n int) {
	h.t.Helper()
	h.eventually(func() error {
		if got := value(h.srv.waiters.gauge); got != float64(n) {
			return fmt.Errorf("%v waiting, want %d", got, n)
		}
		return nil
	})
}

func (h *harness) waitResults(result string) float64 {
	return value(h.srv.waiters.results.WithLabelValues(result))
}

// value reads a gauge or counter.
func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return m.Counter.GetValue()
}

// receive waits for an answer; within is a liveness bound, raised to a minute: a busy
// machine only waits longer.
func receive(t testing.TB, ch <-chan answer, within time.Duration) answer {
	t.Helper()
	within = max(within, time.Minute)
	select {
	case a := <-ch:
		return a
	case <-time.After(within):
		t.Fatalf("no answer within %v", within)
		return answer{}
	}
}

// TestConfigWaitWokenByBinding: a request waiting 60s is answered as soon as the bot is bound.
// Nothing but the informer's event can answer it early: the deadline is on a fake clock that
// never moves (and, in real time, 65s away), and the server has no loop that looks again.
func TestConfigWaitWokenByBinding(t *testing.T) {
	h := newHarness(t)
	s := h.slot("pool-google-meet-001")
	ch := h.waitCall(t.Context(), s, "60s")
	h.waiting(1)
	b := h.bot("standup")
	bound := time.Now()
	h.bind(s, b)
	a := receive(t, ch, 20*time.Second)
	wantStatus(t, "woken by the binding", a.code, a.body, http.StatusOK, `"bot":"standup"`)
	if took := a.at.Sub(bound); took > 15*time.Second {
		t.Errorf("answered %v after the binding, want at once", took)
	}
	h.waiting(0)
	if n := h.waitResults("bound"); n != 1 {
		t.Errorf("%v waits ended bound, want 1", n)
	}
}

// TestConfigWaitDeadline: no binding within the wait: 404, as without a wait.
func TestConfigWaitDeadline(t *testing.T) {
	h := newHarness(t)
	s := h.slot("pool-google-meet-001")
	ch := h.waitCall(t.Context(), s, "30s")
	h.waiting(1)
	h.eventually(func() error {
		if !h.clock.HasWaiters() {
			return errors.New("the wait has no timer yet")
		}
		return nil
	})
	h.clock.Step(29 * time.Second)
	select {
	case a := <-ch:
		t.Fatalf("answered %d %s before the deadline", a.code, a.body)
	default:
	}
	h.clock.Step(time.Second)
	a := receive(t, ch, 20*time.Second)
	wantStatus(t, "deadline", a.code, a.body, http.StatusNotFound, "no bot is bound to this slot yet")
	h.waiting(0)
	if n := h.waitResults("timeout"); n != 1 {
		t.Errorf("%v waits timed out, want 1", n)
	}
}

func TestConfigWaitRefusesABadWait(t *testing.T) {
	h := newHarness(t)
	s := h.slot("pool-google-meet-001")
	for _, wait := range []string{"soon", "30", "61s", "-1s", "1h"} {
		code, body := h.call("GET", "/v1/slots/"+s.app+"/config?wait="+wait, s.token, "")
		wantStatus(t, "wait="+wait, code, body, http.StatusBadRequest, "wait")
	}
	code, body := h.call("GET", "/v1/slots/"+s.app+"/config?wait=0s", s.token, "")
	wantStatus(t, "wait=0s answers at once", code, body, http.StatusNotFound, "no bot is bound")
}

// TestConfigWaitCancelled: a client that leaves takes its wait with it.
func TestConfigWaitCancelled(t *testing.T) {
	h := newHarness(t)
	s := h.slot("pool-google-meet-001")
	ctx, cancel := context.WithCancel(t.Context())
	ch := h.waitCall(ctx, s, "60s")
	h.waiting(1)
	cancel()
	<-ch
	h.waiting(0)
	h.eventually(func() error {
		if n := h.waitResults("cancelled"); n != 1 {
			return fmt.Errorf("%v waits cancelled, want 1", n)
		}
		return nil
	})
}

// TestConfigWaitCaps: one wait per slot (a newer request takes the place of the older, which
// is answered 409) and a bound on all, so a slot's token cannot pin the server's memory.
func TestConfigWaitCaps(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxWaiters = 2 })
	a, b, c := h.slot("pool-google-meet-001"), h.slot("pool-google-meet-002"), h.slot("pool-google-meet-003")

	first := h.waitCall(t.Context(), a, "60s")
	h.waiting(1)
	second := h.waitCall(t.Context(), a, "60s")
	got := receive(t, first, 20*time.Second)
	wantStatus(t, "replaced wait", got.code, got.body, http.StatusConflict, "a newer config request of this slot's container waits")
	h.waiting(1)

	other := h.waitCall(t.Context(), b, "60s")
	h.waiting(2)
	code, body := h.call("GET", "/v1/slots/"+c.app+"/config?wait=60s", c.token, "")
	wantStatus(t, "over the cap", code, body, http.StatusServiceUnavailable, "too many requests wait")
	// Without a wait, the slot past the cap is answered as always.
	code, body = h.call("GET", "/v1/slots/"+c.app+"/config", c.token, "")
	wantStatus(t, "no wait over the cap", code, body, http.StatusNotFound, "no bot is bound")

	bot := h.bot("standup")
	h.bind(a, bot)
	got = receive(t, second, 20*time.Second)
	wantStatus(t, "the newer wait", got.code, got.body, http.StatusOK, `"bot":"standup"`)
	h.waiting(1)
	select {
	case got := <-other:
		t.Fatalf("slot b's wait answered %d %s by slot a's binding", got.code, got.body)
	default:
	}
}

// TestConfigWaitEndsWhenTheTokenGoes: a container whose token was replaced (a fresh container
// got a new one) or whose slot was deleted is told to exit, at once.
func TestConfigWaitEndsWhenTheTokenGoes(t *testing.T) {
	h := newHarness(t)
	s := h.slot("pool-google-meet-001")
	ch := h.waitCall(t.Context(), s, "60s")
	h.waiting(1)
	token, err := slottoken.New()
	must(t, err)
	must(t, env.Client.Get(t.Context(), client.ObjectKeyFromObject(s.slot), s.slot))
	s.slot.Status.TokenSHA256 = slottoken.Hash([]byte(token))
	must(t, env.Client.Status().Update(t.Context(), s.slot))
	a := receive(t, ch, 20*time.Second)
	wantStatus(t, "token replaced", a.code, a.body, http.StatusGone, "exit")
	h.waiting(0)
}

// TestConfigRecordsAsks: every authenticated config call records the slot's ask with the hash
// of its token, at most once a second per slot; a store that fails does not fail the call.
func TestConfigRecordsAsks(t *testing.T) {
	h := newHarness(t)
	s := h.slot("pool-google-meet-001")
	path := "/v1/slots/" + s.app + "/config"
	code, body := h.call("GET", path, "bpt_not-a-token", "")
	wantStatus(t, "unknown token", code, body, http.StatusUnauthorized, "invalid token")
	for range 3 {
		code, body = h.call("GET", path, s.token, "")
		wantStatus(t, "free slot", code, body, http.StatusNotFound, "no bot")
	}
	asks := h.live.asksOf(s.slot.UID)
	want := store.SlotAsk{SlotUID: s.slot.UID, Namespace: h.ns, Name: s.slot.Name, TokenSHA256: slottoken.Hash([]byte(s.token)), At: h.clock.Now()}
	if len(asks) != 1 || asks[0] != want {
		t.Fatalf("asks = %+v, want one: %+v", asks, want)
	}

	h.clock.Step(time.Second)
	h.live.mu.Lock()
	h.live.err = errors.New("the store is down")
	h.live.mu.Unlock()
	code, body = h.call("GET", path+"?wait=0s", s.token, "")
	wantStatus(t, "store down", code, body, http.StatusNotFound, "no bot")
	if asks := h.live.asksOf(s.slot.UID); len(asks) != 2 || !asks[1].At.Equal(h.clock.Now()) {
		t.Fatalf("asks = %+v, want a second one a second later", asks)
	}
}
