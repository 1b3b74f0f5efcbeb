package controllers

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/botapi/botclient"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/kubetest"
)

// simulatedBot is what a bot image does, through the bot API only: it reads its config from
// the environment Coolify gave its container, joins, beats, and reports its way to Done.
func simulatedBot(c sim.Container) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := botclient.New(c.Env["BOTPOOL_API_URL"], c.Env["POOL_SLOT_UUID"], c.Env["BOTPOOL_SLOT_TOKEN"], nil)
	var cfg botclient.Config
	for {
		var err error
		if cfg, err = cl.Config(ctx); err == nil {
			break
		}
		if !errors.Is(err, botclient.ErrSlotFree) || ctx.Err() != nil {
			return fmt.Errorf("config: %w", err)
		}
		time.Sleep(20 * time.Millisecond) // bound a moment ago: the cache catches up
	}
	for _, phase := range []string{botclient.PhaseJoiningCall, botclient.PhaseInCall} {
		if _, err := cl.ReportStatus(ctx, cfg.Bot, botclient.StatusReport{Phase: phase}); err != nil {
			return fmt.Errorf("%s: %w", phase, err)
		}
	}
	for range 3 {
		if hb, err := cl.Heartbeat(ctx, cfg.Bot); err != nil || hb.Action != botclient.ActionContinue {
			return fmt.Errorf("heartbeat: %+v %w", hb, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, phase := range []string{botclient.PhaseCallEnded, botclient.PhaseDone} {
		if _, err := cl.ReportStatus(ctx, cfg.Bot, botclient.StatusReport{Phase: phase}); err != nil {
			return fmt.Errorf("%s: %w", phase, err)
		}
	}
	return nil
}

// TestSimulatedBotsThroughTheBotAPI: containers that speak only the bot API take bots from
// binding to Done, and the pool serves the queue with the slots they free.
func TestSimulatedBotsThroughTheBotAPI(t *testing.T) {
	errs := make(chan error, 16)
	cfg := sim.Config{Hooks: sim.Hooks{OnStart: func(c sim.Container) {
		go func() {
			if err := simulatedBot(c); err != nil {
				errs <- fmt.Errorf("container of %s: %w", c.AppName, err)
			}
		}()
	}}}
	sc := newScenario(t, "endtoend", cfg, func(p *v1.BotPool) { p.Spec.MaxSlots, p.Spec.MinIdle = 2, 2 })
	sc.sim.WarmImage(fixture.ServerUUID, sc.pool.Spec.Image, sc.pool.Spec.ImageTag)
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
