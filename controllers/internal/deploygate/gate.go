package deploygate

import (
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/event"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/coolify"
)

// Gate bounds the deployments a pool has in flight (maxConcurrentDeployments) and, once
// its server's settings are known, the deployments in flight on the server over every pool
// of the same Coolify user (what the server runs at once: see server_limits.go); and it lets
// the first deployment of an image on a server run alone: it pulls the image, and the others
// then start from the server's cache instead of pulling the same gigabytes side by side.
//
// Starts go before recycles: a deployment a bot waits for (DeployAsk.start) that finds the
// server full is remembered, and while it waits no recycle nobody waits for takes the room a
// Done frees on that server.
//
// Slots the cache already shows Deploying are counted by the caller; the gate remembers the
// admissions the cache may not show yet, so concurrent reconciles cannot overshoot the limit.
// For the server it remembers every pool's deployments in flight as the pool's last Admit saw
// them, less each slot's Done, and (for the server and the pool alike) believes no cache that
// still shows a slot Deploying after its Done (for admissionTTL).
//
// A slot it refuses asks again after the slot controller's gate retry, or sooner: when a
// deployment ends (Done), the gate wakes the slots it refused that the freed room may admit
// (Wake), so a start does not sit out a retry after its server has room.
//
// Its maps hold only live state: a pool's admissions go with its last slot's release, a
// pause once it ends, a pool's deployments on a server with their Done (or ServerHeldTTL), and
// what is known of an image once unused for WarmTTL.
type Gate struct {
	Clock clock.PassiveClock
	// Wake, when set, receives a BotPoolSlot (namespace and name) for each slot the gate
	// refused that a Done may now admit: the slot controller watches it. It never blocks a
	// Done: a wake-up that finds it full is skipped, and the slot asks on its gate retry.
	Wake chan<- event.GenericEvent

	mu       sync.Mutex
	admitted map[types.NamespacedName]map[string]admission // pool → slot → its admission
	warm     map[string]time.Time                          // imageKey → last seen warm
	paused   map[string]time.Time                          // pauseKey → no deploys before
	// starts: CoolifyServer.Key → slot → when a deployment a bot waits for was last refused
	// for want of room on the server. While one waits, recycles there are refused (see Admit).
	starts map[string]map[types.NamespacedName]time.Time
	// onServer: CoolifyServer.Key → pool → its deployments in flight there, as the pool's
	// last Admit saw them.
	onServer map[string]map[types.NamespacedName]poolFlight
	// done: slot (namespace/name) → its Done, for admissionTTL: a cache that still shows the
	// slot Deploying lags, and the slot no longer counts for its server nor its pool.
	done map[types.NamespacedName]time.Time
	// refused: slot → what it was last refused for room on (its pool and server) and when,
	// the slots a Done wakes.
	refused map[types.NamespacedName]refusal
	// pulls: CoolifyServer.Key → pool → when the pool last saw its pre-pull there in flight
	// (AdmitPull, Pulling). Pulls hold builds of the server like the slots' deployments do.
	pulls map[string]map[types.NamespacedName]time.Time
	// pullAsks: CoolifyServer.Key → pool → its pull refused for room there, waiting its turn.
	pullAsks map[string]map[types.NamespacedName]pullAsk
	pruned   time.Time
}

// PrePullFlight names a pre-pull in the deploy gate's view of a server (no slot has a name
// with a space).
const PrePullFlight = "pre-pull "

// pullAsk is a pool's pre-pull waiting for room on a server: since when, and when it last
// asked.
type pullAsk struct{ first, last time.Time }

// PullAskTTL is how long a refused pull keeps its place in line without asking again: a pool
// asks at its deployment poll interval while it wants to pull.
const PullAskTTL = 2 * time.Minute

// refusal is what a slot the gate refused waits for: room in its pool or on its server
// (CoolifyServer.Key).
type refusal struct {
	pool   types.NamespacedName
	server string
	at     time.Time
}

// admission is one the cache may not show yet: when, and on which server (CoolifyServer.Key).
type admission struct {
	at     time.Time
	server string
}

// poolFlight is what a pool's last Admit saw of its deployments in flight.
type poolFlight struct {
	slots map[string]bool
	seen  time.Time
}

