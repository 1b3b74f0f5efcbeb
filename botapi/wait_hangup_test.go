package botapi

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"botpool.dev/botpool/internal/slottoken"
	"botpool.dev/botpool/store"
)

// TestConfigWaitHangUpRecordsTheContainerLeft: a client that hangs up its wait (a container
// that died closes its connection) is recorded as gone, with the token it waited with, the time
// its wait began and the time it hung up; when it asks again at once its ask is recorded, though
// within a second of the last, so the hang-up is cleared.
func TestConfigWaitHangUpRecordsTheContainerLeft(t *testing.T) {
	h := newHarness(t)
	s := h.slot("pool-google-meet-001")
	began := h.clock.Now()
	ctx, cancel := context.WithCancel(t.Context())
	ch := h.waitCall(ctx, s, "60s")
	h.waiting(1)
	h.clock.Step(300 * time.Millisecond)
	cancel()
	<-ch
	h.eventually(func() error {
		if n := h.waitResults("cancelled"); n != 1 {
			return fmt.Errorf("%v waits cancelled, want 1", n)
		}
		return nil
	})
	want := store.SlotLeft{SlotUID: s.slot.UID, TokenSHA256: slottoken.Hash([]byte(s.token)), Since: began, At: began.Add(300 * time.Millisecond)}
	if lefts := h.live.leftsOf(s.slot.UID); len(lefts) != 1 || lefts[0] != want {
		t.Fatalf("hang-ups recorded = %+v, want %+v", lefts, want)
	}

	// The container asks again at once: recorded (it clears the hang-up), a second or not.
	code, body := h.call("GET", "/v1/slots/"+s.app+"/config?wait=0s", s.token, "")
	wantStatus(t, "asking again", code, body, http.StatusNotFound, "no bot")
	if asks := h.live.asksOf(s.slot.UID); len(asks) != 2 || !asks[1].At.Equal(want.At) {
		t.Fatalf("asks = %+v, want the first and the one after the hang-up", asks)
	}
}

