package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"botpool.dev/botpool/store"
)

func testSlotRoundTrip(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	rec := Slot("ns", "pool-google-meet-001").App("app-1").BoundTo("bot-1", "standup").LastUsed(T0.Add(-time.Hour)).Record()
	must(t, s.UpsertSlot(ctx, rec))
	got, ok, err := s.Slot(ctx, "ns", "pool-google-meet-001")
	must(t, err)
	if !ok || !sameSlot(got, rec) {
		t.Fatalf("slot = %+v, want %+v", got, rec)
	}

	// Released: the bot and its name go, lastUsedAt moves, the application stays.
	rec = Slot("ns", "pool-google-meet-001").App("app-1").LastUsed(T0).Record()
	must(t, s.UpsertSlot(ctx, rec))
	got, _, err = s.Slot(ctx, "ns", "pool-google-meet-001")
	must(t, err)
	if !sameSlot(got, rec) {
		t.Fatalf("released slot = %+v, want %+v", got, rec)
	}

	must(t, s.DeleteSlot(ctx, "ns", "pool-google-meet-001"))
	must(t, s.DeleteSlot(ctx, "ns", "pool-google-meet-001")) // deleting twice is fine
	if _, ok, err := s.Slot(ctx, "ns", "pool-google-meet-001"); err != nil || ok {
		t.Fatalf("deleted slot still there (ok=%v, err=%v)", ok, err)
	}
}

func sameSlot(a, b store.SlotRecord) bool {
	if (a.LastUsedAt == nil) != (b.LastUsedAt == nil) || (a.LastUsedAt != nil && !a.LastUsedAt.Equal(*b.LastUsedAt)) {
		return false
	}
	if !a.UpdatedAt.Equal(b.UpdatedAt) {
		return false
	}
	a.LastUsedAt, b.LastUsedAt, a.UpdatedAt, b.UpdatedAt = nil, nil, time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

// testSlotUniqueness walks one sequence of writes, checking after each that the store answers
// as the UNIQUE constraints say: a conflicting write is refused and changes nothing.
func testSlotUniqueness(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	steps := []struct {
		name     string
		write    func() error
		conflict bool
	}{
		{"first slot", upsert(ctx, s, Slot("ns", "s1").App("app-1").BoundTo("bot-1", "b1")), false},
		{"same slot again", upsert(ctx, s, Slot("ns", "s1").App("app-1").BoundTo("bot-1", "b1")), false},
		{"application taken", upsert(ctx, s, Slot("ns", "s2").App("app-1")), true},
		{"application taken across namespaces", upsert(ctx, s, Slot("other", "s1").App("app-1")), true},
		{"bot already assigned", upsert(ctx, s, Slot("ns", "s2").App("app-2").BoundTo("bot-1", "b1")), true},
		{"free slots without applications", upsert(ctx, s, Slot("ns", "s3")), false},
		{"another one", upsert(ctx, s, Slot("ns", "s4")), false},
		{"distinct application", upsert(ctx, s, Slot("ns", "s2").App("app-2")), false},
		{"release s1", upsert(ctx, s, Slot("ns", "s1").App("app-1")), false},
		{"bot moves to s2", upsert(ctx, s, Slot("ns", "s2").App("app-2").BoundTo("bot-1", "b1")), false},
		{"s1 cannot take it back", upsert(ctx, s, Slot("ns", "s1").App("app-1").BoundTo("bot-1", "b1")), true},
		{"s1 deleted", func() error { return s.DeleteSlot(ctx, "ns", "s1") }, false},
		{"its application is free again", upsert(ctx, s, Slot("ns", "s5").App("app-1")), false},
	}
	for _, st := range steps {
		err := st.write()
		switch {
		case st.conflict && !errors.Is(err, store.ErrConflict):
			t.Fatalf("%s: err = %v, want ErrConflict", st.name, err)
		case !st.conflict && err != nil:
			t.Fatalf("%s: %v", st.name, err)
		}
	}
	// The refused writes changed nothing.
	for name, want := range map[string]store.SlotRecord{
		"s2": Slot("ns", "s2").App("app-2").BoundTo("bot-1", "b1").Record(),
		"s5": Slot("ns", "s5").App("app-1").Record(),
	} {
		got, ok, err := s.Slot(ctx, "ns", name)
		must(t, err)
		if !ok || !sameSlot(got, want) {
			t.Fatalf("slot %s = %+v, want %+v", name, got, want)
		}
	}
	if _, ok, _ := s.Slot(ctx, "other", "s1"); ok {
		t.Fatal("a refused write created slot other/s1")
	}
}

func upsert(ctx context.Context, s Subject, b *SlotBuilder) func() error {
	rec := b.Record()
	return func() error { return s.UpsertSlot(ctx, rec) }
}

// testConcurrentBindingsOneWinner races slots for one bot: the constraint lets exactly one win
// (invariant 1, the second safety net behind the API server's optimistic lock).
func testConcurrentBindingsOneWinner(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	const racers = 8
	var wg sync.WaitGroup
	errs := make([]error, racers)
	for i := range racers {
		wg.Go(func() {
			errs[i] = s.UpsertSlot(ctx, Slot("ns", fmt.Sprintf("s%d", i)).App(fmt.Sprintf("app-%d", i)).BoundTo("bot-1", "b1").Record())
		})
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrConflict):
			t.Fatalf("racer %d: %v", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d slots bound the same bot, want exactly 1", won)
	}
}

func testTransitions(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	want := []store.Transition{
		Transition("ns", "s1", "Creating", "Idle", T0),
		Transition("ns", "s1", "Idle", "Deploying", T0.Add(time.Second)),
		Transition("ns", "s1", "Deploying", "Busy", T0.Add(2*time.Second)),
	}
	want[1].BotUID, want[1].BotName, want[1].ApplicationUUID = "bot-1", "b1", "app-1"
	// Written out of order and mixed with another slot's: read back by slot, oldest first.
	for _, tr := range []store.Transition{want[2], Transition("ns", "s2", "Creating", "Idle", T0), want[0], want[1]} {
		must(t, s.RecordTransition(ctx, tr))
	}
	got, err := s.Transitions(ctx, "ns", "s1")
	must(t, err)
	if len(got) != len(want) {
		t.Fatalf("got %d transitions, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if !g.At.Equal(w.At) {
			t.Fatalf("transition %d at %v, want %v", i, g.At, w.At)
		}
		g.At, w.At = time.Time{}, time.Time{}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("transition %d = %+v, want %+v", i, g, w)
		}
	}
}

