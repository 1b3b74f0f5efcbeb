package botclient_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

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
