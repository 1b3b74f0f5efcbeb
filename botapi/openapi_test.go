package botapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/botapi/botclient"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/internal/slottoken"
	"botpool.dev/botpool/store"
)

// The bot API's OpenAPI document, docs/botapi.openapi.yaml, held against the real server:
// every request the test sends (the Go client's included) and every answer the server gives
// is validated against it with kin-openapi; every operation and every response the document
// lists must occur; and the server may serve no route the document lacks (its registrations in
// this package's source, its live mux, and what it answers to every method on every path).

// breaksSpec marks a request meant to break the document (a test of an error path). Its value
// is a part of kin-openapi's complaint, so the request breaks it for the intended reason; the
// proxy in front of the server drops the header. A request without it must conform.
const breaksSpec = "X-Test-Breaks-Spec"

// tokenPatternKey is the extension of a security scheme giving the form of its tokens.
const tokenPatternKey = "x-botpool-token-pattern"

func specFile() string { return filepath.Join(kubetest.RepoRoot(), "docs", "botapi.openapi.yaml") }

// specCheck validates traffic against the document and counts the responses it saw.
type specCheck struct {
	doc    *openapi3.T
	router routers.Router
	opts   *openapi3filter.Options

	mu   sync.Mutex
	seen map[string]int // "GET /v1/slots/{appUUID}/config 200"
}

func loadSpecCheck(t *testing.T) *specCheck {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(specFile())
	if err != nil {
		t.Fatalf("loading %s: %v", specFile(), err)
	}
	// Examples are validated too: they are part of the contract the docs show.
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("%s is not a valid OpenAPI 3 document: %v", specFile(), err)
	}
	// The servers of the document are where a deployment serves the API; the test's servers
	// listen elsewhere, and the router matches paths and methods alone.
	routed := *doc
	routed.Servers = nil
	router, err := legacy.NewRouter(&routed)
	if err != nil {
		t.Fatal(err)
	}
	patterns := map[string]*regexp.Regexp{}
	for name, ref := range doc.Components.SecuritySchemes {
		s := ref.Value
		raw, _ := s.Extensions[tokenPatternKey].(string)
		if s.Type != "http" || s.Scheme != "bearer" || raw == "" {
			t.Fatalf("security scheme %s: want an http bearer scheme with %s", name, tokenPatternKey)
		}
		patterns[name] = regexp.MustCompile(raw)
	}
	auth := func(_ context.Context, in *openapi3filter.AuthenticationInput) error {
		// The server takes exactly "Bearer <token>"; the document gives each scheme's form.
		tok, ok := strings.CutPrefix(in.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ")
		if !ok {
			return in.NewError(errors.New("no Authorization: Bearer header"))
		}
		if !patterns[in.SecuritySchemeName].MatchString(tok) {
			return in.NewError(fmt.Errorf("the bearer token is not a %s", in.SecuritySchemeName))
		}
		return nil
	}
	return &specCheck{doc: doc, router: router, seen: map[string]int{},
		opts: &openapi3filter.Options{
			AuthenticationFunc: auth,
			// An answer with a status the document lacks fails, and the server must see the
			// bytes the client sent: no defaults written into them.
			IncludeResponseStatus: true,
			SkipSettingDefaults:   true,
		}}
}

// serve is next behind a proxy that validates each request and its answer against the
// document, failing t on any violation, and counts the answer.
func (c *specCheck) serve(t *testing.T, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		breaks := r.Header.Get(breaksSpec)
		r.Header.Del(breaksSpec)
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("%s %s: reading the request: %v", r.Method, r.URL, err)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		what := r.Method + " " + r.URL.RequestURI()
		vreq := r.Clone(r.Context())
		vreq.Body = io.NopCloser(bytes.NewReader(body))

		rec := httptest.NewRecorder()
		route, params, err := c.router.FindRoute(vreq)
		if err != nil {
			// Not in the document: the server must not serve it either.
			next.ServeHTTP(rec, r)
			if msg := c.catchAll(rec); msg != "" {
				t.Errorf("%s is not in the document, but the server serves it: %s", what, msg)
			}
			copyAnswer(w, rec)
			return
		}
		in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: c.opts}
		reqErr := openapi3filter.ValidateRequest(context.Background(), in)
		switch {
		case breaks == "" && reqErr != nil:
			t.Errorf("%s: the request breaks the document: %v", what, reqErr)
		case breaks != "" && reqErr == nil:
			t.Errorf("%s: the request was meant to break the document (%s), but conforms", what, breaks)
		case breaks != "" && !strings.Contains(reqErr.Error(), breaks):
			t.Errorf("%s: the request breaks the document, but not as meant (%s): %v", what, breaks, reqErr)
		}

		next.ServeHTTP(rec, r)
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: rec.Code, Header: rec.Header(), Options: c.opts}
		out.SetBodyBytes(rec.Body.Bytes())
		if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
			t.Errorf("%s: the answer %d %s breaks the document: %v", what, rec.Code, strings.TrimSpace(rec.Body.String()), err)
		}
		c.mu.Lock()
		c.seen[fmt.Sprintf("%s %s %d", route.Method, route.Path, rec.Code)]++
		c.mu.Unlock()
		copyAnswer(w, rec)
	})
}

