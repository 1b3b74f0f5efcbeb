package controllers

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/deploygate"
)

// TestDeployGateBoundsAServerOverItsPools: two pools of one Coolify user on one server share
// what the server runs (2 here) although each may deploy 5 at once; the same server uuid on
// another instance, or seen through another user's token, has a gate of its own; until the
// server's settings are known, the pools are bounded each on its own, as before.
func TestDeployGateBoundsAServerOverItsPools(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	g := &deploygate.Gate{Clock: fc}
	one, two := gatePool("team", "meet", "srv-0"), gatePool("team", "zoom", "srv-0")
	const instA, instB = "https://coolify-a.example/api/v1", "https://coolify-b.example/api/v1"
	srv := coolifyview.CoolifyServer{Instance: instA, Key: instA + "|user:a|srv-0", Runs: 2}

	if !g.Admit(one, srv, deploygate.DeployAsk{Slot: "meet-1", Warm: true}) || !g.Admit(two, srv, deploygate.DeployAsk{Slot: "zoom-1", Deploying: nil, Warm: true}) {
		t.Fatal("the server's two builds were not given")
	}
	if g.Admit(two, srv, deploygate.DeployAsk{Slot: "zoom-2", Deploying: []string{"zoom-1"}, Here: []string{"zoom-1"}, Warm: true}) {
		t.Fatal("a third deployment on a server that runs two: the pools do not share the server's bound")
	}
	other := gatePool("tenant-b", "meet", "srv-0")
	for _, elsewhere := range []coolifyview.CoolifyServer{
		{Instance: instB, Key: instB + "|user:a|srv-0", Runs: 2}, // same uuid, another instance
		{Instance: instA, Key: instA + "|user:b|srv-0", Runs: 2}, // another user's token
	} {
		if !g.Admit(other, elsewhere, deploygate.DeployAsk{Slot: "meet-1", Warm: true}) {
			t.Fatalf("%s shares the gate of another tenant's server", elsewhere.Key)
		}
		g.Done(other, "meet-1", true)
	}
	if !g.Admit(two, coolifyview.CoolifyServer{Instance: instA, Key: srv.Key}, deploygate.DeployAsk{Slot: "zoom-2", Deploying: []string{"zoom-1"}, Here: []string{"zoom-1"}, Warm: true}) {
		t.Fatal("settings unknown: the pool's own bound (5) should apply")
	}
	g.Done(two, "zoom-2", false)

	g.Done(one, "meet-1", true) // its deployment ended
	if !g.Admit(two, srv, deploygate.DeployAsk{Slot: "zoom-2", Deploying: []string{"zoom-1"}, Here: []string{"zoom-1"}, Warm: true}) {
		t.Fatal("a build freed by another pool's Done was not given")
	}
}

// TestDeployGateLearnsAServerFromEachPoolsCache: after a restart the gate knows nothing it
// admitted; each pool's pass tells it which of its slots deploy, and those count for the
// server, every pool's as the pool last saw them. A cache that still shows a slot Deploying
// after its Done lags, and is not believed.
func TestDeployGateLearnsAServerFromEachPoolsCache(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	g := &deploygate.Gate{Clock: fc}
	one, two := gatePool("team", "meet", "srv-0"), gatePool("team", "zoom", "srv-0")
	srv := coolifyview.CoolifyServer{Instance: "i", Key: "i|u|srv-0", Runs: 2}

	// meet's cache shows two deployments: the server is full, for meet and for zoom.
	if g.Admit(one, srv, deploygate.DeployAsk{Slot: "meet-3", Deploying: []string{"meet-1", "meet-2"}, Here: []string{"meet-1", "meet-2"}, Warm: true}) {
		t.Fatal("meet-3 admitted beside two deploying slots on a server that runs two")
	}
	if g.Admit(two, srv, deploygate.DeployAsk{Slot: "zoom-1", Warm: true}) {
		t.Fatal("zoom admitted while meet's cache shows the server full")
	}
	// meet-2's deployment ended; meet's cache does not show it yet.
	g.Done(one, "meet-2", true)
	if !g.Admit(one, srv, deploygate.DeployAsk{Slot: "meet-3", Deploying: []string{"meet-1", "meet-2"}, Here: []string{"meet-1", "meet-2"}, Warm: true}) {
		t.Fatal("meet-2 counts again after its Done, because a lagging cache still shows it")
	}
	if g.Admit(two, srv, deploygate.DeployAsk{Slot: "zoom-1", Warm: true}) {
		t.Fatal("zoom admitted beside meet-1 and meet-3")
	}
	// meet-1 ended in another process (no Done here): meet's next pass no longer shows it.
	if !g.Admit(one, srv, deploygate.DeployAsk{Slot: "meet-4", Deploying: []string{"meet-3"}, Here: []string{"meet-3"}, Warm: true}) {
		t.Fatal("meet-1, which meet's cache no longer shows, still counts")
	}
	g.Done(one, "meet-3", true)
	g.Done(one, "meet-4", true)
	if got := g.ServersHeld(); got != 0 {
		t.Fatalf("the gate holds %d servers after every Done", got)
	}
}

