package modelcheck

import (
	"fmt"
	"math/rand/v2"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify/sim"
)

// Several servers in the model (issue 16): some pools of a run spread over the simulator's
// server and one or two more (spec.coolify.servers), some with a per-server maxSlots. Actions
// take a server out of Coolify's reach and back (its deployments fail, its stops are lost),
// cordon and uncordon a pool's server, and change a server's maxSlots. Checked:
//
//	13: never more slots on a server than its maxSlots (a server whose maxSlots was lowered,
//	    or that was cordoned or dropped from the list, drains: it never grows meanwhile);
//	14: no bot is bound to a slot on a server its pool cordoned or no longer lists;
//	15 (settled): with every server back, no pool still reports one out.

// serverRecord is what the checker remembers of the servers.
type serverRecord struct {
	extra []string // the simulator's servers besides the fixture's
	// ceiling: pool|server → how many slots the server may hold for the pool (invariant 13).
	ceiling map[string]int
	down    map[string]bool // servers out of Coolify's reach now
	// counts: pool|server → the pool's slots there after the last step (read under the API
	// server's write lock, which must not list).
	counts map[string]int
}

// serverPools spreads some of the run's pools over several servers. The choice comes from a
// random stream of its own, so the runs of earlier seeds keep the rest of their world.
func (w *world) serverPools() {
	rng := rand.New(rand.NewPCG(w.seed, 0x73727673))
	w.srv = serverRecord{ceiling: map[string]int{}, down: map[string]bool{}}
	for i := range 2 {
		uuid := w.sim.AddServer(sim.ServerSpec{Name: fmt.Sprintf("extra-%d", i+1)})
		w.srv.extra = append(w.srv.extra, uuid)
	}
	for _, p := range w.pools {
		if rng.IntN(2) != 0 {
			continue
		}
		live := w.api.get(w.api.keyOf(p)).(*v1.BotPool)
		servers := []v1.PoolServer{{UUID: w.fixture.ServerUUID, Weight: 1}}
		for _, uuid := range w.srv.extra[:1+rng.IntN(2)] {
			srv := v1.PoolServer{UUID: uuid, Weight: int32(1 + rng.IntN(2))}
			if rng.IntN(2) == 0 {
				n := int32(rng.IntN(3))
				srv.MaxSlots = &n
			}
			servers = append(servers, srv)
			if rng.IntN(2) == 0 {
				w.sim.WarmImage(uuid, live.Spec.Image, live.Spec.ImageTag)
			}
		}
		live.Spec.Coolify.ServerUUID, live.Spec.Coolify.Servers = "", servers
		must(w.api.Update(w.ctx, live))
		*p = *live.DeepCopy()
		w.counts["pools on several servers"]++
	}
}

// slotServerOf is the server a slot lives on, as the pool controller records it.
func slotServerOf(s *v1.BotPoolSlot, p *v1.BotPool) string {
	if s.Spec.Server != "" {
		return s.Spec.Server
	}
	return p.Spec.Coolify.DefaultServer()
}

// serverAllows is how many slots the pool may keep on the server by its spec.
func serverAllows(p *v1.BotPool, uuid string) int {
	srv, listed := p.Spec.Coolify.Server(uuid)
	switch {
	case !listed || srv.Cordoned:
		return 0
	case srv.MaxSlots != nil:
		return int(*srv.MaxSlots)
	}
	return int(p.Spec.MaxSlots)
}

// serverCounts counts each pool's live slots per server.
func (w *world) serverCounts(slots []v1.BotPoolSlot) map[string]int {
	n := map[string]int{}
	for i := range slots {
		s := &slots[i]
		if p := w.pool(s.Spec.Pool); p != nil && s.DeletionTimestamp.IsZero() {
			n[p.Name+"|"+slotServerOf(s, p)]++
		}
	}
	return n
}

// checkServers is invariant 13, after every step.
func (w *world) checkServers(slots []v1.BotPoolSlot) {
	if w.srv.ceiling == nil {
		return
	}
	counts := w.serverCounts(slots)
	w.srv.counts = counts
	for _, p := range w.pools {
		if len(p.Spec.Coolify.Servers) == 0 {
			continue
		}
		for _, uuid := range append([]string{w.fixture.ServerUUID}, w.srv.extra...) {
			k := p.Name + "|" + uuid
			n, allows := counts[k], serverAllows(p, uuid)
			ceiling, known := w.srv.ceiling[k]
			if !known {
				ceiling = max(allows, n)
			}
			if n > ceiling {
				w.violate("invariant 13: pool %s holds %d slots on server %s, which allows %d (at most %d since it was lowered, cordoned or unlisted)", p.Name, n, uuid, allows, ceiling)
			}
			w.srv.ceiling[k] = max(allows, min(ceiling, n))
		}
	}
}

// servesBots reports whether the slot's server takes bots: listed and not cordoned in its
// pool's spec, and not out by the health the pool's status last recorded (what the
// dispatcher reads).
func (w *world) servesBots(s *v1.BotPoolSlot) bool {
	p := w.pool(s.Spec.Pool)
	if p == nil {
		return true
	}
	uuid := slotServerOf(s, p)
	if srv, listed := p.Spec.Coolify.Server(uuid); !listed || srv.Cordoned {
		return false
	}
	live := w.api.get(w.api.keyOf(p)).(*v1.BotPool)
	for _, st := range live.Status.Servers {
		if st.UUID == uuid && st.Health.Out() {
			return false
		}
	}
	return true
}