func copyAnswer(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// catchAll says what is wrong when an answer is not the server's answer to a route it lacks
// (404, an Error body saying "no such endpoint"), "" when it is.
func (c *specCheck) catchAll(rec *httptest.ResponseRecorder) string {
	var v any
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		return fmt.Sprintf("%d with a body that is not JSON: %q", rec.Code, rec.Body.String())
	}
	if err := c.doc.Components.Schemas["Error"].Value.VisitJSON(v); err != nil {
		return fmt.Sprintf("%d %s, not an Error: %v", rec.Code, rec.Body.String(), err)
	}
	if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "no such endpoint") ||
		rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("Cache-Control") != "no-store" {
		return fmt.Sprintf("answered %d %s", rec.Code, strings.TrimSpace(rec.Body.String()))
	}
	return ""
}

// operations are the document's operations as ServeMux patterns ("GET /v1/slots/{appUUID}/config").
func (c *specCheck) operations() []string {
	var out []string
	for path, item := range c.doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, method+" "+path)
		}
	}
	slices.Sort(out)
	return out
}

// uncovered lists the responses of the document the test never saw.
func (c *specCheck) uncovered() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, op := range c.operations() {
		method, path, _ := strings.Cut(op, " ")
		for status := range c.doc.Paths.Value(path).GetOperation(method).Responses.Map() {
			if c.seen[op+" "+status] == 0 {
				out = append(out, op+" "+status)
			}
		}
	}
	slices.Sort(out)
	return out
}

// specHarness is a harness whose every request passes through c. Its limits are far away, so
// only the requests meant to meet them do, and an unknown credential is refused at once (no
// real-time wait for a cache to catch up).
func (c *specCheck) harness(t *testing.T, mutate ...func(*Config)) *harness {
	t.Helper()
	roomy := func(cfg *Config) {
		cfg.CatchUp = -1
		cfg.SlotRate, cfg.SlotBurst = 1000, 1000
		cfg.AuthFailureRate, cfg.AuthFailureBurst = 1000, 1000
	}
	h := newHarness(t, append([]func(*Config){roomy}, mutate...)...)
	srv := httptest.NewServer(c.serve(t, h.srv.Handler()))
	t.Cleanup(srv.Close)
	h.url = srv.URL
	return h
}

// request is one request of the test.
type request struct {
	method, path, token, body string
	contentType               string // application/json when there is a body and none is given
	breaks                    string // see breaksSpec
}

// do sends r and returns the answer's status, headers and body.
func (h *harness) do(r request) (int, http.Header, string) {
	h.t.Helper()
	req, err := http.NewRequest(r.method, h.url+r.path, strings.NewReader(r.body))
	must(h.t, err)
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	switch {
	case r.contentType != "":
		req.Header.Set("Content-Type", r.contentType)
	case r.body != "":
		req.Header.Set("Content-Type", "application/json")
	}
	if r.breaks != "" {
		req.Header.Set(breaksSpec, r.breaks)
	}
	resp, err := http.DefaultClient.Do(req)
	must(h.t, err)
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	must(h.t, err)
	return resp.StatusCode, resp.Header, string(body)
}

// expect sends r and checks the answer's status and that its body contains want.
func (h *harness) expect(r request, code int, want string) http.Header {
	h.t.Helper()
	got, header, body := h.do(r)
	wantStatus(h.t, r.method+" "+r.path, got, body, code, want)
	return header
}

func TestOpenAPI(t *testing.T) {
	c := loadSpecCheck(t)

	t.Run("routes", func(t *testing.T) { testSpecRoutes(t, c) })
	t.Run("config", func(t *testing.T) { testSpecConfig(t, c) })
	t.Run("configWait", func(t *testing.T) { testSpecConfigWait(t, c) })
	t.Run("heartbeat", func(t *testing.T) { testSpecHeartbeat(t, c) })
	t.Run("status", func(t *testing.T) { testSpecStatus(t, c) })
	t.Run("events", func(t *testing.T) { testSpecEvents(t, c) })
	t.Run("limits", func(t *testing.T) { testSpecLimits(t, c) })
	t.Run("faults", func(t *testing.T) { testSpecFaults(t, c) })

	if missing := c.uncovered(); len(missing) > 0 {
		t.Errorf("responses of %s the server never gave in this test (a response the server cannot give, "+
			"or a case the test lacks):\n  %s", specFile(), strings.Join(missing, "\n  "))
	}
}

// registeredRoutes are the patterns this package's (non-test) source registers on a mux.
func registeredRoutes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(kubetest.RepoRoot(), "botapi", "*.go"))
	must(t, err)
	fset := token.NewFileSet()
	var out []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		must(t, err)
		f, err := parser.ParseFile(fset, name, src, 0)
		must(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") || len(call.Args) != 2 {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				t.Errorf("%s: a route registered with a pattern that is not a string literal: this test cannot hold it to the document",
					fset.Position(call.Pos()))
				return true
			}
			pattern, err := strconv.Unquote(lit.Value)
			must(t, err)
			out = append(out, pattern)
			return true
		})
	}
	slices.Sort(out)
	return out
}

