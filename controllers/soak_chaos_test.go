package controllers

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/internal/pgtest"
	"botpool.dev/botpool/store/postgres"
)

// soakErrorRate is the share of Coolify requests answered 500 during the chaos.
const soakErrorRate = 0.2

// Operations that may answer 429 in bursts: the ones a pool calls most (reads, stop, patch).
var soakBurstOps = []string{"list-applications", "list-deployments", "get-deployment-by-uuid",
	"list-deployments-by-app-uuid", "get-application-by-uuid", "stop-application-by-uuid", "update-application-by-uuid"}

// Operations whose injected errors happen after the work was done (a proxy timing out on a
// create that succeeded): the operator must adopt or de-duplicate, never leak or double.
var soakAfterOps = []string{"create-dockerimage-application", "deploy-by-tag-or-uuid"}

// plan draws the whole run from the seed: arrivals, deletions, and the fault episodes, each
// kind in windows that do not overlap.
func (s *soak) plan(steps int) {
	s.arrivals, s.deletions, s.events = map[int][]soakArrival{}, map[int][]soakArrival{}, map[int][]func(){}
	s.planBots(steps)
	at := func(step int, f func()) { s.events[step] = append(s.events[step], f) }

	// From the first step to the last: 20% errors, and as many on create and deploy after
	// the work was done.
	at(0, func() {
		s.setErrors()
		for _, op := range soakAfterOps {
			s.sc.sim.SetFault(op, sim.Fault{ErrorRate: soakErrorRate, AfterProcessing: true})
		}
	})
	// Crashes and failed pulls end this long before the faults stop: a crashed bot is only
	// found out by its silence (a crash comes up to 2 minutes after the start, the timeout 5
	// minutes later, its nudge within 2 more), and the pool must have found it by then.
	timeout := int((v1.DefaultHeartbeatTimeout + 5*time.Minute) / soakInterval)
	for _, w := range s.windows(max(2, steps/60), 2, 6, 5, steps-5) {
		latency := time.Duration(80+s.rng.IntN(170)) * time.Millisecond
		at(w[0], func() { s.latency = latency; s.setErrors(); s.episodes["latency spikes"]++ })
		at(w[1], func() { s.latency = 0; s.setErrors() })
	}
	for _, w := range s.windows(max(2, steps/180), 1, 3, 5, steps-5) {
		at(w[0], func() { s.sc.sim.SetOutage(true); s.episodes["outages"]++ })
		at(w[1], func() { s.sc.sim.SetOutage(false) })
	}
	for _, w := range s.windows(max(2, steps/150), 3, 10, 10, steps-timeout) {
		crash := sim.Crash{After: time.Duration(20+s.rng.IntN(100)) * time.Second, Loop: s.rng.IntN(2) == 0}
		kind := "crash windows"
		if crash.Loop {
			kind = "crash-loop windows"
		}
		at(w[0], func() { s.sc.sim.CrashContainers(s.sc.pool.Spec.Image, crash); s.episodes[kind]++ })
		at(w[1], func() { s.sc.sim.CrashContainers(s.sc.pool.Spec.Image, sim.Crash{}) })
	}
	for range max(2, steps/60) {
		ops := []string{soakBurstOps[s.rng.IntN(len(soakBurstOps))], soakBurstOps[s.rng.IntN(len(soakBurstOps))]}
		n := 3 + s.rng.IntN(8)
		at(s.rng.IntN(steps), func() {
			for _, op := range ops {
				s.sc.sim.SetFault(op, sim.Fault{Burst: n, BurstCode: 429})
			}
			s.episodes["429 bursts"]++
		})
	}
	for range max(3, steps/50) {
		n := 1 + s.rng.IntN(3)
		at(s.rng.IntN(max(steps-timeout, 1)), func() { s.sc.sim.FailPulls(s.sc.pool.Spec.Image, n); s.episodes["pulls failed"] += n })
	}
	for _, step := range s.spread(s.cfg.restarts, 5, steps-5) {
		down := s.rng.IntN(3)
		at(step, func() { s.restartManager(down) })
	}
	// Postgres goes down once, in the middle, for 3 to 9 minutes: longer than a heartbeat
	// timeout, so a store that turned an outage into "dead" would fail bots.
	pgStart := steps*3/10 + s.rng.IntN(max(steps*3/10, 1))
	pgLen := int((3*time.Minute + time.Duration(s.rng.IntN(7))*time.Minute) / soakInterval)
	at(pgStart, s.stopPostgres)
	at(min(pgStart+pgLen, steps-1), s.resumePostgres)
	// Last, so the draws above stay what they were for a seed: a server goes out now and
	// then, and comes back before the crashes stop (a rebooted server's bots are found out by
	// their silence too).
	s.planOutages(steps, 5, steps-timeout, at)
}