// TestConfigWaitRecordsNoHangUpOtherwise: a wait that ends at its deadline, with its binding,
// or in the place of a newer request of its slot is no hang-up; nor is one a stopping server
// ends (its containers ask another replica).
func TestConfigWaitRecordsNoHangUpOtherwise(t *testing.T) {
	h := newHarness(t)
	s := h.slot("pool-google-meet-001")

	deadline := h.waitCall(t.Context(), s, "1s")
	h.waiting(1)
	h.eventually(func() error {
		if !h.clock.HasWaiters() {
			return fmt.Errorf("the wait has no timer yet")
		}
		return nil
	})
	h.clock.Step(time.Second)
	a := receive(t, deadline, 20*time.Second)
	wantStatus(t, "deadline", a.code, a.body, http.StatusNotFound, "no bot is bound")

	first := h.waitCall(t.Context(), s, "60s")
	h.waiting(1)
	second := h.waitCall(t.Context(), s, "60s")
	a = receive(t, first, 20*time.Second)
	wantStatus(t, "replaced", a.code, a.body, http.StatusConflict, "a newer config request")
	h.bind(s, h.bot("standup"))
	a = receive(t, second, 20*time.Second)
	wantStatus(t, "bound", a.code, a.body, http.StatusOK, `"bot":"standup"`)
	h.waiting(0)
	for result, want := range map[string]float64{"timeout": 1, "replaced": 1, "bound": 1} {
		if n := h.waitResults(result); n != want {
			t.Errorf("%v waits ended %s, want %v", n, result, want)
		}
	}

	// A server that stops ends its waits: not their containers' hang-up.
	other := h.slot("pool-google-meet-002")
	addr := freeAddr(t)
	srv := New(Config{Addr: addr, Cache: objCache, Client: h.srv.cfg.Client, APIReader: h.srv.cfg.APIReader, Liveness: h.live, Clock: h.clock})
	ctx, stop := context.WithCancel(t.Context())
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Start(ctx) }()
	h.eventually(func() error { // serving
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			return err
		}
		return resp.Body.Close()
	})
	served := &harness{t: t, url: "http://" + addr}
	ended := served.waitCall(t.Context(), other, "60s")
	h.eventually(func() error {
		if n := value(srv.waiters.gauge); n != 1 {
			return fmt.Errorf("%v waiting on the stopping server, want 1", n)
		}
		return nil
	})
	stop()
	if err := <-stopped; err != nil {
		t.Fatalf("the server stopped with %v", err)
	}
	<-ended
	if n := value(srv.waiters.results.WithLabelValues("cancelled")); n != 1 {
		t.Errorf("%v waits ended by the shutdown, want 1", n)
	}

	for _, f := range []*slotFixture{s, other} {
		if lefts := h.live.leftsOf(f.slot.UID); len(lefts) != 0 {
			t.Errorf("slot %s: hang-ups recorded %+v, want none", f.slot.Name, lefts)
		}
	}
}

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// TestConfigWaitCapPerNamespace: one namespace's slots cannot take more than their share of
// the waits: past it that namespace's waits are refused (503, Retry-After), another
// namespace's still wait, and a slot's newer request takes its older one's place, uncounted.
func TestConfigWaitCapPerNamespace(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.MaxWaitersPerNamespace = 2 })
	a1, a2, a3 := h.slot("pool-google-meet-001"), h.slot("pool-google-meet-002"), h.slot("pool-google-meet-003")
	ctx, cancel := context.WithCancel(t.Context())
	_ = h.waitCall(ctx, a1, "60s")
	_ = h.waitCall(t.Context(), a2, "60s")
	h.waiting(2)

	// A short wait: were it not refused, it would end soon in real time too.
	req, err := http.NewRequest(http.MethodGet, h.url+"/v1/slots/"+a3.app+"/config?wait=1s", nil)
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+a3.token)
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	must(t, err)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(string(body), "namespace "+h.ns) || !strings.Contains(string(body), "at most 2 a namespace") {
		t.Fatalf("a third wait of the namespace: %d (Retry-After %q) %s; want 503 naming the namespace's cap", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if n := h.waitResults("refused"); n != 1 {
		t.Errorf("%v waits refused, want 1", n)
	}

	// A slot's newer request takes its older one's place: not a third wait.
	_ = h.waitCall(t.Context(), a2, "60s")
	h.eventually(func() error {
		if n := h.waitResults("replaced"); n != 1 {
			return fmt.Errorf("%v waits replaced, want 1", n)
		}
		return nil
	})
	h.waiting(2)

	// Another namespace's slots still wait.
	other := &harness{t: t, ns: env.Namespace(t), clock: h.clock, url: h.url, srv: h.srv}
	b1 := other.slot("pool-google-meet-001")
	_ = h.waitCall(t.Context(), b1, "60s")
	h.waiting(3)

	// One of the full namespace's waits ends: the next one waits.
	cancel()
	h.waiting(2)
	_ = h.waitCall(t.Context(), a3, "60s")
	h.waiting(3)
	if n := h.waitResults("refused"); n != 1 {
		t.Errorf("%v waits refused, want still 1", n)
	}
}

// TestConfigWaitHangUpLoopIsBounded: a container that loops "wait, hang up" costs the store a
// bounded number of writes: one hang-up a slot per 10 s, and the asks' own bound (one a second,
// and the one after a recorded hang-up, which clears it), not two rows a request.
func TestConfigWaitHangUpLoopIsBounded(t *testing.T) {
	h := newHarness(t)
	s := h.slot("pool-google-meet-001")
	hangUp := func(n int) {
		t.Helper()
		ctx, cancel := context.WithCancel(t.Context())
		ch := h.waitCall(ctx, s, "60s")
		h.waiting(1)
		cancel()
		<-ch
		h.eventually(func() error {
			if got := h.waitResults("cancelled"); got != float64(n) {
				return fmt.Errorf("%v waits cancelled, want %d", got, n)
			}
			return nil
		})
	}
	const loops = 10
	for i := range loops {
		hangUp(i + 1)
	}
	asks, lefts := h.live.asksOf(s.slot.UID), h.live.leftsOf(s.slot.UID)
	if len(lefts) != 1 || len(asks) != 2 {
		t.Fatalf("%d requests hung up within a second wrote %d asks and %d hang-ups, want 2 and 1", loops, len(asks), len(lefts))
	}

	// 10 s later the next hang-up is recorded again, with its time.
	h.clock.Step(10 * time.Second)
	hangUp(loops + 1)
	lefts = h.live.leftsOf(s.slot.UID)
	if len(lefts) != 2 || !lefts[1].At.Equal(h.clock.Now()) {
		t.Fatalf("hang-ups = %+v, want a second one at %v", lefts, h.clock.Now())
	}
}
