package botclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"botpool.dev/botpool/botapi/botclient"
)

// scripted answers the config requests with the given codes in turn (200 after they run out)
// and records the wait each asked for.
type scripted struct {
	mu    sync.Mutex
	codes []int
	waits []string
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waits = append(s.waits, r.URL.Query().Get("wait"))
	code := http.StatusOK
	if len(s.codes) > 0 {
		code, s.codes = s.codes[0], s.codes[1:]
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if code != http.StatusOK {
		_ = json.NewEncoder(w).Encode(botclient.ErrorResponse{Error: http.StatusText(code)})
		return
	}
	_ = json.NewEncoder(w).Encode(botclient.Config{Bot: "standup"})
}

func TestWaitForBinding(t *testing.T) {
	for _, c := range []struct {
		name    string
		codes   []int
		wantErr error
		calls   int
	}{
		{"free, then bound", []int{404, 404}, nil, 3},
		{"transient errors are retried", []int{503, 429, 502}, nil, 4},
		{"a finished bot", []int{404, 410}, botclient.ErrGone, 2},
		{"a refused token is not retried", []int{401}, botclient.ErrUnauthorized, 1},
		{"a second claim is not retried", []int{409}, botclient.ErrConflict, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			api := &scripted{codes: c.codes}
			srv := httptest.NewServer(api)
			t.Cleanup(srv.Close)
			// A Timeout far shorter than the wait: the waiting requests must get longer.
			hc := &http.Client{Timeout: time.Nanosecond}
			cfg, err := botclient.New(srv.URL, "app", "bpt_x", hc).WaitForBinding(t.Context(), 20*time.Millisecond)
			if !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, c.wantErr)
			}
			if err == nil && cfg.Bot != "standup" {
				t.Errorf("config %+v", cfg)
			}
			api.mu.Lock()
			defer api.mu.Unlock()
			if len(api.waits) != c.calls {
				t.Errorf("%d requests, want %d", len(api.waits), c.calls)
			}
			for _, w := range api.waits {
				if w != "20ms" {
					t.Errorf("a request asked to wait %q, want 20ms", w)
				}
			}
		})
	}
}

func TestWaitForBindingEndsWithItsContext(t *testing.T) {
	srv := httptest.NewServer(&scripted{codes: []int{404, 404, 404, 404, 404, 404, 404, 404}})
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := botclient.New(srv.URL, "app", "bpt_x", nil).WaitForBinding(ctx, time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}
