package storetest

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"botpool.dev/botpool/store"
)

// testRetention prunes history older than a day: old events, transitions and finished bots
// go; recent ones, running bots and their liveness stay; zero cutoffs delete nothing.
func testRetention(t *testing.T, s Subject) {
	p, ok := s.(store.Pruner)
	if !ok {
		t.Fatal("the store does not implement store.Pruner")
	}
	ctx := ctxFor(t)
	old, recent := T0.Add(-48*time.Hour), T0.Add(-time.Hour)
	must(t, s.AppendBotEvents(ctx, []store.BotEvent{Event("a", "log", "old", old), Event("a", "log", "recent", recent)}))
	must(t, s.RecordTransition(ctx, Transition("ns", "s1", "Idle", "Busy", old)))
	must(t, s.RecordTransition(ctx, Transition("ns", "s1", "Busy", "Idle", recent)))
	must(t, s.UpsertBot(ctx, Bot("done-long-ago").Phase("Done").Finished(old).Record()))
	must(t, s.UpsertBot(ctx, Bot("done-recently").Phase("Done").Finished(recent).Record()))
	must(t, s.UpsertBot(ctx, Bot("running").Phase("InCall").Record()))
	must(t, s.RecordHeartbeat(ctx, Beat("running", old))) // silent for long, but not finished

	if got, err := p.Prune(ctx, store.Cutoffs{}); err != nil || got != (store.Pruned{}) {
		t.Fatalf("prune without cutoffs = %+v, %v; want nothing deleted", got, err)
	}
	got, err := p.Prune(ctx, store.Retention{Events: 24 * time.Hour, Transitions: 24 * time.Hour, FinishedBots: 24 * time.Hour}.CutoffsAt(T0))
	must(t, err)
	if want := (store.Pruned{Events: 1, Transitions: 1, Bots: 1}); got != want {
		t.Fatalf("pruned %+v, want %+v", got, want)
	}
	events, err := s.BotEvents(ctx, "a")
	must(t, err)
	if len(events) != 1 || !events[0].At.Equal(recent) {
		t.Fatalf("events left: %+v, want the recent one", events)
	}
	trs, err := s.Transitions(ctx, "ns", "s1")
	must(t, err)
	if len(trs) != 1 || !trs[0].At.Equal(recent) {
		t.Fatalf("transitions left: %+v, want the recent one", trs)
	}
	for uid, want := range map[types.UID]bool{"done-long-ago": false, "done-recently": true, "running": true} {
		_, exists, err := s.Bot(ctx, uid)
		must(t, err)
		if exists != want {
			t.Errorf("bot %s exists = %v after pruning, want %v", uid, exists, want)
		}
	}
	wantBeats(t, lastBeats(t, s, "running"), map[types.UID]time.Time{"running": old})
}