// planBots draws the arrivals: 30% in bursts of 8 to 20, the rest alone, over the whole chaos
// (the faults stop with bots in flight); a mix of priorities, some impatient, and 5% deleted by
// their user later.
func (s *soak) planBots(steps int) {
	// Each bot goes to one of the pools, from a stream of its own: the rest of a seed's plan
	// stays what it was with one pool.
	lanes := rand.New(rand.NewPCG(s.cfg.seed, 0x6c616e65))
	span := max(steps, 1)
	at := make([]int, s.cfg.bots)
	i := 0
	for i < s.cfg.bots*3/10 {
		step, size := s.rng.IntN(span), 8+s.rng.IntN(13)
		for ; size > 0 && i < s.cfg.bots*3/10; size-- {
			at[i] = step
			i++
		}
	}
	for ; i < s.cfg.bots; i++ {
		at[i] = s.rng.IntN(span)
	}
	sort.Ints(at)
	for n, step := range at {
		a := soakArrival{name: fmt.Sprintf("bot-%04d", n), lane: lanes.IntN(len(s.lanes))}
		s.lanes[a.lane].planned++
		switch r := s.rng.IntN(10); {
		case r == 0:
			a.priority = 5
		case r < 3:
			a.priority = 1
		}
		if s.rng.IntN(10) == 0 {
			a.queueTimeout = "2m"
		}
		s.arrivals[step] = append(s.arrivals[step], a)
		if s.rng.IntN(20) == 0 {
			if del := step + 2 + s.rng.IntN(39); del < steps {
				s.deletions[del] = append(s.deletions[del], a)
			}
		}
	}
}

// windows draws n windows [start, end) of minLen to maxLen steps within [from, to), one in
// each of n equal parts, so windows of one kind never overlap.
func (s *soak) windows(n, minLen, maxLen, from, to int) [][2]int {
	var out [][2]int
	part := (to - from) / n
	if part < maxLen+1 {
		return nil
	}
	for i := range n {
		length := minLen + s.rng.IntN(maxLen-minLen+1)
		start := from + i*part + s.rng.IntN(part-length)
		out = append(out, [2]int{start, start + length})
	}
	return out
}

// spread draws n steps within [from, to), one in each of n equal parts.
func (s *soak) spread(n, from, to int) []int {
	var out []int
	if n == 0 || to-from < n {
		return nil
	}
	part := (to - from) / n
	for i := range n {
		out = append(out, from+i*part+s.rng.IntN(part))
	}
	return out
}

// setErrors sets the fault every operation shares: the error rate and the current latency.
func (s *soak) setErrors() {
	s.sc.sim.SetFault("*", sim.Fault{ErrorRate: soakErrorRate, Latency: s.latency})
}

// faultsOff ends the chaos: no more errors, bursts, latency, outages, failed pulls or crashes,
// every server back, and Postgres up.
func (s *soak) faultsOff() {
	s.latency = 0
	for _, op := range append(append([]string{"*"}, soakBurstOps...), soakAfterOps...) {
		s.sc.sim.SetFault(op, sim.Fault{})
	}
	s.sc.sim.SetOutage(false)
	s.sc.sim.FailPulls(s.sc.pool.Spec.Image, 0)
	s.sc.sim.CrashContainers(s.sc.pool.Spec.Image, sim.Crash{})
	s.serversAllUp()
	if s.pgDown {
		s.resumePostgres()
	}
}

// restartManager stops the operator, lets the world run on without it for `down` steps
// (Coolify deploys, bots fail to reach the bot API and retry), then starts a new one: a new
// process, with a new connection to Postgres when it is up, empty caches and no memory.
func (s *soak) restartManager(down int) {
	defer func(start time.Time) { s.wall["manager restarts"] += time.Since(start) }(time.Now())
	manager.stop()
	<-manager.done
	for range down {
		clk.Step(soakInterval)
		time.Sleep(soakPause)
	}
	if !s.pgDown {
		if err := s.store.Close(); err != nil {
			s.t.Logf("closing the old manager's store: %v", err)
		}
		s.store = s.openStore()
		managerStore = s.store
	}
	if err := runManager(env); err != nil {
		s.t.Fatal(err)
	}
	kubetest.Eventually(s.t, 20*time.Second, func() error {
		c, err := net.DialTimeout("tcp", botAPIAddr, time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
	for _, l := range s.lanes {
		l.obs.restarted()
	}
	s.restarts++
}

// startPostgres starts a throwaway Postgres and runs the manager on a store in it until the
// test ends (then the suite's memory store again).
func (s *soak) startPostgres() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg, err := pgtest.Start(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	s.pg = pg
	s.t.Cleanup(func() {
		if err := pg.Close(); err != nil {
			s.t.Log(err)
		}
	})
	s.dsn = pg.NewDatabase(s.t)
	s.store = s.openStore()
	managerStore = s.store
	restartManager(s.t)
	s.t.Cleanup(func() {
		if s.pgDown {
			s.resumePostgres()
		}
		managerStore = liveStore
		restartManager(s.t)
		if err := s.store.Close(); err != nil {
			s.t.Log(err)
		}
	})
}

func (s *soak) openStore() *postgres.Store {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The fake clock stamps and paces the store, and is the one clock of every store the soak
	// opens (one per manager restart): without WithSharedClock each would measure another
	// offset to the database's real clock, and a dead bot's last beat, written before a
	// restart, would read as younger than it is. A zero flush interval writes each heartbeat
	// batch at once instead of on a timer only a step of the clock would fire.
	st, err := postgres.New(ctx, s.dsn, postgres.WithClock(clk), postgres.WithSharedClock(), postgres.WithHeartbeatBatch(postgres.DefaultBatchSize, 0),
		postgres.WithWriteTimeout(2*time.Second))
	if err != nil {
		s.t.Fatal(err)
	}
	return st
}

func (s *soak) stopPostgres() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.pg.Stop(ctx); err != nil {
		s.t.Fatal(err)
	}
	s.pgDown, s.pgDownAt = true, clk.Now()
}

func (s *soak) resumePostgres() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.pg.Resume(ctx); err != nil {
		s.t.Fatal(err)
	}
	s.pgDown = false
	s.pgOutage += clk.Since(s.pgDownAt)
	s.pgRestarts++
}