// ServerHeldTTL forgets what a pool saw when it has not asked again for this long and no
// Done ended its deployments (its slots moved on in another process, say): longer than any
// deployment runs.
const ServerHeldTTL = 30 * time.Minute

// admissionTTL bounds how long an admission counts without the cache confirming it.
const admissionTTL = time.Minute

// WarmTTL is how long the gate remembers an image as cached without a deployment of it;
// forgetting costs one lone deployment (a pull, or a cache hit) the next time.
const WarmTTL = 24 * time.Hour

// imageKey names what "warm" is known about: a pool's image on one server (each server has
// its own cache). Pools sharing a server each learn once that the image is cached there,
// which costs at most one lone deployment per pool and server.
func imageKey(pool *v1.BotPool, server string) string {
	return string(pool.UID) + "|" + server + "|" + pool.Spec.Image + ":" + pool.Spec.ImageTag
}

// StartWaitTTL is how long a start refused for room on its server holds recycles there back:
// a start that still waits asks again every gate retry (2 s), one that stopped waiting (its
// bot went, or it deploys elsewhere now) releases them after this.
const StartWaitTTL = 15 * time.Second

// pauseKey names what a pause stops. A full queue (429 from /deploy) is the server's: every
// user deploying there waits, so the key is the server on its instance (server uuids are
// unique only within one instance, and a pool on another instance, another tenant's maybe,
// must not pause this one's). A rate limit is the Coolify user's own budget: it pauses that
// user's deployments to the server, and no other tenant's (srv.key holds the user).
func pauseKey(srv coolifyview.CoolifyServer, queueFull bool) string {
	if queueFull {
		return srv.Instance + "|" + srv.UUID
	}
	return "user|" + srv.Key
}

// DeployAsk is what a slot asks the gate for.
type DeployAsk struct {
	Slot string
	// Deploying names the pool's slots the cache shows Deploying (slot itself excluded), and
	// here those of them on the slot's server.
	Deploying, Here []string
	// Warm: a deployment of the pool's image is known to have completed on the server.
	Warm bool
	// Start: a bot waits for this deployment (its own container, or a standby pool's recycle
	// while the pool has bots queued). A recycle no bot waits for is not a start: it never
	// takes room on the server a start waits for (the issue's "recycles never hold back a
	// start").
	Start bool
}

