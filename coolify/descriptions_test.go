package coolify_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/kubetest"
)

// TestDescriptionsCoalesceWhileTheBudgetIsShort: while a start-path request waits for the
// user's budget, description updates do not hold their callers; five updates of one
// application become one PATCH, with the last text, once the start path has had its token.
func TestDescriptionsCoalesceWhileTheBudgetIsShort(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	s := sim.New(sim.Config{Clock: fc})
	fix := s.SeedDefault()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	checker := newChecker(t)
	t.Cleanup(func() { checker.finish(t) })
	reg := prometheus.NewRegistry()
	lim := coolify.NewLimiter(65) // a burst of 5, then one a second
	c, err := coolify.New(srv.URL, fix.Token, coolify.WithClock(fc), coolify.WithVersion(sim.DefaultVersion),
		coolify.WithLimiter(lim), coolify.WithRegisterer(reg),
		coolify.WithHTTPClient(&http.Client{Transport: &transport{base: http.DefaultTransport, checker: checker}}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := boundedCtx(t)
	uuid, err := c.CreateDockerImageApplication(ctx, coolify.CreateApplicationRequest{
		ProjectUUID: fix.ProjectUUID, ServerUUID: fix.ServerUUID, EnvironmentName: fix.EnvironmentName,
		Image: "ghcr.io/example/bot", Name: "slot-a-0", Description: "[CREATING]"})
	if err != nil {
		t.Fatal(err)
	}
	for range 4 { // the rest of the burst
		if _, err := c.ListServers(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A deploy-path read waits for the next token.
	started := make(chan error, 1)
	go func() { _, err := c.ListServers(ctx); started <- err }()
	kubetest.Eventually(t, 10*time.Second, func() error {
		if s, _ := lim.Waiting(); s != 1 {
			return errors.New("the start-path request is not waiting yet")
		}
		return nil
	})

	for i := range 5 {
		if err := c.SetDescription(ctx, uuid, fmt.Sprintf("[PHASE %d]", i)); err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
	}
	if n := lim.PendingDescriptions(); n != 1 {
		t.Fatalf("%d description updates queued, want 1 for the one application", n)
	}
	// The sender may have taken the first update off the queue before the others came; the
	// budget then holds it back, and it counts as superseded when the sender sees the newer
	// text. Either way four of the five are superseded, once the sender has had its answer.
	kubetest.Eventually(t, 10*time.Second, func() error {
		if got := counterValue(t, reg, "botpool_coolify_descriptions_superseded_total"); got != 4 {
			return fmt.Errorf("superseded = %v, want 4", got)
		}
		return nil
	})

	// Time moves a second at a time, each step once every waiting goroutine (the start-path
	// request until it is served, the description sender until it has sent) waits on the
	// fake clock: the start path gets its token first, then the queued description goes, once.
	startDone := false
	for step := 0; ; step++ {
		if step > 30 {
			t.Fatal("the queued description was never sent")
		}
		sent := false
		kubetest.Eventually(t, 10*time.Second, func() error {
			if !startDone {
				select {
				case err := <-started:
					if err != nil {
						t.Fatalf("start-path request: %v", err)
					}
					startDone = true
				default:
				}
			}
			if sent = s.Counts()["update-application-by-uuid"][200] == 1; sent {
				return nil
			}
			want := 1
			if !startDone {
				want = 2
			}
			if fc.Waiters() < want {
				return errors.New("a goroutine is between two waits")
			}
			return nil
		})
		if sent {
			break
		}
		fc.Step(time.Second)
	}
	if !startDone {
		t.Fatal("the description went before the start-path request was served")
	}
	start, desc := -1, -1
	for i, r := range s.Requests() {
		switch r.Op {
		case "list-servers":
			start = i
		case "update-application-by-uuid":
			desc = i
		}
	}
	if desc < start {
		t.Errorf("the description went before the waiting start-path request (request log %v)", s.Requests())
	}
	if app, _ := s.App(uuid); app.Description != "[PHASE 4]" {
		t.Fatalf("description %q, want the last one", app.Description)
	}
	fc.Step(time.Minute)
	if got := s.Counts()["update-application-by-uuid"]; len(got) != 1 || got[200] != 1 {
		t.Fatalf("description requests %v, want one PATCH", got)
	}
	if n := lim.PendingDescriptions(); n != 0 {
		t.Fatalf("%d still queued", n)
	}
}

// counterValue reads a registered counter without labels.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
