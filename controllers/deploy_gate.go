package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify"
)

// DeployGate bounds the deployments a pool has in flight (maxConcurrentDeployments) and, once
// its server's settings are known, the deployments in flight on the server over every pool
// of the same Coolify user (what the server runs at once: see server_limits.go); and it lets
// the first deployment of an image on a server run alone: it pulls the image, and the others
// then start from the server's cache instead of pulling the same gigabytes side by side.
//
// Slots the cache already shows Deploying are counted by the caller; the gate remembers the
// admissions the cache may not show yet, so concurrent reconciles cannot overshoot the limit.
// For the server it remembers every pool's deploying slots as each pool last told it, until
// the slot's Done.
//
// Its maps hold only live state: a pool's admissions go with its last slot's release, a
// pause once it ends, a server's slots with their Done (or serverHeldTTL), and what is known
// of an image once unused for warmTTL.
type DeployGate struct {
	Clock clock.PassiveClock

	mu       sync.Mutex
	admitted map[types.NamespacedName]map[string]time.Time // pool → slot → admitted at
	warm     map[string]time.Time                          // pool uid|image:tag → last seen warm
	paused   map[string]time.Time                          // Coolify instance|server → no deploys before
	// onServer: coolifyServer.key → slot (namespace/name) → its deployment in flight there.
	onServer map[string]map[types.NamespacedName]serverHeld
	pruned   time.Time
}

// serverHeld is a slot's deployment in flight on a server: its pool, and when the gate last
// knew it in flight (admitted, or shown Deploying by its pool's cache).
type serverHeld struct {
	pool types.NamespacedName
	seen time.Time
}

// serverHeldTTL forgets a deployment no Done ended (its slot moved on in another process,
// say) and no pass of its pool showed again: longer than any deployment runs.
const serverHeldTTL = 30 * time.Minute

// admissionTTL bounds how long an admission counts without the cache confirming it.
const admissionTTL = time.Minute

// warmTTL is how long the gate remembers an image as cached without a deployment of it;
// forgetting costs one lone deployment (a pull, or a cache hit) the next time.
const warmTTL = 24 * time.Hour

// imageKey names what "warm" is known about: a pool's image. Pools sharing a server each
// learn once that the image is cached, which costs at most one lone deployment per pool.
func imageKey(pool *v1.BotPool) string {
	return string(pool.UID) + "|" + pool.Spec.Image + ":" + pool.Spec.ImageTag
}

// serverKey names a Coolify server: server uuids are unique only within one Coolify instance,
// and a pool on another instance (another tenant's, maybe) must not pause this one's server.
func serverKey(instance string, pool *v1.BotPool) string {
	return instance + "|" + pool.Spec.Coolify.ServerUUID
}

// Admit reports whether slot may start a deployment now on srv, its pool's server.
// deploying names the pool's slots the cache shows Deploying (slot itself excluded).
func (g *DeployGate) Admit(pool *v1.BotPool, srv coolifyServer, slot string, deploying []string, warm bool) bool {
	key := types.NamespacedName{Namespace: pool.Namespace, Name: pool.Name}
	now := g.Clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.admitted == nil {
		g.admitted = map[types.NamespacedName]map[string]time.Time{}
	}
	if g.warm == nil {
		g.warm = map[string]time.Time{}
	}
	if g.paused == nil { // Pause may have made it already: never replace it
		g.paused = map[string]time.Time{}
	}
	if g.onServer == nil {
		g.onServer = map[string]map[types.NamespacedName]serverHeld{}
	}
	g.prune(now)
	if now.Before(g.paused[serverKey(srv.instance, pool)]) {
		return false
	}
	adm := g.admitted[key]
	if adm == nil {
		adm = map[string]time.Time{}
		g.admitted[key] = adm
	}
	inFlight := map[string]bool{}
	for _, s := range deploying {
		inFlight[s] = true
		delete(adm, s) // the cache shows it now
	}
	for s, at := range adm {
		if now.Sub(at) > admissionTTL {
			delete(adm, s)
		} else {
			inFlight[s] = true
		}
	}
	delete(inFlight, slot)
	onServer := g.serverView(srv.key, key, inFlight, now)
	delete(onServer, types.NamespacedName{Namespace: pool.Namespace, Name: slot})
	limit := int(pool.Spec.MaxConcurrentDeployments)
	if limit < 1 {
		limit = v1.DefaultMaxConcurrentDeployments
	}
	if warm {
		g.warm[imageKey(pool)] = now
	} else if _, known := g.warm[imageKey(pool)]; !known {
		limit = 1 // the first pull of the image on this server runs alone
	}
	if len(inFlight) >= limit || srv.runs > 0 && len(onServer) >= srv.runs {
		return false
	}
	adm[slot] = now
	g.onServer[srv.key][types.NamespacedName{Namespace: pool.Namespace, Name: slot}] = serverHeld{pool: key, seen: now}
	return true
}

