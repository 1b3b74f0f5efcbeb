package botclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Errors the operator answers with, for errors.Is.
var (
	// ErrSlotFree (404 on config): no bot is bound to this slot yet; ask again shortly.
	ErrSlotFree = errors.New("slot is free")
	// ErrGone (410): exit, and do not restart. On config: the bound bot is finished, was
	// deleted or went back to the queue, or the slot stops this container (its bot ended and
	// let go of the slot, the slot failed or is being deleted). On a bot call: the bot ended
	// (Done, Fatal, or deleted) and its slot let go of it; on a status report, also a Bot
	// deleted meanwhile.
	ErrGone = errors.New("bot is finished")
	// ErrUnauthorized (401): the token is missing or wrong (a slot token the operator replaced
	// once it stopped the container included); on a bot call, also when the binding of the
	// credential has ended otherwise (its slot was deleted: exit) or the slot token was sent
	// instead of it.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden (403): the token belongs to a slot not bound to this bot.
	ErrForbidden = errors.New("forbidden")
	// ErrConflict (409): the reported phase is not a valid next phase; on config, the binding
	// was already handed out (a binding is handed out once: exit).
	ErrConflict = errors.New("conflict")
	// ErrRateLimited (429): slow down.
	ErrRateLimited = errors.New("rate limited")
)

// Error is an answer other than 2xx.
type Error struct {
	StatusCode int
	Message    string
	// RetryAfter is the answer's Retry-After, when it had one (whole seconds).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("bot API answered %d: %s", e.StatusCode, e.Message)
}

// Is maps status codes to the sentinel errors.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized
	case ErrForbidden:
		return e.StatusCode == http.StatusForbidden
	case ErrSlotFree:
		return e.StatusCode == http.StatusNotFound
	case ErrGone:
		return e.StatusCode == http.StatusGone
	case ErrConflict:
		return e.StatusCode == http.StatusConflict
	case ErrRateLimited:
		return e.StatusCode == http.StatusTooManyRequests
	}
	return false
}

// Retryable reports whether a request that failed with err is worth another try, after a
// pause (or the Retry-After the answer carried): the operator asked for it (429, 503 while it
// restarts or its store is away), a proxy in between failed (502, 504), or no answer came at
// all. A cancelled context is not retried, nor is any other answer: a 4xx will not change.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var apiErr *Error
	if errors.As(err, &apiErr) {
		switch apiErr.StatusCode {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}

// Retry calls call until it succeeds, fails with an error that is not Retryable, or has been
// tried attempts times (at least once), and returns its last error. It waits first between
// tries, doubling up to most: what a bot should do with the operator's 429s and 503s.
func Retry(ctx context.Context, attempts int, first, most time.Duration, call func() error) error {
	wait := first
	for attempt := 1; ; attempt++ {
		err := call()
		if err == nil || !Retryable(err) || attempt >= attempts {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, most)
	}
}

// Client talks to the operator's bot API for one slot. It keeps the binding credential of the
// last configuration it received (Config, WaitForBinding) and sends it, instead of the slot
// token, with the bot calls (Heartbeat, ReportStatus, SendEvents): the operator accepts only
// that credential there. Until it has one (an operator older than binding credentials sends
// none) the bot calls carry the slot token. It is safe for concurrent use.
type Client struct {
	base    string
	appUUID string
	token   string
	http    *http.Client

	mu         sync.Mutex
	credential string
}

// New returns a client for the slot whose application is appUUID.
func New(baseURL, appUUID, token string, httpClient *http.Client) *Client {
	if httpClient == nil {
		httpClient = &http.Client{Timeout: 10 * time.Second}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), appUUID: appUUID, token: token, http: httpClient}
}

// PrePullEnv is set to "1" in the container of a pool's puller application: the operator
// deploys the bot image there only to pull it onto the server before any bot needs it, and
// stops the container as soon as the deployment finished. Such a container has no slot, no
// API URL and no token: it should exit at once (see PrePull).
const PrePullEnv = "BOTPOOL_PREPULL"

// PrePull reports whether this container was started only to pull its image (PrePullEnv is
// "1"). A bot's main calls it first and exits with status 0 when it is true.
func PrePull() bool { return os.Getenv(PrePullEnv) == "1" }

// FromEnv builds a client from POOL_SLOT_UUID, BOTPOOL_API_URL and BOTPOOL_SLOT_TOKEN.
func FromEnv() (*Client, error) {
	base, app, token := os.Getenv("BOTPOOL_API_URL"), os.Getenv("POOL_SLOT_UUID"), os.Getenv("BOTPOOL_SLOT_TOKEN")
	if base == "" || app == "" || token == "" {
		return nil, errors.New("BOTPOOL_API_URL, POOL_SLOT_UUID and BOTPOOL_SLOT_TOKEN must all be set")
	}
	return New(base, app, token, nil), nil
}

