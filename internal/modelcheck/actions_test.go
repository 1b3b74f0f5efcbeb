package modelcheck

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers"
	"botpool.dev/botpool/coolify/sim"
)

// action is one kind of step; do returns false when it has nothing to act on.
type action struct {
	name   string
	weight int
	do     func(w *world) bool
}

var actions = []action{
	{"reconcile bot", 140, (*world).reconcileRandomBot},
	{"reconcile slot", 140, (*world).reconcileRandomSlot},
	{"reconcile pool", 40, (*world).reconcileRandomPool},
	{"dispatch", 60, (*world).dispatchRandomPool},
	{"reconcile stale", 10, (*world).reconcileStale},
	{"container", 200, (*world).containerAction},
	{"beat all", 20, func(w *world) bool { w.beatAll(); return true }},
	{"advance clock", 140, (*world).advanceRandom},
	{"create bot", 60, (*world).createBot},
	{"delete bot", 12, (*world).deleteBot},
	{"coolify fault", 12, (*world).toggleCoolify},
	{"pull failures", 4, (*world).togglePulls},
	{"crashes", 4, (*world).toggleCrashes},
	{"latency", 3, (*world).toggleLatency},
	{"lagging deployment records", 4, (*world).toggleLagging},
	{"store outage", 5, (*world).toggleStore},
	{"restart", 3, func(w *world) bool { w.restart(); return true }},
	{"gc tokens", 5, func(w *world) bool { w.gcTokens(); return true }},
	{"delete a slot by hand", 2, (*world).deleteSlotByHand},
	{"delete an application by hand", 2, (*world).deleteAppByHand},
	{"resize a pool", 2, (*world).resizePool},
	{"server reachability", 3, (*world).toggleServer},
	{"change a server", 2, (*world).changeServer},
	{"change a pool's template", 2, (*world).changeTemplate},
}

var totalWeight = func() int {
	n := 0
	for _, a := range actions {
		n += a.weight
	}
	return n
}()

// randomStep runs one action chosen by weight, retrying when it had nothing to act on.
func (w *world) randomStep() string {
	for {
		r := w.rng.IntN(totalWeight)
		for _, a := range actions {
			if r -= a.weight; r < 0 {
				if a.do(w) {
					return a.name
				}
				break
			}
		}
	}
}

// afterStep lets the cache catch up with some of the writes (each written object with even
// odds, or all of them), unless it would lag more than maxCacheLag.
func (w *world) afterStep() {
	w.toggleAdmission()
	if w.rng.IntN(10) < 6 {
		w.cache.syncAll()
	} else {
		for _, k := range w.api.takeDirty() {
			if w.rng.IntN(2) == 0 {
				w.cache.sync(k)
			}
		}
	}
	w.noteLag()
}

// noteLag remembers since when the cache has been behind.
func (w *world) noteLag() {
	if len(w.api.takeDirty()) == 0 {
		w.lastLagged = time.Time{}
	} else if w.lastLagged.IsZero() {
		w.lastLagged = w.clk.Now()
	}
}

// advance moves the clock by d. Bots that are not silent beat every heartbeat interval on the
// way (in a real cluster they do not wait for the operator), and the cache never falls more
// than maxCacheLag behind.
func (w *world) advance(d time.Duration) {
	for d > 0 {
		step := min(d, heartbeatInterval)
		if !w.lastLagged.IsZero() && w.clk.Now().Add(step).Sub(w.lastLagged) > maxCacheLag {
			w.cache.syncAll()
			w.lastLagged = time.Time{}
		}
		w.clk.Step(step)
		w.sim.Tick()
		d -= step
		if step == heartbeatInterval || w.rng.IntN(int(heartbeatInterval/max(step, time.Millisecond))+1) == 0 {
			w.beatAll()
		}
	}
}

func (w *world) advanceRandom() bool {
	var d time.Duration
	switch r := w.rng.IntN(100); {
	case r < 55:
		d = time.Duration(1+w.rng.IntN(1000)) * time.Millisecond
	case r < 85:
		d = time.Duration(1+w.rng.IntN(20)) * time.Second
	case r < 98:
		d = time.Duration(20+w.rng.IntN(100)) * time.Second
	default:
		d = time.Duration(2+w.rng.IntN(4)) * time.Minute
	}
	w.detail = d.String()
	w.advance(d)
	return true
}

