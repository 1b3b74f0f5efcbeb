package coolify

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"botpool.dev/botpool/internal/egress"
)

// Defaults of the client's options. A call never holds its caller (a reconcile) for long: each
// attempt is bounded by DefaultTimeout, the whole call with its retries by DefaultCallBudget,
// and any wait inside it (rate limiter, Retry-After, backoff) by DefaultMaxWait; a longer wait
// is returned to the caller as a *WaitError to requeue on.
const (
	DefaultTimeout     = 10 * time.Second
	DefaultCallBudget  = 20 * time.Second
	DefaultMaxRetries  = 4
	DefaultMaxBodySize = 4 << 20
	// DefaultMaxWait is the longest the client waits inside one call (for the rate limiter,
	// a Retry-After or a backoff); beyond it the call returns a *WaitError.
	DefaultMaxWait = 2 * time.Second
	// DefaultMaxRetryAfter is the former name of DefaultMaxWait.
	DefaultMaxRetryAfter = DefaultMaxWait
	backoffBase          = 250 * time.Millisecond
	backoffCap           = 10 * time.Second
)

// Client talks to one Coolify instance with one token. It is safe for concurrent use.
type Client struct {
	base       *url.URL
	token      string
	http       *http.Client
	clock      clock.Clock
	limiter    *Limiter
	instance   *Instance
	user       string // UserKey, the client's name in its instance guard
	limits     InstanceLimits
	metrics    *Metrics
	log        logr.Logger
	timeout    time.Duration
	budget     time.Duration
	maxRetries int
	maxBody    int64
	maxWait    time.Duration
	jitter     func() float64
	// egress, when set, is the dial policy of the http.Client New builds (WithEgress).
	egress *egress.Policy

	versionMu sync.Mutex
	version   string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the http.Client (its Timeout should be zero: the client sets one per
// attempt). Give it CheckRedirect: egress.SameHostRedirects, as NewHTTPClient does.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithClock sets the clock used for rate limiting and backoff.
func WithClock(clk clock.Clock) Option { return func(c *Client) { c.clock = clk } }

// WithLimiter shares a rate limiter; see Registry.
func WithLimiter(l *Limiter) Option { return func(c *Client) { c.limiter = l } }

// WithMetrics uses collectors built by NewMetrics.
func WithMetrics(m *Metrics) Option { return func(c *Client) { c.metrics = m } }

// WithRegisterer registers new collectors with reg (nil: none).
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(c *Client) { c.metrics = NewMetrics(reg) }
}

// WithLogger sets the logger; retries are logged at V(1).
func WithLogger(l logr.Logger) Option { return func(c *Client) { c.log = l } }

// WithTimeout bounds each attempt (see WithCallBudget for the whole call).
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithCallBudget bounds a whole call, its retries and waits included: no retry starts that
// would end past it.
func WithCallBudget(d time.Duration) Option { return func(c *Client) { c.budget = d } }

// WithInstance shares the guard (bulkhead and breakers) of a Coolify instance; see Registry.
func WithInstance(in *Instance) Option { return func(c *Client) { c.instance = in } }

// WithInstanceLimits configures the instance guard a client or a Registry builds.
func WithInstanceLimits(l InstanceLimits) Option { return func(c *Client) { c.limits = l } }

// WithEgress makes the client dial only where policy allows, checked on every connection's
// resolved address, and follow redirects only to the same scheme, host and port. A Registry
// builds one http.Client for all its clients; New builds one per client.
func WithEgress(policy egress.Policy) Option { return func(c *Client) { c.egress = &policy } }

// WithMaxRetries sets how many times a retryable failure is retried (0: never).
func WithMaxRetries(n int) Option { return func(c *Client) { c.maxRetries = n } }

// WithMaxBodySize caps how much of a response is read.
func WithMaxBodySize(n int64) Option { return func(c *Client) { c.maxBody = n } }

// WithMaxWait sets the longest the client waits inside one call (rate limiter, Retry-After,
// backoff); a longer wait is a *WaitError for the caller to requeue on.
func WithMaxWait(d time.Duration) Option { return func(c *Client) { c.maxWait = d } }

// WithMaxRetryAfter is the former name of WithMaxWait.
func WithMaxRetryAfter(d time.Duration) Option { return WithMaxWait(d) }

// WithVersion skips the version lookup, for a server whose version is known.
func WithVersion(v string) Option { return func(c *Client) { c.version = v } }

// New builds a client. baseURL is the instance's address, with or without the /api/v1 suffix.
func New(baseURL, token string, opts ...Option) (*Client, error) {
	base, err := normalizeBaseURL(baseURL)
	if err != nil {
		return nil, err
	}
	if token == "" {
		return nil, errors.New("coolify: empty token")
	}
	c := defaults()
	c.base, c.token = base, token
	for _, o := range opts {
		o(c)
	}
	if c.http == nil {
		c.http = newHTTPClient(c.egress)
	}
	if c.instance == nil {
		c.instance = NewInstance(c.limits)
	}
	c.user = userKey(c.base, c.token)
	if c.limiter == nil {
		c.limiter = NewLimiter(DefaultRateLimit)
	}
	if c.metrics == nil {
		c.metrics = NewMetrics(nil)
	}
	return c, nil
}

func defaults() *Client {
	return &Client{
		clock:      clock.RealClock{},
		log:        logr.Discard(),
		timeout:    DefaultTimeout,
		budget:     DefaultCallBudget,
		maxRetries: DefaultMaxRetries,
		maxBody:    DefaultMaxBodySize,
		maxWait:    DefaultMaxWait,
		jitter:     rand.Float64,
	}
}

// NewHTTPClient is the http.Client for Coolify calls: it dials only where policy allows and
// never follows a redirect to another scheme, host or port (a redirect to an internal address
// would carry the request past the check made on the configured URL).
func NewHTTPClient(policy egress.Policy) *http.Client { return newHTTPClient(&policy) }

func newHTTPClient(policy *egress.Policy) *http.Client {
	h := &http.Client{CheckRedirect: egress.SameHostRedirects}
	if policy != nil {
		h.Transport = policy.Transport()
	}
	return h
}

func normalizeBaseURL(raw string) (*url.URL, error) {
	raw = strings.TrimSpace(raw)
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error quotes the whole URL, password included: quote it without its user info,
		// and say what is wrong from a parse of that (secret-free) text.
		shown := redactUserinfo(raw)
		cause := "malformed user info"
		var uerr *url.Error
		if _, perr := url.Parse(shown); errors.As(perr, &uerr) {
			cause = uerr.Err.Error()
		}
		return nil, fmt.Errorf("coolify: base URL %q: %s", shown, cause)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("coolify: base URL %q: want http(s)://host", redactUserinfo(raw))
	}
	p := strings.TrimRight(u.Path, "/")
	if !strings.HasSuffix(p, "/api/v1") {
		p += "/api/v1"
	}
	u.Path, u.RawQuery, u.Fragment, u.User = p, "", "", nil
	return u, nil
}