// TestDeployGateStartsGoBeforeRecycles: a standby pool's recycles (deployments no bot waits
// for) fill a server that runs two; a Stopped pool's start that finds no room there is
// remembered, and while it waits no recycle takes the room a Done frees: the start gets it.
// A recycle its pool's queued bots wait for is a start itself and is not held back. A start
// held only by its own pool's bound holds no other pool's recycles, and a start that stopped
// asking releases them after StartWaitTTL.
func TestDeployGateStartsGoBeforeRecycles(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	g := &deploygate.Gate{Clock: fc}
	standby, stopped := gatePool("team", "warm", "srv-0"), gatePool("team", "cold", "srv-0")
	srv := coolifyview.CoolifyServer{Instance: "i", Key: "i|u|srv-0", Runs: 2}
	recycle := func(slot string) bool { return g.Admit(standby, srv, deploygate.DeployAsk{Slot: slot, Warm: true}) }
	start := func(slot string) bool {
		return g.Admit(stopped, srv, deploygate.DeployAsk{Slot: slot, Warm: true, Start: true})
	}

	if !recycle("warm-1") || !recycle("warm-2") {
		t.Fatal("an idle server refused two recycles")
	}
	if start("cold-1") {
		t.Fatal("a third deployment on a server that runs two")
	}
	g.Done(standby, "warm-1", true)
	if recycle("warm-3") {
		t.Fatal("a recycle took the room a waiting start needs")
	}
	if !g.Admit(standby, srv, deploygate.DeployAsk{Slot: "warm-4", Warm: true, Start: true}) {
		t.Fatal("a recycle the pool's queued bots wait for was held back like housekeeping")
	}
	g.Done(standby, "warm-4", true)
	if !start("cold-1") {
		t.Fatal("the waiting start did not get the room a Done freed")
	}
	g.Done(stopped, "cold-1", true)
	g.Done(standby, "warm-2", true)
	if !recycle("warm-3") {
		t.Fatal("a recycle was refused after the start it waited behind got its room")
	}
	g.Done(standby, "warm-3", true)

	// A start held back by its own pool's bound (1 here) waits for that pool only.
	one := gatePool("team", "single", "srv-0")
	one.Spec.MaxConcurrentDeployments = 1
	if !g.Admit(one, srv, deploygate.DeployAsk{Slot: "single-1", Warm: true, Start: true}) {
		t.Fatal("the single pool's first start was refused")
	}
	if g.Admit(one, srv, deploygate.DeployAsk{Slot: "single-2", Deploying: []string{"single-1"}, Here: []string{"single-1"}, Warm: true, Start: true}) {
		t.Fatal("the single pool ran two deployments although its bound is one")
	}
	if !recycle("warm-5") {
		t.Fatal("a start waiting on its own pool's bound held another pool's recycle back")
	}
	g.Done(standby, "warm-5", true)

	// A start that stops asking (its bot went) holds recycles back for StartWaitTTL at most.
	if !recycle("warm-6") || start("cold-2") {
		t.Fatal("setup: the server should be full (single-1, warm-6) for cold-2")
	}
	g.Done(standby, "warm-6", true)
	if recycle("warm-7") {
		t.Fatal("a recycle went before the start that asked an instant ago")
	}
	fc.Step(deploygate.StartWaitTTL + time.Second)
	if !recycle("warm-7") {
		t.Fatal("a start that stopped asking still holds recycles back after startWaitTTL")
	}
}

