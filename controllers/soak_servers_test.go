package controllers

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/bot"
	"botpool.dev/botpool/controllers/internal/policy"
)

// The soak's pools are spread over two simulated Coolify servers, and the chaos takes one of
// them out for a few minutes now and then: Coolify cannot reach it (unreachable), its Docker
// does not answer (unusable), or it is rebooted (unreachable, then back without its
// containers). Starts caught by an outage fail (Coolify refuses to deploy on a server it does
// not find functional, and fails the deployments running there); their bots must go back to
// the queue and start on the other server, never end Fatal while they have start attempts
// left. What the soak checks of it: invariant 13 (no server holds more of a pool's slots than
// its maxSlots) and 14 (no bot bound on a cordoned or unlisted server) every round; 15 (a
// server back is taken back: no pool reports one out) whenever the pools converge; every
// round, that a bot sent back to the queue has its failed start recorded and that a bot that
// reported running is never sent back (checkStarts); at the end, that no bot failed a start
// for a reason of the infrastructure with attempts left (checkFailedStart), and that the
// outages caught starts at all.

// Kinds of server outage.
const (
	outageUnreachable = "unreachable"
	outageUnusable    = "unusable"
	outageRebooted    = "rebooted" // unreachable, then back with its containers lost
)

// soakOutage is one server outage of the chaos.
type soakOutage struct {
	n      int // 1, 2… in the order planned
	server string
	kind   string
	from   time.Time // fake clock; zero until it begins
	to     time.Time // zero while it lasts
}

func (o *soakOutage) String() string {
	to := "…"
	if !o.to.IsZero() {
		to = o.to.Format(time.TimeOnly)
	}
	return fmt.Sprintf("#%d %s %s %s–%s", o.n, o.server, o.kind, o.from.Format(time.TimeOnly), to)
}

// caught reports whether a start that failed on server at `at` (as the bot controller saw it)
// fell in the outage: from its start to `slack` after its end (the failure reaches the bot a
// pass or two after the slot saw it).
func (o *soakOutage) caught(server string, at time.Time, slack time.Duration) bool {
	if o.from.IsZero() || server != o.server || at.Before(o.from) {
		return false
	}
	return o.to.IsZero() || !at.After(o.to.Add(slack))
}

// soakOutageWindow is the length of a server outage: 2 to 6 minutes, long enough for the
// pools to read the server's health (once a minute) and route around it.
const (
	soakOutageMin = int(2 * time.Minute / soakInterval)
	soakOutageMax = int(6 * time.Minute / soakInterval)
)

// planOutages draws the server outages within [from, to): one in each of n equal parts,
// beginning at the part's largest burst of arrivals at the Stopped pool (the one whose starts
// are deployments), just before those bots arrive: the pools learn of the outage only from
// their next read of the servers (within the minute, sooner after a failed deployment), so
// each outage catches starts. The kind is drawn; the server is the one where the Stopped
// pool has the most free slots as the outage begins (where the burst's bots will deploy),
// the drawn one among equals.
func (s *soak) planOutages(steps, from, to int, at func(int, func())) {
	n := max(3, steps/160)
	part := (to - from) / n
	if part < soakOutageMax+3 || len(s.servers) < 2 {
		return
	}
	kinds := []string{outageUnreachable, outageUnusable, outageRebooted}
	for i := range n {
		length := soakOutageMin + s.rng.IntN(soakOutageMax-soakOutageMin+1)
		lo, hi := from+i*part, from+(i+1)*part-length-1
		start, most := lo+s.rng.IntN(hi-lo), 0
		for step := lo; step < hi; step++ {
			k := 0
			for _, a := range s.arrivals[step] {
				if !s.lanes[a.lane].pool.Spec.Standby.Running() {
					k++
				}
			}
			if k > most {
				start, most = step, k
			}
		}
		o := &soakOutage{n: i + 1, server: s.servers[s.rng.IntN(len(s.servers))], kind: kinds[s.rng.IntN(len(kinds))]}
		s.outages = append(s.outages, o)
		at(start, func() { s.serverDown(o) })
		at(start+length, func() { s.serverUp(o) })
	}
}