// Config fetches the bound bot's configuration: ErrSlotFree while no bot is bound, ErrGone
// once the bot is finished or the slot stops this container (exit).
func (c *Client) Config(ctx context.Context) (Config, error) {
	var cfg Config
	err := c.doWith(ctx, c.http, c.token, http.MethodGet, "/v1/slots/"+url.PathEscape(c.appUUID)+"/config", nil, &cfg)
	c.keep(cfg, err)
	return cfg, err
}

// keep remembers the credential of a configuration received.
func (c *Client) keep(cfg Config, err error) {
	if err != nil || cfg.Credential == "" {
		return
	}
	c.mu.Lock()
	c.credential = cfg.Credential
	c.mu.Unlock()
}

// botToken is what the bot calls carry: the binding credential once there is one.
func (c *Client) botToken() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.credential != "" {
		return c.credential
	}
	return c.token
}

// DefaultWait is the wait WaitForBinding asks the operator for when given none.
const DefaultWait = 30 * time.Second

// WaitForBinding asks for the bound bot's configuration until there is one, each request
// waiting up to wait (at most 60s; the operator answers the moment a bot is bound, so a
// standby container learns its bot at once). It returns ErrGone when the operator says the
// slot's container should exit, and the error of an answer that will not change (401, 403…);
// transient failures (429, 503, no answer) are retried with backoff, honouring Retry-After.
// It returns ctx's error when ctx ends.
func (c *Client) WaitForBinding(ctx context.Context, wait time.Duration) (Config, error) {
	if wait <= 0 {
		wait = DefaultWait
	}
	const firstBackoff, mostBackoff = 200 * time.Millisecond, 5 * time.Second
	backoff := firstBackoff
	for {
		start := time.Now()
		cfg, err := c.configWait(ctx, wait)
		var pause time.Duration
		switch {
		case err == nil:
			return cfg, nil
		case errors.Is(err, ErrSlotFree):
			backoff = firstBackoff
			// An operator that does not wait (one older than the long-poll) answers at once:
			// pause instead of asking in a tight loop.
			if time.Since(start) < wait/2 {
				pause = min(wait, time.Second)
			}
		case Retryable(err):
			pause = backoff
			var apiErr *Error
			if errors.As(err, &apiErr) {
				pause = max(pause, apiErr.RetryAfter)
			}
			backoff = min(2*backoff, mostBackoff)
		default:
			return cfg, err
		}
		if pause > 0 {
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return Config{}, ctx.Err()
			case <-t.C:
			}
		}
		if err := ctx.Err(); err != nil {
			return Config{}, err
		}
	}
}

// configWait is one config request that waits up to wait. Its HTTP client gives it the time
// to: an http.Client's Timeout shorter than the wait would cut every wait short.
func (c *Client) configWait(ctx context.Context, wait time.Duration) (Config, error) {
	hc := c.http
	if hc.Timeout != 0 && hc.Timeout < wait+10*time.Second {
		longer := *hc
		longer.Timeout = wait + 10*time.Second
		hc = &longer
	}
	var cfg Config
	path := "/v1/slots/" + url.PathEscape(c.appUUID) + "/config?wait=" + url.QueryEscape(wait.String())
	err := c.doWith(ctx, hc, c.token, http.MethodGet, path, nil, &cfg)
	c.keep(cfg, err)
	return cfg, err
}

// Heartbeat proves the bot is alive and returns what it should do next. Once the binding
// ended it fails: ErrGone when the bot ended and its slot let go of it, ErrUnauthorized
// otherwise; either way, exit.
func (c *Client) Heartbeat(ctx context.Context, bot string) (HeartbeatResponse, error) {
	var resp HeartbeatResponse
	err := c.do(ctx, http.MethodPost, c.botPath(bot, "heartbeat"), struct{}{}, &resp)
	return resp, err
}

// ReportStatus reports the bot's phase; repeats are harmless.
func (c *Client) ReportStatus(ctx context.Context, bot string, report StatusReport) (StatusResponse, error) {
	var resp StatusResponse
	err := c.do(ctx, http.MethodPost, c.botPath(bot, "status"), report, &resp)
	return resp, err
}

// SendEvents stores events about the meeting.
func (c *Client) SendEvents(ctx context.Context, bot string, events ...Event) (EventsResponse, error) {
	var resp EventsResponse
	err := c.do(ctx, http.MethodPost, c.botPath(bot, "events"), EventsRequest{Events: events}, &resp)
	return resp, err
}

func (c *Client) botPath(bot, action string) string {
	return "/v1/bots/" + url.PathEscape(bot) + "/" + action
}

// do sends a bot call, with the binding credential.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	return c.doWith(ctx, c.http, c.botToken(), method, path, body, out)
}

func (c *Client) doWith(ctx context.Context, hc *http.Client, token, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%s %s: reading answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e ErrorResponse
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = http.StatusText(resp.StatusCode)
		}
		apiErr := &Error{StatusCode: resp.StatusCode, Message: e.Error}
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
			apiErr.RetryAfter = time.Duration(secs) * time.Second
		}
		return apiErr
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}
