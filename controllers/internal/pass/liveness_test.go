package pass

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
)

// beatsFake answers LastHeartbeats from a map, or with err.
type beatsFake struct {
	beats map[types.UID]time.Time
	err   error
	asked []types.UID
}

func (f *beatsFake) LastHeartbeats(_ context.Context, bots []types.UID) (map[types.UID]time.Time, error) {
	f.asked = append(f.asked, bots...)
	if f.err != nil {
		return nil, f.err
	}
	out := map[types.UID]time.Time{}
	for _, b := range bots {
		if t, ok := f.beats[b]; ok {
			out[b] = t
		}
	}
	return out, nil
}

// TestLivenessReader: the one reading of a bot's heartbeats the slot and bot controllers
// share, with the restart rule: a store that cannot answer, or no beat right after this
// process started, concludes nothing; a beat always counts.
func TestLivenessReader(t *testing.T) {
	const (
		bot   = types.UID("bot-1")
		other = types.UID("bot-2")
		grace = 5 * time.Minute // the caller's restart grace
		fresh = time.Minute     // a caller's freshness window, for beatWithin
	)
	down := errors.New("store unavailable")
	cases := []struct {
		name    string
		uptime  time.Duration // how long ago this process started
		beatAgo time.Duration // 0: the store knows no beat of the bot
		err     error
		// want
		known, storeDown, beat, beatWithin bool
	}{
		{name: "fresh beat", uptime: time.Hour, beatAgo: 10 * time.Second, known: true, beat: true, beatWithin: true},
		{name: "beat exactly at the freshness limit", uptime: time.Hour, beatAgo: fresh, known: true, beat: true, beatWithin: true},
		{name: "stale beat", uptime: time.Hour, beatAgo: 10 * time.Minute, known: true, beat: true},
		{name: "beat within the restart grace counts", uptime: 10 * time.Second, beatAgo: 5 * time.Second, known: true, beat: true, beatWithin: true},
		{name: "stale beat within the restart grace counts", uptime: 10 * time.Second, beatAgo: 10 * time.Minute, known: true, beat: true},
		{name: "no beat within the restart grace: unknown", uptime: grace - time.Second},
		{name: "no beat once the restart grace is over", uptime: grace, known: true},
		{name: "no beat long after the start", uptime: time.Hour, known: true},
		{name: "store unavailable", uptime: time.Hour, err: down, storeDown: true},
		{name: "store unavailable within the restart grace", uptime: time.Second, err: down, storeDown: true},
		{name: "store unavailable though the bot beat", uptime: time.Hour, beatAgo: time.Second, err: down, storeDown: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
			started := clk.Now().Add(-tc.uptime)
			store := &beatsFake{err: tc.err, beats: map[types.UID]time.Time{other: clk.Now()}}
			if tc.beatAgo > 0 {
				store.beats[bot] = clk.Now().Add(-tc.beatAgo)
			}
			got := LivenessReader{Store: store, Clock: clk, Started: started}.Read(context.Background(), bot, grace)
			if !slices.Equal(store.asked, []types.UID{bot}) {
				t.Errorf("the store was asked for %v, want [%s]", store.asked, bot)
			}
			if got.Known != tc.known || got.StoreDown != tc.storeDown || (got.LastBeat != nil) != tc.beat {
				t.Fatalf("read = {known %v, storeDown %v, lastBeat %v}, want {known %v, storeDown %v, a beat %v}",
					got.Known, got.StoreDown, got.LastBeat, tc.known, tc.storeDown, tc.beat)
			}
			if tc.beat && !got.LastBeat.Equal(store.beats[bot]) {
				t.Errorf("lastBeat %s, want the store's %s", got.LastBeat, store.beats[bot])
			}
			if w := got.BeatWithin(clk.Now(), fresh); w != tc.beatWithin {
				t.Errorf("beatWithin(now, %s) = %v, want %v", fresh, w, tc.beatWithin)
			}
		})
	}

	// The restart grace runs on the injected clock: the same silence is unknown right after
	// the start and known once the clock passed the grace.
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
	r := LivenessReader{Store: &beatsFake{}, Clock: clk, Started: clk.Now()}
	if got := r.Read(context.Background(), bot, grace); got.Known {
		t.Errorf("right after the start: known, want unknown")
	}
	clk.Step(grace)
	if got := r.Read(context.Background(), bot, grace); !got.Known || got.LastBeat != nil {
		t.Errorf("after the restart grace: %+v, want known without a beat", got)
	}
}