// serverDown begins an outage.
func (s *soak) serverDown(o *soakOutage) {
	o.server = s.mostFree(o.server)
	o.from = clk.Now()
	if o.kind == outageUnusable {
		s.sc.sim.SetServerUsable(o.server, false)
	} else {
		s.sc.sim.SetServerReachable(o.server, false)
	}
	s.episodes["server outages ("+o.kind+")"]++
	s.t.Logf("server outage %s begins; the pools' slots there: %s", o, s.slotsOn(o.server))
}

// mostFree is the server where the Stopped pools have the most free slots now; drawn wins
// among equals.
func (s *soak) mostFree(drawn string) string {
	free := map[string]int{}
	for _, l := range s.lanes {
		if l.pool.Spec.Standby.Running() {
			continue
		}
		snap, err := l.obs.snapshot()
		if err != nil {
			return drawn
		}
		for _, sl := range snap.free() {
			free[policy.SlotServer(sl, l.pool)]++
		}
	}
	best := drawn
	for _, uuid := range s.servers {
		if free[uuid] > free[best] {
			best = uuid
		}
	}
	return best
}

// slotsOn counts the pools' slots on server by pool and phase.
func (s *soak) slotsOn(server string) string {
	phases := map[string]int{}
	for _, l := range s.lanes {
		snap, err := l.obs.snapshot()
		if err != nil {
			return err.Error()
		}
		for i := range snap.slots {
			if sl := &snap.slots[i]; policy.SlotServer(sl, l.pool) == server {
				phases[l.pool.Name+" "+string(sl.Status.Phase)]++
			}
		}
	}
	return countsString(phases)
}

// serverUp ends an outage: a rebooted server comes back without its containers.
func (s *soak) serverUp(o *soakOutage) {
	if o.kind == outageRebooted {
		s.sc.sim.LoseServerContainers(o.server)
	}
	s.sc.sim.SetServerReachable(o.server, true)
	s.sc.sim.SetServerUsable(o.server, true)
	o.to = clk.Now()
}

// outageOf is the outage that caught a start failed on server at `at`, or nil.
func (s *soak) outageOf(server string, at time.Time) *soakOutage {
	for _, o := range s.outages {
		if o.caught(server, at, soakOutageSlack) {
			return o
		}
	}
	return nil
}

// soakOutageSlack is how long after an outage's end a failed start still counts as its: the
// bot controller sees it a pass after the slot, and the soak's steps jump the clock.
const soakOutageSlack = soakRoundEvery*soakInterval + time.Minute

// reportRetries logs how many bots had failed starts and which outage caught them, and flags
// a run whose outages caught no start: they tested nothing.
func (s *soak) reportRetries() {
	var bots []v1.Bot
	for _, l := range s.lanes {
		snap, err := l.obs.snapshot()
		if err != nil {
			s.t.Fatal(err)
		}
		bots = append(bots, snap.bots...)
	}
	s.retriesCaught(bots)
}