// instantiate fills a path template with sample values.
func instantiate(path string) string {
	return strings.NewReplacer("{appUUID}", "app-probe", "{name}", "probe").Replace(path)
}

// testSpecRoutes: the routes the server registers are the document's operations, and to every
// other method and path the server answers its catch-all 404.
func testSpecRoutes(t *testing.T, c *specCheck) {
	ops := c.operations()
	if len(ops) == 0 {
		t.Fatal("the document has no operations")
	}
	var registered []string
	catchAll := false
	for _, p := range registeredRoutes(t) {
		switch method, _, ok := strings.Cut(p, " "); {
		case p == "/":
			catchAll = true
		case !ok || method == "" || strings.Contains(method, "/"):
			t.Errorf("route %q serves every method: only the catch-all / may", p)
		default:
			registered = append(registered, p)
		}
	}
	if !catchAll {
		t.Error("the server registers no catch-all route: unknown paths would get a plain-text 404 and known ones 405, neither in the document")
	}
	for _, p := range registered {
		if !slices.Contains(ops, p) {
			t.Errorf("the server registers %q, which %s lacks", p, specFile())
		}
	}
	for _, op := range ops {
		if !slices.Contains(registered, op) {
			t.Errorf("%s has %q, which the server does not register", specFile(), op)
		}
	}

	srv := New(Config{Cache: objCache, Client: env.Client, APIReader: env.Client, Liveness: &fakeLiveness{},
		AuthFailureRate: 1000, AuthFailureBurst: 1000})
	handler := srv.Handler()
	mux, ok := handler.(*http.ServeMux)
	if !ok {
		t.Fatalf("Handler() is a %T, not the *http.ServeMux this test reads routes from", handler)
	}
	// The live mux routes each operation to the registration of the same name.
	for _, op := range ops {
		method, path, _ := strings.Cut(op, " ")
		if _, pattern := mux.Handler(httptest.NewRequest(method, instantiate(path), nil)); pattern != op {
			t.Errorf("%s %s is routed to %q, want %q", method, instantiate(path), pattern, op)
		}
	}
	// Every method on every path: an operation of the document is served (it asks for a
	// token), anything else gets the catch-all.
	paths := []string{"/", "/v1", "/v1/slots/app-probe", "/v1/slots/app-probe/config/", "/v1/bots/probe",
		"/v1/bots/probe/unknown", "/v1/bots/probe/heartbeat/", "/v2/bots/probe/heartbeat", "/metrics", "/healthz"}
	for path := range c.doc.Paths.Map() {
		paths = append(paths, path)
	}
	for _, path := range paths {
		for _, method := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"} {
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, httptest.NewRequest(method, instantiate(path), nil))
			served := c.catchAll(rec) != ""
			switch documented := slices.Contains(ops, method+" "+path); {
			case documented && !served:
				t.Errorf("%s %s is in the document, but the server answers its catch-all", method, path)
			case documented && (rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "missing bearer token")):
				t.Errorf("%s %s without a token: %d %s, want 401", method, path, rec.Code, rec.Body.String())
			case !documented && served:
				t.Errorf("%s %s is not in the document, but the server serves it: %s", method, instantiate(path), c.catchAll(rec))
			}
		}
	}
}