// redactUserinfo hides the user info (user:password@) of a URL that may not parse.
func redactUserinfo(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		if at := strings.LastIndex(raw, "@"); at >= 0 {
			return "redacted@" + raw[at+1:]
		}
		return raw
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	if at := strings.LastIndex(rest[:end], "@"); at >= 0 {
		return scheme + "://redacted@" + rest[at+1:]
	}
	return raw
}

// BaseURL is the API root the client calls, ending in /api/v1.
func (c *Client) BaseURL() string { return c.base.String() }

// UserKey names the Coolify user the client acts as without revealing the token: a hash of
// the instance's base URL and the token. Clients with the same key share what Coolify
// shows one user (its budget, its team's servers); different keys share nothing.
func (c *Client) UserKey() string { return userKey(c.base, c.token) }

func userKey(base *url.URL, token string) string {
	sum := sha256.Sum256([]byte(base.String() + "\x00" + token))
	return "user:" + hex.EncodeToString(sum[:12])
}

// call describes one API request.
type call struct {
	op     string
	method string
	path   string
	query  url.Values
	body   any
	// idempotent calls are retried on 5xx and transport errors; others only on a 429 that
	// the server answered before doing anything.
	idempotent bool
	// out receives the decoded 2xx body; nil discards it. A *string takes the raw body.
	out any
	// yield hands the call back (a *WaitError) instead of waiting for the rate limiter
	// while a start-path request waits there, or for a pause: its caller has somewhere
	// better to keep it (see SetDescription).
	yield bool
}