// TestDeployGatePullsLeaveABuildToStarts: pre-pulls of every pool on a server take at most
// all its builds but one, only builds the slots' deployments leave free, and take turns in the
// order they asked; the slots' deployments are not held back by them. (The model check found
// pulls that could never finish holding both builds of a server for good, every start there
// timing out behind them.)
func TestDeployGatePullsLeaveABuildToStarts(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	g := &deploygate.Gate{Clock: fc}
	meet, zoom := gatePool("team", "meet", "srv-0"), gatePool("team", "zoom", "srv-0")
	key := func(p *v1.BotPool) types.NamespacedName {
		return types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
	}
	third := types.NamespacedName{Namespace: "team", Name: "third"}
	srv := coolifyview.CoolifyServer{Instance: "i", Key: "i|u|srv-0", Runs: 2}
	start := func(slot string, deploying ...string) bool {
		return g.Admit(zoom, srv, deploygate.DeployAsk{Slot: slot, Deploying: deploying, Here: deploying, Warm: true, Start: true})
	}

	if !g.AdmitPull(key(meet), srv) {
		t.Fatal("an idle server refused a pull")
	}
	if g.AdmitPull(key(zoom), srv) {
		t.Fatal("a second pull took the server's last build")
	}
	if !g.AdmitPull(key(zoom), coolifyview.CoolifyServer{Instance: "i", Key: "i|u|srv-1", Runs: 2}) {
		t.Fatal("a pull on another server was held back")
	}
	g.Pulling(key(zoom), "i|u|srv-1", false)
	if !start("zoom-1") || !start("zoom-2", "zoom-1") {
		t.Fatal("the slots' deployments were held back by a pull")
	}
	g.Pulling(key(meet), srv.Key, false) // the pull ended
	if g.AdmitPull(key(zoom), srv) {
		t.Fatal("a pull admitted beside two deployments on a server that runs two")
	}
	g.Done(zoom, "zoom-1", true)
	if g.AdmitPull(key(meet), srv) {
		t.Fatal("meet's pull went before zoom's, which asked first")
	}
	if !g.AdmitPull(key(zoom), srv) {
		t.Fatal("the pull whose turn it is did not get the build zoom-1 freed")
	}
	g.Done(zoom, "zoom-2", true)

	// Refused pulls take turns in the order they asked: a pool whose pull fails and asks
	// again at once waits behind the one that asked while it pulled.
	if g.AdmitPull(third, srv) {
		t.Fatal("a second pull on a server that runs two")
	}
	fc.Step(15 * time.Second)
	g.Pulling(key(zoom), srv.Key, false) // zoom's pull failed
	if g.AdmitPull(key(zoom), srv) {
		t.Fatal("a pool's pull went again before the pulls that waited for it")
	}
	if !g.AdmitPull(key(meet), srv) {
		t.Fatal("the pull that waited longest did not get the room")
	}
	g.Pulling(key(meet), srv.Key, false)
	if g.AdmitPull(key(zoom), srv) || !g.AdmitPull(third, srv) {
		t.Fatal("the pulls did not go in the order they asked")
	}
	g.Pulling(third, srv.Key, false)
	// zoom asked above, and waits its turn; one that stopped asking loses it after PullAskTTL.
	if g.AdmitPull(key(meet), srv) {
		t.Fatal("meet's pull went before zoom's, which asked before")
	}
	fc.Step(deploygate.PullAskTTL + time.Second)
	if !g.AdmitPull(key(meet), srv) {
		t.Fatal("a pool that stopped asking still holds its place in line")
	}
	// A pull its pool no longer confirms (a restart, a pool gone) is forgotten.
	fc.Step(deploygate.ServerHeldTTL + time.Second)
	if !g.AdmitPull(key(zoom), srv) {
		t.Fatal("a pull nobody confirmed for serverHeldTTL still holds the server's build")
	}
	g.Pulling(key(zoom), srv.Key, false)

	// A server of one build: the starts go first, a pull waits while one waits.
	one := coolifyview.CoolifyServer{Instance: "i", Key: "i|u|srv-3", Runs: 1}
	if !g.Admit(zoom, one, deploygate.DeployAsk{Slot: "zoom-5", Warm: true, Start: true}) ||
		g.Admit(zoom, one, deploygate.DeployAsk{Slot: "zoom-6", Deploying: []string{"zoom-5"}, Here: []string{"zoom-5"}, Warm: true, Start: true}) {
		t.Fatal("setup: one start on a server of one build")
	}
	g.Done(zoom, "zoom-5", true)
	if g.AdmitPull(key(meet), one) {
		t.Fatal("a pull took a one-build server from the start waiting for it")
	}
	// Unknown settings: only a pause holds a pull back.
	unknown := coolifyview.CoolifyServer{Instance: "i", Key: "i|u|srv-2"}
	if !g.AdmitPull(key(meet), unknown) || !g.AdmitPull(key(zoom), unknown) {
		t.Fatal("pulls refused on a server whose settings are unknown")
	}
}

