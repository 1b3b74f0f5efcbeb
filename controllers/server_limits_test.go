package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	slotctrl "botpool.dev/botpool/controllers/slot"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/kubetest"
)

// capped waits until the pool's DeploymentsCapped condition is as want says (nil: absent)
// for the pool's current generation, and returns the pool.
func capped(t *testing.T, key client.ObjectKey, want func(*metav1.Condition) error) *v1.BotPool {
	t.Helper()
	pool := &v1.BotPool{}
	kubetest.Eventually(t, 15*time.Second, func() error {
		if err := env.Client.Get(context.Background(), key, pool); err != nil {
			return err
		}
		if pool.Status.ObservedGeneration != pool.Generation {
			return fmt.Errorf("generation %d not observed yet", pool.Generation)
		}
		return want(meta.FindStatusCondition(pool.Status.Conditions, v1.ConditionDeploymentsCapped))
	})
	return pool
}

func isCapped(c *metav1.Condition) error {
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1.ReasonServerRunsFewer {
		return fmt.Errorf("DeploymentsCapped = %+v", c)
	}
	return nil
}

func notCapped(c *metav1.Condition) error {
	if c != nil {
		return fmt.Errorf("DeploymentsCapped still %+v", c)
	}
	return nil
}

// TestPoolSaysWhenItsServerRunsFewerDeployments: a pool that may deploy 4 at once on a server
// whose concurrent_builds is 2 says so (and stays Ready); lowering it to 2 clears the advice.
func TestPoolSaysWhenItsServerRunsFewerDeployments(t *testing.T) {
	sc := newScenarioOn(t, "capped", sim.Config{}, sim.ServerSpec{UUID: "srv-two", Name: "two", ConcurrentBuilds: 2},
		func(p *v1.BotPool) { p.Spec.MaxConcurrentDeployments = 4 })
	sc.prePulled() // a pool is Ready once its image is on a server
	key := client.ObjectKeyFromObject(sc.pool)
	pool := capped(t, key, isCapped)
	c := meta.FindStatusCondition(pool.Status.Conditions, v1.ConditionDeploymentsCapped)
	if c.ObservedGeneration != pool.Generation || !strings.Contains(c.Message, "maxConcurrentDeployments is 4") || !strings.Contains(c.Message, "runs 2") {
		t.Errorf("condition %+v", c)
	}
	if !meta.IsStatusConditionTrue(pool.Status.Conditions, v1.ConditionReady) {
		t.Errorf("advice made the pool not Ready: %+v", pool.Status.Conditions)
	}

	// The pool controller writes the pool's status meanwhile: update the latest version.
	kubetest.Eventually(t, 10*time.Second, func() error {
		latest := &v1.BotPool{}
		if err := env.Client.Get(context.Background(), key, latest); err != nil {
			return err
		}
		latest.Spec.MaxConcurrentDeployments = 2
		return env.Client.Update(context.Background(), latest)
	})
	capped(t, key, notCapped)
}

