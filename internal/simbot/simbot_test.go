package simbot

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"botpool.dev/botpool/botapi/botclient"
	"botpool.dev/botpool/coolify/sim"
)

// fakeAPI is a bot API that answers from scripts and records every call as "config",
// "heartbeat" or the reported phase.
type fakeAPI struct {
	t *testing.T

	mu sync.Mutex
	// configCodes are the answers to the first config requests; 200 after they run out,
	// unless the slot stays free forever.
	configCodes []int
	freeForever bool
	// beat answers the n-th heartbeat (1-based).
	beat func(n int) botclient.Action
	// beatCodes are the codes of the first heartbeats; 200 after they run out.
	beatCodes []int
	// statusCodes are the answers to the first status reports; 200 after they run out.
	statusCodes []int
	calls       []string
	beats       int
}

const (
	testApp        = "app-1"
	testToken      = "bpt_secret"
	testCredential = "bpb_secret"
)

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The slot token fetches the config; the bot calls carry the config's credential.
	want := testToken
	if r.Method == http.MethodPost {
		want = testCredential
	}
	if got := r.Header.Get("Authorization"); got != "Bearer "+want {
		f.t.Errorf("%s %s with Authorization %q, want %q", r.Method, r.URL.Path, got, want)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	answer := func(code int, body any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		if code/100 != 2 {
			body = botclient.ErrorResponse{Error: http.StatusText(code)}
		}
		_ = json.NewEncoder(w).Encode(body)
	}
	next := func(codes *[]int) int {
		if len(*codes) == 0 {
			return http.StatusOK
		}
		c := (*codes)[0]
		*codes = (*codes)[1:]
		return c
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/slots/"+testApp+"/config":
		if r.URL.Query().Get("wait") == "" {
			f.t.Errorf("config request without a wait: %s", r.URL)
		}
		f.calls = append(f.calls, "config")
		code := next(&f.configCodes)
		if f.freeForever {
			code = http.StatusNotFound
		}
		answer(code, botclient.Config{Bot: "standup", HeartbeatInterval: botclient.Duration(5 * time.Millisecond), Credential: testCredential})
	case r.Method == http.MethodPost && r.URL.Path == "/v1/bots/standup/heartbeat":
		f.calls = append(f.calls, "heartbeat")
		f.beats++
		action := botclient.ActionContinue
		if f.beat != nil {
			action = f.beat(f.beats)
		}
		answer(next(&f.beatCodes), botclient.HeartbeatResponse{Action: action})
	case r.Method == http.MethodPost && r.URL.Path == "/v1/bots/standup/status":
		var rep botclient.StatusReport
		if err := json.NewDecoder(r.Body).Decode(&rep); err != nil {
			f.t.Errorf("status body: %v", err)
		}
		f.calls = append(f.calls, rep.Phase)
		answer(next(&f.statusCodes), botclient.StatusResponse{Phase: rep.Phase})
	default:
		f.t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
		answer(http.StatusNotFound, nil)
	}
}

// recorded returns the calls, with runs of heartbeats folded into one "heartbeat*".
func (f *fakeAPI) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if c == "heartbeat" && len(out) > 0 && out[len(out)-1] == "heartbeat*" {
			continue
		}
		if c == "heartbeat" {
			c = "heartbeat*"
		}
		out = append(out, c)
	}
	return out
}

func container(url string) sim.Container {
	return sim.Container{AppUUID: testApp, Env: map[string]string{
		"BOTPOOL_API_URL": url, "POOL_SLOT_UUID": testApp, "BOTPOOL_SLOT_TOKEN": testToken,
	}}
}

func start(t *testing.T, f *fakeAPI) sim.Container {
	f.t = t
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return container(srv.URL)
}

// leaveAt answers leave to the n-th heartbeat, continue before.
func leaveAt(n int) func(int) botclient.Action {
	return func(beat int) botclient.Action {
		if beat >= n {
			return botclient.ActionLeave
		}
		return botclient.ActionContinue
	}
}