// drains reports whether the pool drains the slot's server: it takes no new slots there
// (cordoned, unlisted) or holds more than its maxSlots there.
func (w *world) drains(s *v1.BotPoolSlot, p *v1.BotPool) bool {
	if len(p.Spec.Coolify.Servers) == 0 {
		return false
	}
	uuid := slotServerOf(s, p)
	srv, listed := p.Spec.Coolify.Server(uuid)
	if !listed || srv.Cordoned {
		return true
	}
	return srv.MaxSlots != nil && w.srv.counts[p.Name+"|"+uuid] > int(*srv.MaxSlots)
}

// checkServerBinding is invariant 14, on every binding write.
func (w *world) checkServerBinding(s *v1.BotPoolSlot) {
	p := w.pool(s.Spec.Pool)
	if p == nil || len(p.Spec.Coolify.Servers) == 0 {
		return
	}
	uuid := slotServerOf(s, p)
	if srv, listed := p.Spec.Coolify.Server(uuid); !listed || srv.Cordoned {
		w.violate("invariant 14: bot %s was bound to slot %s on server %s, which pool %s cordoned or no longer lists", s.Spec.BotRef.Name, s.Name, uuid, p.Name)
	}
}

// checkServersSettled is 15: with every server reachable again, the pools' reads of their
// servers (one a minute) have seen it. A server a pool found Failing itself (its own starts
// there failed in a row) comes back on a timer of its own, unit-tested in controllers
// (TestServerFailing), not on Coolify's word.
func (w *world) checkServersSettled(when string) {
	for _, p := range w.pools {
		live := w.api.get(w.api.keyOf(p)).(*v1.BotPool)
		for _, st := range live.Status.Servers {
			if st.Health.Out() && st.Health != v1.ServerFailing && !w.srv.down[st.UUID] {
				w.violate("settled (%s): pool %s still reports server %s %s, which Coolify reaches", when, p.Name, st.UUID, st.Health)
			}
		}
	}
}

// serverPool picks a pool on several servers, nil when the run has none.
func (w *world) serverPool() *v1.BotPool {
	var multi []*v1.BotPool
	for _, p := range w.pools {
		if len(p.Spec.Coolify.Servers) > 0 {
			multi = append(multi, p)
		}
	}
	if len(multi) == 0 {
		return nil
	}
	return multi[w.rng.IntN(len(multi))]
}

// toggleServer takes a server out of Coolify's reach, or brings it back.
func (w *world) toggleServer() bool {
	if w.serverPool() == nil {
		return false
	}
	all := append([]string{w.fixture.ServerUUID}, w.srv.extra...)
	uuid := all[w.rng.IntN(len(all))]
	w.srv.down[uuid] = !w.srv.down[uuid]
	w.sim.SetServerReachable(uuid, !w.srv.down[uuid])
	w.detail = fmt.Sprintf("server %s reachable=%v", uuid, !w.srv.down[uuid])
	w.counts[fmt.Sprintf("server reachable=%v", !w.srv.down[uuid])]++
	return true
}

// serversBack makes every server reachable again (a settle's faults stop).
func (w *world) serversBack() {
	for uuid, down := range w.srv.down {
		if down {
			w.sim.SetServerReachable(uuid, true)
			w.srv.down[uuid] = false
		}
	}
}

// changeServer cordons or uncordons one of a pool's servers, or changes its maxSlots, as a
// person would; the cache sees it at once (the pool controller decides on the current spec).
func (w *world) changeServer() bool {
	p := w.serverPool()
	if p == nil {
		return false
	}
	live := w.api.get(w.api.keyOf(p)).(*v1.BotPool).DeepCopy()
	i := w.rng.IntN(len(live.Spec.Coolify.Servers))
	srv := &live.Spec.Coolify.Servers[i]
	if w.rng.IntN(2) == 0 {
		srv.Cordoned = !srv.Cordoned
		w.detail = fmt.Sprintf("%s server %s cordoned=%v", p.Name, srv.UUID, srv.Cordoned)
	} else {
		if n := int32(w.rng.IntN(4)); n < 3 {
			srv.MaxSlots = &n
		} else {
			srv.MaxSlots = nil
		}
		w.detail = fmt.Sprintf("%s server %s maxSlots=%v", p.Name, srv.UUID, describeMax(srv.MaxSlots))
	}
	must(w.api.Update(w.ctx, live))
	w.cache.sync(w.api.keyOf(live))
	*p = *live.DeepCopy()
	// What the server holds now is its ceiling until it drains below what it allows.
	counts := w.serverCounts(w.liveSlots())
	k := p.Name + "|" + srv.UUID
	w.srv.ceiling[k] = max(serverAllows(p, srv.UUID), counts[k])
	w.counts["change a server"]++
	return true
}

func describeMax(n *int32) string {
	if n == nil {
		return "unset"
	}
	return fmt.Sprint(*n)
}
