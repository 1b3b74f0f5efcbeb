package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/internal/simbot"
)

// TestSimulatedBotsThroughTheBotAPI: containers that speak only the bot API take bots from
// binding to Done, and the pool serves the queue with the slots they free.
func TestSimulatedBotsThroughTheBotAPI(t *testing.T) {
	errs := make(chan error, 16)
	cfg := sim.Config{Hooks: sim.Hooks{OnStart: func(c sim.Container) {
		if simbot.IsPrePull(c) {
			return // the pool's image pre-pull: no slot, no bot
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// The operator runs on the suite's fake clock, the bot on real time: three quick
			// beats during a short meeting, and a config poll that catches up with the cache.
			b := simbot.Behaviour{MeetingLength: 25 * time.Millisecond, HeartbeatEvery: 10 * time.Millisecond, PollEvery: 20 * time.Millisecond}
			if res, err := simbot.Run(ctx, c, b); err != nil || res.Outcome != simbot.Finished {
				errs <- fmt.Errorf("container of %s: %+v %w", c.AppName, res, err)
			}
		}()
	}}}
	sc := newScenario(t, "endtoend", cfg, func(p *v1.BotPool) { p.Spec.MaxSlots, p.Spec.MinIdle = 2, 2 })
	sc.warm()
	waitPhases(t, sc.ns, map[v1.SlotPhase]int{v1.SlotIdle: 2})
	var bots []*v1.Bot
	for i := range 5 {
		bots = append(bots, newBot(t, sc.ns, fmt.Sprintf("meeting-%d", i), sc.pool.Name))
	}
	kubetest.Eventually(t, 60*time.Second, func() error {
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
		step(5 * time.Second) // deployments finish, containers start, bots run
		checkInvariants(t, sc.ns)
		for _, b := range bots {
			if got := sc.bot(b.Name); got.Status.Phase != v1.BotDone {
				return fmt.Errorf("bot %s is %s", b.Name, got.Status.Phase)
			}
		}
		return nil
	})
	uids := make([]types.UID, len(bots))
	for i, b := range bots {
		uids[i] = b.UID
	}
	beats, err := liveStore.LastHeartbeats(context.Background(), uids)
	if err != nil || len(beats) != len(bots) {
		t.Errorf("heartbeats recorded for %d of %d bots (%v)", len(beats), len(bots), err)
	}
	waitPhases(t, sc.ns, map[v1.SlotPhase]int{v1.SlotIdle: 2})
}
