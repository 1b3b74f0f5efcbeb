package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"botpool.dev/botpool/store"
)

// RunOutbox is the conformance suite of store.Outbox; newOutbox returns a fresh, empty one.
func RunOutbox(t *testing.T, newOutbox func(t *testing.T) store.Outbox) {
	cases := []struct {
		name string
		run  func(t *testing.T, o store.Outbox)
	}{
		{"AddIsIdempotent", testOutboxAddIsIdempotent},
		{"OneBotInOrder", testOutboxOneBotInOrder},
		{"LeaseExcludesAndExpires", testOutboxLease},
		{"RetryWhenDue", testOutboxRetryWhenDue},
		{"ConcurrentClaimersNeverShare", testOutboxConcurrentClaimers},
		{"SummaryAndStats", testOutboxSummaryAndStats},
		{"SeqTakenOnce", testOutboxSeqTaken},
		{"LateOutcomeIsFenced", testOutboxLateOutcome},
		{"NamespacesTakeTurns", testOutboxNamespacesTakeTurns},
		{"OldestDueIsWhatWaitsOnTheRelay", testOutboxOldestDue},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, newOutbox(t)) })
	}
}

var outboxT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func msg(bot string, seq int64, phase string) store.OutboxMessage {
	return store.OutboxMessage{
		ID: fmt.Sprintf("%s.%d.%s", bot, seq, phase), BotUID: types.UID(bot), Seq: seq,
		Namespace: "ns", Name: bot, Phase: phase, URL: "https://hooks.example/" + bot,
		Payload: []byte(`{"phase":"` + phase + `"}`), SecretName: "s", SecretKey: "k", CreatedAt: outboxT0,
	}
}

func mustAdd(t *testing.T, o store.Outbox, ms ...store.OutboxMessage) {
	t.Helper()
	for _, m := range ms {
		if err := o.AddMessage(context.Background(), m); err != nil {
			t.Fatalf("AddMessage(%s): %v", m.ID, err)
		}
	}
}

func claim(t *testing.T, o store.Outbox, now time.Time, limit int) []store.OutboxMessage {
	t.Helper()
	ms, err := o.ClaimMessages(context.Background(), now, time.Minute, limit)
	if err != nil {
		t.Fatalf("ClaimMessages: %v", err)
	}
	return ms
}

func ids(ms []store.OutboxMessage) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

// finish records out as the outcome of attempt of message id.
func finish(t *testing.T, o store.Outbox, id string, attempt int, out store.OutboxOutcome) {
	t.Helper()
	out.Attempt = attempt
	if err := o.FinishAttempt(context.Background(), id, out); err != nil {
		t.Fatalf("FinishAttempt(%s): %v", id, err)
	}
}

func testOutboxAddIsIdempotent(t *testing.T, o store.Outbox) {
	m := msg("a", 1, "Queued")
	mustAdd(t, o, m, m)
	got := claim(t, o, outboxT0, 10)
	if len(got) != 1 || got[0].ID != m.ID || got[0].Attempts != 1 || string(got[0].Payload) != string(m.Payload) ||
		got[0].SecretName != "s" || got[0].SecretKey != "k" || got[0].URL != m.URL {
		t.Fatalf("claimed %+v, want the one message with its fields and attempt 1", got)
	}
}

func testOutboxOneBotInOrder(t *testing.T, o store.Outbox) {
	mustAdd(t, o, msg("a", 2, "Running"), msg("a", 1, "Queued"), msg("b", 1, "Queued"))
	got := claim(t, o, outboxT0, 10)
	if fmt.Sprint(ids(got)) != "[a.1.Queued b.1.Queued]" {
		t.Fatalf("claimed %v, want the head of each bot", ids(got))
	}
	finish(t, o, "a.1.Queued", 1, store.OutboxOutcome{State: store.OutboxDelivered})
	if got := claim(t, o, outboxT0, 10); fmt.Sprint(ids(got)) != "[a.2.Running]" {
		t.Fatalf("after delivering a.1, claimed %v, want a.2", ids(got))
	}
}

