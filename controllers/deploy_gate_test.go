package controllers

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify"
)

// TestDeployGateBoundsAServerOverItsPools: two pools of one Coolify user on one server share
// what the server runs (2 here) although each may deploy 5 at once; the same server uuid on
// another instance, or seen through another user's token, has a gate of its own; until the
// server's settings are known, the pools are bounded each on its own, as before.
func TestDeployGateBoundsAServerOverItsPools(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	g := &DeployGate{Clock: fc}
	one, two := gatePool("team", "meet", "srv-0"), gatePool("team", "zoom", "srv-0")
	const instA, instB = "https://coolify-a.example/api/v1", "https://coolify-b.example/api/v1"
	srv := coolifyServer{instance: instA, key: instA + "|user:a|srv-0", runs: 2}

	if !g.Admit(one, srv, "meet-1", nil, true) || !g.Admit(two, srv, "zoom-1", nil, true) {
		t.Fatal("the server's two builds were not given")
	}
	if g.Admit(two, srv, "zoom-2", []string{"zoom-1"}, true) {
		t.Fatal("a third deployment on a server that runs two: the pools do not share the server's bound")
	}
	other := gatePool("tenant-b", "meet", "srv-0")
	for _, elsewhere := range []coolifyServer{
		{instance: instB, key: instB + "|user:a|srv-0", runs: 2}, // same uuid, another instance
		{instance: instA, key: instA + "|user:b|srv-0", runs: 2}, // another user's token
	} {
		if !g.Admit(other, elsewhere, "meet-1", nil, true) {
			t.Fatalf("%s shares the gate of another tenant's server", elsewhere.key)
		}
		g.Done(other, "meet-1", true)
	}
	if !g.Admit(two, coolifyServer{instance: instA, key: srv.key}, "zoom-2", []string{"zoom-1"}, true) {
		t.Fatal("settings unknown: the pool's own bound (5) should apply")
	}
	g.Done(two, "zoom-2", false)

	g.Done(one, "meet-1", true) // its deployment ended
	if !g.Admit(two, srv, "zoom-2", []string{"zoom-1"}, true) {
		t.Fatal("a build freed by another pool's Done was not given")
	}
}

// TestDeployGateLearnsAServerFromEachPoolsCache: after a restart the gate knows nothing it
// admitted; each pool's pass tells it which of its slots deploy, and those count for the
// server, every pool's as the pool last saw them. A cache that still shows a slot Deploying
// after its Done lags, and is not believed.
func TestDeployGateLearnsAServerFromEachPoolsCache(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	g := &DeployGate{Clock: fc}
	one, two := gatePool("team", "meet", "srv-0"), gatePool("team", "zoom", "srv-0")
	srv := coolifyServer{instance: "i", key: "i|u|srv-0", runs: 2}

	// meet's cache shows two deployments: the server is full, for meet and for zoom.
	if g.Admit(one, srv, "meet-3", []string{"meet-1", "meet-2"}, true) {
		t.Fatal("meet-3 admitted beside two deploying slots on a server that runs two")
	}
	if g.Admit(two, srv, "zoom-1", nil, true) {
		t.Fatal("zoom admitted while meet's cache shows the server full")
	}
	// meet-2's deployment ended; meet's cache does not show it yet.
	g.Done(one, "meet-2", true)
	if !g.Admit(one, srv, "meet-3", []string{"meet-1", "meet-2"}, true) {
		t.Fatal("meet-2 counts again after its Done, because a lagging cache still shows it")
	}
	if g.Admit(two, srv, "zoom-1", nil, true) {
		t.Fatal("zoom admitted beside meet-1 and meet-3")
	}
	// meet-1 ended in another process (no Done here): meet's next pass no longer shows it.
	if !g.Admit(one, srv, "meet-4", []string{"meet-3"}, true) {
		t.Fatal("meet-1, which meet's cache no longer shows, still counts")
	}
	g.Done(one, "meet-3", true)
	g.Done(one, "meet-4", true)
	if got := g.serversHeld(); got != 0 {
		t.Fatalf("the gate holds %d servers after every Done", got)
	}
}

// TestDeploymentsCappedCondition: the advice appears when maxConcurrentDeployments exceeds
// what the server runs, names both numbers, leaves Ready alone, and goes away when the pool
// asks for no more, or while the settings are unknown.
func TestDeploymentsCappedCondition(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pool := gatePool("team", "meet", "srv-0")
	pool.Generation = 3
	pool.Spec.MaxConcurrentDeployments = 4
	settings := &coolify.ServerSettings{ConcurrentBuilds: 2, DeploymentQueueLimit: 25}
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
	setServerCondition(pool, &coolify.ServerSettings{ConcurrentBuilds: 4, DeploymentQueueLimit: 2}, now)
	if c := meta.FindStatusCondition(pool.Status.Conditions, v1.ConditionDeploymentsCapped); c == nil {
		t.Fatal("a queue of 2 bounds the server to 2, below 3")
	}
	setServerCondition(pool, nil, now)
	if c := meta.FindStatusCondition(pool.Status.Conditions, v1.ConditionDeploymentsCapped); c != nil {
		t.Fatal("advice kept while the settings are unknown")
	}
}