// TestDeployGateForgetsAnEndedPull: a pool's pre-pull counts on its server through its slots'
// asks (PrePullFlight); once the pool says the pull ended, it holds no build there, though no
// slot of the pool asks again. Before, a pool whose pull failed and which then stalled kept a
// build for ServerHeldTTL, and another pool's rollout on the server waited twenty minutes (the
// model check, seed 4474694933379790).
func TestDeployGateForgetsAnEndedPull(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	g := &deploygate.Gate{Clock: fc}
	stalled, other := gatePool("team", "gamma", "srv-0"), gatePool("team", "alpha", "srv-0")
	srv := coolifyview.CoolifyServer{Instance: "i", Key: "i|u|srv-0", Runs: 2}
	pulling := []string{deploygate.PrePullFlight + "srv-0"}
	if !g.Admit(stalled, srv, deploygate.DeployAsk{Slot: "gamma-1", Here: pulling, Warm: true, Start: true}) {
		t.Fatal("setup: a start beside the pool's own pull on a server of two builds")
	}
	g.Done(stalled, "gamma-1", false)
	if g.Admit(other, srv, deploygate.DeployAsk{Slot: "alpha-1", Here: pulling, Warm: true}) {
		t.Fatal("two pulls in flight on a server of two builds, and another deployment was admitted")
	}
	fc.Step(time.Minute)
	g.Pulling(types.NamespacedName{Namespace: "team", Name: "gamma"}, srv.Key, false) // its pull failed; its slots ask no more
	if !g.Admit(other, srv, deploygate.DeployAsk{Slot: "alpha-1", Here: pulling, Warm: true}) {
		t.Fatal("a pull that ended still holds a build of its server")
	}
}

// TestDeployGateRateLimitPausesOnlyItsUser: a 429 for the Coolify user's rate limit pauses
// that user's deployments to the server, not another user's (another tenant's) on the same
// server; a full deployment queue is the server's, and pauses every user's there.
func TestDeployGateRateLimitPausesOnlyItsUser(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	g := &deploygate.Gate{Clock: fc}
	a, b := gatePool("tenant-a", "pool", "srv-0"), gatePool("tenant-b", "pool", "srv-0")
	srvA := coolifyview.CoolifyServer{Instance: "i", Key: "i|user:a|srv-0"}
	srvB := coolifyview.CoolifyServer{Instance: "i", Key: "i|user:b|srv-0"}

	g.Pause(srvA, false, fc.Now().Add(time.Minute))
	if g.Admit(a, srvA, deploygate.DeployAsk{Slot: "a-1", Warm: true}) {
		t.Fatal("the rate-limited user's deployment was admitted during its pause")
	}
	if !g.Admit(b, srvB, deploygate.DeployAsk{Slot: "b-1", Warm: true}) {
		t.Fatal("one user's rate limit paused another user's deployments to the same server")
	}
	g.Done(b, "b-1", true)
	g.Pause(srvB, true, fc.Now().Add(time.Minute))
	if g.Admit(a, srvA, deploygate.DeployAsk{Slot: "a-1", Warm: true}) || g.Admit(b, srvB, deploygate.DeployAsk{Slot: "b-1", Warm: true}) {
		t.Fatal("a full queue on the server did not pause every user's deployments there")
	}
	fc.Step(time.Minute)
	if !g.Admit(a, srvA, deploygate.DeployAsk{Slot: "a-1", Warm: true}) {
		t.Fatal("still paused after the Retry-After")
	}
}

