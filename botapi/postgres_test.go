package botapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"botpool.dev/botpool/botapi/botclient"
	"botpool.dev/botpool/internal/pgtest"
	"botpool.dev/botpool/internal/slottoken"
	"botpool.dev/botpool/store/postgres"
)

// TestEndpointsWithPostgres runs a bot's whole conversation against the real store: beats
// land as liveness, events and speaker timeframes as rows, and a Postgres restart in the
// middle fails nothing and loses no acknowledged beat.
func TestEndpointsWithPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg := pgtest.StartT(t)
	st, err := postgres.New(ctx, pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })

	h := newHarness(t, func(c *Config) { c.Liveness = st })
	s, b, c := h.boundBot("pool-google-meet-001", "standup")

	// The config call that claimed the binding is the slot's latest ask.
	asks, err := st.LastSlotAsks(ctx, []types.UID{s.slot.UID})
	if ask := asks[s.slot.UID]; err != nil || ask.TokenSHA256 != slottoken.Hash([]byte(s.token)) || !ask.At.Equal(h.clock.Now().Truncate(time.Microsecond)) {
		t.Errorf("the slot's ask in Postgres = %+v (%v), want now with its token's hash", asks, err)
	}
	if resp, err := c.Heartbeat(ctx, "standup"); err != nil || resp.Action != botclient.ActionContinue {
		t.Fatalf("heartbeat: %+v, %v", resp, err)
	}
	beats, err := st.LastHeartbeats(ctx, []types.UID{b.UID})
	if err != nil {
		t.Fatal(err)
	}
	if got := beats[b.UID]; !got.Equal(h.clock.Now().Truncate(time.Microsecond)) {
		t.Errorf("last heartbeat in Postgres = %v, want %v", got, h.clock.Now())
	}

	// Postgres goes away: the bot's calls still succeed (buffered), then land.
	if err := pg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	h.clock.Step(10 * time.Second)
	if resp, err := c.Heartbeat(ctx, "standup"); err != nil || resp.Action != botclient.ActionContinue {
		t.Fatalf("heartbeat during the outage: %+v, %v", resp, err)
	}
	if _, err := c.SendEvents(ctx, "standup", botclient.Event{Type: "participant.joined", Data: json.RawMessage(`{"name":"Ann"}`)}); err != nil {
		t.Fatalf("events during the outage: %v", err)
	}
	if _, err := c.ReportStatus(ctx, "standup", botclient.StatusReport{Phase: "InCall"}); err != nil {
		t.Fatalf("status during the outage (goes to the API server, not Postgres): %v", err)
	}
	if err := pg.Resume(ctx); err != nil {
		t.Fatal(err)
	}

	deadline := time.Now().Add(time.Minute) // a liveness bound
	for {
		beats, err = st.LastHeartbeats(ctx, []types.UID{b.UID})
		events, evErr := st.BotEvents(ctx, b.UID)
		if err == nil && evErr == nil && beats[b.UID].Equal(h.clock.Now().Truncate(time.Microsecond)) && len(events) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after recovery: beats %v (%v), events %v (%v)", beats, err, events, evErr)
		}
		time.Sleep(50 * time.Millisecond)
	}

	start := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	if _, err := c.ReportStatus(ctx, "standup", botclient.StatusReport{Phase: "Done",
		SpeakerTimeframes: []botclient.SpeakerTimeframe{{Speaker: "Ann", Start: start, End: start.Add(time.Minute)}}}); err != nil {
		t.Fatal(err)
	}
	events, err := st.BotEvents(ctx, b.UID)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 || events[1].Type != "speakerTimeframes" {
		t.Errorf("events in Postgres = %+v, want the participant and the speaker timeframes", events)
	}
	h.eventually(func() error {
		if _, err := c.Config(ctx); !errors.Is(err, botclient.ErrGone) {
			return fmt.Errorf("config of a Done bot: %w, want 410", err)
		}
		return nil
	})
}
