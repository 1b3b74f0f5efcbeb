package coolify_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"botpool.dev/botpool/coolify"
)

const secretToken = "7|s3cr3t-token-value"

func TestParseStatus(t *testing.T) {
	for _, tc := range []struct {
		in     string
		state  coolify.State
		health coolify.Health
	}{
		{"running:healthy", coolify.StateRunning, coolify.HealthHealthy},
		{"running:unknown", coolify.StateRunning, coolify.HealthUnknown},
		{"exited:unhealthy", coolify.StateExited, coolify.HealthUnhealthy},
		{"restarting:unknown", coolify.StateRestarting, coolify.HealthUnknown},
		{"degraded:unhealthy", coolify.StateDegraded, coolify.HealthUnhealthy},
		{"exited", coolify.StateExited, coolify.HealthUnknown},
		{"hibernating:sleepy", coolify.State("hibernating"), coolify.Health("sleepy")},
		{"", coolify.State(""), coolify.HealthUnknown},
	} {
		s, h := coolify.ParseStatus(tc.in)
		if s != tc.state || h != tc.health {
			t.Errorf("ParseStatus(%q) = %q, %q; want %q, %q", tc.in, s, h, tc.state, tc.health)
		}
	}
}

func TestDeploymentStatus(t *testing.T) {
	for s, terminal := range map[coolify.DeploymentStatus]bool{
		"queued": false, "in_progress": false, "finished": true, "failed": true, "cancelled-by-user": true,
	} {
		if s.Terminal() != terminal || !s.Known() {
			t.Errorf("%s: terminal %v known %v", s, s.Terminal(), s.Known())
		}
	}
	if coolify.DeploymentStatus("error").Known() || coolify.DeploymentStatus("cancelled").Known() {
		t.Error("error and cancelled are not Coolify statuses")
	}
}

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"4.3.11", "4.2.0", 1},
		{"4.2.0", "4.2.0", 0},
		{"v4.2.0", "4.2.0", 0},
		{"4.0.0-beta.454", "4.0.0-beta.453", 1},
		{"4.0.0-beta.99", "4.0.0-beta.454", -1},
		{"4.0.0-beta.454", "4.0.0", -1},
		{"4.1.0", "4.0.0-beta.454", 1},
		{"4.10.0", "4.9.9", 1},
	} {
		if got := coolify.CompareVersions(tc.a, tc.b); got != tc.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// stub answers every request with one canned response and counts the calls.
func stub(t *testing.T, code int, header map[string]string, body string) (*httptest.Server, *int) {
	t.Helper()
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n++
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// checkedHTTP is an http.Client whose requests are checked against the spec; stubs answer
// outside the contract on purpose, so their answers are not.
func checkedHTTP(t *testing.T) *http.Client {
	t.Helper()
	checker := newChecker(t)
	checker.requestsOnly = true
	t.Cleanup(func() { checker.finish(t) })
	return &http.Client{Transport: &transport{base: http.DefaultTransport, checker: checker}}
}

func stubClient(t *testing.T, url string, opts ...coolify.Option) *coolify.Client {
	t.Helper()
	fc := autoClock{clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))}
	all := append([]coolify.Option{coolify.WithHTTPClient(checkedHTTP(t)), coolify.WithClock(fc), coolify.WithVersion("4.3.11")}, opts...)
	c, err := coolify.New(url, secretToken, all...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestErrorKinds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		code   int
		header map[string]string
		body   string
		kind   error
		fields map[string]string
		retry  time.Duration
	}{
		{"not found", 404, nil, `{"message":"Application not found."}`, coolify.ErrNotFound, nil, 0},
		{"unauthenticated", 401, nil, `{"message":"Unauthenticated."}`, coolify.ErrUnauthorized, nil, 0},
		{"api disabled", 403, nil, `{"success":true,"message":"API is disabled."}`, coolify.ErrAPIDisabled, nil, 0},
		{"missing ability", 403, nil, `{"message":"Missing required permissions: deploy"}`, coolify.ErrForbidden, nil, 0},
		{"validation arrays", 422, nil, `{"message":"Validation failed.","errors":{"name":["too long","bad"]}}`, coolify.ErrValidation, map[string]string{"name": "too long; bad"}, 0},
		{"validation strings", 422, nil, `{"message":"Validation failed.","errors":{"ports_exposes":"must be a string"}}`, coolify.ErrValidation, map[string]string{"ports_exposes": "must be a string"}, 0},
		{"conflict", 409, nil, `{"message":"exists"}`, coolify.ErrConflict, nil, 0},
		{"queue full", 429, map[string]string{"Retry-After": "60"}, `{"message":"Deployment queue is full. Please wait for existing deployments to complete."}`, coolify.ErrQueueFull, nil, time.Minute},
		{"bad request", 400, nil, `{"message":"Invalid request.","error":"Content-Type must be application/json."}`, coolify.ErrBadRequest, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := stub(t, tc.code, tc.header, tc.body)
			c := stubClient(t, srv.URL)
			_, err := c.GetApplication(context.Background(), "x")
			if !errors.Is(err, tc.kind) {
				t.Fatalf("err = %v, want %v", err, tc.kind)
			}
			var apiErr *coolify.APIError
			if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.code || apiErr.RetryAfter != tc.retry {
				t.Fatalf("APIError = %+v", apiErr)
			}
			for k, v := range tc.fields {
				if got := strings.Join(apiErr.Fields[k], "; "); got != v {
					t.Errorf("field %s = %q, want %q", k, got, v)
				}
			}
		})
	}
}

