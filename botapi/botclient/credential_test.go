package botclient_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"botpool.dev/botpool/botapi/botclient"
)

// TestClientSendsTheBindingCredential: the config call carries the slot token; once a config
// answer carried a credential, the bot calls carry it instead.
func TestClientSendsTheBindingCredential(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			_ = json.NewEncoder(w).Encode(botclient.Config{Bot: "standup", Credential: "bpb_cred"})
			return
		}
		_ = json.NewEncoder(w).Encode(botclient.HeartbeatResponse{Action: botclient.ActionContinue})
	}))
	t.Cleanup(srv.Close)
	c := botclient.New(srv.URL, "app", "bpt_slot", nil)
	if _, err := c.Heartbeat(t.Context(), "standup"); err != nil { // before any config: the slot token
		t.Fatal(err)
	}
	if _, err := c.WaitForBinding(t.Context(), time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Heartbeat(t.Context(), "standup"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SendEvents(t.Context(), "standup", botclient.Event{Type: "log"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"POST Bearer bpt_slot", "GET Bearer bpt_slot", "POST Bearer bpb_cred", "POST Bearer bpb_cred"}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, "|") != strings.Join(want, "|") {
		t.Errorf("calls %q, want %q", seen, want)
	}
}