// do runs a call with the instance's guard, rate limiting, retries and metrics. It waits
// inside the call at most maxWait at a time and only while the call's budget lasts; beyond
// that a 429 or a throttle comes back as a *WaitError.
func (c *Client) do(ctx context.Context, cl call) (err error) {
	defer func() {
		var we *WaitError
		if errors.As(err, &we) {
			c.metrics.notSent.WithLabelValues(cl.op, we.Reason).Inc()
		}
	}()
	var payload []byte
	if cl.body != nil {
		var err error
		if payload, err = json.Marshal(cl.body); err != nil {
			return fmt.Errorf("coolify %s: encode body: %w", cl.op, err)
		}
	}
	release, err := c.instance.acquire(ctx, c.clock, c.user, cl.op, c.maxWait, PriorityOf(ctx))
	if err != nil {
		return err
	}
	defer release()
	deadline := c.clock.Now().Add(c.budget)
	for attempt := 0; ; attempt++ {
		err := c.attempt(ctx, cl, payload, deadline)
		if err == nil {
			return nil
		}
		if _, throttled := RetryAfter(err); throttled {
			return err
		}
		reason, wait, retry := c.retryable(cl, err, attempt)
		if retry && (wait > c.maxWait || c.clock.Now().Add(wait).After(deadline)) {
			retry = false
		}
		if !retry {
			return c.final(cl, err, wait)
		}
		c.metrics.retries.WithLabelValues(cl.op, reason).Inc()
		c.log.V(1).Info("Retrying Coolify request", "operation", cl.op, "reason", reason, "attempt", attempt+1, "wait", wait.String())
		if err := c.sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// final is the error a call ends with: a 429 becomes a *WaitError (the request did not take
// effect, and the caller should come back after the server's Retry-After, capped).
func (c *Client) final(cl call, err error, wait time.Duration) error {
	var apiErr *APIError
	if errors.As(err, &apiErr) && errors.Is(err, ErrRateLimited) {
		return &WaitError{Op: cl.op, Reason: WaitRateLimited, Wait: capPause(max(apiErr.RetryAfter, wait, time.Second)), Err: err}
	}
	return err
}

// retryable decides whether and after how long to retry.
func (c *Client) retryable(cl call, err error, attempt int) (reason string, wait time.Duration, ok bool) {
	backoff := c.backoff(attempt)
	var apiErr *APIError
	rateLimited := errors.As(err, &apiErr) && errors.Is(err, ErrRateLimited)
	if rateLimited {
		wait = max(apiErr.RetryAfter, backoff)
	}
	if attempt >= c.maxRetries {
		return "", wait, false
	}
	switch {
	case rateLimited:
		// The throttle middleware refuses before the controller runs: safe for every call.
		return "rate_limited", wait, true
	case !cl.idempotent:
		return "", 0, false
	case errors.As(err, &apiErr) && errors.Is(err, ErrServer):
		return "server_error", max(apiErr.RetryAfter, backoff), true
	case errors.Is(err, egress.ErrRefused):
		return "", 0, false // the same address is refused again
	case errors.Is(err, ErrTransport):
		return "transport", backoff, true
	}
	return "", 0, false
}

// backoff is exponential with full jitter: a random wait in [base·2ⁿ/2, base·2ⁿ], capped.
func (c *Client) backoff(attempt int) time.Duration {
	d := min(backoffBase<<attempt, backoffCap)
	return d/2 + time.Duration(c.jitter()*float64(d/2))
}

func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	return sleepCtx(ctx, c.clock, d)
}

func (c *Client) attempt(ctx context.Context, cl call, payload []byte, deadline time.Time) error {
	waited, err := c.limiter.wait(ctx, c.clock, cl.op, c.maxWait, cl.yield)
	if err != nil {
		return err
	}
	if waited > 0 {
		c.metrics.waits.WithLabelValues(cl.op).Inc()
		c.metrics.throttled.WithLabelValues(cl.op).Add(waited.Seconds())
	}
	timeout := c.timeout
	if rest := deadline.Sub(c.clock.Now()); rest < timeout {
		// The last attempt still gets a fair chance to answer (and a test's fake clock that
		// jumped past the deadline does not starve it).
		timeout = max(rest, min(c.timeout, 5*time.Second))
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	u := *c.base
	u.Path += cl.path
	u.RawQuery = cl.query.Encode()
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(actx, cl.method, u.String(), body)
	if err != nil {
		return fmt.Errorf("coolify %s: %w", cl.op, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}

	start := c.clock.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		c.observe(cl.op, "error", start)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !errors.Is(err, egress.ErrRefused) && // a refusal of ours says nothing of the instance
			c.instance.record(c.clock.Now(), c.user, true) {
			c.metrics.breakerOpened.Inc()
		}
		return &transportError{op: cl.op, err: c.redact(err)}
	}
	c.instance.record(c.clock.Now(), c.user, false)
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBody+1))
	c.observe(cl.op, strconv.Itoa(resp.StatusCode), start)
	if err != nil {
		return &transportError{op: cl.op, err: fmt.Errorf("read body: %w", c.redact(err))}
	}
	if int64(len(data)) > c.maxBody {
		return fmt.Errorf("coolify %s: response larger than %d bytes", cl.op, c.maxBody)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		apiErr := newAPIError(cl.op, resp, data, c.clock.Now())
		if errors.Is(apiErr, ErrRateLimited) && apiErr.RetryAfter > 0 {
			now := c.clock.Now()
			c.limiter.pause(now, now.Add(apiErr.RetryAfter))
		}
		return apiErr
	}
	return decode(cl, data)
}

func decode(cl call, data []byte) error {
	switch out := cl.out.(type) {
	case nil:
		return nil
	case *string:
		*out = string(data)
		return nil
	default:
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("coolify %s: decode answer: %w", cl.op, err)
		}
		return nil
	}
}

func (c *Client) observe(op, code string, start time.Time) {
	c.metrics.requests.WithLabelValues(op, code).Inc()
	c.metrics.duration.WithLabelValues(op).Observe(c.clock.Since(start).Seconds())
}

// redact removes the token from an error text, in case a transport ever echoes a header.
func (c *Client) redact(err error) error {
	if err == nil || !strings.Contains(err.Error(), c.token) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), c.token, "[redacted]"))
}

// String never shows the token, so a client printed with %v leaks nothing.
func (c *Client) String() string { return "coolify.Client(" + c.base.String() + ")" }