// Reconciles, with the checks that follow one.

func req(name string) ctrl.Request {
	return ctrl.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: name}}
}

func (w *world) reconcileBot(name string) {
	w.detail = name
	synced := w.cache.synced(botKey(name))
	res, err := w.op.bots.Reconcile(w.ctx, ctrl.Request{NamespacedName: botKey(name).NamespacedName})
	if err != nil {
		w.counts["reconcile error: bot"]++
		delete(w.botTimers, name) // controller-runtime retries with backoff
		return
	}
	w.botReconciled(name, synced, res.RequeueAfter)
}

func (w *world) reconcileSlot(name string) {
	w.detail = name
	before := w.liveSlot(name)
	orphan := before != nil && w.cache.synced(slotKey(name)) && w.slotOrphaned(before) &&
		w.cache.synced(botKey(before.Spec.BotRef.Name))
	_, err := w.op.slots.Reconcile(w.ctx, req(name))
	if err != nil {
		w.counts["reconcile error: slot"]++
	}
	if errors.Is(err, controllers.ErrIllegalSlotTransition) { // refused, so never audited
		w.violate("slot %s tried a transition the controller's table does not allow: %v", name, err)
	}
	if orphan {
		// 6: released within one reconcile.
		if after := w.liveSlot(name); after != nil && after.Spec.BotRef != nil && after.Spec.BotRef.UID == before.Spec.BotRef.UID {
			w.violate("invariant 6: slot %s is still bound to finished or deleted bot %s after a reconcile that read both (error: %v)",
				name, before.Spec.BotRef.Name, err)
		}
	}
}

func (w *world) reconcilePool(name string) {
	w.detail = name
	if _, err := w.op.pools.Reconcile(w.ctx, req(name)); err != nil {
		w.counts["reconcile error: pool"]++
	}
}

// dispatch runs one binding wave of a pool and checks invariants 3 and 4 around it.
func (w *world) dispatch(pool string) {
	w.detail = pool
	synced := len(w.api.takeDirty()) == 0
	var bots v1.BotList
	var slots v1.BotPoolSlotList
	must(w.cache.List(w.ctx, &bots))
	must(w.cache.List(w.ctx, &slots))
	waiting := queued(bots.Items, slots.Items, pool)
	var held map[string]int32
	if p := w.livePool(pool); p.Spec.Tenancy != nil {
		held = heldBy(p, bots.Items, slots.Items)
	}
	// A slot the cache shows free that a person deleted meanwhile loses its bind, and a bot
	// behind may win one in the same wave: the operator cannot know (docs/invariants.md, 4).
	var byHand bool
	for i := range slots.Items {
		if s := &slots.Items[i]; s.Spec.Pool == pool && isFreeSlot(s) && w.slotsDeletedByHand[s.UID] {
			byHand = true
		}
	}
	w.binds = nil
	_, err := w.op.disp.Reconcile(w.ctx, req(pool))
	binds := w.binds
	w.binds = nil
	if err != nil {
		w.counts["reconcile error: dispatch"]++
	}
	w.counts[fmt.Sprintf("dispatch bound %d", min(len(binds), 3))]++
	for _, e := range binds {
		w.checkTenantBinding(e) // after the wave: the API server's lock is not held here
	}
	if byHand {
		w.counts["dispatch beside a slot deleted by hand"]++
	} else {
		w.checkQueueOrder(pool, waiting, binds)
	}
	if synced && err == nil {
		w.checkQueueServed(pool, "after a binding wave on a synced cache")
		if !byHand {
			w.checkGuarantees(pool, waiting, held, binds)
		}
	}
}

func (w *world) reconcileRandomBot() bool {
	bots := w.liveBots()
	if len(bots) == 0 {
		return false
	}
	w.reconcileBot(bots[w.rng.IntN(len(bots))].Name)
	return true
}

func (w *world) reconcileRandomSlot() bool {
	slots := w.liveSlots()
	if len(slots) == 0 {
		return false
	}
	w.reconcileSlot(slots[w.rng.IntN(len(slots))].Name)
	return true
}

func (w *world) reconcileRandomPool() bool {
	w.reconcilePool(w.pools[w.rng.IntN(len(w.pools))].Name)
	return true
}