// fast waits 20ms per config request: the fake API answers 404 at once, as an operator that
// does not wait would, and the client pauses the wait (at most 1s) before it asks again.
var fast = Behaviour{MeetingLength: 40 * time.Millisecond, HeartbeatEvery: 10 * time.Millisecond, PollEvery: time.Millisecond, Wait: 20 * time.Millisecond}

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name    string
		api     *fakeAPI
		b       Behaviour
		want    Result
		calls   []string
		wantErr string
	}{{
		name: "waits for a bot, meets, beats and finishes",
		api:  &fakeAPI{configCodes: []int{404, 404, 503}},
		b:    fast,
		want: Result{Bot: "standup", Outcome: Finished},
		calls: []string{"config", "config", "config", "config", "JoiningCall", "InCall", "heartbeat*",
			"CallEnded", "Done"},
	}, {
		name:  "leaves when a heartbeat says so, long before the meeting ends",
		api:   &fakeAPI{beat: leaveAt(2)},
		b:     Behaviour{MeetingLength: time.Hour, HeartbeatEvery: 5 * time.Millisecond},
		want:  Result{Bot: "standup", Outcome: Left, Heartbeats: 2},
		calls: []string{"config", "JoiningCall", "InCall", "heartbeat*", "Leaving", "CallEnded", "Done"},
	}, {
		name:  "exits at once when a heartbeat says so",
		api:   &fakeAPI{beat: func(int) botclient.Action { return botclient.ActionExit }},
		b:     Behaviour{MeetingLength: time.Hour},
		want:  Result{Bot: "standup", Outcome: Exited, Heartbeats: 1},
		calls: []string{"config", "JoiningCall", "InCall", "heartbeat*"},
	}, {
		name:  "a heartbeat refused once the binding ended is an exit",
		api:   &fakeAPI{beatCodes: []int{200, 401}},
		b:     Behaviour{MeetingLength: time.Hour, HeartbeatEvery: 5 * time.Millisecond},
		want:  Result{Bot: "standup", Outcome: Exited, Heartbeats: 1},
		calls: []string{"config", "JoiningCall", "InCall", "heartbeat*"},
	}, {
		name:  "a heartbeat answered 410 (the slot let go of the ended bot) is an exit",
		api:   &fakeAPI{beatCodes: []int{200, 410}},
		b:     Behaviour{MeetingLength: time.Hour, HeartbeatEvery: 5 * time.Millisecond},
		want:  Result{Bot: "standup", Outcome: Exited, Heartbeats: 1},
		calls: []string{"config", "JoiningCall", "InCall", "heartbeat*"},
	}, {
		name:  "a report answered 410 is an exit, with nothing more reported",
		api:   &fakeAPI{statusCodes: []int{200, 410}},
		b:     fast,
		want:  Result{Bot: "standup", Outcome: Exited},
		calls: []string{"config", "JoiningCall", "InCall"},
	}, {
		name:  "a finished bot's container exits without reporting",
		api:   &fakeAPI{configCodes: []int{410}},
		b:     fast,
		want:  Result{Outcome: Exited},
		calls: []string{"config"},
	}, {
		name:  "a meeting of zero length still beats once",
		api:   &fakeAPI{},
		b:     Behaviour{},
		want:  Result{Bot: "standup", Outcome: Finished, Heartbeats: 1},
		calls: []string{"config", "JoiningCall", "InCall", "heartbeat*", "CallEnded", "Done"},
	}, {
		name:  "transient answers to a report are retried",
		api:   &fakeAPI{statusCodes: []int{503, 429}},
		b:     Behaviour{PollEvery: time.Millisecond},
		want:  Result{Bot: "standup", Outcome: Finished, Heartbeats: 1},
		calls: []string{"config", "JoiningCall", "JoiningCall", "JoiningCall", "InCall", "heartbeat*", "CallEnded", "Done"},
	}, {
		name:    "a refused transition is an error",
		api:     &fakeAPI{statusCodes: []int{200, 409}},
		b:       fast,
		want:    Result{Bot: "standup"},
		calls:   []string{"config", "JoiningCall", "InCall"},
		wantErr: "reporting InCall: bot API answered 409",
	}, {
		name:    "a token refused on config is an error, not a retry",
		api:     &fakeAPI{configCodes: []int{401}},
		b:       fast,
		calls:   []string{"config"},
		wantErr: "config: bot API answered 401",
	}, {
		name:    "transient errors that do not stop give up after Retries",
		api:     &fakeAPI{statusCodes: []int{503, 503, 503}},
		b:       Behaviour{PollEvery: time.Millisecond, Retries: 3},
		want:    Result{Bot: "standup"},
		calls:   []string{"config", "JoiningCall", "JoiningCall", "JoiningCall"},
		wantErr: "reporting JoiningCall: bot API answered 503",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := start(t, tc.api)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got, err := Run(ctx, c, tc.b)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			if tc.want.Heartbeats == 0 && tc.want.Outcome == Finished {
				// A timed meeting: the count depends on the scheduler, the lower bound does not.
				if got.Heartbeats < 2 {
					t.Errorf("%d heartbeats during a %v meeting beating every %v", got.Heartbeats, tc.b.MeetingLength, tc.b.HeartbeatEvery)
				}
				tc.want.Heartbeats = got.Heartbeats
			}
			if got != tc.want {
				t.Errorf("result %+v, want %+v", got, tc.want)
			}
			if calls := tc.api.recorded(); !slices.Equal(calls, tc.calls) {
				t.Errorf("calls\n %v\nwant\n %v", calls, tc.calls)
			}
		})
	}
}

