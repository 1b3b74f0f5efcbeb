package botclient_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"botpool.dev/botpool/botapi/botclient"
)

func TestRetryable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&botclient.Error{StatusCode: http.StatusServiceUnavailable}, true},
		{&botclient.Error{StatusCode: http.StatusTooManyRequests}, true},
		{&botclient.Error{StatusCode: http.StatusBadGateway}, true},
		{&botclient.Error{StatusCode: http.StatusGatewayTimeout}, true},
		{fmt.Errorf("wrapped: %w", &botclient.Error{StatusCode: http.StatusServiceUnavailable}), true},
		{&botclient.Error{StatusCode: http.StatusInternalServerError}, false},
		{&botclient.Error{StatusCode: http.StatusConflict}, false},
		{&botclient.Error{StatusCode: http.StatusForbidden}, false},
		{&botclient.Error{StatusCode: http.StatusNotFound}, false},
		{fmt.Errorf("GET /x: %w", context.Canceled), false},
		{context.DeadlineExceeded, false},
		{errors.New("invalid character 'x' looking for value"), false},
		{nil, false},
	} {
		if got := botclient.Retryable(c.err); got != c.want {
			t.Errorf("Retryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	// A refused connection is what a restarting operator looks like.
	_, err := botclient.New("http://127.0.0.1:1", "app", "token", nil).Config(context.Background())
	if err == nil || !botclient.Retryable(err) {
		t.Errorf("connection refused (%v) is not retryable", err)
	}
}

func TestRetry(t *testing.T) {
	unavailable := &botclient.Error{StatusCode: http.StatusServiceUnavailable}
	ctx := context.Background()
	calls := func(errs ...error) (func() error, *int) {
		n := 0
		return func() error {
			n++
			if n <= len(errs) {
				return errs[n-1]
			}
			return nil
		}, &n
	}

	call, n := calls(unavailable, unavailable)
	if err := botclient.Retry(ctx, 5, time.Millisecond, time.Millisecond, call); err != nil || *n != 3 {
		t.Errorf("two 503s then success: %v after %d calls, want nil after 3", err, *n)
	}
	call, n = calls(unavailable, unavailable, unavailable, unavailable)
	if err := botclient.Retry(ctx, 3, time.Millisecond, time.Millisecond, call); !errors.Is(err, unavailable) || *n != 3 {
		t.Errorf("503s past the attempts: %v after %d calls, want the 503 after 3", err, *n)
	}
	call, n = calls(&botclient.Error{StatusCode: http.StatusConflict})
	if err := botclient.Retry(ctx, 5, time.Millisecond, time.Millisecond, call); !errors.Is(err, botclient.ErrConflict) || *n != 1 {
		t.Errorf("a 409: %v after %d calls, want it after 1", err, *n)
	}
	call, n = calls(unavailable)
	if err := botclient.Retry(ctx, 0, time.Millisecond, time.Millisecond, call); !errors.Is(err, unavailable) || *n != 1 {
		t.Errorf("attempts 0: %v after %d calls, want one try", err, *n)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	call, n = calls(unavailable, unavailable)
	if err := botclient.Retry(cancelled, 5, time.Hour, time.Hour, call); !errors.Is(err, context.Canceled) || *n != 1 {
		t.Errorf("cancelled while waiting: %v after %d calls, want context.Canceled after 1", err, *n)
	}
}
