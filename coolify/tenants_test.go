package coolify_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/internal/kubetest"
)

// These tests drive the instance guard through the public client only, so that they run
// unchanged against a guard without per-user shares and show what it did wrong.

const (
	tokenA = "1|tenant-a"
	tokenB = "2|tenant-b"
)

// tenantServer is one Coolify instance shared by two users: tenant A's requests hang until
// the test lets them go, one per send on releaseA (all once it is closed); tenant B's are
// answered at once. It records the most requests it ever had in flight.
type tenantServer struct {
	*httptest.Server
	releaseA chan struct{}
	arrivedA atomic.Int32
	servedB  atomic.Int32
	inFlight atomic.Int32
	peak     atomic.Int32
}

func newTenantServer(t *testing.T) *tenantServer {
	s := &tenantServer{releaseA: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
		}
		if r.Header.Get("Authorization") == "Bearer "+tokenA {
			s.arrivedA.Add(1)
			select {
			case <-s.releaseA:
			case <-r.Context().Done():
				return
			}
		} else {
			s.servedB.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`[]`))
	}))
	t.Cleanup(s.Close)
	return s
}

// callsInBackground starts n ListServers calls of c and returns their errors' channel.
func callsInBackground(ctx context.Context, wg *sync.WaitGroup, c *coolify.Client, n int) <-chan error {
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.ListServers(ctx)
			errs <- err
		}()
	}
	return errs
}

// TestSlowTenantDoesNotKeepAnothersPlace: tenant A holds every place of an instance with
// calls that hang, and keeps asking for more; tenant B's call on the same instance waits. When
// one of A's calls ends, the place goes to B (A holds more than its share), not to A's next
// call, so B's call succeeds within its maxWait instead of failing with a bulkhead wait.
func TestSlowTenantDoesNotKeepAnothersPlace(t *testing.T) {
	srv := newTenantServer(t)
	fc := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	reg := coolify.NewRegistry(1_000_000, coolify.WithClock(fc), coolify.WithVersion("4.3.11"),
		coolify.WithMaxWait(2*time.Second), coolify.WithInstanceLimits(coolify.InstanceLimits{MaxInFlight: 2}))
	a, _ := reg.Client(srv.URL, tokenA)
	ctx := boundedCtx(t)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(srv.releaseA) // let A's calls end before waiting for them

	callsInBackground(ctx, &wg, a, 2)
	kubetest.Eventually(t, 10*time.Second, func() error {
		if n := srv.arrivedA.Load(); n != 2 {
			return fmt.Errorf("%d of A's calls reached the instance, want 2", n)
		}
		return nil
	})
	// A keeps asking: two more calls wait for a place (each waits on a timer of the clock).
	callsInBackground(ctx, &wg, a, 2)
	waiters(t, fc, 2)
	// B arrives after A's waiting calls.
	b, _ := reg.Client(srv.URL, tokenB)
	bErr := callsInBackground(ctx, &wg, b, 1)
	waiters(t, fc, 3)

	srv.releaseA <- struct{}{} // one of A's calls ends: a place is free
	var err error
	var done bool
	kubetest.Eventually(t, 10*time.Second, func() error {
		select {
		case err = <-bErr:
			done = true
			return nil
		default:
		}
		if srv.arrivedA.Load() > 2 {
			return nil // the place went to A's next call
		}
		return errors.New("the freed place went to nobody yet")
	})
	if !done {
		fc.Step(2 * time.Second) // B's maxWait runs out
		err = <-bErr
	}
	if err != nil || !done {
		t.Fatalf("B's call after one of A's ended: %v (served before its maxWait ran out: %v), want it served", err, done)
	}
	if got := srv.servedB.Load(); got != 1 {
		t.Fatalf("B's requests served: %d, want 1", got)
	}
	if peak := srv.peak.Load(); peak > 2 {
		t.Fatalf("%d requests in flight at once, want at most MaxInFlight (2)", peak)
	}
}