func testSpecConfig(t *testing.T, c *specCheck) {
	h := c.harness(t)
	ctx := t.Context()
	s := h.slot("pool-google-meet-001")
	other := h.slot("pool-google-meet-002")
	path := "/v1/slots/" + s.app + "/config"

	h.expect(request{method: "GET", path: path, breaks: "no Authorization: Bearer header"}, 401, "missing bearer token")
	h.expect(request{method: "GET", path: path, token: "bpt_not-a-token", breaks: "the bearer token is not a slotToken"}, 401, "invalid token")
	forged, err := slottoken.New() // the form of a slot token, but no slot's
	must(t, err)
	h.expect(request{method: "GET", path: path, token: forged}, 401, "invalid token")
	h.expect(request{method: "GET", path: path, token: other.token}, 403, "does not belong to application")
	h.expect(request{method: "GET", path: path + "?wait=soon", token: s.token, breaks: `parameter "wait"`}, 400, "not a duration")
	h.expect(request{method: "GET", path: path + "?wait=61s", token: s.token}, 400, "out of range")
	h.expect(request{method: "GET", path: path + "?wait=0s", token: s.token}, 404, "no bot is bound")
	if _, err := h.client(s).Config(ctx); !errors.Is(err, botclient.ErrSlotFree) {
		t.Errorf("free slot: %v, want 404", err)
	}

	b := h.bot("standup", func(b *v1.Bot) { b.Status.Platform = v1.PlatformGoogleMeet })
	h.bind(s, b)
	cfg, err := h.client(s).Config(ctx)
	if err != nil || cfg.Bot != "standup" || !strings.HasPrefix(cfg.Credential, "bpb_") {
		t.Fatalf("the claim: %+v, %v", cfg, err)
	}
	h.expect(request{method: "GET", path: path, token: s.token}, 409, "handed out once")

	h.updateBotStatus(b, func(b *v1.Bot) { b.Status.Phase = v1.BotDone })
	h.expect(request{method: "GET", path: path, token: s.token}, 410, "is Done")
	// The slot let go of the ended bot and stops its container: 410 until the token is replaced.
	h.setSlotStatus(s, func(st *v1.BotPoolSlotStatus) { st.Phase = v1.SlotBusy })
	h.release(s)
	h.expect(request{method: "GET", path: path, token: s.token}, 410, "ended and let go of it")
	h.expect(request{method: "GET", path: path + "?wait=30s", token: s.token}, 410, "ended and let go of it")

	// A bot whose start failed in this slot went back to the queue: not this container's.
	retried := h.slot("pool-google-meet-003")
	rb := h.bot("retried")
	h.bind(retried, rb)
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(retried.slot), retried.slot))
	retried.slot.Status.Phase, retried.slot.Status.Reason = v1.SlotError, string(v1.ReasonDeploymentFailed)
	must(t, env.Client.Status().Update(ctx, retried.slot))
	h.synced(retried.slot)
	h.updateBotStatus(rb, func(b *v1.Bot) {
		b.Status.Phase, b.Status.SlotName, b.Status.ApplicationUUID = v1.BotQueued, "", ""
		b.Status.StartAttempts = []v1.StartAttempt{{SlotName: retried.slot.Name, Reason: v1.ReasonDeploymentFailed, At: metav1.NewTime(time.Now())}}
	})
	h.expect(request{method: "GET", path: "/v1/slots/" + retried.app + "/config", token: retried.token}, 410, "went back to the queue")

	// Parameters and a secret parameter: a Secret missing at the claim is a 503 that claims
	// nothing; once it is there, the one answer carries both.
	withParams := h.slot("pool-google-meet-004")
	pb := bt.MakeBot(h.ns, "parameters").MeetingURL("https://meet.google.com/abc-defg-hij").
		Parameters(`{"transcription":{"provider":"deepgram"}}`).SecretParameter("transcriptionKey", "deepgram", "apiKey").Obj()
	must(t, env.Client.Create(ctx, pb))
	pb.Status.Phase = v1.BotDeploying
	must(t, env.Client.Status().Update(ctx, pb))
	h.synced(pb)
	h.bind(withParams, pb)
	paramsPath := "/v1/slots/" + withParams.app + "/config"
	header := h.expect(request{method: "GET", path: paramsPath, token: withParams.token}, 503, "ParameterSecretNotFound")
	if header.Get("Retry-After") != "5" {
		t.Errorf("Retry-After %q on parameters that cannot be read, want 5", header.Get("Retry-After"))
	}
	must(t, env.Client.Create(ctx, bt.ParameterSecret(h.ns, "deepgram", true, map[string]string{"apiKey": "dg_value"})))
	// Asked again within the Retry-After: the same answer, without another Secret read.
	h.expect(request{method: "GET", path: paramsPath, token: withParams.token}, 503, "ParameterSecretNotFound")
	h.clock.Step(parametersRetry)
	cfg, err = h.client(withParams).Config(ctx)
	if err != nil || string(cfg.Parameters) != `{"transcription":{"provider":"deepgram"}}` || cfg.SecretParameters["transcriptionKey"] != "dg_value" {
		t.Fatalf("the claim of a bot with parameters: %s, %d secret values, %v", cfg.Parameters, len(cfg.SecretParameters), err)
	}
	h.expect(request{method: "GET", path: paramsPath, token: withParams.token}, 409, "handed out once")
}

func testSpecConfigWait(t *testing.T, c *specCheck) {
	h := c.harness(t, func(cfg *Config) { cfg.MaxWaiters = 2 })
	a, b, d := h.slot("pool-google-meet-001"), h.slot("pool-google-meet-002"), h.slot("pool-google-meet-003")

	// No binding within the wait: 404 at the deadline, on the fake clock.
	ch := h.waitCall(t.Context(), a, "30s")
	h.waiting(1)
	h.eventually(func() error {
		if !h.clock.HasWaiters() {
			return errors.New("the wait has no timer yet")
		}
		return nil
	})
	h.clock.Step(30 * time.Second)
	got := receive(t, ch, 20*time.Second)
	wantStatus(t, "deadline", got.code, got.body, http.StatusNotFound, "no bot is bound")
	h.waiting(0)

	// A newer wait of the slot takes the older one's place: 409.
	first := h.waitCall(t.Context(), a, "60s")
	h.waiting(1)
	second := h.waitCall(t.Context(), a, "1m0s")
	got = receive(t, first, 20*time.Second)
	wantStatus(t, "replaced", got.code, got.body, http.StatusConflict, "waits in this one's place")
	h.waiting(1)

	// Past MaxWaiters: 503 with Retry-After.
	other := h.waitCall(t.Context(), b, "60s")
	h.waiting(2)
	header := h.expect(request{method: "GET", path: "/v1/slots/" + d.app + "/config?wait=60s", token: d.token}, 503, "too many requests wait")
	if header.Get("Retry-After") != "1" {
		t.Errorf("503 of a full replica: Retry-After %q, want 1", header.Get("Retry-After"))
	}

	// The binding wakes the wait: 200 with the configuration.
	h.bind(a, h.bot("standup"))
	got = receive(t, second, 20*time.Second)
	wantStatus(t, "woken by the binding", got.code, got.body, http.StatusOK, `"credential":"bpb_`)

	// The slot's token replaced while its request waits: 410.
	token, err := slottoken.New()
	must(t, err)
	must(t, env.Client.Get(t.Context(), client.ObjectKeyFromObject(b.slot), b.slot))
	b.slot.Status.TokenSHA256 = slottoken.Hash([]byte(token))
	must(t, env.Client.Status().Update(t.Context(), b.slot))
	got = receive(t, other, 20*time.Second)
	wantStatus(t, "token replaced", got.code, got.body, http.StatusGone, "exit")
	h.waiting(0)

	// The Go client's long poll.
	type result struct {
		cfg botclient.Config
		err error
	}
	polled := make(chan result, 1)
	go func() {
		cfg, err := h.client(d).WaitForBinding(t.Context(), 45*time.Second)
		polled <- result{cfg, err}
	}()
	h.waiting(1)
	h.bind(d, h.bot("retro"))
	select {
	case r := <-polled:
		if r.err != nil || r.cfg.Bot != "retro" {
			t.Errorf("WaitForBinding: %+v, %v", r.cfg, r.err)
		}
	case <-time.After(time.Minute): // a liveness bound
		t.Fatal("WaitForBinding did not return within a minute of the binding")
	}

	// A client that hangs up its wait: the server's 503, which nobody reads, conforms too.
	e := h.slot("pool-google-meet-004")
	ctx, cancel := context.WithCancel(t.Context())
	left := h.waitCall(ctx, e, "60s")
	h.waiting(1)
	cancel()
	<-left
	h.waiting(0)
	h.eventually(func() error {
		if len(h.live.leftsOf(e.slot.UID)) == 0 {
			return errors.New("the hang-up is not recorded yet")
		}
		return nil
	})
}

