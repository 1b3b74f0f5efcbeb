package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/policy"
	poolctrl "botpool.dev/botpool/controllers/pool"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/kubetest"
)

// onServers spreads the pool over servers instead of its lone serverUUID.
func onServers(servers ...v1.PoolServer) func(*v1.BotPool) {
	return func(p *v1.BotPool) {
		p.Spec.Coolify.ServerUUID = ""
		for i := range servers {
			if servers[i].Weight == 0 {
				servers[i].Weight = 1
			}
		}
		p.Spec.Coolify.Servers = servers
	}
}

// slotsByServer counts the namespace's slots (not being deleted) by spec.server, and fails
// the wait when a slot's application is not on the server the slot names.
func (sc *scenario) slotsByServer() (map[string]int, error) {
	got := map[string]int{}
	for _, s := range listSlots(sc.t, sc.ns) {
		if !s.DeletionTimestamp.IsZero() {
			continue
		}
		got[s.Spec.Server]++
		if uuid := s.Status.ApplicationUUID; uuid != "" {
			if app, ok := sc.sim.App(uuid); ok && app.ServerUUID != s.Spec.Server {
				return nil, fmt.Errorf("slot %s names server %s, its application %s lives on %s", s.Name, s.Spec.Server, uuid, app.ServerUUID)
			}
		}
	}
	return got, nil
}

// waitServers waits until the slots are spread as want (server → slots, absent = 0).
func (sc *scenario) waitServers(want map[string]int) {
	sc.t.Helper()
	kubetest.Eventually(sc.t, 15*time.Second, func() error {
		got, err := sc.slotsByServer()
		if err != nil {
			return err
		}
		for srv, n := range want {
			if got[srv] != n {
				return fmt.Errorf("slots by server %v, want %v", got, want)
			}
		}
		for srv, n := range got {
			if want[srv] != n {
				return fmt.Errorf("slots by server %v, want %v", got, want)
			}
		}
		return nil
	})
}

// poolNow reads the pool.
func (sc *scenario) poolNow() *v1.BotPool {
	sc.t.Helper()
	p := &v1.BotPool{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(sc.pool), p); err != nil {
		sc.t.Fatal(err)
	}
	return p
}

// updatePool changes the pool's spec, retrying conflicts.
func (sc *scenario) updatePool(change func(*v1.BotPool)) {
	sc.t.Helper()
	kubetest.Eventually(sc.t, 10*time.Second, func() error {
		p := sc.poolNow()
		change(p)
		return env.Client.Update(context.Background(), p)
	})
}

// twoServerPool is a pool of at most maxSlots slots on its scenario's server (home) and
// another (other), keeping two warm, one on each.
func twoServerPool(t *testing.T, name string, maxSlots int32) (sc *scenario, home, other string) {
	t.Helper()
	sc = newScenario(t, name, sim.Config{})
	home = sc.pool.Spec.Coolify.ServerUUID
	other = sc.sim.AddServer(sim.ServerSpec{Name: "other"})
	sc.updatePool(func(p *v1.BotPool) {
		p.Spec.MaxSlots, p.Spec.MinIdle = maxSlots, 2
		onServers(v1.PoolServer{UUID: home}, v1.PoolServer{UUID: other})(p)
	})
	sc.waitServers(map[string]int{home: 1, other: 1})
	waitPhases(t, sc.ns, map[v1.SlotPhase]int{v1.SlotIdle: 2})
	return sc, home, other
}