// serverView brings the server's deployments in flight up to date with what pool's pass
// knows of its own (inFlight: the cache's Deploying slots and the fresh admissions) and
// returns them all, every pool's. Callers hold g.mu.
func (g *DeployGate) serverView(server string, pool types.NamespacedName, inFlight map[string]bool, now time.Time) map[types.NamespacedName]serverHeld {
	held := g.onServer[server]
	if held == nil {
		held = map[types.NamespacedName]serverHeld{}
		g.onServer[server] = held
	}
	for s := range inFlight {
		held[types.NamespacedName{Namespace: pool.Namespace, Name: s}] = serverHeld{pool: pool, seen: now}
	}
	view := make(map[types.NamespacedName]serverHeld, len(held))
	for s, h := range held {
		switch {
		case h.pool == pool && !inFlight[s.Name] && now.Sub(h.seen) > admissionTTL:
			delete(held, s) // its pool's cache would show it by now: it ended
		case now.Sub(h.seen) > serverHeldTTL:
			delete(held, s)
		default:
			view[s] = h
		}
	}
	return view
}

// prune drops ended pauses, expired admissions, empty pools and images not seen warm for
// warmTTL, at most once a minute. Callers hold g.mu.
func (g *DeployGate) prune(now time.Time) {
	if now.Sub(g.pruned) < time.Minute {
		return
	}
	g.pruned = now
	for k, until := range g.paused {
		if !now.Before(until) {
			delete(g.paused, k)
		}
	}
	for k, adm := range g.admitted {
		for s, at := range adm {
			if now.Sub(at) > admissionTTL {
				delete(adm, s)
			}
		}
		if len(adm) == 0 {
			delete(g.admitted, k)
		}
	}
	for k, at := range g.warm {
		if now.Sub(at) > warmTTL {
			delete(g.warm, k)
		}
	}
	for k, held := range g.onServer {
		for s, h := range held {
			if now.Sub(h.seen) > serverHeldTTL {
				delete(held, s)
			}
		}
		if len(held) == 0 {
			delete(g.onServer, k)
		}
	}
}

// Pause stops new deployments to the pool's server on its Coolify instance until the given
// time, but never for more than coolify.MaxPause: Coolify answered that its queue is full,
// with a Retry-After that holds for every slot on the server (a server that asks for a year
// is asked again after MaxPause).
func (g *DeployGate) Pause(pool *v1.BotPool, instance string, until time.Time) {
	if limit := g.Clock.Now().Add(coolify.MaxPause); until.After(limit) {
		until = limit
	}
	key := serverKey(instance, pool)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused == nil {
		g.paused = map[string]time.Time{}
	}
	if until.After(g.paused[key]) {
		g.paused[key] = until
	}
}

// Done releases slot's admission; finished says a deployment of the pool's image completed,
// so the image is cached on the server from now on.
func (g *DeployGate) Done(pool *v1.BotPool, slot string, finished bool) {
	key := types.NamespacedName{Namespace: pool.Namespace, Name: pool.Name}
	g.mu.Lock()
	defer g.mu.Unlock()
	if adm := g.admitted[key]; adm != nil {
		delete(adm, slot)
		if len(adm) == 0 {
			delete(g.admitted, key)
		}
	}
	for k, held := range g.onServer {
		delete(held, types.NamespacedName{Namespace: pool.Namespace, Name: slot})
		if len(held) == 0 {
			delete(g.onServer, k)
		}
	}
	if finished {
		if g.warm == nil {
			g.warm = map[string]time.Time{}
		}
		g.warm[imageKey(pool)] = g.Clock.Now()
	}
}

// size reports how many entries the gate holds, for tests.
func (g *DeployGate) size() (admitted, warm, paused int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.admitted), len(g.warm), len(g.paused)
}

// serversHeld reports how many servers the gate counts deployments on, for tests.
func (g *DeployGate) serversHeld() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.onServer)
}
