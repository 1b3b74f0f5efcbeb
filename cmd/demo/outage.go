package main

import (
	"fmt"
	"sync"
	"time"

	"botpool.dev/botpool/coolify/sim"
)

// serverUUIDs are the simulated servers of a demo on n servers: srv-1 is the one
// sim.SeedDefault makes, the others are added next to it.
func serverUUIDs(n int) []string {
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, fmt.Sprintf("srv-%d", i+1))
	}
	return out
}

// seedServers adds the servers after srv-1 (with the simulator's default capacity) and,
// unless cold, puts the bot image in every server's cache.
func seedServers(s *sim.Server, servers []string, cold bool) {
	for i, uuid := range servers {
		if i > 0 {
			s.AddServer(sim.ServerSpec{UUID: uuid, Name: fmt.Sprintf("bots-%d", i+1), IP: fmt.Sprintf("10.0.0.%d", i+1)})
		}
		if !cold {
			s.WarmImage(uuid, botImage, botImageTag)
		}
	}
}

// reachability is the simulator's switch the outage flips (a fake in tests).
type reachability interface {
	SetServerReachable(serverUUID string, reachable bool)
}

// outage takes one server down in Coolify (unreachable, as when SSH stops answering) at a
// moment of the burst, and back after a while: the server, its slots and their containers stay,
// but Coolify cannot deploy, stop or check anything there meanwhile. What the pool makes of it
// (status.servers health, ServerOut, bots caught) the recorder sees.
type outage struct {
	sim    reachability
	server string
	at     time.Duration // after the burst; 0: no outage
	lasts  time.Duration // 0: the server stays down

	mu     sync.Mutex
	burst  time.Time
	downAt time.Time // when the demo took it down; zero before
	upAt   time.Time // when the demo brought it back; zero before
}

// armed says when the burst began: the outage counts from there.
func (o *outage) armed(burst time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.burst = burst
}

// tick switches the server when its moment has come and returns what it did ("" for nothing),
// for the live view.
func (o *outage) tick(now time.Time) string {
	if o == nil || o.at <= 0 {
		return ""
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case o.burst.IsZero():
	case o.downAt.IsZero() && now.Sub(o.burst) >= o.at:
		o.sim.SetServerReachable(o.server, false)
		o.downAt = now
		return fmt.Sprintf("server %s taken down: Coolify cannot reach it", o.server)
	case o.lasts > 0 && !o.downAt.IsZero() && o.upAt.IsZero() && now.Sub(o.downAt) >= o.lasts:
		o.sim.SetServerReachable(o.server, true)
		o.upAt = now
		return fmt.Sprintf("server %s back: Coolify reaches it again", o.server)
	}
	return ""
}

// window is when the server was down: zero down when the outage never came, zero up while it
// lasts.
func (o *outage) window() (down, up time.Time) {
	if o == nil {
		return time.Time{}, time.Time{}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.downAt, o.upAt
}

// downWindow is the outage as a window (zero: it never came).
func (o *outage) downWindow() downWindow {
	if o == nil {
		return downWindow{}
	}
	from, to := o.window()
	return downWindow{server: o.server, from: from, to: to}
}