// TestDeployGateUnsetBoundFollowsTheServer: a pool without maxConcurrentDeployments deploys
// as many at once as its server runs (6 here, above the fallback of 4), and 4 while the
// server's settings are unknown.
func TestDeployGateUnsetBoundFollowsTheServer(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	g := &deploygate.Gate{Clock: fc}
	pool := gatePool("team", "meet", "srv-0")
	pool.Spec.MaxConcurrentDeployments = 0
	admitted := func(srv coolifyview.CoolifyServer) int {
		var deploying []string
		for i := range 10 {
			slot := fmt.Sprintf("meet-%d", i)
			if g.Admit(pool, srv, deploygate.DeployAsk{Slot: slot, Deploying: deploying, Here: deploying, Warm: true, Start: true}) {
				deploying = append(deploying, slot)
			}
		}
		for _, slot := range deploying {
			g.Done(pool, slot, true)
		}
		return len(deploying)
	}
	if n := admitted(coolifyview.CoolifyServer{Instance: "i", Key: "i|u|srv-0", Runs: 6}); n != 6 {
		t.Fatalf("%d deployments at once on a server that runs 6, want 6", n)
	}
	if n := admitted(coolifyview.CoolifyServer{Instance: "i", Key: "i|u|srv-0"}); n != v1.DefaultMaxConcurrentDeployments {
		t.Fatalf("%d deployments at once while the server is unknown, want %d", n, v1.DefaultMaxConcurrentDeployments)
	}
}

// TestDeployGateSpreadsOverServers: a pool on two servers deploys on each up to what that
// server runs (a full server holds no deployment to the other), each server's first pull of
// the image runs alone there while the other server pulls beside it, and the pool's own
// maxConcurrentDeployments bounds its deployments over both.
func TestDeployGateSpreadsOverServers(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	g := &deploygate.Gate{Clock: fc}
	pool := gatePool("team", "meet", "")
	pool.Spec.MaxConcurrentDeployments = 0
	a := coolifyview.CoolifyServer{Instance: "i", Key: "i|u|srv-a", UUID: "srv-a", Runs: 2}
	b := coolifyview.CoolifyServer{Instance: "i", Key: "i|u|srv-b", UUID: "srv-b", Runs: 2}
	var deploying []string
	here := map[string][]string{}
	admit := func(srv coolifyview.CoolifyServer, slot string, warm bool) bool {
		ok := g.Admit(pool, srv, deploygate.DeployAsk{Slot: slot, Deploying: deploying, Here: here[srv.Key], Warm: warm, Start: true})
		if ok {
			deploying = append(deploying, slot)
			here[srv.Key] = append(here[srv.Key], slot)
		}
		return ok
	}

	// Cold image: one pull per server, side by side.
	if !admit(a, "a-1", false) || !admit(b, "b-1", false) {
		t.Fatal("each server's first pull should run, one per server")
	}
	if admit(a, "a-2", false) || admit(b, "b-2", false) {
		t.Fatal("a second deployment of a cold image ran beside the server's first pull")
	}
	g.Done(pool, "a-1", true) // a's pull finished: the image is cached on a, not on b
	deploying, here["i|u|srv-a"] = []string{"b-1"}, nil
	if !admit(a, "a-2", false) || !admit(a, "a-3", false) {
		t.Fatal("a server whose pull finished should run what it runs (2)")
	}
	if admit(a, "a-4", false) {
		t.Fatal("a third deployment on a server that runs two")
	}
	if admit(b, "b-2", false) {
		t.Fatal("b's image is still cold: its pull runs alone there")
	}

	// The pool's own bound spans its servers.
	pool.Spec.MaxConcurrentDeployments = 3
	g.Done(pool, "b-1", true)
	deploying, here["i|u|srv-b"] = []string{"a-2", "a-3"}, nil
	if !admit(b, "b-2", true) {
		t.Fatal("b has room and the pool is under its bound")
	}
	if admit(b, "b-3", true) {
		t.Fatal("the pool's maxConcurrentDeployments 3 was exceeded over its two servers")
	}
}