// TestPoolSpreadsSlotsOverServers: new slots go to the server with the fewest slots for its
// weight, never to a cordoned one; each slot's application is created on the server its
// spec.server names, and status.servers counts them.
func TestPoolSpreadsSlotsOverServers(t *testing.T) {
	sc := newScenario(t, "spread", sim.Config{})
	a := sc.sim.AddServer(sim.ServerSpec{Name: "a"})
	b := sc.sim.AddServer(sim.ServerSpec{Name: "b"})
	c := sc.sim.AddServer(sim.ServerSpec{Name: "c"})
	sc.updatePool(func(p *v1.BotPool) {
		p.Spec.MaxSlots, p.Spec.MinIdle = 7, 7
		onServers(v1.PoolServer{UUID: sc.pool.Spec.Coolify.ServerUUID, Cordoned: true},
			v1.PoolServer{UUID: a}, v1.PoolServer{UUID: b, Weight: 2}, v1.PoolServer{UUID: c, Cordoned: true})(p)
	})
	// The pool's first slot (on its former lone server, now cordoned) is drained; the seven
	// wanted go to a and b by weight, 1:2 (b, a, b, b, a, b, b: ties go to the listed first).
	sc.waitServers(map[string]int{a: 2, b: 5})
	waitPhases(t, sc.ns, map[v1.SlotPhase]int{v1.SlotIdle: 7})
	kubetest.Eventually(t, 10*time.Second, func() error {
		got := map[string]string{}
		for _, s := range sc.poolNow().Status.Servers {
			got[s.UUID] = fmt.Sprintf("%s %d/%d free", s.State, s.Free, s.Slots)
		}
		want := map[string]string{sc.pool.Spec.Coolify.ServerUUID: "Cordoned 0/0 free", a: "Active 2/2 free", b: "Active 5/5 free", c: "Cordoned 0/0 free"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("status.servers %v, want %v", got, want)
		}
		return nil
	})
}

// TestPoolDrainsACordonedServer: cordoning a server removes its free slots at once and its
// busy one when its bot lets go; bots are bound only on the other server, which takes the
// pool's warm slots. A server's maxSlots bounds it: lowered, its free slots above it go, and
// a pool whose servers have no room says so (ServersFull).
func TestPoolDrainsACordonedServer(t *testing.T) {
	sc, home, other := twoServerPool(t, "drain", 6)

	// Bind a bot on the server to cordon: make "other" the only one with a free slot first.
	sc.updatePool(func(p *v1.BotPool) { p.Spec.Coolify.Servers[0].Cordoned = true })
	sc.waitServers(map[string]int{other: 2})
	busy := slotOf(t, newBot(t, sc.ns, "leaving", sc.pool.Name))
	if busy.Spec.Server != other {
		t.Fatalf("bot bound on %s, the cordoned server; want %s", busy.Spec.Server, other)
	}
	// Swap: uncordon home, cordon other. Other keeps only its bound slot; home gets the
	// two warm ones.
	sc.updatePool(func(p *v1.BotPool) {
		p.Spec.Coolify.Servers[0].Cordoned, p.Spec.Coolify.Servers[1].Cordoned = false, true
	})
	sc.waitServers(map[string]int{home: 2, other: 1})
	for _, s := range listSlots(t, sc.ns) {
		if s.Spec.Server == other && s.DeletionTimestamp.IsZero() && s.Name != busy.Name {
			t.Fatalf("free slot %s of the cordoned server survived", s.Name)
		}
	}
	next := slotOf(t, newBot(t, sc.ns, "arriving", sc.pool.Name))
	if next.Spec.Server != home {
		t.Fatalf("a bot was bound on the cordoned server %s", next.Spec.Server)
	}
	// The bot on the cordoned server ends: its slot goes with it.
	if err := env.Client.Delete(context.Background(), sc.bot("leaving")); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 15*time.Second, func() error {
		clk.Step(time.Second) // the bot's leaveGracePeriod, by the suite's clock
		got, err := sc.slotsByServer()
		if err != nil {
			return err
		}
		if got[other] != 0 {
			return fmt.Errorf("slots by server %v: the drained server still holds one", got)
		}
		return nil
	})

	// home's maxSlots 1: it holds the bound slot only; no server has room for minIdle.
	sc.updatePool(func(p *v1.BotPool) { p.Spec.Coolify.Servers[0].MaxSlots = ptr.To[int32](1) })
	sc.waitServers(map[string]int{home: 1})
	kubetest.Eventually(t, 10*time.Second, func() error {
		c := meta.FindStatusCondition(sc.poolNow().Status.Conditions, v1.ConditionReconciling)
		if c == nil || c.Reason != v1.ReasonServersFull {
			return fmt.Errorf("Reconciling %+v, want reason %s", c, v1.ReasonServersFull)
		}
		return nil
	})
}

