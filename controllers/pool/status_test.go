package pool

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// TestDeploymentsCappedCondition: the advice appears when maxConcurrentDeployments exceeds
// what the server runs, names both numbers, leaves Ready alone, and goes away when the pool
// asks for no more, or while the settings are unknown.
func TestDeploymentsCappedCondition(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pool := bt.MakePool("team", "meet").Image("bot", "1").Placement("", "srv-0", "").Obj()
	pool.Generation = 3
	pool.Spec.MaxConcurrentDeployments = 4
	settings := map[string]coolify.ServerSettings{"srv-0": {ConcurrentBuilds: 2, DeploymentQueueLimit: 25}}
	setServerCondition(pool, settings, now)
	c := meta.FindStatusCondition(pool.Status.Conditions, v1.ConditionDeploymentsCapped)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1.ReasonServerRunsFewer || c.ObservedGeneration != 3 {
		t.Fatalf("condition %+v", c)
	}
	pool.Spec.MaxConcurrentDeployments = 2
	setServerCondition(pool, settings, now)
	if c := meta.FindStatusCondition(pool.Status.Conditions, v1.ConditionDeploymentsCapped); c != nil {
		t.Fatalf("still capped at 2 of 2: %+v", c)
	}
	pool.Spec.MaxConcurrentDeployments = 3
	setServerCondition(pool, map[string]coolify.ServerSettings{"srv-0": {ConcurrentBuilds: 4, DeploymentQueueLimit: 2}}, now)
	if c := meta.FindStatusCondition(pool.Status.Conditions, v1.ConditionDeploymentsCapped); c == nil {
		t.Fatal("a queue of 2 bounds the server to 2, below 3")
	}
	setServerCondition(pool, nil, now)
	if c := meta.FindStatusCondition(pool.Status.Conditions, v1.ConditionDeploymentsCapped); c != nil {
		t.Fatal("advice kept while the settings are unknown")
	}
	pool.Spec.MaxConcurrentDeployments = 0 // unset: follows the server
	setServerCondition(pool, settings, now)
	if c := meta.FindStatusCondition(pool.Status.Conditions, v1.ConditionDeploymentsCapped); c != nil {
		t.Fatalf("advice on a pool that asks for nothing: %+v", c)
	}

	// Several servers: their runs add up; a cordoned one counts for nothing, an unknown one
	// makes the sum unknown.
	pool.Spec.MaxConcurrentDeployments = 5
	pool.Spec.Coolify.ServerUUID = ""
	pool.Spec.Coolify.Servers = []v1.PoolServer{{UUID: "a"}, {UUID: "b"}, {UUID: "c", Cordoned: true}}
	two := coolify.ServerSettings{ConcurrentBuilds: 2, DeploymentQueueLimit: 25}
	setServerCondition(pool, map[string]coolify.ServerSettings{"a": two, "b": two}, now)
	c = meta.FindStatusCondition(pool.Status.Conditions, v1.ConditionDeploymentsCapped)
	if c == nil || !strings.Contains(c.Message, "servers a, b run 4 deployment(s) at once in all") {
		t.Fatalf("5 asked of two servers running 2 each: condition %+v", c)
	}
	pool.Spec.MaxConcurrentDeployments = 4
	setServerCondition(pool, map[string]coolify.ServerSettings{"a": two, "b": two}, now)
	if c := meta.FindStatusCondition(pool.Status.Conditions, v1.ConditionDeploymentsCapped); c != nil {
		t.Fatalf("4 asked of two servers running 2 each: %+v", c)
	}
	pool.Spec.MaxConcurrentDeployments = 5
	setServerCondition(pool, map[string]coolify.ServerSettings{"a": two}, now)
	if c := meta.FindStatusCondition(pool.Status.Conditions, v1.ConditionDeploymentsCapped); c != nil {
		t.Fatalf("advice while server b's settings are unknown: %+v", c)
	}
}

// TestStalledMessageSaysHowToOptIn: a pool refused its credentials Secret for want of the
// opt-in label says, in its Stalled condition, the exact command that opts in.
func TestStalledMessageSaysHowToOptIn(t *testing.T) {
	pool := bt.MakePool("team", "pool").Credentials("coolify").Obj()
	const cmd = "kubectl label secret coolify -n team botpool.dev/allow-pool-use=true"
	if msg := stalledMessage(&poolScope{pool: pool, stalled: v1.ReasonCredentialsNotAllowed}); !strings.Contains(msg, cmd) {
		t.Errorf("the pool's Stalled message %q does not say the command %q", msg, cmd)
	}
}