// Admit reports whether a slot may start a deployment now on srv, its pool's server.
func (g *Gate) Admit(pool *v1.BotPool, srv coolifyview.CoolifyServer, ask DeployAsk) bool {
	key := types.NamespacedName{Namespace: pool.Namespace, Name: pool.Name}
	slot, deploying := ask.Slot, ask.Deploying
	now := g.Clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.admitted == nil {
		g.admitted = map[types.NamespacedName]map[string]admission{}
	}
	if g.warm == nil {
		g.warm = map[string]time.Time{}
	}
	if g.paused == nil { // Pause may have made it already: never replace it
		g.paused = map[string]time.Time{}
	}
	if g.onServer == nil {
		g.onServer = map[string]map[types.NamespacedName]poolFlight{}
	}
	g.prune(now)
	slotKey := types.NamespacedName{Namespace: pool.Namespace, Name: slot}
	if now.Before(g.paused[pauseKey(srv, true)]) || now.Before(g.paused[pauseKey(srv, false)]) {
		// A pause ends by the clock, not with a Done: the slot's gate retry asks again.
		g.startWaits(srv, slotKey, ask.Start, now)
		return false
	}
	adm := g.admitted[key]
	if adm == nil {
		adm = map[string]admission{}
		g.admitted[key] = adm
	}
	inFlight, inFlightHere := map[string]bool{}, map[string]bool{}
	for _, s := range deploying {
		delete(adm, s) // the cache shows it now
		// A slot whose Done is more recent than the cache's view ended: the cache lags (the
		// slot woken by that Done asks before the ended slot's status reaches the cache).
		if !g.doneSince(types.NamespacedName{Namespace: pool.Namespace, Name: s}, now) {
			inFlight[s] = true
		}
	}
	for _, s := range ask.Here {
		if !g.doneSince(types.NamespacedName{Namespace: pool.Namespace, Name: s}, now) {
			inFlightHere[s] = true
		}
	}
	admHere := map[string]bool{}
	for s, a := range adm {
		switch {
		case now.Sub(a.at) > admissionTTL:
			delete(adm, s)
		case s == slot:
		default:
			inFlight[s] = true
			if a.server == srv.Key {
				inFlightHere[s] = true
				admHere[s] = true
			}
		}
	}
	delete(inFlight, slot)
	delete(inFlightHere, slot)
	// Pulls in flight are not counted: they take only builds the slots left free, never more
	// than all but one (AdmitPull), and a deployment admitted beside one queues in Coolify for
	// at most that pull, as it would behind another slot's.
	onServer := g.serverView(srv.Key, key, admHere, ask.Here, slot, now)
	// The pool's own bound: maxConcurrentDeployments over all its servers. Unset, the
	// servers' bounds are the pool's, or 4 while the server's settings are unknown.
	limit := int(pool.Spec.MaxConcurrentDeployments)
	if limit < 1 && srv.Runs == 0 {
		limit = v1.DefaultMaxConcurrentDeployments
	}
	if ask.Warm {
		g.warm[imageKey(pool, srv.Key)] = now
	}
	_, known := g.warm[imageKey(pool, srv.Key)]
	// The first pull of the image on a server runs alone there; another server's runs beside.
	if limit > 0 && len(inFlight) >= limit || !known && len(inFlightHere) >= 1 {
		// The pool's own bound: its own deployments hold it, no other pool's recycles.
		g.startWaits(srv, slotKey, false, now)
		g.refuse(slotKey, key, srv, now)
		return false
	}
	if srv.Runs > 0 && onServer >= srv.Runs || !ask.Start && g.startWaiting(srv, slotKey, now) {
		g.startWaits(srv, slotKey, ask.Start, now)
		g.refuse(slotKey, key, srv, now)
		return false
	}
	g.startWaits(srv, slotKey, false, now)
	delete(g.refused, slotKey)
	adm[slot] = admission{at: now, server: srv.Key}
	if f, ok := g.onServer[srv.Key][key]; ok {
		f.slots[slot] = true
	} else {
		if g.onServer[srv.Key] == nil {
			g.onServer[srv.Key] = map[types.NamespacedName]poolFlight{}
		}
		g.onServer[srv.Key][key] = poolFlight{slots: map[string]bool{slot: true}, seen: now}
	}
	delete(g.done, slotKey)
	return true
}

// startWaits records (waits) or forgets that slot's start waits for room on srv. Callers hold
// g.mu.
func (g *Gate) startWaits(srv coolifyview.CoolifyServer, slot types.NamespacedName, waits bool, now time.Time) {
	if !waits {
		if m := g.starts[srv.Key]; m != nil {
			delete(m, slot)
			if len(m) == 0 {
				delete(g.starts, srv.Key)
			}
		}
		return
	}
	if g.starts == nil {
		g.starts = map[string]map[types.NamespacedName]time.Time{}
	}
	if g.starts[srv.Key] == nil {
		g.starts[srv.Key] = map[types.NamespacedName]time.Time{}
	}
	g.starts[srv.Key][slot] = now
}

// refuse remembers that slot of pool waits for room in the pool or on srv, for the Done that
// frees it to wake the slot. Callers hold g.mu.
func (g *Gate) refuse(slot, pool types.NamespacedName, srv coolifyview.CoolifyServer, now time.Time) {
	if g.refused == nil {
		g.refused = map[types.NamespacedName]refusal{}
	}
	g.refused[slot] = refusal{pool: pool, server: srv.Key, at: now}
}

// doneSince reports whether slot's deployment ended (Done) within admissionTTL. Callers hold
// g.mu.
func (g *Gate) doneSince(slot types.NamespacedName, now time.Time) bool {
	at, ok := g.done[slot]
	return ok && now.Sub(at) <= admissionTTL
}

// waiters returns the slots refused for room in pool or on server that still ask (within
// StartWaitTTL: a slot asks again every gate retry), and forgets the others. Callers hold
// g.mu.
func (g *Gate) waiters(pool types.NamespacedName, server string, now time.Time) []types.NamespacedName {
	var slots []types.NamespacedName
	for s, w := range g.refused {
		switch {
		case now.Sub(w.at) > StartWaitTTL:
			delete(g.refused, s)
		case w.pool == pool || server != "" && w.server == server:
			slots = append(slots, s)
		}
	}
	return slots
}