func (w *world) dispatchRandomPool() bool {
	w.dispatch(w.pools[w.rng.IntN(len(w.pools))].Name)
	return true
}

// reconcileStale reconciles an object that is gone, as a late event does.
func (w *world) reconcileStale() bool {
	if len(w.deleted) == 0 {
		return false
	}
	k := w.deleted[w.rng.IntN(len(w.deleted))]
	switch k.kind {
	case kindBot:
		w.reconcileBot(k.Name)
	case kindSlot:
		w.reconcileSlot(k.Name)
	default:
		return false
	}
	return true
}

// reconcileAll reconciles every object once, on a synced cache: pools, binding waves, slots,
// bots.
func (w *world) reconcileAll() {
	for _, p := range w.pools {
		w.cache.syncAll()
		w.reconcilePool(p.Name)
	}
	for _, p := range w.pools {
		w.cache.syncAll()
		w.dispatch(p.Name)
	}
	for _, s := range w.liveSlots() {
		w.cache.syncAll()
		w.reconcileSlot(s.Name)
	}
	for _, b := range w.liveBots() {
		w.cache.syncAll()
		w.reconcileBot(b.Name)
	}
	w.cache.syncAll()
}

// Faults.

// faults is what is currently injected.
type faults struct {
	coolify string // "", "partial-5xx", "5xx", "outage", "429", "lost-answers"
	pulls   bool
	crashes bool
	latency time.Duration
	lagging bool // deployment records trail the containers
}

// coolifyDown reports whether every Coolify call fails now (invariant 9 applies in full).
func (f faults) coolifyDown() bool {
	return f.coolify == "5xx" || f.coolify == "outage" || f.coolify == "429"
}

func (w *world) setCoolify(mode string) {
	w.sim.SetFault("*", sim.Fault{})
	w.sim.SetOutage(false)
	switch mode {
	case "partial-5xx":
		w.sim.SetFault("*", sim.Fault{ErrorRate: 0.1 + 0.4*w.rng.Float64()})
	case "5xx":
		w.sim.SetFault("*", sim.Fault{ErrorRate: 1})
	case "outage":
		w.sim.SetOutage(true)
	case "429":
		w.sim.SetFault("*", sim.Fault{Burst: 1 << 30, BurstCode: 429})
	case "lost-answers":
		// The request takes effect, the answer is a 500: a create or deploy that happened
		// though the caller was told it failed.
		w.sim.SetFault("*", sim.Fault{ErrorRate: 0.3, AfterProcessing: true})
	}
	w.faults.coolify = mode
	w.counts["coolify mode "+orOff(mode)]++
}

func orOff(s string) string {
	if s == "" {
		return "off"
	}
	return s
}

func (w *world) toggleCoolify() bool {
	modes := []string{"", "", "", "partial-5xx", "5xx", "outage", "429", "lost-answers"}
	w.setCoolify(modes[w.rng.IntN(len(modes))])
	w.detail = orOff(w.faults.coolify)
	return true
}

func (w *world) togglePulls() bool {
	n := []int{0, 0, 1, 2, -1}[w.rng.IntN(5)]
	for _, r := range w.pullRefs() {
		w.sim.FailPulls(r, n)
	}
	w.faults.pulls = n != 0
	w.counts[fmt.Sprintf("pull failures %d", n)]++
	return true
}

func (w *world) toggleCrashes() bool {
	c := sim.Crash{}
	if w.rng.IntN(2) == 0 {
		c = sim.Crash{After: time.Duration(10+w.rng.IntN(900)) * time.Second, Loop: w.rng.IntN(5) == 0}
	}
	for _, img := range w.images {
		w.sim.CrashContainers(img, c)
	}
	w.faults.crashes = c != sim.Crash{}
	w.counts[fmt.Sprintf("crashes %v", w.faults.crashes)]++
	return true
}

func (w *world) toggleLatency() bool {
	w.faults.latency = []time.Duration{0, 0, 50 * time.Millisecond, 300 * time.Millisecond}[w.rng.IntN(4)]
	w.coolify.setLatency(w.faults.latency)
	w.counts[fmt.Sprintf("latency %s", w.faults.latency)]++
	return true
}

func (w *world) toggleLagging() bool {
	w.faults.lagging = !w.faults.lagging
	w.coolify.setLagging(w.faults.lagging)
	w.counts[fmt.Sprintf("lagging records %v", w.faults.lagging)]++
	return true
}