// TestPoolMovesFromOneServerToSeveral: a pool switched from serverUUID to servers keeps its
// slots where they are — a slot created before slots recorded their server gets the old
// server written on it first — and places the new ones over the servers.
func TestPoolMovesFromOneServerToSeveral(t *testing.T) {
	sc := newScenario(t, "moving", sim.Config{}, func(p *v1.BotPool) { p.Spec.MaxSlots, p.Spec.MinIdle = 4, 1 })
	old := sc.pool.Spec.Coolify.ServerUUID
	first := sc.phase(v1.SlotIdle)
	if first.Spec.Server != old {
		t.Fatalf("new slot names server %q, want the pool's %s", first.Spec.Server, old)
	}
	// A slot as an earlier version made it: no spec.server.
	legacy := &v1.BotPoolSlot{}
	legacy.Namespace, legacy.Name = sc.ns, poolctrl.SlotName(sc.pool.Spec.Platform, 9)
	legacy.Labels = map[string]string{v1.LabelPool: sc.pool.Name}
	legacy.Spec.Pool = sc.pool.Name
	if err := env.Client.Create(context.Background(), legacy); err != nil {
		t.Fatal(err)
	}
	sc.waitServers(map[string]int{old: 2})
	waitPhases(t, sc.ns, map[v1.SlotPhase]int{v1.SlotIdle: 2})
	apps := map[string]string{}
	for _, s := range listSlots(t, sc.ns) {
		apps[s.Name] = s.Status.ApplicationUUID
	}

	b := sc.sim.AddServer(sim.ServerSpec{Name: "b"})
	sc.updatePool(func(p *v1.BotPool) {
		p.Spec.MinIdle = 4
		onServers(v1.PoolServer{UUID: old}, v1.PoolServer{UUID: b})(p)
	})
	sc.waitServers(map[string]int{old: 2, b: 2})
	waitPhases(t, sc.ns, map[v1.SlotPhase]int{v1.SlotIdle: 4})
	var kept []string
	for _, s := range listSlots(t, sc.ns) {
		if want, ok := apps[s.Name]; ok {
			if s.Status.ApplicationUUID != want || s.Spec.Server != old {
				t.Fatalf("slot %s moved: application %s on %s, was %s on %s", s.Name, s.Status.ApplicationUUID, s.Spec.Server, want, old)
			}
			kept = append(kept, s.Name)
		}
	}
	sort.Strings(kept)
	if len(kept) != 2 {
		t.Fatalf("kept slots %v, want both earlier ones", kept)
	}
}