// startWaiting reports whether a start other than slot waits for room on srv. Callers hold
// g.mu.
func (g *Gate) startWaiting(srv coolifyview.CoolifyServer, slot types.NamespacedName, now time.Time) bool {
	for s, at := range g.starts[srv.Key] {
		if s != slot && now.Sub(at) <= StartWaitTTL {
			return true
		}
	}
	return false
}

// serverView records what pool's pass knows of its own deployments in flight (its fresh
// admissions, and the slots its cache shows Deploying unless their Done is more recent than
// the cache) and counts the server's, over every pool, slot excluded. Callers hold g.mu.
func (g *Gate) serverView(server string, pool types.NamespacedName, adm map[string]bool, deploying []string, slot string, now time.Time) int {
	if g.done == nil {
		g.done = map[types.NamespacedName]time.Time{}
	}
	mine := map[string]bool{}
	for s := range adm {
		mine[s] = true
	}
	for _, s := range deploying {
		if at, ok := g.done[types.NamespacedName{Namespace: pool.Namespace, Name: s}]; !ok || now.Sub(at) > admissionTTL {
			mine[s] = true
		}
	}
	delete(mine, slot)
	pools := g.onServer[server]
	if pools == nil {
		pools = map[types.NamespacedName]poolFlight{}
		g.onServer[server] = pools
	}
	if len(mine) > 0 {
		pools[pool] = poolFlight{slots: mine, seen: now}
	} else {
		delete(pools, pool)
	}
	n := 0
	for p, f := range pools {
		if now.Sub(f.seen) > ServerHeldTTL {
			delete(pools, p)
			continue
		}
		n += len(f.slots)
	}
	if len(pools) == 0 {
		delete(g.onServer, server)
	}
	return n
}

// prune drops ended pauses, expired admissions, empty pools and images not seen warm for
// WarmTTL, at most once a minute. Callers hold g.mu.
func (g *Gate) prune(now time.Time) {
	if now.Sub(g.pruned) < time.Minute {
		return
	}
	g.pruned = now
	for k, until := range g.paused {
		if !now.Before(until) {
			delete(g.paused, k)
		}
	}
	pruneNested(g.admitted, func(a admission) bool { return now.Sub(a.at) > admissionTTL })
	for k, at := range g.warm {
		if now.Sub(at) > WarmTTL {
			delete(g.warm, k)
		}
	}
	pruneNested(g.onServer, func(f poolFlight) bool { return now.Sub(f.seen) > ServerHeldTTL || len(f.slots) == 0 })
	for s, at := range g.done {
		if now.Sub(at) > admissionTTL {
			delete(g.done, s)
		}
	}
	for s, w := range g.refused {
		if now.Sub(w.at) > StartWaitTTL {
			delete(g.refused, s)
		}
	}
	pruneNested(g.starts, func(at time.Time) bool { return now.Sub(at) > StartWaitTTL })
	pruneNested(g.pulls, func(seen time.Time) bool { return now.Sub(seen) > ServerHeldTTL })
	pruneNested(g.pullAsks, func(a pullAsk) bool { return now.Sub(a.last) > PullAskTTL })
}

// AdmitPull reports whether pool may start a pre-pull of its image on srv now, and counts it
// in flight there if so (Pulling ends it).
//
// A pull is housekeeping that holds one of the server's builds for minutes (a cold pull of a
// bot image takes 7 or more), and Coolify runs a server's deployments in the order they came:
// pulls started beside the deployments bots wait for queue them for their whole length. The
// model check found pools whose pulls could never finish (a deploymentTimeout shorter than
// the pull, or a tag the registry lacks) retrying for good, two at a time, on a server of two
// builds: every deployment there waited behind them past its own timeout, and the bots behind
// those ended QueueTimeout (seeds 881256409367164, 3457702266237803). So a pull starts only
// into room the slots' deployments leave, and the pulls of every pool on a server take at most
// all its builds but one: the starts always keep one. The slots' deployments do not count the
// pulls (Admit): counted, a standby pool's recycles ran one at a time beside its rollout's
// pull, and it went short of ready slots (TestRolloutUnderAStreamOfBots). While the server's
// settings are unknown only a pause holds a pull back.
//
// Pulls refused for room take their turns in the order they first asked: a pool whose pulls
// keep failing (and retry) must not keep another pool's rollout from ever pulling.
func (g *Gate) AdmitPull(pool types.NamespacedName, srv coolifyview.CoolifyServer) bool {
	now := g.Clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.prune(now)
	if now.Before(g.paused[pauseKey(srv, true)]) || now.Before(g.paused[pauseKey(srv, false)]) || !g.pullRoom(pool, srv, now) {
		g.askPull(pool, srv.Key, now)
		return false
	}
	if m := g.pullAsks[srv.Key]; m != nil {
		delete(m, pool)
		if len(m) == 0 {
			delete(g.pullAsks, srv.Key)
		}
	}
	g.pulling(pool, srv.Key, now)
	return true
}

