package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// route is one endpoint: segments of the path after /api/v1, "{}" for a parameter.
type route struct {
	method  string
	pattern []string
	op      string
	ability string // "" for no auth
	handle  func(s *Sim, rc *reqCtx) (int, any)
}

// reqCtx is one request being handled, under s.mu.
type reqCtx struct {
	r      *http.Request
	params []string
	body   []byte
	tok    *token
	now    time.Time
	header http.Header
}

// uuid is the path parameter ({uuid} in every route that has one).
func (rc *reqCtx) uuid() string { return rc.params[0] }

func (rc *reqCtx) can(ability string) bool {
	return rc.tok != nil && (rc.tok.abilities["root"] || rc.tok.abilities[ability])
}

// Request is one answered request, for assertions such as "never a 429".
type Request struct {
	At   time.Time
	Op   string
	Code int
	User string
	// App is the application the request is about (named in its path, or through the
	// deployment it names, or /deploy's uuid); empty for lists and lookups.
	App string
}

type msg map[string]any

// Messages the real server sends (docs/coolify.md).
var (
	msgNotFound     = msg{"message": "Not found.", "docs": "https://coolify.io/docs"}
	msgServerError  = msg{"message": "Server Error"}
	msgUnauth       = msg{"message": "Unauthenticated."}
	msgAPIDisabled  = msg{"success": true, "message": "API is disabled."}
	msgTooMany      = msg{"message": "Too Many Attempts."}
	msgMethodPost   = msg{"message": "This endpoint has changed to a POST request."}
	msgBadType      = msg{"message": "Invalid request.", "error": "Content-Type must be application/json."}
	msgUnavailable  = msg{"message": "Service Unavailable"}
	maxRequestBody  = int64(1 << 20)
	requestLogLimit = 200_000
)

// ServeHTTP implements http.Handler.
func (s *Sim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt, params, status := match(r)
	op := "unknown"
	if rt != nil {
		op = rt.op
	}
	s.mu.Lock()
	s.advance()
	now := s.clk.Now()
	rc := &reqCtx{r: r, params: params, now: now, header: http.Header{}}
	code, body, latency := s.serve(rt, rc, status)
	s.record(op, code, rc, now)
	hooks := s.takeHooks()
	s.mu.Unlock()
	runHooks(hooks)
	if latency > 0 {
		time.Sleep(latency)
	}
	write(w, r, rc.header, code, body)
}

// serve runs the middleware chain and the handler. Callers hold s.mu.
func (s *Sim) serve(rt *route, rc *reqCtx, status int) (code int, body any, latency time.Duration) {
	if s.outage {
		return http.StatusServiceUnavailable, msgUnavailable, 0
	}
	switch status {
	case http.StatusNotFound:
		return status, msgNotFound, 0
	case http.StatusMethodNotAllowed:
		return status, msgMethodPost, 0
	}
	if rt.ability == "" {
		code, body = rt.handle(s, rc)
		return code, body, 0
	}
	rc.tok = s.authenticate(rc.r)
	if rc.tok != nil {
		if limited := s.throttle(rc); limited {
			return http.StatusTooManyRequests, msgTooMany, 0
		}
	}
	switch {
	case rc.tok == nil:
		return http.StatusUnauthorized, msgUnauth, 0
	case !s.apiEnabled:
		return http.StatusForbidden, msgAPIDisabled, 0
	case !rc.can(rt.ability):
		return http.StatusForbidden, msg{"message": "Missing required permissions: " + rt.ability}, 0
	}
	fault, after, latency, retryAfter := s.injected(rt.op)
	if fault != 0 && retryAfter > 0 {
		rc.header.Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
	}
	if fault != 0 && !after {
		return fault, faultBody(fault), latency
	}
	if rc.r.Body != nil {
		b, err := readBody(rc.r)
		if err != nil {
			return http.StatusBadRequest, msg{"message": "Invalid request."}, latency
		}
		rc.body = b
	}
	if len(rc.body) > 0 && !isJSON(rc.r.Header.Get("Content-Type")) {
		return http.StatusBadRequest, msgBadType, latency
	}
	code, body = rt.handle(s, rc)
	if fault != 0 {
		return fault, faultBody(fault), latency
	}
	return code, body, latency
}

func faultBody(code int) any {
	switch code {
	case http.StatusServiceUnavailable:
		return msgUnavailable
	case http.StatusTooManyRequests:
		return msgTooMany
	}
	return msgServerError
}

func readBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody+1))
	if err == nil && int64(len(b)) > maxRequestBody {
		err = fmt.Errorf("body larger than %d bytes", maxRequestBody)
	}
	return b, err
}

func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

func (s *Sim) authenticate(r *http.Request) *token {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		return nil
	}
	return s.tokens[strings.TrimSpace(tok)]
}

// window is a user's fixed rate-limit window, as Laravel's throttle keeps it.
type window struct {
	start time.Time
	hits  int
}

// throttle counts the request against its user; rejected requests do not count.
func (s *Sim) throttle(rc *reqCtx) bool {
	limit := s.cfg.RateLimit
	if limit < 0 {
		return false
	}
	w := s.limits[rc.tok.user]
	if w == nil || !rc.now.Before(w.start.Add(time.Minute)) {
		w = &window{start: rc.now}
		s.limits[rc.tok.user] = w
	}
	rc.header.Set("X-RateLimit-Limit", strconv.Itoa(limit))
	if w.hits >= limit {
		reset := w.start.Add(time.Minute)
		secs := int(math.Ceil(reset.Sub(rc.now).Seconds()))
		rc.header.Set("X-RateLimit-Remaining", "0")
		rc.header.Set("Retry-After", strconv.Itoa(max(secs, 1)))
		rc.header.Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
		return true
	}
	w.hits++
	rc.header.Set("X-RateLimit-Remaining", strconv.Itoa(limit-w.hits))
	return false
}

func (s *Sim) record(op string, code int, rc *reqCtx, at time.Time) {
	if s.counts[op] == nil {
		s.counts[op] = map[int]int{}
	}
	s.counts[op][code]++
	user := ""
	if rc.tok != nil {
		user = rc.tok.user
	}
	if len(s.log) < requestLogLimit {
		s.log = append(s.log, Request{At: at, Op: op, Code: code, User: user, App: s.requestApp(rc)})
	}
}

// requestApp is the application a request names: its path's uuid when that is an application
// or one of its deployments, or the uuid /deploy was asked for. Callers hold s.mu.
func (s *Sim) requestApp(rc *reqCtx) string {
	if len(rc.params) > 0 {
		p := rc.params[0]
		if _, ok := s.apps[p]; ok {
			return p
		}
		if d, ok := s.deploys[p]; ok {
			return d.app.uuid
		}
		return ""
	}
	return rc.r.URL.Query().Get("uuid")
}

// write answers like Laravel: JSON when the client accepts it; otherwise 429 and 5xx come
// back as HTML and validation errors as a redirect.
func write(w http.ResponseWriter, r *http.Request, h http.Header, code int, body any) {
	for k, v := range h {
		w.Header()[k] = v
	}
	wantsJSON := strings.Contains(r.Header.Get("Accept"), "json")
	switch {
	case !wantsJSON && code == http.StatusUnprocessableEntity:
		w.Header().Set("Location", "/")
		w.WriteHeader(http.StatusFound)
		return
	case !wantsJSON && (code == http.StatusTooManyRequests || code >= 500):
		w.Header().Set("Content-Type", "text/html; charset=UTF-8")
		w.WriteHeader(code)
		_, _ = fmt.Fprintf(w, "<!DOCTYPE html><html><body>%d</body></html>", code)
		return
	}
	if s, ok := body.(rawText); ok {
		w.Header().Set("Content-Type", "text/html; charset=UTF-8")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(s))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// rawText is a body sent as is (the bare strings of /version and /health).
type rawText string

// Counts returns answered requests per operation and status code.
func (s *Sim) Counts() map[string]map[int]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]map[int]int, len(s.counts))
	for op, m := range s.counts {
		out[op] = map[int]int{}
		for c, n := range m {
			out[op][c] = n
		}
	}
	return out
}

// Requests returns the request log (the first 200,000 requests).
func (s *Sim) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.log...)
}

// CountCode sums the requests of every operation answered with code.
func (s *Sim) CountCode(code int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.counts {
		n += m[code]
	}
	return n
}

// MaxPerMinute is the highest number of requests by user in any 60-second sliding window.
func (s *Sim) MaxPerMinute(user string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	best, lo := 0, 0
	var times []time.Time
	for _, r := range s.log {
		if r.User == user {
			times = append(times, r.At)
		}
	}
	for hi := range times {
		for times[hi].Sub(times[lo]) >= time.Minute {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}
