package callback

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"botpool.dev/botpool/internal/egress"
)

// maxResponseBody is how much of a response is read before closing it: enough to let the
// connection be reused for typical small replies, never enough for a hostile receiver to matter.
const maxResponseBody = 4 << 10

// attemptResult is the outcome of one request.
type attemptResult struct {
	err        error         // nil after a 2xx
	retryable  bool          // a transport error, 408, 429 or 5xx
	retryAfter time.Duration // the receiver's Retry-After, 0 when absent
}

// attempt POSTs the callback once. Errors never carry the URL's query or user info, which may
// hold secrets: they end up in logs and, through OnResult, in Events.
func (n *Notifier) attempt(ctx context.Context, it *item, extra map[string]string) attemptResult {
	body, err := json.Marshal(it.cb.Body)
	if it.cb.Raw != nil {
		body, err = it.cb.Raw, nil
	}
	if err != nil {
		return attemptResult{err: fmt.Errorf("encode callback body: %w", err)}
	}
	u, err := url.Parse(it.cb.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return attemptResult{err: fmt.Errorf("invalid callback URL %q", redactURL(it.cb.URL))}
	}

	ctx, cancel := context.WithTimeout(ctx, n.opts.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return attemptResult{err: fmt.Errorf("build callback request: %w", redactError(err))}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "botpool")
	req.Header.Set("Idempotency-Key", it.cb.Key)
	for k, v := range it.cb.Headers {
		req.Header.Set(k, v)
	}
	for k, v := range extra {
		req.Header.Set(k, v)
	}

	n.metrics.attempts.Inc()
	start := n.clock.Now()
	resp, err := n.client.Do(req)
	n.metrics.duration.Observe(n.clock.Since(start).Seconds())
	if err != nil {
		// A destination the egress policy refuses stays refused: retrying only repeats it.
		return attemptResult{err: fmt.Errorf("POST %s: %w", redactURL(it.cb.URL), redactError(err)), retryable: !errors.Is(err, egress.ErrRefused)}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBody))
	_ = resp.Body.Close() // the status is all we need; a close error changes nothing

	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return attemptResult{}
	}
	res := attemptResult{err: &StatusError{URL: redactURL(it.cb.URL), StatusCode: code}}
	if code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500 {
		res.retryable = true
		res.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), n.clock.Now())
	}
	return res
}

// StatusError is a non-2xx response from the receiver.
type StatusError struct {
	URL        string // scheme, host and path only
	StatusCode int
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("POST %s: %d %s", e.URL, e.StatusCode, http.StatusText(e.StatusCode))
}

// parseRetryAfter reads Retry-After in seconds or as an HTTP date; 0 when absent or invalid.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil {
		if s < 0 {
			return 0
		}
		return time.Duration(min(s, 24*3600)) * time.Second // bounded before the multiply overflows
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// redactURL keeps scheme, host and path: query strings and user info often carry tokens.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<invalid URL>"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

// redactError drops the *url.Error wrapper that net/http adds, since its message is the full
// URL; the caller names the redacted URL instead.
func redactError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