func testSpecHeartbeat(t *testing.T, c *specCheck) {
	h := c.harness(t)
	ctx := t.Context()
	s, b, cl := h.boundBot("pool-zoom-001", "standup")
	path := "/v1/bots/standup/heartbeat"

	if resp, err := cl.Heartbeat(ctx, "standup"); err != nil || resp.Action != botclient.ActionContinue {
		t.Errorf("beat: %+v, %v", resp, err)
	}
	h.expect(request{method: "POST", path: path, token: s.cred}, 200, `"action":"continue"`)
	h.expect(request{method: "POST", path: path, token: s.cred, body: "{}"}, 200, `"logLevel":"info"`)
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(b), b))
	b.Annotations = map[string]string{v1.AnnotationLogLevel: "debug"}
	must(t, env.Client.Update(ctx, b))
	h.synced(b)
	h.expect(request{method: "POST", path: path, token: s.cred}, 200, `"logLevel":"debug"`)

	h.setStoreErr(store.ErrBuffered)
	h.expect(request{method: "POST", path: path, token: s.cred}, 200, `"buffered":true`)
	h.setStoreErr(errors.New("store closed"))
	if header := h.expect(request{method: "POST", path: path, token: s.cred}, 503, "could not record this heartbeat"); header.Get("Retry-After") != "1" {
		t.Errorf("503 of a beat the store refused: Retry-After %q, want 1", header.Get("Retry-After"))
	}
	h.setStoreErr(nil)

	h.expect(request{method: "POST", path: path, token: s.cred, body: `{"extra":true}`, breaks: `property "extra" is unsupported`}, 400, "unknown field")
	h.expect(request{method: "POST", path: path, token: s.cred, body: `{`, breaks: "failed to decode request body"}, 400, "invalid JSON")
	h.expect(request{method: "POST", path: path, token: s.cred, body: strings.Repeat(" ", 2<<10) + "{}"}, 413, "body larger than 1024 bytes")
	h.expect(request{method: "POST", path: path, token: s.cred, body: "{}", contentType: "text/plain", breaks: "header Content-Type has unexpected value"}, 415, "Content-Type")
	h.bot("intruder")
	h.expect(request{method: "POST", path: "/v1/bots/intruder/heartbeat", token: s.cred}, 403, "does not authorize bot intruder")
	h.expect(request{method: "POST", path: path, breaks: "no Authorization: Bearer header"}, 401, "missing bearer token")
	h.expect(request{method: "POST", path: path, token: s.token, breaks: "the bearer token is not a bindingCredential"}, 401, "only fetches the config")
	forged, _ := newBindingCredential()
	h.expect(request{method: "POST", path: path, token: forged}, 401, "invalid token")

	// leave: past maxDuration; the slot being deleted; exit: the bot finished.
	h.updateBotStatus(b, func(b *v1.Bot) { b.Status.StartedAt = &metav1.Time{Time: h.clock.Now().Add(-2 * time.Hour)} })
	h.expect(request{method: "POST", path: path, token: s.cred}, 200, `"action":"leave"`)
	h.updateBotStatus(b, func(b *v1.Bot) { b.Status.StartedAt = &metav1.Time{Time: h.clock.Now()} })
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(s.slot), s.slot))
	s.slot.Finalizers = append(s.slot.Finalizers, "botpool.dev/test")
	must(t, env.Client.Update(ctx, s.slot))
	must(t, env.Client.Delete(ctx, s.slot))
	h.eventually(func() error {
		if resp, err := cl.Heartbeat(ctx, "standup"); err != nil || resp.Action != botclient.ActionLeave {
			return fmt.Errorf("the slot being deleted: %+v, %w; want leave", resp, err)
		}
		return nil
	})
	h.updateBotStatus(b, func(b *v1.Bot) { b.Status.Phase = v1.BotDone })
	h.expect(request{method: "POST", path: path, token: s.cred}, 200, `"action":"exit"`)

	// The slot let go of the Done bot: 410, exit.
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(s.slot), s.slot))
	s.slot.Spec.BotRef = nil
	must(t, env.Client.Update(ctx, s.slot))
	h.eventually(func() error {
		if _, err := cl.Heartbeat(ctx, "standup"); !errors.Is(err, botclient.ErrGone) {
			return fmt.Errorf("the slot let go of the ended bot: %w, want 410", err)
		}
		return nil
	})
	// The binding ended with its slot gone: 401, with a credential of the right form.
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(s.slot), s.slot))
	s.slot.Finalizers = nil
	must(t, env.Client.Update(ctx, s.slot))
	h.eventually(func() error {
		if _, err := cl.Heartbeat(ctx, "standup"); !errors.Is(err, botclient.ErrUnauthorized) {
			return fmt.Errorf("the binding ended: %w, want 401", err)
		}
		return nil
	})
}

