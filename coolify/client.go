package coolify

import (
	"bytes"
	"context"
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
)

// Defaults of the client's options.
const (
	DefaultTimeout     = 30 * time.Second
	DefaultMaxRetries  = 4
	DefaultMaxBodySize = 4 << 20
	// DefaultMaxRetryAfter is the longest Retry-After the client waits for inside one call;
	// beyond it the error goes back to the caller, who requeues.
	DefaultMaxRetryAfter = 30 * time.Second
	backoffBase          = 250 * time.Millisecond
	backoffCap           = 10 * time.Second
)

// Client talks to one Coolify instance with one token. It is safe for concurrent use.
type Client struct {
	base          *url.URL
	token         string
	http          *http.Client
	clock         clock.Clock
	limiter       *Limiter
	metrics       *Metrics
	log           logr.Logger
	timeout       time.Duration
	maxRetries    int
	maxBody       int64
	maxRetryAfter time.Duration
	jitter        func() float64

	versionMu sync.Mutex
	version   string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the http.Client (its Timeout should be zero: the client sets one per attempt).
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

// WithTimeout bounds each attempt (not the whole call with its retries).
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithMaxRetries sets how many times a retryable failure is retried (0: never).
func WithMaxRetries(n int) Option { return func(c *Client) { c.maxRetries = n } }

// WithMaxBodySize caps how much of a response is read.
func WithMaxBodySize(n int64) Option { return func(c *Client) { c.maxBody = n } }

// WithMaxRetryAfter sets the longest server-requested wait the client sits out itself.
func WithMaxRetryAfter(d time.Duration) Option { return func(c *Client) { c.maxRetryAfter = d } }

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
	c := &Client{
		base:          base,
		token:         token,
		http:          &http.Client{},
		clock:         clock.RealClock{},
		log:           logr.Discard(),
		timeout:       DefaultTimeout,
		maxRetries:    DefaultMaxRetries,
		maxBody:       DefaultMaxBodySize,
		maxRetryAfter: DefaultMaxRetryAfter,
		jitter:        rand.Float64,
	}
	for _, o := range opts {
		o(c)
	}
	if c.limiter == nil {
		c.limiter = NewLimiter(DefaultRateLimit)
	}
	if c.metrics == nil {
		c.metrics = NewMetrics(nil)
	}
	return c, nil
}

func normalizeBaseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return nil, fmt.Errorf("coolify: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("coolify: base URL %q: want http(s)://host", raw)
	}
	p := strings.TrimRight(u.Path, "/")
	if !strings.HasSuffix(p, "/api/v1") {
		p += "/api/v1"
	}
	u.Path, u.RawQuery, u.Fragment, u.User = p, "", "", nil
	return u, nil
}

// BaseURL is the API root the client calls, ending in /api/v1.
func (c *Client) BaseURL() string { return c.base.String() }

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
}

// do runs a call with rate limiting, retries and metrics.
func (c *Client) do(ctx context.Context, cl call) error {
	var payload []byte
	if cl.body != nil {
		var err error
		if payload, err = json.Marshal(cl.body); err != nil {
			return fmt.Errorf("coolify %s: encode body: %w", cl.op, err)
		}
	}
	for attempt := 0; ; attempt++ {
		err := c.attempt(ctx, cl, payload)
		if err == nil {
			return nil
		}
		reason, wait, retry := c.retryable(cl, err, attempt)
		if !retry {
			return err
		}
		c.metrics.retries.WithLabelValues(cl.op, reason).Inc()
		c.log.V(1).Info("Retrying Coolify request", "operation", cl.op, "reason", reason, "attempt", attempt+1, "wait", wait.String())
		if err := c.sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// retryable decides whether and after how long to retry.
func (c *Client) retryable(cl call, err error, attempt int) (reason string, wait time.Duration, ok bool) {
	if attempt >= c.maxRetries {
		return "", 0, false
	}
	backoff := c.backoff(attempt)
	var apiErr *APIError
	switch {
	case errors.As(err, &apiErr) && errors.Is(err, ErrRateLimited):
		// The throttle middleware refuses before the controller runs: safe for every call.
		if apiErr.RetryAfter > c.maxRetryAfter {
			return "", 0, false
		}
		return "rate_limited", max(apiErr.RetryAfter, backoff), true
	case !cl.idempotent:
		return "", 0, false
	case errors.As(err, &apiErr) && errors.Is(err, ErrServer):
		if apiErr.RetryAfter > c.maxRetryAfter {
			return "", 0, false
		}
		return "server_error", max(apiErr.RetryAfter, backoff), true
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

func (c *Client) attempt(ctx context.Context, cl call, payload []byte) error {
	waited, err := c.limiter.wait(ctx, c.clock)
	if err != nil {
		return err
	}
	if waited > 0 {
		c.metrics.waits.WithLabelValues(cl.op).Inc()
		c.metrics.throttled.WithLabelValues(cl.op).Add(waited.Seconds())
	}
	actx, cancel := context.WithTimeout(ctx, c.timeout)
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
		return &transportError{op: cl.op, err: c.redact(err)}
	}
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
			c.limiter.pause(c.clock.Now().Add(apiErr.RetryAfter))
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