// retriesCaught is reportRetries on the bots of every pool.
func (s *soak) retriesCaught(bots []v1.Bot) {
	byOutage := map[*soakOutage]map[types.UID]bool{}
	attempts, retried, otherAttempts := 0, 0, map[string]int{}
	ends := map[string]int{} // how the bots an outage caught ended
	for i := range bots {
		b := &bots[i]
		if len(b.Status.StartAttempts) == 0 {
			continue
		}
		retried++
		caughtBot := false
		for _, a := range b.Status.StartAttempts {
			attempts++
			if o := s.outageOf(a.Server, a.At.Time); o != nil {
				if byOutage[o] == nil {
					byOutage[o] = map[types.UID]bool{}
				}
				byOutage[o][b.UID] = true
				caughtBot = true
			} else {
				otherAttempts[string(a.Reason)]++
			}
		}
		if caughtBot {
			ends[strings.TrimSpace(string(b.Status.Phase)+" "+string(b.Status.Reason))]++
		}
	}
	parts := make([]string, 0, len(s.outages))
	caught := 0
	for _, o := range s.outages {
		names := make([]string, 0, len(byOutage[o]))
		for i := range bots {
			if byOutage[o][bots[i].UID] {
				names = append(names, bots[i].Name)
			}
		}
		sort.Strings(names)
		parts = append(parts, fmt.Sprintf("%s: %d bots%s", o, len(names), nameList(names)))
		caught += len(names)
	}
	s.t.Logf("failed starts: %d bots had %d; caught by the server outages: %d bots (%s), of which ended %s; other failed starts by reason: %s",
		retried, attempts, caught, strings.Join(parts, ", "), countsString(ends), countsString(otherAttempts))
	if len(s.outages) > 0 && caught == 0 {
		s.findings.violate("the server outages (%s) caught no start: they tested nothing", strings.Join(parts, ", "))
	}
}

// checkServers checks invariants 13 and 14 on a snapshot: no server holds more of the pool's
// slots (those not being deleted, as the pool counts them) than its maxSlots, and no bot is
// bound to a slot on a server the pool cordoned or no longer lists. The soak never lowers a
// bound or cordons a server: a breach is at once a violation.
func (o *soakObserver) checkServers(snap *soakSnapshot) {
	count := map[string]int{}
	for i := range snap.slots {
		sl := &snap.slots[i]
		server := policy.SlotServer(sl, o.pool)
		if sl.DeletionTimestamp.IsZero() {
			count[server]++
		}
		if ref := sl.Spec.BotRef; ref != nil {
			if st := policy.ServerState(o.pool, server); st != v1.ServerActive {
				o.violate("invariant 14: bot %s is bound to slot %s on server %s, which is %s", ref.Name, sl.Name, server, st)
			}
		}
	}
	for _, srv := range o.pool.Spec.Coolify.ServerList() {
		if srv.MaxSlots != nil && count[srv.UUID] > int(*srv.MaxSlots) {
			o.violate("invariant 13: server %s holds %d of the pool's slots, maxSlots %d", srv.UUID, count[srv.UUID], *srv.MaxSlots)
		}
	}
}

// checkStarts holds the pool to the rules of retried starts on a snapshot: a bot seen with a
// slot (Deploying or later) and seen in the queue again has its failed start recorded in
// status.startAttempts (the bot controller writes both at once); a bot that reported running
// (startedAt) is never back in the queue, and has no failed start recorded after it ran —
// it could join its meeting twice.
func (o *soakObserver) checkStarts(snap *soakSnapshot) {
	if o.startedWith == nil {
		o.startedWith = map[types.UID]int{}
	}
	for i := range snap.bots {
		b := &snap.bots[i]
		st := &b.Status
		n := len(st.StartAttempts)
		if st.StartedAt != nil {
			if st.Phase == v1.BotQueued {
				o.violate("bot %s reported running at %s, yet it is back in the queue (a second start)", b.Name, st.StartedAt.Format(time.TimeOnly))
			}
			for _, a := range st.StartAttempts {
				if a.At.After(st.StartedAt.Time) {
					o.violate("bot %s reported running at %s, yet a failed start was recorded at %s (%s in slot %s): it would be started again",
						b.Name, st.StartedAt.Format(time.TimeOnly), a.At.Format(time.TimeOnly), a.Reason, a.SlotName)
				}
			}
		}
		switch {
		case running(st.Phase):
			o.startedWith[b.UID] = n
		case st.Phase == v1.BotQueued:
			if seen, ok := o.startedWith[b.UID]; ok && n <= seen {
				o.violate("bot %s was sent back to the queue from slot %s without its failed start recorded (%d start attempts, as before)",
					b.Name, st.SlotName, n)
			}
			delete(o.startedWith, b.UID)
		default:
			delete(o.startedWith, b.UID)
		}
	}
}

