package coolify

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Sentinel errors callers branch on with errors.Is. An *APIError matches the sentinel of its
// kind; transport failures wrap ErrTransport.
var (
	ErrNotFound     = errors.New("coolify: not found")
	ErrUnauthorized = errors.New("coolify: unauthorized")
	ErrForbidden    = errors.New("coolify: forbidden")
	ErrAPIDisabled  = errors.New("coolify: API is disabled")
	ErrValidation   = errors.New("coolify: validation failed")
	ErrConflict     = errors.New("coolify: conflict")
	ErrRateLimited  = errors.New("coolify: rate limited")
	ErrQueueFull    = errors.New("coolify: deployment queue full")
	ErrServer       = errors.New("coolify: server error")
	ErrTransport    = errors.New("coolify: transport error")
	ErrBadRequest   = errors.New("coolify: bad request")
	// ErrUnsupported means the server's version does not offer the call.
	ErrUnsupported = errors.New("coolify: not supported by this server version")
)

// APIError is an HTTP answer Coolify gave that was not a success.
type APIError struct {
	// Op is the operation (the spec's operationId), e.g. "get-application-by-uuid".
	Op         string
	StatusCode int
	// Message is the server's "message" (and "error" when present), never a token.
	Message string
	// Fields holds 422 field errors; the server sends each as an array or a single string.
	Fields map[string][]string
	// RetryAfter is the server's Retry-After, when it sent one.
	RetryAfter time.Duration

	kind error
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "coolify %s: HTTP %d", e.Op, e.StatusCode)
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	if len(e.Fields) > 0 {
		keys := make([]string, 0, len(e.Fields))
		for k := range e.Fields {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, k+": "+strings.Join(e.Fields[k], "; "))
		}
		fmt.Fprintf(&b, " (%s)", strings.Join(parts, ", "))
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrNotFound) and friends work.
func (e *APIError) Is(target error) bool { return e.kind != nil && target == e.kind }

// Kind is the sentinel this error matches, or nil for an unclassified status.
func (e *APIError) Kind() error { return e.kind }

// Messages the server uses where the status alone is ambiguous (docs/coolify.md).
const (
	msgAPIDisabled = "API is disabled."
	msgQueueFull   = "Deployment queue is full"
)

// errorBody is the union of the JSON error shapes Coolify sends.
type errorBody struct {
	Message string                     `json:"message"`
	Error   string                     `json:"error"`
	Errors  map[string]json.RawMessage `json:"errors"`
}

// newAPIError classifies a non-2xx answer.
func newAPIError(op string, resp *http.Response, body []byte, now time.Time) *APIError {
	e := &APIError{Op: op, StatusCode: resp.StatusCode}
	var eb errorBody
	if json.Unmarshal(body, &eb) == nil {
		e.Message = eb.Message
		if eb.Error != "" {
			e.Message = strings.TrimSpace(e.Message + " " + eb.Error)
		}
		e.Fields = parseFieldErrors(eb.Errors)
	} else if len(body) > 0 && len(body) < MaxMessageLength && !strings.Contains(string(body), "<") {
		e.Message = strings.TrimSpace(string(body))
	}
	e.kind = classify(resp.StatusCode, e.Message)
	// Whatever the server sent reaches slot and pool status, Events and logs: keep it short and
	// printable (a hostile or confused server could send a page, newlines to forge log lines,
	// or control characters).
	e.Message = Sanitize(e.Message, MaxMessageLength)
	e.Fields = sanitizeFields(e.Fields)
	e.RetryAfter = capPause(parseRetryAfter(resp.Header.Get("Retry-After"), now))
	return e
}

// Limits of server text kept in an APIError.
const (
	// MaxMessageLength bounds the server's message, and each field error.
	MaxMessageLength = 200
	// maxFieldErrors bounds how many 422 fields are kept.
	maxFieldErrors = 10
)

// Sanitize makes server text safe to show: valid UTF-8, control characters (newlines
// included) replaced by spaces, runs of spaces collapsed, at most max runes (an ellipsis
// marks a cut).
func Sanitize(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	var b strings.Builder
	n, space := 0, false
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Zl, r) || unicode.Is(unicode.Zp, r) || unicode.IsSpace(r) {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			if n++; n > max {
				break
			}
			b.WriteByte(' ')
		}
		space = false
		if n++; n > max {
			break
		}
		b.WriteRune(r)
	}
	out := b.String()
	if n > max {
		r := []rune(out)
		out = strings.TrimSpace(string(r[:max-1])) + "…"
	}
	return out
}

func sanitizeFields(fields map[string][]string) map[string][]string {
	if len(fields) == 0 {
		return fields
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(map[string][]string, min(len(keys), maxFieldErrors))
	for _, k := range keys[:min(len(keys), maxFieldErrors)] {
		vals := fields[k][:min(len(fields[k]), 3)]
		clean := make([]string, len(vals))
		for i, v := range vals {
			clean[i] = Sanitize(v, MaxMessageLength)
		}
		out[Sanitize(k, 64)] = clean
	}
	return out
}

func classify(code int, msg string) error {
	switch {
	case code == http.StatusNotFound:
		return ErrNotFound
	case code == http.StatusUnauthorized:
		return ErrUnauthorized
	case code == http.StatusForbidden && strings.Contains(msg, msgAPIDisabled):
		return ErrAPIDisabled
	case code == http.StatusForbidden:
		return ErrForbidden
	case code == http.StatusUnprocessableEntity:
		return ErrValidation
	case code == http.StatusConflict:
		return ErrConflict
	case code == http.StatusTooManyRequests && strings.Contains(msg, msgQueueFull):
		return ErrQueueFull
	case code == http.StatusTooManyRequests:
		return ErrRateLimited
	case code >= 500:
		return ErrServer
	case code == http.StatusBadRequest:
		return ErrBadRequest
	}
	return nil
}

// parseFieldErrors accepts both shapes of a 422 field error: ["a","b"] and "a".
func parseFieldErrors(raw map[string]json.RawMessage) map[string][]string {
	if len(raw) == 0 {
		return nil
	}
	out := make(map[string][]string, len(raw))
	for k, v := range raw {
		var list []string
		if json.Unmarshal(v, &list) == nil {
			out[k] = list
			continue
		}
		var one string
		if json.Unmarshal(v, &one) == nil {
			out[k] = []string{one}
			continue
		}
		out[k] = []string{string(v)}
	}
	return out
}

// parseRetryAfter reads delta-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil {
		if s < 0 {
			return 0
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// transportError wraps a failure below HTTP (dial, TLS, timeout, truncated body).
type transportError struct {
	op  string
	err error
}

// Error is sanitised too: a redirect's Location or a proxy's text is the server's choice.
func (e *transportError) Error() string {
	return fmt.Sprintf("coolify %s: %s", e.op, Sanitize(e.err.Error(), 2*MaxMessageLength))
}
func (e *transportError) Unwrap() []error {
	return []error{ErrTransport, e.err}
}