func (h *harness) setStoreErr(err error) {
	h.live.mu.Lock()
	defer h.live.mu.Unlock()
	h.live.err = err
}

func testSpecStatus(t *testing.T, c *specCheck) {
	h := c.harness(t)
	ctx := t.Context()
	s, _, cl := h.boundBot("pool-zoom-001", "standup")
	path := "/v1/bots/standup/status"

	for _, phase := range []string{"JoiningCall", "InWaitingRoom", "InCall", "InCall"} {
		if resp, err := cl.ReportStatus(ctx, "standup", botclient.StatusReport{Phase: phase}); err != nil || resp.Phase != phase {
			t.Fatalf("report %s: %+v, %v", phase, resp, err)
		}
	}
	h.expect(request{method: "POST", path: path, token: s.cred, body: `{"phase":"JoiningCall"}`}, 409, "cannot go back")

	bad := []struct{ body, breaks, want string }{
		{`{"phase":"Dancing"}`, `"/phase"`, "is not one a bot reports"},
		{`{}`, `property "phase" is missing`, "is not one a bot reports"},
		{`{"phase":"Fatal","reason":"HeartbeatTimeout"}`, `"/reason": Doesn't match schema "not"`, "the operator's to give"},
		{`{"phase":"Fatal","reason":"kicked"}`, `"/reason": string doesn't match the regular expression`, "CamelCase"},
		{`{"phase":"InCall","message":"a\u0000b"}`, `"/message"`, "NUL"},
		{`{"phase":"InCall","message":"` + strings.Repeat("x", 1025) + `"}`, `"/message"`, "longer than 1024"},
		{`{"phase":"Done","recordingLocation":"` + strings.Repeat("x", 2049) + `"}`, `"/recordingLocation"`, "longer than 2048"},
		{`{"phase":"InCall","mood":"good"}`, `property "mood" is unsupported`, "unknown field"},
		{`{"phase":"CallEnded","speakerTimeframes":[{"speaker":"Ann","start":"yesterday","end":"2026-01-15T14:00:00Z"}]}`, `"/speakerTimeframes/0/start"`, "invalid JSON"},
	}
	for _, tc := range bad {
		h.expect(request{method: "POST", path: path, token: s.cred, body: tc.body, breaks: tc.breaks}, 400, tc.want)
	}
	h.expect(request{method: "POST", path: path, token: s.cred, breaks: "value is required but missing"}, 400, "empty body")
	// Conforming, but no timeframe ends before it starts.
	h.expect(request{method: "POST", path: path, token: s.cred,
		body: `{"phase":"CallEnded","speakerTimeframes":[{"speaker":"Ann","start":"2026-01-15T14:01:00Z","end":"2026-01-15T14:00:00Z"}]}`},
		400, "end is before start")
	h.expect(request{method: "POST", path: path, token: s.cred, body: strings.Repeat(" ", 257<<10) + `{"phase":"InCall"}`}, 413, "body larger than")
	h.expect(request{method: "POST", path: path, token: s.cred, body: `{"phase":"InCall"}`, contentType: "text/plain", breaks: "header Content-Type has unexpected value"}, 415, "Content-Type")
	h.bot("intruder")
	h.expect(request{method: "POST", path: "/v1/bots/intruder/status", token: s.cred, body: `{"phase":"InCall"}`}, 403, "does not authorize")
	h.expect(request{method: "POST", path: path, token: s.token, body: `{"phase":"InCall"}`, breaks: "the bearer token is not a bindingCredential"}, 401, "only fetches the config")

	start := time.Date(2026, 1, 15, 14, 0, 0, 0, time.UTC)
	done := botclient.StatusReport{Phase: "Done", RecordingLocation: "s3://recordings/standup.mp4",
		SpeakerTimeframes: []botclient.SpeakerTimeframe{{Speaker: "Ann", Start: start, End: start.Add(70 * time.Second)}}}
	if resp, err := cl.ReportStatus(ctx, "standup", done); err != nil || resp.Phase != "Done" {
		t.Fatalf("report Done: %+v, %v", resp, err)
	}
	if _, err := cl.ReportStatus(ctx, "standup", botclient.StatusReport{Phase: "Fatal", Reason: "Kicked"}); !errors.Is(err, botclient.ErrConflict) {
		t.Errorf("Fatal after Done: %v, want 409", err)
	}
	h.release(s) // the slot let go of the Done bot
	h.expect(request{method: "POST", path: path, token: s.cred, body: `{"phase":"Done"}`}, 410, "bot standup is Done and slot pool-zoom-001 let go of it: exit")

	_, _, cl2 := h.boundBot("pool-zoom-002", "kicked")
	report := botclient.StatusReport{Phase: "Fatal", Reason: "RemovedFromMeeting", Message: "the host removed the bot"}
	if resp, err := cl2.ReportStatus(ctx, "kicked", report); err != nil || resp.Phase != "Fatal" {
		t.Errorf("report Fatal: %+v, %v", resp, err)
	}
}