// pullRoom reports whether the server has a build for pool's pull now, and no pull that asked
// before it still waits. On a server of one build a pull also waits while a start does. A
// pull never has a build kept for it: the slots' deployments, a standby pool's recycles
// included, go first, and the pull takes a build they leave free. Callers hold g.mu.
func (g *Gate) pullRoom(pool types.NamespacedName, srv coolifyview.CoolifyServer, now time.Time) bool {
	mine, asked := g.pullAsks[srv.Key][pool]
	for p, a := range g.pullAsks[srv.Key] {
		if p != pool && now.Sub(a.last) <= PullAskTTL && (!asked || a.first.Before(mine.first)) {
			return false
		}
	}
	if srv.Runs == 0 {
		return true
	}
	if srv.Runs == 1 && g.startWaiting(srv, types.NamespacedName{}, now) {
		return false
	}
	pulls := g.pullsOn(srv.Key, now)
	if _, in := g.pulls[srv.Key][pool]; in {
		pulls-- // its own pull, recorded as in flight, ended or is asked for again
	}
	return pulls < max(srv.Runs-1, 1) && pulls+g.slotsOn(srv.Key, now) < srv.Runs
}

// slotsOn counts the slots' deployments in flight on server, over every pool, as each pool's
// last Admit saw them. Callers hold g.mu.
func (g *Gate) slotsOn(server string, now time.Time) int {
	n := 0
	for _, f := range g.onServer[server] {
		if now.Sub(f.seen) <= ServerHeldTTL {
			n += len(f.slots)
		}
	}
	return n
}

// askPull keeps pool's refused pull in line on server. Callers hold g.mu.
func (g *Gate) askPull(pool types.NamespacedName, server string, now time.Time) {
	if g.pullAsks == nil {
		g.pullAsks = map[string]map[types.NamespacedName]pullAsk{}
	}
	if g.pullAsks[server] == nil {
		g.pullAsks[server] = map[types.NamespacedName]pullAsk{}
	}
	a, ok := g.pullAsks[server][pool]
	if !ok || now.Sub(a.last) > PullAskTTL {
		a.first = now
	}
	a.last = now
	g.pullAsks[server][pool] = a
}