// nudgePool makes the pool controller look at the pool now (an annotation change).
func (sc *scenario) nudgePool() {
	sc.t.Helper()
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{"test.botpool.dev/nudge":%q}}}`, clk.Now().String()+time.Now().String())))
	if err := env.Client.Patch(context.Background(), sc.poolNow(), patch); err != nil {
		sc.t.Fatal(err)
	}
}

// serverHealthIs waits until the pool's status shows the server with health h, stepping the
// suite's clock past the servers' refresh and nudging the pool to read them again.
// The clock moves at most a few refreshes in all: on a slow machine the polls come often, and
// an unbounded clock would fire the other bots' timers (queue, heartbeat, deployment).
func (sc *scenario) serverHealthIs(uuid string, h v1.ServerHealth) *v1.BotPool {
	sc.t.Helper()
	var p *v1.BotPool
	steps := 0
	kubetest.Eventually(sc.t, 15*time.Second, func() error {
		p = sc.poolNow()
		if got := policy.HealthOf(p, uuid); got != h {
			if steps < 3 {
				clk.Step(coolifyview.ServersRefresh)
				steps++
			}
			sc.nudgePool()
			return fmt.Errorf("server %s is %s, want %s", uuid, got, h)
		}
		return nil
	})
	return p
}

// TestPoolKeepsBotsOffAnUnreachableServer: when Coolify reports a server unreachable, the pool
// says so (status.servers health, ServerOut), stops offering that server's free slot, and
// serves its bots on the other server — creating a slot there to keep minIdle — while a bot
// it has no room for waits; when Coolify reports the server back, that waiting bot is bound
// to the server's free slot with no other nudge.
func TestPoolKeepsBotsOffAnUnreachableServer(t *testing.T) {
	sc, home, other := twoServerPool(t, "health", 3)
	sc.serverHealthIs(other, v1.ServerHealthy)

	sc.sim.SetServerReachable(other, false)
	p := sc.serverHealthIs(other, v1.ServerUnreachable)
	kubetest.Eventually(t, 10*time.Second, func() error {
		p = sc.poolNow()
		c := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionServerOut)
		if c == nil || c.Status != "True" || c.Reason != v1.ReasonServerNotFunctional {
			return fmt.Errorf("ServerOut %+v", c)
		}
		return nil
	})
	// minIdle 2 counts only the healthy server's free slot: a second one is made there.
	sc.waitServers(map[string]int{home: 2, other: 1})
	for _, name := range []string{"first", "second"} {
		if s := slotOf(t, newBot(t, sc.ns, name, sc.pool.Name)); s.Spec.Server != home {
			t.Fatalf("bot %s bound on %s, which Coolify reports unreachable", name, s.Spec.Server)
		}
	}
	newBot(t, sc.ns, "third", sc.pool.Name) // no room: maxSlots 3, the unreachable server's slot not offered
	kubetest.Eventually(t, 10*time.Second, func() error {
		if b := sc.bot("third"); b.Status.Phase != v1.BotQueued {
			return fmt.Errorf("third is %s, want Queued", b.Status.Phase)
		}
		return nil
	})
	for _, s := range listSlots(t, sc.ns) {
		if s.Spec.Server == other && s.Spec.BotRef != nil {
			t.Fatalf("slot %s of the unreachable server was bound to %s", s.Name, s.Spec.BotRef.Name)
		}
	}

	sc.sim.SetServerReachable(other, true)
	sc.serverHealthIs(other, v1.ServerHealthy)
	if s := slotOf(t, sc.bot("third")); s.Spec.Server != other {
		t.Fatalf("third bound on %s, want the server that came back (%s)", s.Spec.Server, other)
	}
	if c := meta.FindStatusCondition(sc.poolNow().Status.Conditions, v1.ConditionServerOut); c != nil {
		t.Fatalf("ServerOut kept after the server came back: %+v", c)
	}
}

// TestPoolRoutesAroundAServerItsTokenDoesNotSee: a listed server that Coolify's list of
// servers does not have (a typo, a deleted server, another team's) is NotFound: out, named in
// ServerOut, no slot of it offered or counted as free; the pool's bots run on its other server.
func TestPoolRoutesAroundAServerItsTokenDoesNotSee(t *testing.T) {
	sc := newScenario(t, "notfound", sim.Config{})
	home := sc.pool.Spec.Coolify.ServerUUID
	const ghost = "nosuchserver0000000000000"
	sc.updatePool(func(p *v1.BotPool) {
		p.Spec.MaxSlots, p.Spec.MinIdle = 4, 2
		onServers(v1.PoolServer{UUID: home}, v1.PoolServer{UUID: ghost})(p)
	})
	sc.serverHealthIs(ghost, v1.ServerNotFound)
	kubetest.Eventually(t, 10*time.Second, func() error {
		c := meta.FindStatusCondition(sc.poolNow().Status.Conditions, v1.ConditionServerOut)
		if c == nil || c.Status != "True" || !strings.Contains(c.Message, ghost) || !strings.Contains(c.Message, "NotFound") {
			return fmt.Errorf("ServerOut %+v, want True naming %s NotFound", c, ghost)
		}
		return nil
	})
	for _, name := range []string{"first", "second"} {
		if s := slotOf(t, newBot(t, sc.ns, name, sc.pool.Name)); s.Spec.Server != home {
			t.Fatalf("bot %s bound on %s, which the pool's Coolify token does not see", name, s.Spec.Server)
		}
	}
	for _, s := range listSlots(t, sc.ns) {
		if s.Spec.Server == ghost && (s.Status.ApplicationUUID != "" || s.Status.Phase != v1.SlotCreating) {
			t.Errorf("slot %s on the unknown server is %s with application %q, want Creating with none", s.Name, s.Status.Phase, s.Status.ApplicationUUID)
		}
	}
}

// TestLostStopIsSentAgain: Coolify drops a stop sent to a server it cannot reach, and the
// container runs on when the server is back — in the meeting of a bot that was deleted. The
// free slot sees its application running well after it stopped it and stops it again.
func TestLostStopIsSentAgain(t *testing.T) {
	sc := newScenario(t, "stray", sim.Config{})
	server := sc.pool.Spec.Coolify.ServerUUID
	sc.sim.WarmImage(server, sc.pool.Spec.Image, sc.pool.Spec.ImageTag)
	bot, _ := sc.bind("leaving")
	sc.phase(v1.SlotDeploying)
	step(40 * time.Second) // a warm deployment
	slot := sc.deployed()
	app := slot.Status.ApplicationUUID

	sc.sim.SetServerReachable(server, false)
	if err := env.Client.Delete(context.Background(), bot); err != nil {
		t.Fatal(err)
	}
	sc.slot("Idle, released", func(s *v1.BotPoolSlot) bool {
		clk.Step(time.Second) // the bot's leaveGracePeriod
		return s.Status.Phase == v1.SlotIdle && s.Spec.BotRef == nil
	})
	if a, _ := sc.sim.App(app); !a.Running {
		t.Fatal("setup: the stop reached a server Coolify cannot reach")
	}

	sc.sim.SetServerReachable(server, true)
	kubetest.Eventually(t, 30*time.Second, func() error {
		if a, _ := sc.sim.App(app); a.Running {
			clk.Step(20 * time.Second) // the application list's age, then StrayAfter
			sc.nudge()
			return fmt.Errorf("the container of the released slot still runs (%s)", a.Status)
		}
		return nil
	})
	sc.phase(v1.SlotIdle)
}

// TestSlotWaitsToDeleteOnAnUnreachableServer: Coolify deletes the application of a server it
// cannot reach but never removes its container. A slot being deleted while Coolify reports its
// server unreachable keeps its application (and says why) until the server is back.
func TestSlotWaitsToDeleteOnAnUnreachableServer(t *testing.T) {
	sc := newScenario(t, "undeleted", sim.Config{})
	server := sc.pool.Spec.Coolify.ServerUUID
	idle := sc.phase(v1.SlotIdle)
	app := idle.Status.ApplicationUUID
	sc.sim.SetServerReachable(server, false)
	sc.serverHealthIs(server, v1.ServerUnreachable)

	if err := env.Client.Delete(context.Background(), idle); err != nil {
		t.Fatal(err)
	}
	sc.slot("waiting for its server", func(s *v1.BotPoolSlot) bool {
		return !s.DeletionTimestamp.IsZero() && strings.Contains(s.Status.Message, "would leave its container running there")
	})
	if a, ok := sc.sim.App(app); !ok || a.Deleting {
		t.Fatalf("the application was deleted on a server Coolify cannot reach (exists %v)", ok)
	}

	sc.sim.SetServerReachable(server, true)
	kubetest.Eventually(t, 30*time.Second, func() error {
		if _, ok := sc.sim.App(app); ok {
			clk.Step(coolifyview.ServersRetry)
			sc.nudge()
			return fmt.Errorf("application %s not deleted yet", app)
		}
		return nil
	})
	if orphans := sc.sim.Orphans(); len(orphans) != 0 {
		t.Fatalf("containers left running without an application: %+v", orphans)
	}
}