func testSpecEvents(t *testing.T, c *specCheck) {
	h := c.harness(t)
	ctx := t.Context()
	s, b, cl := h.boundBot("pool-zoom-001", "standup")
	path := "/v1/bots/standup/events"

	resp, err := cl.SendEvents(ctx, "standup",
		botclient.Event{Type: "participant.joined", At: h.clock.Now(), Data: json.RawMessage(`{"name":"Ann"}`)},
		botclient.Event{Type: "log"},
		botclient.Event{Type: "chat:message", Data: json.RawMessage(`null`)})
	if err != nil || resp.Accepted != 3 {
		t.Errorf("events: %+v, %v", resp, err)
	}
	h.expect(request{method: "POST", path: path, token: s.cred,
		body: `{"events":[{"type":"participant.joined","at":"2026-01-15T14:00:05Z","data":{"name":"Ann"}}]}`}, 202, `"accepted":1`)

	bad := []struct{ body, breaks, want string }{
		{`{"events":[]}`, `"/events"`, "between 1 and 100"},
		{`{"events":[` + strings.Repeat(`{"type":"log"},`, 100) + `{"type":"log"}]}`, `"/events"`, "between 1 and 100"},
		{`{}`, `property "events" is missing`, "between 1 and 100"},
		{`{"events":[{"type":".hidden"}]}`, `"/events/0/type"`, "events[0].type"},
		{`{"events":[{"type":"log","at":"yesterday"}]}`, `"/events/0/at"`, "invalid JSON"},
		{`{"events":[{"type":"log","level":"info"}]}`, `property "level" is unsupported`, "unknown field"},
	}
	for _, tc := range bad {
		h.expect(request{method: "POST", path: path, token: s.cred, body: tc.body, breaks: tc.breaks}, 400, tc.want)
	}
	// Conforming, but beyond what the server or the store takes.
	h.expect(request{method: "POST", path: path, token: s.cred, body: `{"events":[{"type":"log","data":"a\u0000b"}]}`}, 400, "NUL character")
	h.expect(request{method: "POST", path: path, token: s.cred, body: `{"events":[{"type":"log","data":"` + strings.Repeat("x", 16<<10) + `"}]}`}, 400, "larger than 16384 bytes")
	h.setStoreErr(fmt.Errorf("%w: insert_events: untranslatable character", store.ErrInvalid))
	h.expect(request{method: "POST", path: path, token: s.cred, body: `{"events":[{"type":"log"}]}`}, 400, "the store refused these events")
	h.setStoreErr(errors.New("connection refused"))
	h.expect(request{method: "POST", path: path, token: s.cred, body: `{"events":[{"type":"log"}]}`}, 503, "retry later")
	h.setStoreErr(nil)

	big := `{"events":[` + strings.Repeat(`{"type":"log","data":"`+strings.Repeat("x", 10000)+`"},`, 60) + `{"type":"log"}]}`
	h.expect(request{method: "POST", path: path, token: s.cred, body: big}, 413, "body larger than")
	h.expect(request{method: "POST", path: path, token: s.cred, body: `{"events":[{"type":"log"}]}`, contentType: "text/plain", breaks: "header Content-Type has unexpected value"}, 415, "Content-Type")
	h.bot("other")
	h.expect(request{method: "POST", path: "/v1/bots/other/events", token: s.cred, body: `{"events":[{"type":"log"}]}`}, 403, "does not authorize")
	h.expect(request{method: "POST", path: path, body: `{"events":[{"type":"log"}]}`, breaks: "no Authorization: Bearer header"}, 401, "missing bearer token")

	h.updateBotStatus(b, func(b *v1.Bot) { b.Status.Phase = v1.BotDone })
	h.release(s) // the slot let go of the Done bot
	h.expect(request{method: "POST", path: path, token: s.cred, body: `{"events":[{"type":"log"}]}`}, 410, "let go of it: exit")
}