// Pulling records whether pool's pre-pull on the server (CoolifyServer.Key) is in flight: the
// pool says so at every pass that follows it (a new process learns it so), and when it ended.
//
// An ended pull also leaves the server's view of the pool's deployments (PrePullFlight, which
// its slots' asks put there): a pool whose slots ask no more after it (its pull failed, and it
// stalls) held a build of the server with it for ServerHeldTTL, and every other pool's starts
// and recycles there waited for it (the model check, seed 4474694933379790).
func (g *Gate) Pulling(pool types.NamespacedName, server string, inFlight bool) {
	if inFlight {
		g.mu.Lock()
		g.pulling(pool, server, g.Clock.Now())
		g.mu.Unlock()
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if m := g.pulls[server]; m != nil {
		delete(m, pool)
		if len(m) == 0 {
			delete(g.pulls, server)
		}
	}
	if f, ok := g.onServer[server][pool]; ok {
		for slot := range f.slots {
			if strings.HasPrefix(slot, PrePullFlight) {
				delete(f.slots, slot)
			}
		}
	}
}

// pulling records pool's pull on server as in flight at now. Callers hold g.mu.
func (g *Gate) pulling(pool types.NamespacedName, server string, now time.Time) {
	if g.pulls == nil {
		g.pulls = map[string]map[types.NamespacedName]time.Time{}
	}
	if g.pulls[server] == nil {
		g.pulls[server] = map[types.NamespacedName]time.Time{}
	}
	g.pulls[server][pool] = now
}

// pullsOn counts the pulls in flight on server, forgetting those no pool has confirmed for
// ServerHeldTTL (longer than any pull may run: its pool's deploymentTimeout cancels it). Callers
// hold g.mu.
func (g *Gate) pullsOn(server string, now time.Time) int {
	for p, seen := range g.pulls[server] {
		if now.Sub(seen) > ServerHeldTTL {
			delete(g.pulls[server], p)
		}
	}
	if len(g.pulls[server]) == 0 {
		delete(g.pulls, server)
	}
	return len(g.pulls[server])
}

// pruneNested deletes the entries of m's inner maps that expired, and the inner maps left
// empty. Callers hold g.mu.
func pruneNested[K, K2 comparable, V any](m map[K]map[K2]V, expired func(V) bool) {
	for k, inner := range m {
		for k2, v := range inner {
			if expired(v) {
				delete(inner, k2)
			}
		}
		if len(inner) == 0 {
			delete(m, k)
		}
	}
}

// Pause stops new deployments to srv until the given time, but never for more
// than coolify.MaxPause (a server that asks for a year is asked again after MaxPause): Coolify
// answered a deploy with 429 and a Retry-After. A full queue pauses every deployment to the
// server on that instance, a rate limit only those of the pool's Coolify user (pauseKey).
func (g *Gate) Pause(srv coolifyview.CoolifyServer, queueFull bool, until time.Time) {
	if limit := g.Clock.Now().Add(coolify.MaxPause); until.After(limit) {
		until = limit
	}
	key := pauseKey(srv, queueFull)
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
// so the image is cached on the slot's server from now on (the server the gate admitted or
// counted the slot on; one it knows nothing of, after a restart, costs a lone deployment
// later).
//
// The room it frees wakes the slots refused for room in the pool or on that server (Wake):
// all of them, since the gate decides who gets it (starts first) when they ask again, and a
// slot refused again costs a pass that writes nothing.
func (g *Gate) Done(pool *v1.BotPool, slot string, finished bool) {
	for _, s := range g.done1(pool, slot, finished) {
		select {
		case g.Wake <- event.GenericEvent{Object: &v1.BotPoolSlot{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}}}:
		default:
		}
	}
}

// done1 is Done under g.mu; it returns the slots to wake.
func (g *Gate) done1(pool *v1.BotPool, slot string, finished bool) []types.NamespacedName {
	key := types.NamespacedName{Namespace: pool.Namespace, Name: pool.Name}
	g.mu.Lock()
	defer g.mu.Unlock()
	server, known := "", false
	if adm := g.admitted[key]; adm != nil {
		a, ok := adm[slot]
		server, known = a.server, ok
		delete(adm, slot)
		if len(adm) == 0 {
			delete(g.admitted, key)
		}
	}
	for k, pools := range g.onServer {
		if f, ok := pools[key]; ok && f.slots[slot] {
			server, known = k, true
			delete(f.slots, slot)
			if len(f.slots) == 0 {
				delete(pools, key)
			}
		}
		if len(pools) == 0 {
			delete(g.onServer, k)
		}
	}
	if known { // a slot the gate never admitted nor counted needs no record
		if g.done == nil {
			g.done = map[types.NamespacedName]time.Time{}
		}
		g.done[types.NamespacedName{Namespace: pool.Namespace, Name: slot}] = g.Clock.Now()
	}
	if finished && known {
		if g.warm == nil {
			g.warm = map[string]time.Time{}
		}
		g.warm[imageKey(pool, server)] = g.Clock.Now()
	}
	if g.Wake == nil || !known {
		return nil // no room freed that the gate counted
	}
	return g.waiters(key, server, g.Clock.Now())
}

// Size reports how many entries the gate holds, for tests.
func (g *Gate) Size() (admitted, warm, paused int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.admitted), len(g.warm), len(g.paused)
}

// ServersHeld reports how many servers the gate counts deployments on, for tests.
func (g *Gate) ServersHeld() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.onServer)
}