func testOutboxLease(t *testing.T, o store.Outbox) {
	mustAdd(t, o, msg("a", 1, "Queued"))
	if got := claim(t, o, outboxT0, 10); len(got) != 1 {
		t.Fatalf("claimed %v", ids(got))
	}
	if got := claim(t, o, outboxT0.Add(59*time.Second), 10); len(got) != 0 {
		t.Fatalf("claimed %v under a live lease", ids(got))
	}
	// The first claimer died: after the lease the message is claimed again, a second attempt.
	got := claim(t, o, outboxT0.Add(time.Minute), 10)
	if len(got) != 1 || got[0].Attempts != 2 {
		t.Fatalf("after the lease claimed %+v, want the message again at attempt 2", got)
	}
}

func testOutboxRetryWhenDue(t *testing.T, o store.Outbox) {
	mustAdd(t, o, msg("a", 1, "Queued"))
	claim(t, o, outboxT0, 10)
	finish(t, o, "a.1.Queued", 1, store.OutboxOutcome{State: store.OutboxPending, NextAttemptAt: outboxT0.Add(30 * time.Second), Error: "503"})
	if got := claim(t, o, outboxT0.Add(29*time.Second), 10); len(got) != 0 {
		t.Fatalf("claimed %v before it is due", ids(got))
	}
	if got := claim(t, o, outboxT0.Add(30*time.Second), 10); len(got) != 1 || got[0].Attempts != 2 || got[0].LastError != "503" {
		t.Fatalf("claimed %+v when due, want attempt 2 with the last error", got)
	}
	finish(t, o, "a.1.Queued", 2, store.OutboxOutcome{State: store.OutboxFailed, Error: "gave up"})
	if got := claim(t, o, outboxT0.Add(time.Hour), 10); len(got) != 0 {
		t.Fatalf("claimed %v after it was given up", ids(got))
	}
	// A late outcome of an expired claim changes nothing.
	finish(t, o, "a.1.Queued", 1, store.OutboxOutcome{State: store.OutboxDelivered})
	s, err := o.OutboxSummary(context.Background(), "a", 0)
	if err != nil || s.Failed != 1 || s.Delivered != 0 {
		t.Fatalf("summary %+v %v, want one failed", s, err)
	}
}