// TestDeployGateWakesRefusedSlotsOnDone: a Done wakes, at once, the slots the gate refused
// for room in that pool or on that server (another pool of the user there included), and no
// other tenant's, nor a slot that stopped asking; the woken slot is admitted although its
// cache still shows the ended deployment, for the server's bound and for the pool's own.
func TestDeployGateWakesRefusedSlotsOnDone(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	wake := make(chan event.GenericEvent, 16)
	g := &deploygate.Gate{Clock: fc, Wake: wake}
	woken := func() []string {
		var got []string
		for {
			select {
			case e := <-wake:
				got = append(got, e.Object.GetNamespace()+"/"+e.Object.GetName())
			default:
				sort.Strings(got)
				return got
			}
		}
	}
	meet, zoom := gatePool("team", "meet", "srv-0"), gatePool("team", "zoom", "srv-0")
	other := gatePool("tenant-b", "meet", "srv-0")
	srv := coolifyview.CoolifyServer{Instance: "i", Key: "i|user:a|srv-0", Runs: 2}
	otherSrv := coolifyview.CoolifyServer{Instance: "i", Key: "i|user:b|srv-0", Runs: 1}
	ask := func(slot string, deploying ...string) deploygate.DeployAsk {
		return deploygate.DeployAsk{Slot: slot, Deploying: deploying, Here: deploying, Warm: true, Start: true}
	}

	if !g.Admit(meet, srv, ask("meet-1")) || !g.Admit(meet, srv, ask("meet-2", "meet-1")) {
		t.Fatal("an idle server refused two deployments")
	}
	if g.Admit(meet, srv, ask("meet-3", "meet-1", "meet-2")) || g.Admit(zoom, srv, ask("zoom-1")) {
		t.Fatal("a third deployment on a server that runs two")
	}
	if !g.Admit(other, otherSrv, ask("meet-1")) || g.Admit(other, otherSrv, ask("meet-2", "meet-1")) {
		t.Fatal("the other tenant's server (runs one) did not admit one and refuse the second")
	}
	if got := woken(); len(got) != 0 {
		t.Fatalf("woken before any Done: %v", got)
	}

	g.Done(meet, "meet-1", true)
	if got, want := woken(), []string{"team/meet-3", "team/zoom-1"}; !slices.Equal(got, want) {
		t.Fatalf("meet-1's Done woke %v, want %v (the refused slots of its pool and server, no other tenant's)", got, want)
	}
	// The woken slot asks before meet-1's status reaches its cache.
	if !g.Admit(meet, srv, ask("meet-3", "meet-1", "meet-2")) {
		t.Fatal("the woken slot was refused for the deployment whose Done woke it (a lagging cache)")
	}

	// A slot that stopped asking (its bot went, say) is not woken.
	fc.Step(deploygate.StartWaitTTL + time.Second)
	g.Done(meet, "meet-2", true)
	if got := woken(); len(got) != 0 {
		t.Fatalf("woke %v, which stopped asking %s ago", got, deploygate.StartWaitTTL+time.Second)
	}
	g.Done(meet, "meet-3", true)
	woken()

	// The pool's own bound (maxConcurrentDeployments 1, the server's settings unknown).
	one := gatePool("team", "one", "srv-1")
	one.Spec.MaxConcurrentDeployments = 1
	unknown := coolifyview.CoolifyServer{Instance: "i", Key: "i|user:a|srv-1"}
	if !g.Admit(one, unknown, ask("one-1")) || g.Admit(one, unknown, ask("one-2", "one-1")) {
		t.Fatal("a pool that deploys one at a time did not admit one and refuse the second")
	}
	g.Done(one, "one-1", true)
	if got, want := woken(), []string{"team/one-2"}; !slices.Equal(got, want) {
		t.Fatalf("one-1's Done woke %v, want %v", got, want)
	}
	if !g.Admit(one, unknown, ask("one-2", "one-1")) {
		t.Fatal("the pool's bound counted a deployment its Done ended, because a lagging cache still shows it")
	}

	// No Wake: a Done wakes nobody and never blocks.
	quiet := &deploygate.Gate{Clock: fc}
	if !quiet.Admit(one, unknown, ask("one-1")) || quiet.Admit(one, unknown, ask("one-2", "one-1")) {
		t.Fatal("a gate without Wake admits differently")
	}
	quiet.Done(one, "one-1", true)
}
