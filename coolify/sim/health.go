package sim

import (
	"fmt"
	"sort"
	"time"
)

// Server health as Coolify sees it. Coolify checks every server over SSH about once a minute:
// one that does not answer is marked is_reachable=false and is_usable=false, one whose Docker
// does not answer is reachable but not usable. Each deployment and each stop first asks whether
// the server is functional (reachable and usable) and gives up at once when it is not; the
// status check skips it, so its applications keep the status last seen. docs/coolify.md
// ("Servers that go away") says which parts are Coolify's code and which the simulator's model.

// Deployment log lines the simulator writes.
const (
	// logNotFunctional is the line Coolify's deployment job writes when it finds its server
	// not functional as it starts.
	logNotFunctional = "Server is not functional."
	// logServerLost is the simulator's line for a deployment whose server went away (or lost
	// its containers) while it ran: Coolify's remote command fails with the SSH error.
	logServerLost = "Deployment failed: the connection to the server was lost (server is not reachable)."
)

func (srv *server) functional() bool { return !srv.unreachable && !srv.unusable }

// SetServerReachable switches whether Coolify reaches the server over SSH. While unreachable,
// GET /servers reads is_reachable=false and is_usable=false; deployments to it are accepted and
// fail when a worker takes them (those running fail at once); stops are accepted and do nothing;
// deletions drop the application and leave its container running (Orphans); the containers
// there keep running and their applications keep the status last seen. Back to true, the
// containers are still there: an outage of the connection, not a reboot (LoseServerContainers).
// It panics for a server that was never added.
func (s *Sim) SetServerReachable(serverUUID string, reachable bool) {
	s.setHealth(serverUUID, func(srv *server) { srv.unreachable = !reachable })
}

// SetServerUsable switches whether the server's Docker answers: an unusable server is reachable
// but not functional, with the same effects as an unreachable one. It panics for a server that
// was never added.
func (s *Sim) SetServerUsable(serverUUID string, usable bool) {
	s.setHealth(serverUUID, func(srv *server) { srv.unusable = !usable })
}

func (s *Sim) setHealth(serverUUID string, change func(*server)) {
	s.locked(func() {
		s.advance() // what was due before the change runs with the health it had
		srv := s.mustServer(serverUUID)
		now := s.clk.Now()
		was := srv.functional()
		change(srv)
		switch {
		case was && !srv.functional():
			srv.downSince = now
			s.failRunning(srv, now)
		case !was && srv.functional():
			srv.downSince = time.Time{}
		}
		s.schedule(now)
	})
}

// locked runs fn under s.mu, then the hooks it queued outside it; the lock is released even
// when fn panics (an unknown server).
func (s *Sim) locked(fn func()) {
	hooks := func() []func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		fn()
		return s.takeHooks()
	}()
	runHooks(hooks)
}

// LoseServerContainers makes every container on the server exit now (hook reason "lost"), the
// orphans' included, and fails the deployments running there: a machine rebooted without its
// containers coming back, rebuilt, or with Docker's state wiped. It leaves the health alone
// (pair it with SetServerReachable for an outage that ends that way) and keeps the image cache,
// which lives on disk (ClearImageCache drops it). Coolify sees the containers gone at its next
// status check, once the server is functional. It panics for a server that was never added.
func (s *Sim) LoseServerContainers(serverUUID string) {
	s.locked(func() {
		s.advance()
		srv := s.mustServer(serverUUID)
		now := s.clk.Now()
		s.failRunning(srv, now)
		for _, k := range sortedKeys(s.apps) {
			if a := s.apps[k]; a.server == srv {
				s.stopContainer(a, now, "lost")
			}
		}
		for _, a := range srv.orphans {
			s.stopContainer(a, now, "lost")
		}
		srv.orphans = nil
		s.schedule(now)
	})
}

// ClearImageCache empties the server's image cache, as on a fresh disk: the next deployment of
// each image there pulls cold. It panics for a server that was never added.
func (s *Sim) ClearImageCache(serverUUID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.mustServer(serverUUID).images)
}

// Orphans lists the containers still running whose application was deleted while its server
// was not functional (Coolify forgot them; nothing removes them but LoseServerContainers),
// sorted by name.
func (s *Sim) Orphans() []AppInfo {
	s.mu.Lock()
	s.advance()
	hooks := s.takeHooks()
	now := s.clk.Now()
	var out []AppInfo
	for _, k := range sortedKeys(s.servers) {
		srv := s.servers[k]
		kept := srv.orphans[:0]
		for _, a := range srv.orphans {
			if a.running { // a crash ends an orphan too
				kept = append(kept, a)
				out = append(out, s.appInfo(a, now))
			}
		}
		clear(srv.orphans[len(kept):])
		srv.orphans = kept
	}
	s.mu.Unlock()
	runHooks(hooks)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// failRunning fails the deployments running on srv (those holding a worker): their remote
// commands lose the server. Callers hold s.mu.
func (s *Sim) failRunning(srv *server, at time.Time) {
	for _, d := range s.active {
		if d.server == srv && d.status == depInProgress && d.hasWorker {
			s.fail(d, at, logServerLost)
		}
	}
}

// mustServer is a seeded server; a test naming another has a bug worth a loud stop.
// Callers hold s.mu.
func (s *Sim) mustServer(uuid string) *server {
	srv := s.servers[uuid]
	if srv == nil {
		panic(fmt.Sprintf("sim: no server %q (seed it with AddServer)", uuid))
	}
	return srv
}