func testBotEvents(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	must(t, s.AppendBotEvents(ctx, nil))
	want := []store.BotEvent{
		Event("bot-1", "participant.joined", map[string]any{"name": "Ada", "count": 2}, T0),
		Event("bot-1", "log", "joined the waiting room", T0.Add(time.Second)),
		{BotUID: "bot-1", Namespace: "default", Name: "bot-bot-1", Type: "ping", At: T0.Add(2 * time.Second)},
	}
	must(t, s.AppendBotEvents(ctx, []store.BotEvent{want[1], Event("bot-2", "log", "x", T0), want[0]}))
	must(t, s.AppendBotEvents(ctx, want[2:]))
	got, err := s.BotEvents(ctx, "bot-1")
	must(t, err)
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if !g.At.Equal(w.At) || !sameJSON(g.Data, w.Data) {
			t.Fatalf("event %d = %+v (data %s), want %+v (data %s)", i, g, g.Data, w, w.Data)
		}
		g.At, w.At, g.Data, w.Data = time.Time{}, time.Time{}, nil, nil
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("event %d = %+v, want %+v", i, g, w)
		}
	}

	// A batch with one bad event is refused whole.
	bad := []store.BotEvent{Event("bot-3", "ok", 1, T0), {BotUID: "bot-3", Type: "bad", Data: json.RawMessage("{")}}
	if err := s.AppendBotEvents(ctx, bad); !isInvalid(err) {
		t.Fatalf("batch with malformed JSON: err = %v, want ErrInvalid", err)
	}
	if got, err := s.BotEvents(ctx, "bot-3"); err != nil || len(got) != 0 {
		t.Fatalf("a refused batch left %d events (err %v)", len(got), err)
	}
}

func testInvalidRecords(t *testing.T, s Subject) {
	ctx := ctxFor(t)
	cases := map[string]func() error{
		"heartbeat without uid":   func() error { return s.RecordHeartbeat(ctx, store.Heartbeat{Name: "x"}) },
		"bot without uid":         func() error { return s.UpsertBot(ctx, store.BotRecord{Name: "x"}) },
		"delete bot without uid":  func() error { return s.DeleteBot(ctx, "") },
		"slot without name":       func() error { return s.UpsertSlot(ctx, store.SlotRecord{Namespace: "ns"}) },
		"delete slot without ns":  func() error { return s.DeleteSlot(ctx, "", "s1") },
		"transition without slot": func() error { return s.RecordTransition(ctx, store.Transition{Namespace: "ns"}) },
		"event without type":      func() error { return s.AppendBotEvents(ctx, []store.BotEvent{{BotUID: "b"}}) },
	}
	for name, write := range cases {
		if err := write(); !isInvalid(err) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}