// testSpecLimits meets every 429: the slot's rate, the address's failed authentications, the
// event quota.
func testSpecLimits(t *testing.T, c *specCheck) {
	limited := func(h *harness, r request, want string) {
		t.Helper()
		if header := h.expect(r, 429, want); header.Get("Retry-After") == "" {
			t.Errorf("%s %s: 429 without Retry-After", r.method, r.path)
		}
	}

	h := c.harness(t, func(cfg *Config) {
		cfg.SlotRate, cfg.SlotBurst = 1, 1
		cfg.AuthFailureRate, cfg.AuthFailureBurst = 1, 1
	})
	s, _, _ := h.boundBot("pool-zoom-001", "chatty") // the claim spent the slot's one token
	free := h.slot("pool-zoom-002")
	config := request{method: "GET", path: "/v1/slots/" + free.app + "/config", token: free.token}
	h.expect(config, 404, "no bot is bound")
	limited(h, config, "too many requests from this slot")
	for _, r := range []request{
		{method: "POST", path: "/v1/bots/chatty/heartbeat", token: s.cred},
		{method: "POST", path: "/v1/bots/chatty/status", token: s.cred, body: `{"phase":"InCall"}`},
		{method: "POST", path: "/v1/bots/chatty/events", token: s.cred, body: `{"events":[{"type":"log"}]}`},
	} {
		h.clock.Step(time.Second) // the slot's bucket is full again
		ok := 200
		if strings.HasSuffix(r.path, "events") {
			ok = 202
		}
		h.expect(r, ok, "")
		limited(h, r, "too many requests from this slot")
	}
	// Failed authentications from one address: the second is answered 429, with or without a
	// token of the right form; a valid token is still served.
	h.clock.Step(time.Second)
	forged, err := slottoken.New()
	must(t, err)
	h.expect(request{method: "GET", path: config.path, token: forged}, 401, "invalid token")
	limited(h, request{method: "GET", path: config.path, token: forged}, "invalid tokens from this address")
	limited(h, request{method: "POST", path: "/v1/bots/chatty/heartbeat", breaks: "no Authorization: Bearer header"}, "invalid tokens from this address")
	h.expect(config, 404, "no bot is bound")

	// The event quota: a burst of 100 events, refilling at 1 a second on a clock that stands
	// still. Speaker timeframes of a status report count.
	q := c.harness(t, func(cfg *Config) {
		cfg.Liveness = WithEventQuota(cfg.Liveness, EventQuota{BotEvents: 1, Window: time.Second}, cfg.Clock, nil)
	})
	qs, _, _ := q.boundBot("pool-zoom-003", "talkative")
	q.expect(request{method: "POST", path: "/v1/bots/talkative/events", token: qs.cred,
		body: `{"events":[` + strings.Repeat(`{"type":"log"},`, 99) + `{"type":"log"}]}`}, 202, `"accepted":100`)
	limited(q, request{method: "POST", path: "/v1/bots/talkative/events", token: qs.cred, body: `{"events":[{"type":"log"}]}`},
		"event quota of this bot spent")
	limited(q, request{method: "POST", path: "/v1/bots/talkative/status", token: qs.cred,
		body: `{"phase":"CallEnded","speakerTimeframes":[{"speaker":"Ann","start":"2026-01-15T14:00:00Z","end":"2026-01-15T14:01:00Z"}]}`},
		"event quota of this bot spent")
}

// faultyStatus is a client whose status writes fail with err while it is set.
type faultyStatus struct {
	client.Client
	mu  *sync.Mutex
	err *error
}

func (c faultyStatus) Status() client.SubResourceWriter { return faultyWriter{c.Client.Status(), c} }

func (c faultyStatus) set(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	*c.err = err
}

type faultyWriter struct {
	client.SubResourceWriter
	c faultyStatus
}

func (w faultyWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	w.c.mu.Lock()
	err := *w.c.err
	w.c.mu.Unlock()
	if err != nil {
		return err
	}
	return w.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// testSpecFaults: what a bot sees when Kubernetes or the store fails under a status report.
func testSpecFaults(t *testing.T, c *specCheck) {
	faulty := faultyStatus{mu: &sync.Mutex{}, err: new(error)}
	h := c.harness(t, func(cfg *Config) {
		faulty.Client = cfg.Client
		cfg.Client = faulty
	})
	s, _, _ := h.boundBot("pool-zoom-001", "standup")
	path := "/v1/bots/standup/status"
	report := request{method: "POST", path: path, token: s.cred, body: `{"phase":"InCall"}`}

	faulty.set(apierrors.NewNotFound(v1.GroupVersion.WithResource("bots").GroupResource(), "standup"))
	h.expect(report, 410, "no longer exists")
	faulty.set(errors.New("etcdserver: request timed out"))
	if header := h.expect(report, 503, "retry later"); header.Get("Retry-After") != "1" {
		t.Errorf("503 of a failed write: Retry-After %q, want 1", header.Get("Retry-After"))
	}
	faulty.set(nil)
	h.setStoreErr(errors.New("connection refused"))
	h.expect(request{method: "POST", path: path, token: s.cred,
		body: `{"phase":"CallEnded","speakerTimeframes":[{"speaker":"Ann","start":"2026-01-15T14:00:00Z","end":"2026-01-15T14:01:00Z"}]}`},
		503, "retry later")
	h.setStoreErr(nil)
	h.expect(report, 200, `"phase":"InCall"`)
}