// TestKnownTenantFindsAPlaceAtOnce: while tenant B is a user of the instance (its client was
// built), tenant A, however many calls it makes, leaves the last place free, so B's call goes
// at once instead of failing with a bulkhead wait behind A's hanging calls.
func TestKnownTenantFindsAPlaceAtOnce(t *testing.T) {
	srv := newTenantServer(t)
	fc := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	reg := coolify.NewRegistry(1_000_000, coolify.WithClock(fc), coolify.WithVersion("4.3.11"),
		coolify.WithMaxWait(0), coolify.WithInstanceLimits(coolify.InstanceLimits{MaxInFlight: 4}))
	b, _ := reg.Client(srv.URL, tokenB)
	a, _ := reg.Client(srv.URL, tokenA)
	ctx := boundedCtx(t)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(srv.releaseA)

	aErrs := callsInBackground(ctx, &wg, a, 4)
	var refused []error
	kubetest.Eventually(t, 10*time.Second, func() error {
		select {
		case err := <-aErrs:
			refused = append(refused, err)
		default:
		}
		if n := int(srv.arrivedA.Load()) + len(refused); n != 4 {
			return fmt.Errorf("%d of A's 4 calls sent or refused", n)
		}
		return nil
	})
	if _, err := b.ListServers(ctx); err != nil {
		t.Fatalf("B's call while A's hang: %v, want it served at once", err)
	}
	var we *coolify.WaitError
	if len(refused) != 1 || !errors.As(refused[0], &we) || we.Reason != coolify.WaitBulkhead {
		t.Fatalf("A's calls refused: %v, want one bulkhead wait (A keeps the last place free)", refused)
	}
}

// tokenTransport fails every request of tenant A below HTTP (a timeout) and answers the others.
type tokenTransport struct{ sentB atomic.Int32 }

func (f *tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Authorization") == "Bearer "+tokenA {
		return nil, context.DeadlineExceeded
	}
	f.sentB.Add(1)
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(`[]`)), Header: http.Header{}, Request: r}, nil
}

// TestOneTenantsFailuresOpenOnlyItsBreaker: tenant A's transport failures open A's breaker;
// tenant B's calls to the same instance still go through, and an idle registry keeps A's open
// breaker while B keeps the instance in use.
func TestOneTenantsFailuresOpenOnlyItsBreaker(t *testing.T) {
	ft := &tokenTransport{}
	fc := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	metrics := prometheus.NewRegistry()
	reg := coolify.NewRegistry(1_000_000, coolify.WithClock(fc), coolify.WithVersion("4.3.11"),
		coolify.WithHTTPClient(&http.Client{Transport: ft}), coolify.WithMaxRetries(0),
		coolify.WithMetrics(coolify.NewMetrics(metrics)),
		coolify.WithInstanceLimits(coolify.InstanceLimits{BreakerOpen: time.Hour}))
	a, _ := reg.Client("https://coolify.example", tokenA)
	b, _ := reg.Client("https://coolify.example", tokenB)
	ctx := boundedCtx(t)
	for i := range coolify.DefaultBreakerThreshold {
		if _, err := a.ListServers(ctx); !errors.Is(err, coolify.ErrTransport) {
			t.Fatalf("A's call %d: %v, want ErrTransport", i, err)
		}
	}
	var we *coolify.WaitError
	if _, err := a.ListServers(ctx); !errors.As(err, &we) || we.Reason != coolify.WaitBreaker {
		t.Fatalf("A's call after %d failures: %v, want a breaker wait", coolify.DefaultBreakerThreshold, err)
	}
	if _, err := b.ListServers(ctx); err != nil {
		t.Fatalf("B's call while A's breaker is open: %v, want it sent", err)
	}
	if total, _ := gather(t, metrics, "botpool_coolify_breaker_opened_total"); total != 1 {
		t.Fatalf("breaker_opened_total = %v, want 1", total)
	}
	// B uses the instance for 20 minutes, A does not: the registry forgets idle entries, but not
	// A's open breaker.
	for range 2 {
		fc.Step(10 * time.Minute)
		_, _ = reg.Client("https://coolify.example", tokenB)
		if _, err := b.ListServers(ctx); err != nil {
			t.Fatalf("B's call: %v", err)
		}
	}
	a, _ = reg.Client("https://coolify.example", tokenA)
	if _, err := a.ListServers(ctx); !errors.As(err, &we) || we.Reason != coolify.WaitBreaker || we.Wait != 40*time.Minute {
		t.Fatalf("A's call 20 minutes later: %v, want its breaker still open for 40m", err)
	}
	if got := ft.sentB.Load(); got != 3 {
		t.Fatalf("B's requests sent: %d, want 3", got)
	}
}

// waiters waits until n calls wait on the fake clock (a call waiting for a place makes one
// timer).
func waiters(t *testing.T, fc *clocktesting.FakeClock, n int) {
	t.Helper()
	kubetest.Eventually(t, 10*time.Second, func() error {
		if got := fc.Waiters(); got != n {
			return fmt.Errorf("%d calls wait on the clock, want %d", got, n)
		}
		return nil
	})
}
