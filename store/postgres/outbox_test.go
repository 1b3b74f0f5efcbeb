package postgres_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"botpool.dev/botpool/store"
	"botpool.dev/botpool/store/postgres"
	"botpool.dev/botpool/store/storetest"
)

func TestOutboxConformance(t *testing.T) {
	storetest.RunOutbox(t, func(t *testing.T) store.Outbox {
		s, _ := newStore(t)
		return s
	})
}

var outboxT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func outboxMessage(bot string, seq int64, phase string) store.OutboxMessage {
	return store.OutboxMessage{
		ID: bot + "." + phase, BotUID: types.UID("uid-" + bot), Seq: seq, Namespace: "ns", Name: bot, Phase: phase,
		URL: "https://hooks.example/" + bot, Payload: []byte(`{"phase":"` + phase + `"}`), CreatedAt: outboxT0,
	}
}

func claimOne(t *testing.T, o store.Outbox, now time.Time) []store.OutboxMessage {
	t.Helper()
	ms, err := o.ClaimMessages(t.Context(), now, 2*time.Minute, 10)
	if err != nil {
		t.Fatalf("ClaimMessages: %v", err)
	}
	return ms
}

// TestOutboxSurvivesARestartMidRetry: the leader claimed a message, its attempt failed and it
// claimed the retry, then died without an outcome. A new manager on the same database finds
// every message: the retry again when the dead claim's lease ends (attempt 3, same id and
// bytes), and the next phase only after it. Both stores keep the test's times as they are
// (WithSharedClock): each would otherwise measure its own offset to the database's clock, and
// the times the first wrote would come back some microseconds apart.
func TestOutboxSurvivesARestartMidRetry(t *testing.T) {
	old, dsn := newStore(t, postgres.WithSharedClock())
	ctx := t.Context()
	queued, running := outboxMessage("bot-a", 1, "Queued"), outboxMessage("bot-a", 2, "Running")
	for _, m := range []store.OutboxMessage{queued, running} {
		if err := old.AddMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if got := claimOne(t, old, outboxT0); len(got) != 1 || got[0].ID != queued.ID {
		t.Fatalf("claimed %+v, want %s", got, queued.ID)
	}
	if err := old.FinishAttempt(ctx, queued.ID, store.OutboxOutcome{
		Attempt: 1, State: store.OutboxPending, NextAttemptAt: outboxT0.Add(30 * time.Second), Error: "HTTP 503",
	}); err != nil {
		t.Fatal(err)
	}
	if got := claimOne(t, old, outboxT0.Add(30*time.Second)); len(got) != 1 || got[0].Attempts != 2 {
		t.Fatalf("claimed %+v, want the retry at attempt 2", got)
	}
	if err := old.Close(); err != nil { // the leader dies mid-attempt
		t.Fatal(err)
	}

	leader := openStore(t, dsn, postgres.WithSharedClock())
	if got := claimOne(t, leader, outboxT0.Add(time.Minute)); len(got) != 0 {
		t.Fatalf("the new leader claimed %+v under the dead claim's lease", got)
	}
	got := claimOne(t, leader, outboxT0.Add(30*time.Second+2*time.Minute))
	if len(got) != 1 || got[0].ID != queued.ID || got[0].Attempts != 3 || got[0].LastError != "HTTP 503" ||
		string(got[0].Payload) != string(queued.Payload) || !got[0].CreatedAt.Equal(outboxT0) {
		t.Fatalf("after the lease the new leader claimed %+v, want %s at attempt 3 with its error and bytes", got, queued.ID)
	}
	if err := leader.FinishAttempt(ctx, queued.ID, store.OutboxOutcome{Attempt: 3, State: store.OutboxDelivered}); err != nil {
		t.Fatal(err)
	}
	if got := claimOne(t, leader, outboxT0.Add(3*time.Minute)); len(got) != 1 || got[0].ID != running.ID || got[0].Attempts != 1 {
		t.Fatalf("claimed %+v, want %s, first attempt", got, running.ID)
	}
	sum, err := leader.OutboxSummary(ctx, queued.BotUID, 0)
	if err != nil || sum.Delivered != 1 || sum.Pending != 1 || sum.DeliveredPhase != "Queued" {
		t.Fatalf("summary %+v, %v", sum, err)
	}
}

// TestOutboxDuringAnOutage: nothing is buffered. Adding and claiming fail with ErrUnavailable
// while Postgres is down, so the bot controller and the relay try again; afterwards both work
// and nothing was added behind their backs.
func TestOutboxDuringAnOutage(t *testing.T) {
	s, _ := newStore(t, fastOptions(prometheus.NewRegistry())...)
	ctx := t.Context()
	m := outboxMessage("bot-b", 1, "Queued")
	resume := stopServer(t)
	if err := s.AddMessage(ctx, m); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("AddMessage during the outage: %v, want ErrUnavailable", err)
	}
	waitAvailable(t, s, false)
	if _, err := s.ClaimMessages(ctx, outboxT0, time.Minute, 10); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("ClaimMessages during the outage: %v, want ErrUnavailable", err)
	}
	if _, err := s.OutboxSummary(ctx, m.BotUID, 0); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("OutboxSummary during the outage: %v, want ErrUnavailable", err)
	}
	resume()
	waitAvailable(t, s, true)
	if got := claimOne(t, s, outboxT0); len(got) != 0 {
		t.Fatalf("claimed %+v: a refused add was kept", got)
	}
	if err := s.AddMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
	if got := claimOne(t, s, outboxT0); len(got) != 1 {
		t.Fatalf("claimed %+v after the outage, want the message", got)
	}
}