func testOutboxConcurrentClaimers(t *testing.T, o store.Outbox) {
	const bots = 40
	for i := range bots {
		mustAdd(t, o, msg(fmt.Sprintf("bot%02d", i), 1, "Queued"))
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for range 10 {
				ms, err := o.ClaimMessages(context.Background(), outboxT0, time.Minute, 3)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, m := range ms {
					seen[m.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for id, n := range seen {
		if n != 1 {
			t.Errorf("message %s claimed %d times under one lease", id, n)
		}
	}
	if len(seen) != bots {
		t.Errorf("claimed %d messages, want all %d", len(seen), bots)
	}
}

func testOutboxSummaryAndStats(t *testing.T, o store.Outbox) {
	ctx := context.Background()
	mustAdd(t, o, msg("a", 1, "Queued"), msg("a", 2, "Running"), msg("a", 3, "Done"))
	claim(t, o, outboxT0, 10)
	finish(t, o, "a.1.Queued", 1, store.OutboxOutcome{State: store.OutboxDelivered})
	claim(t, o, outboxT0, 10)
	finish(t, o, "a.2.Running", 1, store.OutboxOutcome{State: store.OutboxDelivered})
	claim(t, o, outboxT0, 10)
	finish(t, o, "a.3.Done", 1, store.OutboxOutcome{State: store.OutboxPending, NextAttemptAt: outboxT0.Add(time.Minute), Error: "timeout"})
	s, err := o.OutboxSummary(ctx, "a", 0)
	if err != nil || s.Delivered != 2 || s.Pending != 1 || s.DeliveredPhase != "Running" || s.LastError != "timeout" ||
		s.LastSeq != 3 || s.LastPhase != "Done" || s.FinishedThrough != 2 {
		t.Fatalf("summary %+v %v", s, err)
	}
	// The caller counted through 1: only a.2 counts as delivered now.
	if s, err := o.OutboxSummary(ctx, "a", 1); err != nil || s.Delivered != 1 || s.Pending != 1 || s.DeliveredPhase != "Running" || s.FinishedThrough != 2 {
		t.Fatalf("summary after 1: %+v %v", s, err)
	}
	st, err := o.OutboxStats(ctx, outboxT0.Add(30*time.Second))
	if err != nil || st.Pending != 1 || !st.OldestDue.IsZero() {
		t.Fatalf("stats before due %+v %v", st, err)
	}
	st, err = o.OutboxStats(ctx, outboxT0.Add(2*time.Minute))
	if err != nil || st.Pending != 1 || !st.OldestDue.Equal(outboxT0.Add(time.Minute)) {
		t.Fatalf("stats when due %+v %v", st, err)
	}
}

func testOutboxSeqTaken(t *testing.T, o store.Outbox) {
	mustAdd(t, o, msg("a", 1, "Queued"))
	if err := o.AddMessage(context.Background(), msg("a", 1, "Fatal")); !errors.Is(err, store.ErrSeqTaken) {
		t.Fatalf("a second message with seq 1: %v, want ErrSeqTaken", err)
	}
	mustAdd(t, o, msg("b", 1, "Queued")) // another bot's seq 1
	if got := claim(t, o, outboxT0, 10); fmt.Sprint(ids(got)) != "[a.1.Queued b.1.Queued]" {
		t.Fatalf("claimed %v", ids(got))
	}
}

// A claimer whose lease ran out reports after the message was claimed again: its outcome
// neither clears the live lease nor finishes the message.
func testOutboxLateOutcome(t *testing.T, o store.Outbox) {
	mustAdd(t, o, msg("a", 1, "Queued"), msg("a", 2, "Done"))
	claim(t, o, outboxT0, 10)
	if got := claim(t, o, outboxT0.Add(time.Minute), 10); len(got) != 1 || got[0].Attempts != 2 {
		t.Fatalf("claimed %+v after the lease, want attempt 2", got)
	}
	finish(t, o, "a.1.Queued", 1, store.OutboxOutcome{State: store.OutboxPending, NextAttemptAt: outboxT0, Error: "late"})
	finish(t, o, "a.1.Queued", 1, store.OutboxOutcome{State: store.OutboxFailed, Error: "late"})
	if got := claim(t, o, outboxT0.Add(time.Minute+time.Second), 10); len(got) != 0 {
		t.Fatalf("claimed %v: a late outcome ended the live claim", ids(got))
	}
	if s, err := o.OutboxSummary(context.Background(), "a", 0); err != nil || s.Pending != 2 || s.Failed != 0 || s.LastError != "" {
		t.Fatalf("summary %+v %v: a late outcome changed the message", s, err)
	}
	finish(t, o, "a.1.Queued", 2, store.OutboxOutcome{State: store.OutboxDelivered})
	if got := claim(t, o, outboxT0.Add(time.Minute+time.Second), 10); fmt.Sprint(ids(got)) != "[a.2.Done]" {
		t.Fatalf("claimed %v after the live claim's outcome, want a.2", ids(got))
	}
}

// One namespace's backlog, older than another's message, does not fill the batch.
func testOutboxNamespacesTakeTurns(t *testing.T, o store.Outbox) {
	for i := range 3 {
		m := msg(fmt.Sprintf("busy%d", i), 1, "Queued")
		m.Namespace = "busy"
		mustAdd(t, o, m)
	}
	late := msg("quiet", 1, "Queued")
	late.Namespace, late.CreatedAt = "quiet", outboxT0.Add(time.Second)
	mustAdd(t, o, late)
	got := claim(t, o, outboxT0.Add(time.Second), 3)
	if fmt.Sprint(ids(got)) != "[busy0.1.Queued quiet.1.Queued busy1.1.Queued]" {
		t.Fatalf("claimed %v, want the oldest of each namespace, then the second of the busy one, in that order", ids(got))
	}
}

// The oldest due counts only what the relay could claim: not a message behind its bot's first
// one, nor one being sent.
func testOutboxOldestDue(t *testing.T, o store.Outbox) {
	ctx := context.Background()
	mustAdd(t, o, msg("a", 1, "Queued"), msg("a", 2, "Done"))
	claim(t, o, outboxT0, 10) // a.1 is being sent; a.2 waits behind it
	st, err := o.OutboxStats(ctx, outboxT0.Add(30*time.Second))
	if err != nil || st.Pending != 2 || !st.OldestDue.IsZero() {
		t.Fatalf("stats %+v %v, want 2 pending and nothing waiting on the relay", st, err)
	}
	st, err = o.OutboxStats(ctx, outboxT0.Add(time.Minute))
	if err != nil || !st.OldestDue.Equal(outboxT0) {
		t.Fatalf("stats after the lease %+v %v, want a.1 due since %v", st, err, outboxT0)
	}
}