// checkFailedStart checks a failed bot against the retry rule: a bot whose start failed for
// a reason of the infrastructure, and that never ran (no startedAt, never Alive, its binding
// claimed by no container), ends Fatal only at its last start attempt. It reports whether the
// bot is such a failed start (explained by its attempts).
func (o *soakObserver) checkFailedStart(b *v1.Bot) bool {
	st := &b.Status
	if st.Phase != v1.BotFatal || !bot.RetryableReasons[st.Reason] || policy.BotStarted(b) || st.Binding != nil {
		return false
	}
	n, limit := len(st.StartAttempts), bot.MaxStartAttempts(b, o.pool)
	if n < limit {
		o.violate("bot %s failed %s (%s) after %d of its %d start attempts: a failed start of the infrastructure must send it back to the queue",
			b.Name, st.Reason, st.Message, n, limit)
	}
	return true
}

// serversBack checks invariant 15 once the faults have stopped: every server is back, so the
// pool reports none of its servers out. It returns what is still reported out, or nil.
func serversBack(pool *v1.BotPool) error {
	var out []string
	for _, srv := range pool.Status.Servers {
		// Failing is the pool's own verdict on its starts there, back on its own timer
		// (TestServerFailing), not on Coolify's word.
		if srv.Health.Out() && srv.Health != v1.ServerFailing {
			out = append(out, srv.UUID+" "+string(srv.Health))
		}
	}
	if len(out) > 0 {
		sort.Strings(out)
		return fmt.Errorf("invariant 15: the pool still reports servers out, every one is back: %s", strings.Join(out, ", "))
	}
	return nil
}

// outageExplains reports whether an outage of the server of the bot's application (or of
// its last failed start) overlapped the bot's time in the pool: what it met there (a lost or
// failed deployment, a container that went away) is the outage's.
func (o *soakObserver) outageExplains(b *v1.Bot, outages []*soakOutage) bool {
	servers := map[string]bool{}
	if o.sim != nil {
		for _, a := range o.sim.Apps() {
			if a.UUID == b.Status.ApplicationUUID {
				servers[a.ServerUUID] = true
			}
		}
	}
	if n := len(b.Status.StartAttempts); n > 0 {
		servers[b.Status.StartAttempts[n-1].Server] = true
	}
	from, end := policy.QueuedAt(b), b.Status.FinishedAt.Time
	for _, out := range outages {
		if servers[out.server] && !out.from.IsZero() && !out.from.After(end) && (out.to.IsZero() || !out.to.Add(soakOutageSlack).Before(from)) {
			return true
		}
	}
	return false
}

// soakServerSpecs are the pools' servers: the fixture's and a second one, each holding a bit
// more than half a pool's slots, so one server down leaves the other most of the load.
func soakServerSpecs(servers []string, maxSlots int32, bounded bool) []v1.PoolServer {
	out := make([]v1.PoolServer, 0, len(servers))
	for _, uuid := range servers {
		srv := v1.PoolServer{UUID: uuid, Weight: 1}
		if bounded {
			m := maxSlots/2 + 1
			srv.MaxSlots = &m
		}
		out = append(out, srv)
	}
	return out
}

// serversAllUp brings every server back (faultsOff).
func (s *soak) serversAllUp() {
	for _, o := range s.outages {
		if !o.from.IsZero() && o.to.IsZero() {
			s.serverUp(o)
		}
	}
	for _, uuid := range s.servers {
		s.sc.sim.SetServerReachable(uuid, true)
		s.sc.sim.SetServerUsable(uuid, true)
	}
}

// nameList is " (a, b, c…)" for up to five names, "" for none.
func nameList(names []string) string {
	switch {
	case len(names) == 0:
		return ""
	case len(names) > 5:
		return " (" + strings.Join(names[:5], ", ") + "…)"
	}
	return " (" + strings.Join(names, ", ") + ")"
}
