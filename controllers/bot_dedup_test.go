package controllers

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/kubetest"
)

// TestTwoBotsForOneMeetingNeverBothStart creates pairs of Bots for one meeting at the same
// instant, many times, in a pool with free slots for all of them: in every pair exactly one is
// bound and the other ends Fatal, Duplicate, naming it, and was never bound to any slot (no
// slot's audit trail names it, it holds no slot, no start and no claim). Half the pairs share a
// deduplicationKey, half only a meeting (two shapes of one Zoom link, in a pool that
// deduplicates by meeting URL).
func TestTwoBotsForOneMeetingNeverBothStart(t *testing.T) {
	const pairs = 12
	sc := newScenario(t, "dedup", sim.Config{}, func(p *v1.BotPool) {
		p.Spec.MaxSlots, p.Spec.MinIdle = pairs, pairs
		p.Spec.Deduplication = v1.DeduplicationMeetingURL
	})
	sc.warm()
	waitPhases(t, sc.ns, map[v1.SlotPhase]int{v1.SlotIdle: pairs})

	ctx := context.Background()
	type pair struct{ a, b string }
	var all []pair
	for i := range pairs {
		p := pair{fmt.Sprintf("pair-%02d-a", i), fmt.Sprintf("pair-%02d-b", i)}
		all = append(all, p)
		number := fmt.Sprintf("8581234%04d", i)
		mutate := func(name string) func(*v1.Bot) {
			return func(b *v1.Bot) {
				if i%2 == 0 {
					b.Spec.DeduplicationKey = fmt.Sprintf("calendar-event-%d", i)
					return
				}
				if strings.HasSuffix(name, "-a") {
					b.Spec.MeetingURL = "https://us02web.zoom.us/j/" + number + "?pwd=AbC." + name
				} else {
					b.Spec.MeetingURL = "https://ZOOM.us/j/" + number + "/"
				}
			}
		}
		var wg sync.WaitGroup
		for _, name := range []string{p.a, p.b} {
			wg.Go(func() { newBot(t, sc.ns, name, sc.pool.Name, mutate(name)) })
		}
		wg.Wait()
	}

	kubetest.Eventually(t, 60*time.Second, func() error {
		for _, p := range all {
			a, b := sc.bot(p.a), sc.bot(p.b)
			winner, loser := a, b
			if a.Status.Phase == v1.BotFatal {
				winner, loser = b, a
			}
			if loser.Status.Phase != v1.BotFatal || loser.Status.Reason != v1.ReasonDuplicate {
				return fmt.Errorf("pair %s: %s is %s/%s, %s is %s/%s; want one Fatal, Duplicate", p.a,
					a.Name, a.Status.Phase, a.Status.Reason, b.Name, b.Status.Phase, b.Status.Reason)
			}
			if winner.Status.Phase.Terminal() || winner.Status.SlotName == "" {
				return fmt.Errorf("pair %s: %s is %s on slot %q; want it bound and running", p.a, winner.Name, winner.Status.Phase, winner.Status.SlotName)
			}
			if !strings.Contains(loser.Status.Message, "Bot "+winner.Name+" holds this meeting") {
				return fmt.Errorf("pair %s: the duplicate's message %q does not name %s", p.a, loser.Status.Message, winner.Name)
			}
		}
		return nil
	})

	// Never bound: no slot names a loser in its trail, and no loser has a trace of a start.
	losers := map[string]bool{}
	for _, p := range all {
		for _, name := range []string{p.a, p.b} {
			if b := sc.bot(name); b.Status.Phase == v1.BotFatal {
				losers[name] = true
				if b.Status.SlotName != "" || b.Status.ApplicationUUID != "" || b.Status.Binding != nil || len(b.Status.StartAttempts) != 0 || b.Status.StartedAt != nil {
					t.Errorf("duplicate %s shows a start: %+v", name, b.Status)
				}
			}
		}
	}
	if len(losers) != pairs {
		t.Fatalf("%d duplicates, want %d", len(losers), pairs)
	}
	for _, s := range listSlots(t, sc.ns) {
		if ref := s.Spec.BotRef; ref != nil && losers[ref.Name] {
			t.Errorf("slot %s is bound to duplicate %s", s.Name, ref.Name)
		}
		trail, err := liveStore.Transitions(ctx, sc.ns, s.Name)
		must(t, err)
		for _, tr := range trail {
			if losers[tr.BotName] {
				t.Errorf("slot %s was bound to duplicate %s (%s → %s)", s.Name, tr.BotName, tr.From, tr.To)
			}
		}
	}
}