// TestOutboxRetention: delivered and given-up messages go with the bot events' cutoff (by when
// they finished); pending ones stay whatever their age.
func TestOutboxRetention(t *testing.T) {
	clk := clocktesting.NewFakeClock(outboxT0)
	reg := prometheus.NewRegistry()
	s, _ := newStore(t, postgres.WithClock(clk), postgres.WithRegisterer(reg), postgres.WithPruneBatch(1),
		postgres.WithHeartbeatBatch(1, 0))
	ctx := t.Context()
	finishAt := func(m store.OutboxMessage, state store.OutboxState) {
		t.Helper()
		if err := s.AddMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
		if got := claimOne(t, s, clk.Now()); !slices.ContainsFunc(got, func(c store.OutboxMessage) bool { return c.ID == m.ID }) {
			t.Fatalf("claimed %+v, want %s among them", got, m.ID)
		}
		if state != store.OutboxPending {
			if err := s.FinishAttempt(ctx, m.ID, store.OutboxOutcome{Attempt: 1, State: state, Error: "x"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	finishAt(outboxMessage("old-1", 1, "Done"), store.OutboxDelivered)
	finishAt(outboxMessage("old-2", 1, "Done"), store.OutboxFailed)
	finishAt(outboxMessage("old-3", 1, "Done"), store.OutboxPending)
	clk.Step(48 * time.Hour)
	finishAt(outboxMessage("new-1", 1, "Done"), store.OutboxDelivered)

	got, err := s.Prune(ctx, store.Retention{Events: 24 * time.Hour}.CutoffsAt(clk.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if got.Webhooks != 2 {
		t.Fatalf("pruned %+v, want the 2 old finished messages", got)
	}
	if n, _ := metric(t, reg, "botpool_store_pruned_rows_total", "table", "webhook_outbox"); n != 2 {
		t.Errorf("botpool_store_pruned_rows_total{table=webhook_outbox} = %v, want 2", n)
	}
	for bot, want := range map[string]store.OutboxSummary{
		"old-1": {}, "old-2": {}, "old-3": {LastSeq: 1, LastPhase: "Done", Pending: 1},
		"new-1": {LastSeq: 1, LastPhase: "Done", Delivered: 1, FinishedThrough: 1, DeliveredPhase: "Done"},
	} {
		sum, err := s.OutboxSummary(ctx, outboxMessage(bot, 1, "Done").BotUID, 0)
		if err != nil || sum != want {
			t.Errorf("summary of %s after pruning = %+v, %v; want %+v", bot, sum, err, want)
		}
	}
}