func TestRetriesOnlyWhatIsSafe(t *testing.T) {
	srv, n := stub(t, 500, nil, `{"message":"Server Error"}`)
	reg := prometheus.NewRegistry()
	c := stubClient(t, srv.URL, coolify.WithMaxRetries(2), coolify.WithRegisterer(reg))
	ctx := context.Background()

	if _, err := c.ListServers(ctx); !errors.Is(err, coolify.ErrServer) || *n != 3 {
		t.Fatalf("idempotent read: %v after %d requests, want ErrServer after 3", err, *n)
	}
	*n = 0
	if _, err := c.Deploy(ctx, "app"); !errors.Is(err, coolify.ErrServer) || *n != 1 {
		t.Fatalf("deploy: %v after %d requests, want ErrServer after 1", err, *n)
	}
	*n = 0
	if _, err := c.CreateEnv(ctx, "app", coolify.EnvVar{Key: "K", Value: "V"}); *n != 1 || err == nil {
		t.Fatalf("env create sent %d times", *n)
	}
	if total, _ := gather(t, reg, "botpool_coolify_retries_total"); total != 2 {
		t.Errorf("retries_total = %v, want 2", total)
	}
	if total, series := gather(t, reg, "botpool_coolify_requests_total"); total != 5 || series != 3 {
		t.Errorf("requests_total = %v in %d series, want 5 in 3 (one per operation)", total, series)
	}
}

// gather sums a counter family and counts its series.
func gather(t *testing.T, reg *prometheus.Registry, name string) (total float64, series int) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
				series++
			}
		}
	}
	return total, series
}

func TestTransportErrorsAndTheTokenNeverLeak(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens any more
	var logs strings.Builder
	logger := funcr.New(func(prefix, args string) { logs.WriteString(prefix + args + "\n") }, funcr.Options{Verbosity: 9})
	c := stubClient(t, url, coolify.WithMaxRetries(2), coolify.WithLogger(logger))
	_, err := c.ListServers(context.Background())
	if !errors.Is(err, coolify.ErrTransport) {
		t.Fatalf("err = %v, want ErrTransport", err)
	}
	for _, text := range []string{err.Error(), logs.String(), c.String()} {
		if strings.Contains(text, "s3cr3t") {
			t.Fatalf("token leaked: %s", text)
		}
	}
	if !strings.Contains(logs.String(), "Retrying") {
		t.Errorf("retries were not logged: %q", logs.String())
	}
}