// TestPoolsOfOneServerShareItsBuilds: two pools of one Coolify user on a server that runs one
// deployment at once never deploy together, though each may deploy four; a pool on another
// Coolify instance, with a server of the same uuid, deploys meanwhile.
func TestPoolsOfOneServerShareItsBuilds(t *testing.T) {
	narrow := sim.ServerSpec{UUID: "srv-narrow", Name: "narrow", ConcurrentBuilds: 1}
	four := func(p *v1.BotPool) { p.Spec.MaxConcurrentDeployments = 4 } // capped: the settings are known
	a := newScenarioOn(t, "share-a", sim.Config{}, narrow, four)
	other := newScenarioOn(t, "share-c", sim.Config{}, narrow, four) // another simulator: another instance
	connector.use("share-b", a.api)
	b := newPool(a.ns, "share-b", four, func(p *v1.BotPool) {
		p.Spec.MaxSlots, p.Spec.MinIdle, p.Spec.Coolify.ServerUUID = 1, 1, narrow.UUID
	})
	if err := env.Client.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), b) })
	for _, p := range []*v1.BotPool{a.pool, b, other.pool} {
		capped(t, client.ObjectKeyFromObject(p), isCapped) // the server's settings are known
	}
	slotOfPool := func(ns, pool string) (*v1.BotPoolSlot, error) {
		for _, s := range listSlots(t, ns) {
			if s.Spec.Pool == pool {
				return &s, nil
			}
		}
		return nil, fmt.Errorf("pool %s has no slot yet", pool)
	}
	kubetest.Eventually(t, 15*time.Second, func() error {
		for _, p := range []*v1.BotPool{a.pool, b, other.pool} {
			s, err := slotOfPool(p.Namespace, p.Name)
			if err != nil {
				return err
			}
			if s.Status.Phase != v1.SlotIdle {
				return fmt.Errorf("slot %s is %s", s.Name, s.Status.Phase)
			}
		}
		return nil
	})
	// The pools' own pre-pulls take the narrow server's one build first: they end before the
	// bots come, so the clock can stand still from there on.
	for _, p := range []*v1.BotPool{a.pool, b, other.pool} {
		waitPrePull(t, client.ObjectKeyFromObject(p), func() { clk.Step(5 * time.Second) })
	}
	narrowWaits := func() (bool, error) {
		for _, pool := range []string{a.pool.Name, b.Name} {
			s, err := slotOfPool(a.ns, pool)
			if err != nil {
				return false, err
			}
			if s.Spec.BotRef != nil && s.Status.Phase == v1.SlotIdle && strings.Contains(s.Status.Message, slotctrl.GateWaitMessage) {
				return true, nil
			}
		}
		return false, nil
	}
	newBot(t, a.ns, "bot-a", a.pool.Name)
	newBot(t, a.ns, "bot-b", b.Name)
	// With the clock still, the narrow server's one deployment cannot end: one bot deploys
	// and the other waits for the server, for as long as the test looks.
	kubetest.Eventually(t, 30*time.Second, func() error {
		waits, err := narrowWaits()
		if err == nil && !waits {
			err = errors.New("no bot of the narrow server waits for it yet")
		}
		return err
	})
	// Meanwhile the other instance's pool deploys on its server of the same uuid: its gate is
	// not the narrow server's.
	newBot(t, other.ns, "bot-c", other.pool.Name)
	kubetest.Eventually(t, 30*time.Second, func() error {
		sc, err := slotOfPool(other.ns, other.pool.Name)
		if err != nil {
			return err
		}
		if sc.Status.Phase != v1.SlotDeploying && sc.Status.Phase != v1.SlotBusy {
			return fmt.Errorf("the other instance's slot is %s (%s): it shares the narrow server's gate", sc.Status.Phase, sc.Status.Message)
		}
		return nil
	})
	if waits, err := narrowWaits(); err != nil || !waits {
		t.Fatalf("the narrow server's second bot stopped waiting while the clock stood still (%v)", err)
	}

	// Both bots of the narrow server run, one after the other, as the clock moves.
	busy := map[string]bool{}
	kubetest.Eventually(t, 30*time.Second, func() error {
		for _, pool := range []string{a.pool.Name, b.Name} {
			s, err := slotOfPool(a.ns, pool)
			if err != nil {
				return err
			}
			if s.Status.Phase == v1.SlotBusy {
				busy[pool] = true
			}
		}
		if !busy[a.pool.Name] || !busy[b.Name] {
			clk.Step(5 * time.Second) // the deployment on the narrow server moves on
			return errors.New("the narrow server's bots have not both run yet")
		}
		return nil
	})
	// Coolify's record: each deployment on the narrow server began after the one before it
	// had finished. (The slots' recorded phases may overlap for a moment: a slot leaves
	// Deploying, and frees the server, before its status write lands.)
	var narrowDeps []sim.DeploymentInfo
	pullers := a.pullerApps() // the pools' image pre-pulls are not the slots' deployments
	for _, d := range a.sim.Deployments() {
		if d.ServerUUID == narrow.UUID && !pullers[d.AppUUID] {
			narrowDeps = append(narrowDeps, d)
		}
	}
	if len(narrowDeps) != 2 {
		t.Fatalf("%d deployments on the narrow server, want 2: %+v", len(narrowDeps), narrowDeps)
	}
	if first, second := narrowDeps[0], narrowDeps[1]; first.Finished.IsZero() || first.Finished.After(second.Created) {
		t.Errorf("both pools deployed at once on a server that runs one: %+v began before %+v finished", second, first)
	}
}
