package controllers

import (
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/internal/simbot"
)

// TestDeployAnsweredAfterItHappenedIsNotRepeated: Coolify queues the deployment but answers
// 500 (a proxy timing out), and the answer arrives after the deployment finished and the bot's
// container started. The slot finds that deployment instead of deploying again, which would
// restart the container under the running bot. (Found by the soak test.)
func TestDeployAnsweredAfterItHappenedIsNotRepeated(t *testing.T) {
	var mu sync.Mutex
	starts := map[string]int{}
	cfg := sim.Config{Hooks: sim.Hooks{OnStart: func(c sim.Container) {
		if simbot.IsPrePull(c) {
			return // the pool's image pre-pull: not the slot's container
		}
		mu.Lock()
		defer mu.Unlock()
		starts[c.Reason]++
	}}}
	sc := newScenario(t, "redeploy", cfg)
	sc.warm()
	idle := sc.phase(v1.SlotIdle)
	app := idle.Status.ApplicationUUID
	sc.sim.SetFault("deploy-by-tag-or-uuid", sim.Fault{Burst: 1, AfterProcessing: true, Latency: 500 * time.Millisecond})
	deployments := func() []sim.DeploymentInfo {
		var out []sim.DeploymentInfo
		for _, d := range sc.sim.Deployments() {
			if d.AppUUID == app {
				out = append(out, d)
			}
		}
		return out
	}
	bot, _ := sc.bind("patient")
	kubetest.Eventually(t, 10*time.Second, func() error {
		if len(deployments()) == 0 {
			return fmt.Errorf("no deployment yet")
		}
		return nil
	})
	// While the 500 is on its way, the (warm) deployment finishes and the container starts.
	step(10 * time.Second)
	kubetest.Eventually(t, 15*time.Second, func() error {
		step(time.Second) // a deployment asked for again would finish meanwhile
		if s := listSlots(t, sc.ns)[0]; s.Status.Phase != v1.SlotBusy {
			return fmt.Errorf("slot %s is %s (%s)", s.Name, s.Status.Phase, s.Status.Message)
		}
		return nil
	})
	step(10 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	if deps := deployments(); len(deps) != 1 || starts["deployed"] != 1 || starts["redeployed"] != 0 {
		t.Errorf("%d deployments (%+v), container starts %v: want one deployment and one start", len(deps), deps, starts)
	}
	if b := sc.bot(bot.Name); b.Status.Phase.Terminal() {
		t.Errorf("bot ended %s/%s", b.Status.Phase, b.Status.Reason)
	}
}