func TestRequestHeadersAndBaseURL(t *testing.T) {
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Clone(context.Background())
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"uuid":"u"}`))
	}))
	t.Cleanup(srv.Close)
	for _, base := range []string{srv.URL, srv.URL + "/", srv.URL + "/api/v1", srv.URL + "/api/v1/"} {
		c := stubClient(t, base)
		if err := c.SetDescription(context.Background(), "app", "[IDLE]"); err != nil {
			t.Fatal(err)
		}
		if got.URL.Path != "/api/v1/applications/app" || got.Method != http.MethodPatch {
			t.Errorf("base %q: %s %s", base, got.Method, got.URL.Path)
		}
		if got.Header.Get("Authorization") != "Bearer "+secretToken || got.Header.Get("Accept") != "application/json" ||
			got.Header.Get("Content-Type") != "application/json" {
			t.Errorf("headers = %v", got.Header)
		}
	}
	if _, err := coolify.New("ftp://x", "t"); err == nil {
		t.Error("accepted a non-HTTP base URL")
	}
}

// TestDeletesAndStopsKeepTheServersImages: the pool's delete asks Coolify to remove the
// application's configuration, volumes and networks, and neither it nor a stop runs Coolify's
// Docker cleanup, which would prune the images of the whole server. Flags go as 1 and 0: an
// older Coolify takes "false" for true.
func TestDeletesAndStopsKeepTheServersImages(t *testing.T) {
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Clone(context.Background())
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"message":"queued"}`))
	}))
	t.Cleanup(srv.Close)
	c := stubClient(t, srv.URL)
	for _, tc := range []struct {
		name, method, path string
		call               func() error
		want               url.Values
	}{{
		name: "delete", method: http.MethodDelete, path: "/api/v1/applications/app",
		call: func() error { return c.DeleteApplication(context.Background(), "app", coolify.AppLeftovers) },
		want: url.Values{"delete_configurations": {"1"}, "delete_volumes": {"1"}, "docker_cleanup": {"0"}, "delete_connected_networks": {"1"}},
	}, {
		name: "stop", method: http.MethodPost, path: "/api/v1/applications/app/stop",
		call: func() error { return c.Stop(context.Background(), "app") },
		want: url.Values{"docker_cleanup": {"0"}},
	}} {
		if err := tc.call(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got.Method != tc.method || got.URL.Path != tc.path || !reflect.DeepEqual(got.URL.Query(), tc.want) {
			t.Errorf("%s sent %s %s?%s, want %s %s?%s", tc.name, got.Method, got.URL.Path, got.URL.RawQuery, tc.method, tc.path, tc.want.Encode())
		}
	}
}

func TestResponseBodyIsCapped(t *testing.T) {
	srv, _ := stub(t, 200, nil, `[`+strings.Repeat(`{"uuid":"x"},`, 1000)+`{"uuid":"y"}]`)
	c := stubClient(t, srv.URL, coolify.WithMaxBodySize(1024))
	if _, err := c.ListServers(context.Background()); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("err = %v", err)
	}
}

func TestRegistrySharesLimiterPerUser(t *testing.T) {
	srv, n := stub(t, 200, nil, `[]`)
	fc := autoClock{clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))}
	start := fc.Now()
	reg := coolify.NewRegistry(60, coolify.WithClock(fc), coolify.WithVersion("4.3.11"), coolify.WithHTTPClient(checkedHTTP(t)))
	a, _ := reg.Client(srv.URL, secretToken)
	b, _ := reg.Client(srv.URL+"/api/v1", secretToken) // same user, another pool
	other, _ := reg.Client(srv.URL, "8|another-user")
	ctx := context.Background()
	for range 30 {
		_, _ = a.ListServers(ctx)
		_, _ = b.ListServers(ctx)
	}
	// 60 requests at 60/min with a burst of 5 take at least 55 s of (fake) time.
	if elapsed := fc.Since(start); elapsed < 50*time.Second {
		t.Fatalf("60 shared requests took %s: the limiter is not shared", elapsed)
	}
	mark := fc.Now()
	for range 5 {
		_, _ = other.ListServers(ctx)
	}
	if fc.Since(mark) != 0 {
		t.Fatal("another user waited for the first user's budget")
	}
	if *n != 65 {
		t.Fatalf("requests = %d", *n)
	}
}

func TestMetricsRegisterTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	m1 := coolify.NewMetrics(reg)
	m2 := coolify.NewMetrics(reg) // a second client on the same registry must not panic
	if m1 == nil || m2 == nil {
		t.Fatal("nil metrics")
	}
}

func TestContextCancelStopsWaiting(t *testing.T) {
	srv, _ := stub(t, 200, nil, `[]`)
	lim := coolify.NewLimiter(1)
	// A client told to wait as long as it takes: only the context ends the wait.
	c, _ := coolify.New(srv.URL, secretToken, coolify.WithLimiter(lim), coolify.WithVersion("4.3.11"), coolify.WithHTTPClient(checkedHTTP(t)),
		coolify.WithMaxWait(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, _ = c.ListServers(ctx) // uses the one token
	if _, err := c.ListServers(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's deadline", err)
	}
}