// toggleStore starts or ends a Postgres outage (the embedded store has none).
func (w *world) toggleStore() bool {
	if !w.postgres {
		return false
	}
	down := !w.store.isDown()
	w.store.setDown(down)
	w.counts[fmt.Sprintf("store down %v", down)]++
	return true
}

// clearFaults turns every fault off, for a settle point.
func (w *world) clearFaults() {
	w.setCoolify("")
	for _, r := range w.pullRefs() {
		w.sim.FailPulls(r, 0) // a tag the registry lacks stays missing: it is no fault
	}
	for _, img := range w.images {
		w.sim.CrashContainers(img, sim.Crash{})
	}
	w.faults = faults{}
	w.coolify.setLatency(0)
	w.coolify.setLagging(false)
	w.store.setDown(false)
	w.serversBack()
}

// deleteSlotByHand deletes a random slot, as a person with kubectl might.
func (w *world) deleteSlotByHand() bool {
	slots := w.liveSlots()
	if len(slots) == 0 {
		return false
	}
	s := slots[w.rng.IntN(len(slots))]
	w.byHand = true
	defer func() { w.byHand = false }()
	w.slotsDeletedByHand[s.UID] = true
	must(client.IgnoreNotFound(w.api.Delete(w.ctx, s.DeepCopy())))
	return true
}

// deleteAppByHand deletes a random slot's Coolify application behind the operator's back, as a
// person in Coolify's UI might (when Coolify answers at all).
func (w *world) deleteAppByHand() bool {
	var apps []string
	for _, a := range w.sim.Apps() {
		if !a.Deleting {
			apps = append(apps, a.UUID)
		}
	}
	if len(apps) == 0 {
		return false
	}
	w.deleteApp(apps[w.rng.IntN(len(apps))])
	return true
}

// deleteApp deletes an application through Coolify's API, past the operator.
func (w *world) deleteApp(uuid string) {
	req := httptest.NewRequestWithContext(w.ctx, http.MethodDelete, "/api/v1/applications/"+uuid, nil)
	req.Header.Set("Authorization", "Bearer "+sim.DefaultToken)
	rec := httptest.NewRecorder()
	w.sim.ServeHTTP(rec, req)
	// A fault may answer 500 after the delete took effect: ask Coolify what happened.
	if a, ok := w.sim.App(uuid); !ok || a.Deleting {
		w.cmu.Lock()
		w.deletedByHand[uuid] = true
		w.cmu.Unlock()
	}
	w.counts[fmt.Sprintf("hand delete of an application answered %d", rec.Code)]++
}

// resizePool changes a pool's maxSlots and minIdle, as its owner might. The new spec reaches
// the cache at once (a pool's own spec lagging behind would only let it create a slot it
// no longer wants, a race no controller can avoid).
func (w *world) resizePool() bool {
	i := w.rng.IntN(len(w.pools))
	p := w.api.live(objKey{kind: kindPool, NamespacedName: types.NamespacedName{Namespace: namespace, Name: w.pools[i].Name}}).(*v1.BotPool).DeepCopy()
	before := p.Spec.MaxSlots
	p.Spec.MaxSlots = int32(1 + w.rng.IntN(4))
	if p.Spec.MaxSlots < before {
		w.lowered[p.Name] = w.clk.Now()
	}
	p.Spec.MinIdle = int32(w.rng.IntN(int(min(p.Spec.MaxSlots, 2)) + 1))
	must(w.api.Update(w.ctx, p))
	w.cache.sync(w.api.keyOf(p))
	w.pools[i] = p
	if n := len(w.slotsOf(p.Name)); n > int(p.Spec.MaxSlots) {
		w.ceiling[p.Name] = n
	} else {
		w.ceiling[p.Name] = int(p.Spec.MaxSlots)
	}
	w.detail = fmt.Sprintf("%s maxSlots=%d minIdle=%d", p.Name, p.Spec.MaxSlots, p.Spec.MinIdle)
	return true
}

// slotsOf lists a pool's slots in the API server.
func (w *world) slotsOf(pool string) []v1.BotPoolSlot {
	var out []v1.BotPoolSlot
	for _, s := range w.liveSlots() {
		if s.Spec.Pool == pool {
			out = append(out, s)
		}
	}
	return out
}