// TestRunOnConfig: OnConfig gets the configuration once, before the bot reports anything.
func TestRunOnConfig(t *testing.T) {
	api := &fakeAPI{configCodes: []int{404}}
	c := start(t, api)
	var got []botclient.Config
	var callsThen []string
	b := fast
	b.OnConfig = func(cfg botclient.Config) {
		got = append(got, cfg)
		callsThen = api.recorded()
	}
	if _, err := Run(t.Context(), c, b); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Bot != "standup" {
		t.Fatalf("OnConfig got %+v, want the config of standup once", got)
	}
	if want := []string{"config", "config"}; !slices.Equal(callsThen, want) {
		t.Errorf("calls when OnConfig ran: %v, want %v (before any report)", callsThen, want)
	}
}

// TestRunMeetsForMeetingLength: the bot stays in the call for its meeting, no shorter, and
// beats at the requested period meanwhile.
func TestRunMeetsForMeetingLength(t *testing.T) {
	api := &fakeAPI{}
	c := start(t, api)
	b := Behaviour{MeetingLength: 200 * time.Millisecond, HeartbeatEvery: 20 * time.Millisecond}
	began := time.Now()
	got, err := Run(context.Background(), c, b)
	took := time.Since(began)
	if err != nil || got.Outcome != Finished {
		t.Fatalf("run: %+v %v", got, err)
	}
	if took < b.MeetingLength {
		t.Errorf("left after %v, the meeting lasts %v", took, b.MeetingLength)
	}
	// 200ms / 20ms: about 11 beats; a loaded machine may stretch the sleeps, never add beats.
	if got.Heartbeats < 4 || got.Heartbeats > 11 {
		t.Errorf("%d heartbeats, want between 4 and 11", got.Heartbeats)
	}
}

// TestRunStopsWithItsContainer: a container stopped while waiting for a bot or in the middle of
// a meeting returns the context's error promptly.
func TestRunStopsWithItsContainer(t *testing.T) {
	for name, api := range map[string]*fakeAPI{
		"waiting for a bot": {freeForever: true},
		"in a meeting":      {},
	} {
		t.Run(name, func(t *testing.T) {
			c := start(t, api)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := Run(ctx, c, Behaviour{MeetingLength: time.Hour, HeartbeatEvery: 10 * time.Millisecond, PollEvery: 5 * time.Millisecond})
				done <- err
			}()
			time.Sleep(50 * time.Millisecond) // let it reach the waiting state; the check below does not depend on it
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("error %v, want context.Canceled", err)
				}
			case <-time.After(time.Minute): // a liveness bound
				t.Fatal("still running a minute after its container stopped")
			}
		})
	}
}

// TestRunExitsInAPrePull: a pool's puller container (BOTPOOL_PREPULL=1, no slot variables)
// exits at once with PrePulled and calls nothing.
func TestRunExitsInAPrePull(t *testing.T) {
	api := &fakeAPI{}
	c := start(t, api)
	c.Env = map[string]string{botclient.PrePullEnv: "1"}
	if !IsPrePull(c) {
		t.Fatal("IsPrePull is false for a container with BOTPOOL_PREPULL=1")
	}
	res, err := Run(context.Background(), c, fast)
	if err != nil || res.Outcome != PrePulled || res.Bot != "" {
		t.Fatalf("Run = %+v, %v; want PrePulled and no bot", res, err)
	}
	if calls := api.recorded(); len(calls) != 0 {
		t.Fatalf("a pre-pull's container called the bot API: %v", calls)
	}
	if IsPrePull(container("http://x")) {
		t.Fatal("IsPrePull is true for a slot's container")
	}
}
