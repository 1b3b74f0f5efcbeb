package modelcheck

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/botapi/botclient"
	"botpool.dev/botpool/coolify/sim"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// Regression cases of bugs the model check found, replayed as fixed scripts on the same world
// (real reconcilers, fake API server, simulator), so they stay found whatever the random
// steps of later versions do.

// script drives one world step by step; every step leaves the cache in sync.
type script struct {
	t *testing.T
	w *world
}

func newScript(t *testing.T, pool func(*world)) *script {
	return &script{t: t, w: newWorld(1, pool)}
}

func (s *script) sync() { s.w.cache.syncAll() }

func (s *script) pool(name string)     { s.w.reconcilePool(name); s.sync() }
func (s *script) dispatch(pool string) { s.w.dispatch(pool); s.sync() }
func (s *script) slot(name string)     { s.w.reconcileSlot(name); s.sync() }
func (s *script) bot(name string)      { s.w.reconcileBot(name); s.sync() }
func (s *script) advance(d time.Duration) {
	s.w.advance(d)
	s.sync()
}

// only returns the pool's only slot.
func (s *script) only() *v1.BotPoolSlot {
	s.t.Helper()
	slots := s.w.liveSlots()
	if len(slots) != 1 {
		s.t.Fatalf("want one slot, have %d", len(slots))
	}
	return &slots[0]
}

func (s *script) addBot(name string) {
	b := bt.MakeBot(namespace, name).MaxDuration("1h").Obj()
	must(s.w.api.Create(s.w.ctx, b))
	s.sync()
}

// pulled runs the pool, five seconds apart, until its pre-pull of its template's image has
// finished on every server it lists: until then the deploy gate holds a start there (the first
// pull of an image on a server runs alone).
func (s *script) pulled(pool string) {
	s.t.Helper()
	for range 150 { // a cold pull takes 7 minutes
		s.pool(pool)
		p := s.w.api.get(s.w.api.keyOf(s.w.pool(pool))).(*v1.BotPool)
		done := p.Status.TemplateImage != ""
		for _, srv := range p.Spec.Coolify.ServerList() {
			done = done && cachedOn(p, srv.UUID, p.Status.TemplateImage)
		}
		if done {
			return
		}
		s.advance(5 * time.Second)
	}
	s.t.Fatalf("the pool's pre-pull did not finish: %+v", s.w.api.get(s.w.api.keyOf(s.w.pool(pool))).(*v1.BotPool).Status.Servers)
}

// cachedOn reports whether the pool's status lists ref as pulled on the server.
func cachedOn(p *v1.BotPool, server, ref string) bool {
	for _, st := range p.Status.Servers {
		for _, c := range st.Cached {
			if st.UUID == server && c.Image == ref {
				return true
			}
		}
	}
	return false
}

func (s *script) check() {
	s.t.Helper()
	if len(s.w.violations) > 0 {
		s.t.Fatalf("%s\ncontroller log:\n%s", strings.Join(s.w.violations, "\n"), s.w.log.dump())
	}
}

// soloPool is one zoom pool of one slot with a warm image and default timings.
func soloPool(w *world) {
	w.addPool("solo", v1.PlatformZoom, 1, 1, 1, v1.Timing{})
	w.sim.WarmImage(w.fixture.ServerUUID, w.images[string(v1.PlatformZoom)], "latest")
}

// Found by the model check with seed 1 at step 1445: a deploy request reached Coolify but its
// answer was lost (a 500 after the fact), which leaves status.deployingSince on the Idle slot.
// The bot ended before the slot looked again; the release made the slot Idle and unbound, and
// the dispatcher bound the next bot before the slot had cancelled the unanswered deployment.
// The slot then took that deployment (of the bot before) for the new bot's, and turned Busy
// on a container that had run, and died, before the new bot was even bound.
func TestRegressionNextBotInheritsUnansweredDeploy(t *testing.T) {
	s := newScript(t, soloPool)
	s.pool("solo") // adds the finalizer
	s.pool("solo") // creates the minIdle slot
	slot := s.only().Name
	s.slot(slot)
	s.slot(slot)
	if p := s.only().Status.Phase; p != v1.SlotIdle {
		t.Fatalf("slot %s, want Idle", p)
	}
	s.pulled("solo")

	s.addBot("first")
	s.bot("first")
	s.dispatch("solo")
	s.w.sim.SetFault("deploy-by-tag-or-uuid", sim.Fault{ErrorRate: 1, AfterProcessing: true})
	s.slot(slot)
	s.w.sim.SetFault("deploy-by-tag-or-uuid", sim.Fault{})
	if st := s.only().Status; st.Phase != v1.SlotIdle || st.DeployingSince == nil {
		t.Fatalf("after an unanswered deploy the slot is %s (deployingSince %v), want Idle with deployingSince", st.Phase, st.DeployingSince)
	}
	deps := s.w.slotDeployments() // the pool's image pre-pull deploys on its own
	if len(deps) != 1 {
		t.Fatalf("%d deployments, want the unanswered one", len(deps))
	}

	// The unanswered deployment runs the first bot, which ends; its container dies.
	s.w.sim.CrashContainers(s.w.images[string(v1.PlatformZoom)], sim.Crash{After: 30 * time.Second})
	s.advance(10 * time.Second)
	c := s.w.runningContainers()
	if len(c) != 1 || c[0].bot != "first" {
		t.Fatalf("containers %v, want one serving bot first", c)
	}
	s.w.sendStatus(c[0], botReport(v1.BotDone))
	s.advance(time.Minute)
	s.slot(slot) // releases the finished bot

	// The next bot's wave may come before the slot's next pass.
	s.addBot("second")
	s.bot("second")
	s.dispatch("solo")
	for range 30 {
		s.slot(slot)
		s.dispatch("solo")
		s.bot("second")
		s.check()
		if s.only().Status.Phase == v1.SlotBusy {
			break
		}
		s.advance(5 * time.Second)
	}
	st := s.only()
	if st.Status.Phase != v1.SlotBusy || st.Spec.BotRef == nil || st.Spec.BotRef.Name != "second" {
		t.Fatalf("slot %s bound to %v, want Busy with bot second", st.Status.Phase, st.Spec.BotRef)
	}
	if st.Status.DeploymentUUID == deps[0].UUID {
		t.Fatalf("bot second runs on deployment %s, the one requested for bot first", deps[0].UUID)
	}
	s.check()
}

func botReport(phase v1.BotPhase) botclient.StatusReport {
	return botclient.StatusReport{Phase: string(phase)}
}

// running brings bot name to Busy in a slot of pool solo, its container beating, and returns
// the slot.
func (s *script) running(name string) string {
	s.t.Helper()
	s.pool("solo")
	s.pool("solo")
	s.pulled("solo")
	s.addBot(name)
	for range 20 {
		for _, sl := range s.w.liveSlots() {
			s.slot(sl.Name)
		}
		s.bot(name)
		s.dispatch("solo")
		if b := s.w.liveBot(name); b.Status.StartedAt != nil {
			s.w.beatAll() // the container fetches its config
			s.w.beatAll() // and beats
			s.bot(name)
			return b.Status.SlotName
		}
		s.advance(5 * time.Second)
	}
	s.t.Fatalf("bot %s did not start: %s", name, describeBot(s.w.liveBot(name)))
	return ""
}

func (s *script) container(bot string) *container {
	s.t.Helper()
	for _, c := range s.w.runningContainers() {
		if c.bot == bot {
			return c
		}
	}
	s.t.Fatalf("no container serves bot %s", bot)
	return nil
}

func alive(b *v1.Bot) string {
	if c := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionAlive); c != nil {
		return string(c.Status) + "/" + c.Reason
	}
	return "none"
}

// Found by the model check with seed 1 at step 1342 (NoHeartbeatYet) and, once that was
// fixed, with seeds 1 to 3 (LivenessUnknown after a store outage): a running bot that was not
// Alive was looked at again only after heartbeatGracePeriod (30 s, three beats), so a bot
// whose beats resumed, or arrived for the first time, or reached the store again after an
// outage, stayed not Alive for up to three heartbeats; invariant 7 says within one.
func TestRegressionAliveWithinOneHeartbeat(t *testing.T) {
	s := newScript(t, soloPool)
	s.running("quiet")
	c := s.container("quiet")

	// Silent past the grace period: not Alive.
	c.silent = true
	s.advance(45 * time.Second)
	s.bot("quiet")
	if a := alive(s.w.liveBot("quiet")); a != "False/HeartbeatMissed" {
		t.Fatalf("after 45 s of silence Alive is %s", a)
	}
	// It beats again: the bot controller's own timer must bring Alive back within a beat.
	c.silent = false
	s.w.heartbeat(c)
	s.check()
	s.advance(heartbeatInterval)
	s.bot("quiet")
	if a := alive(s.w.liveBot("quiet")); a != "True/HeartbeatReceived" {
		t.Fatalf("one heartbeat after beating again Alive is %s", a)
	}

	// The same after a store outage (Postgres: beats are buffered and replayed).
	s.w.postgres = true
	s.w.store.setDown(true)
	s.bot("quiet")
	if a := alive(s.w.liveBot("quiet")); a != "Unknown/LivenessUnknown" {
		t.Fatalf("during a store outage Alive is %s", a)
	}
	s.w.store.setDown(false)
	s.w.heartbeat(c)
	s.check()
}

// Found by the model check with seed 31 (the end of the run: four bots Deploying for good): a
// slot Idle since before the operator's last start, bound to a bot, first looks for a deploy
// request the earlier process may have sent without recording it. When the application was
// gone (deleted in Coolify by hand), that lookup answered 404 and the pass failed, every pass,
// before the deploy that would have found the application missing and created it again: the
// bot waited in Deploying forever.
func TestRegressionLookupOnDeletedApplication(t *testing.T) {
	s := newScript(t, soloPool)
	s.pool("solo")
	s.pool("solo")
	slot := s.only().Name
	s.slot(slot)
	s.slot(slot)
	s.pulled("solo")
	s.advance(time.Second)
	s.w.restart() // the slot has been Idle since before this process started

	app := s.only().Status.ApplicationUUID
	for range 5 { // Coolify deletes asynchronously; a fault run may answer 5xx to a hand delete
		if _, ok := s.w.sim.App(app); !ok {
			break
		}
		s.w.deleteApp(app)
		s.advance(15 * time.Second)
	}
	s.addBot("late")
	s.bot("late")
	s.dispatch("solo") // bound before the slot looked at its application again
	if ref := s.only().Spec.BotRef; ref == nil || ref.Name != "late" {
		t.Fatalf("slot bound to %v, want bot late", ref)
	}
	// The hand delete ran Coolify's Docker cleanup (its docker_cleanup flag defaults to true),
	// which removed the pool's image from the server (the deleted application, never deployed,
	// did not keep it): the new application's deployment pulls it cold, for 7 minutes.
	for range 130 {
		s.slot(slot)
		s.bot("late")
		if b := s.w.liveBot("late"); b.Status.StartedAt != nil {
			s.check()
			return
		}
		s.advance(5 * time.Second)
	}
	t.Fatalf("bot late did not start: %s; slot %s", describeBot(s.w.liveBot("late")), describeSlot(s.w.liveSlot(slot)))
}

// Found by the model check with seed 2 at step 24978, once deployment records could lag: a
// slot whose deployment record still read in_progress past deploymentTimeout, while its bot
// beat, was failed (DeploymentTimeout) as soon as the store could not answer: the guard that
// spares a beating bot took "unknown" for "not beating". A store outage must fail nobody.
func TestRegressionDeploymentTimeoutDuringStoreOutage(t *testing.T) {
	s := newScript(t, func(w *world) {
		w.addPool("solo", v1.PlatformZoom, 1, 1, 1, v1.Timing{DeploymentTimeout: "6m"})
		w.sim.WarmImage(w.fixture.ServerUUID, w.images[string(v1.PlatformZoom)], "latest")
	})
	s.pool("solo")
	s.pool("solo")
	s.pulled("solo") // a pre-pull's record lagging for an hour would fail it at deploymentTimeout
	s.w.coolify.fixedLag = time.Hour
	s.w.coolify.setLagging(true)
	slot := s.only().Name
	s.addBot("patient")
	for range 12 { // ten minutes: the record reads in_progress, the container runs and beats
		s.slot(slot)
		s.bot("patient")
		s.dispatch("solo")
		s.advance(50 * time.Second)
	}
	if st := s.only().Status; st.Phase != v1.SlotDeploying {
		t.Fatalf("slot %s (%s), want still Deploying on a lagging record", st.Phase, st.Message)
	}
	s.w.postgres = true
	s.w.store.setDown(true)
	s.slot(slot)
	s.check()
	if st := s.only().Status; st.Phase == v1.SlotError {
		t.Fatalf("slot failed during a store outage: %s", st.Message)
	}
}

// Found by the model check with seed 1000 at step 35377: a wave ran while the cache did not
// show yet the slot the wave before had bound. The dispatcher left that bot out of the queue
// (it remembers its own bindings) but still offered the slot as free; the highest-priority
// bot was paired with it, lost the conflict, and waited, while a lower-priority bot got the
// slot that was really free (invariant 4).
func TestRegressionWaveOffersTheSlotItJustBound(t *testing.T) {
	s := newScript(t, pairPool)
	s.ready()
	s.queued("blocker", 0)
	s.dispatch("solo") // blocker takes pool-zoom-001 (never used, first by name) and runs
	for range 10 {
		s.slot("pool-zoom-001")
		if s.w.liveSlot("pool-zoom-001").Status.Phase == v1.SlotBusy {
			break
		}
		s.advance(5 * time.Second)
	}
	s.queued("early", 0)
	// early takes pool-zoom-002; the cache does not show that binding yet.
	s.w.dispatch("solo")
	s.w.cache.sync(botKey("early"))
	if ref := s.w.liveSlot("pool-zoom-002").Spec.BotRef; ref == nil || ref.Name != "early" {
		t.Fatalf("pool-zoom-002 bound to %v, want early", ref)
	}

	// blocker ends; its slot is released and Idle again, now least recently used but one (the
	// cache shows that).
	b := s.w.liveBot("blocker")
	patch := client.MergeFrom(b.DeepCopy())
	b.Status.Phase = v1.BotDone
	must(s.w.api.Status().Patch(s.w.ctx, b, patch))
	s.w.cache.sync(botKey("blocker"))
	for range 3 {
		s.w.reconcileSlot("pool-zoom-001")
		s.w.cache.sync(slotKey("pool-zoom-001"))
	}
	if sl := s.w.liveSlot("pool-zoom-001"); sl.Status.Phase != v1.SlotIdle || sl.Spec.BotRef != nil || sl.Status.LastUsedAt == nil {
		t.Fatalf("pool-zoom-001 is %s bound to %v, want free", sl.Status.Phase, sl.Spec.BotRef)
	}

	// Two bots wait, the first one with a higher priority; the next wave comes.
	for _, q := range []struct {
		name     string
		priority int32
	}{{"high", 5}, {"low", 0}} {
		bot := bt.MakeBot(namespace, q.name).MaxDuration("1h").Priority(q.priority).Obj()
		must(s.w.api.Create(s.w.ctx, bot))
		for range 2 {
			s.w.cache.sync(botKey(q.name))
			s.w.reconcileBot(q.name)
		}
		s.w.cache.sync(botKey(q.name))
	}
	s.w.dispatch("solo")
	s.check()
	if ref := s.w.liveSlot("pool-zoom-001").Spec.BotRef; ref == nil || ref.Name != "high" {
		t.Fatalf("pool-zoom-001 bound to %v, want the high-priority bot", ref)
	}
}

// Found by the model check with seed 301 at step 2178, once pools could be resized: with
// maxSlots lowered below the slots a pool still held busy, the pool's free count (idle plus
// room) went negative, and routing a bot without poolRef crashed the bot controller on a nil
// pool when the count was -1 (and passed the pool over, "no pool serves this bot", when it was
// lower).
func TestRegressionRoutingToAPoolAboveItsMaxSlots(t *testing.T) {
	s := newScript(t, pairPool)
	s.running("one")
	s.running("two")
	key := objKey{kind: kindPool, NamespacedName: types.NamespacedName{Namespace: namespace, Name: "solo"}}
	pool := s.w.api.live(key).(*v1.BotPool).DeepCopy()
	pool.Spec.MaxSlots, pool.Spec.MinIdle = 1, 0
	must(s.w.api.Update(s.w.ctx, pool))
	s.sync()
	s.pool("solo")
	if c := s.w.api.live(key).(*v1.BotPool).Status.Slots; c == nil || c.Total-c.Idle != 2 {
		t.Fatalf("pool status %+v, want two slots in use", c)
	}
	b := bt.MakeBot(namespace, "routed").MaxDuration("1h").Obj() // no poolRef
	must(s.w.api.Create(s.w.ctx, b))
	s.sync()
	s.bot("routed")
	s.bot("routed")
	if st := s.w.liveBot("routed").Status; st.Phase != v1.BotQueued || st.Pool != "solo" {
		t.Fatalf("bot routed is %s in pool %q, want Queued in solo", st.Phase, st.Pool)
	}
	s.check()
}

// Found by the model check with seed 4184053470628878 at the drained end of a 25,000-step run:
// a slot retired after failing too often had its application deleted and its finalizer
// dropped at once. Coolify deletes in the background and still listed the application when
// the operator restarted (forgetting what it had deleted) and the pool created the
// replacement slot of the same name: the replacement adopted, by name, the application on its
// way out, deployed a bot to it, and turned Busy on a deployment whose container never ran.
func TestRegressionReplacementAdoptsAnApplicationBeingDeleted(t *testing.T) {
	s := newScript(t, soloPool)
	s.pool("solo")
	s.pool("solo")
	name := s.only().Name
	s.slot(name)
	s.slot(name)
	first := s.only()
	old := first.Status.ApplicationUUID
	if first.Status.Phase != v1.SlotIdle || old == "" {
		t.Fatalf("slot %s, want Idle with an application", describeSlot(first))
	}
	s.w.byHand = true // as the slot controller's own retirement does
	must(s.w.api.Delete(s.w.ctx, first.DeepCopy()))
	s.w.byHand = false
	s.sync()
	s.slot(name)
	if a, ok := s.w.sim.App(old); !ok || !a.Deleting {
		t.Fatalf("application %s: present %v, want being deleted", old, ok)
	}
	s.w.restart() // forgets which applications this process deleted

	for range 60 {
		s.pool("solo")
		s.slot(name)
		for _, sl := range s.w.liveSlots() {
			if sl.UID != first.UID && sl.Status.ApplicationUUID == old {
				t.Fatalf("replacement slot %s adopted application %s while Coolify was deleting it", sl.Name, old)
			}
		}
		if sl := s.w.liveSlot(name); sl != nil && sl.UID != first.UID && sl.Status.Phase == v1.SlotIdle {
			if _, ok := s.w.sim.App(old); ok {
				t.Fatalf("replacement Idle on %s while the old application %s is still listed", sl.Status.ApplicationUUID, old)
			}
			s.check()
			return
		}
		s.advance(2 * time.Second)
	}
	t.Fatalf("no replacement slot became Idle: %v", s.w.liveSlots())
}

// Found by the model check with seeds 1 to 3 once templates changed at random: after a
// restartedAt (a new push of the pool's tag, rolled out on purpose), a slot created while the
// server pulled the new push was created on the tag's earlier pull, which the pool's status
// still listed as the newest image there: its bot's deployment pulled the new push cold,
// although another image of the pool was warm on the server (invariant 16). The same
// happened after the pool moved on to another tag while the pull of the new push was failing.
func TestRegressionNewSlotAfterARestartTakesAWarmImage(t *testing.T) {
	s := newScript(t, soloPool)
	s.pool("solo")
	s.pool("solo")
	s.pulled("solo")
	s.newTag("2")
	s.pulled("solo") // a cold pull: the server holds latest and 2
	name := s.only().Name
	s.slot(name)
	if im := s.only().Status.Image; im != ref(s.w.images[string(v1.PlatformZoom)], "2") {
		t.Fatalf("slot on %s, want tag 2", im)
	}

	p := s.w.api.get(s.w.api.keyOf(s.w.pools[0])).(*v1.BotPool).DeepCopy()
	s.w.pushAgain(p)
	must(s.w.api.Update(s.w.ctx, p))
	*s.w.pools[0] = *p.DeepCopy()
	s.sync()
	s.pool("solo") // starts pulling the new push of 2: seven minutes

	// A person deletes the slot; the pool replaces it while the pull runs.
	s.w.byHand = true
	must(s.w.api.Delete(s.w.ctx, s.only().DeepCopy()))
	s.w.byHand = false
	s.sync()
	for range 20 {
		s.slot(name)
		s.pool("solo")
		if sl := s.w.liveSlot(name); sl != nil && sl.Status.Phase == v1.SlotIdle && sl.DeletionTimestamp.IsZero() {
			break
		}
		s.advance(2 * time.Second)
	}
	if im := s.only().Status.Image; im != ref(s.w.images[string(v1.PlatformZoom)], "latest") {
		t.Fatalf("replacement slot created on %s, want latest: the server's only image that is not the old pull of 2", im)
	}
	s.runningBot("b")
	s.check()
	if s.w.liveBot("b").Status.StartedAt == nil {
		t.Fatalf("bot b did not start: %s", describeBot(s.w.liveBot("b")))
	}
}

// Found by the model check with seed 3 at step 21480 once templates changed at random: a
// slot created mid-rollout had its create answered with an error after Coolify had made the
// application, on the newest image its server held. Before its next pass the server finished
// pulling the template's image, so the image a new slot is created with changed; adoption
// took only that image or the template's, refused the application the slot had made, and
// created a second one of the same name (invariant 2).
func TestRegressionAdoptionAfterThePullChangedTheCreateImage(t *testing.T) {
	s := newScript(t, soloPool)
	s.pool("solo")
	s.pool("solo")
	s.pulled("solo")
	name := s.only().Name
	s.slot(name)
	s.slot(name)
	s.newTag("2")
	s.pool("solo") // starts pulling tag 2: seven minutes

	// A person deletes the slot; the pool replaces it.
	s.w.byHand = true
	must(s.w.api.Delete(s.w.ctx, s.only().DeepCopy()))
	s.w.byHand = false
	s.sync()
	for range 20 {
		s.slot(name)
		s.pool("solo")
		if sl := s.w.liveSlot(name); sl != nil && sl.DeletionTimestamp.IsZero() {
			break
		}
		s.advance(2 * time.Second)
	}
	// Its create takes effect; the answer is lost.
	s.w.sim.SetFault("create-dockerimage-application", sim.Fault{ErrorRate: 1, AfterProcessing: true})
	s.slot(name)
	s.w.sim.SetFault("create-dockerimage-application", sim.Fault{})
	var made []string
	for _, a := range s.w.sim.Apps() {
		if a.Name == name && !a.Deleting {
			made = append(made, a.UUID+" "+a.Image)
		}
	}
	if len(made) != 1 || s.only().Status.ApplicationUUID != "" || !strings.HasSuffix(made[0], ":latest") {
		t.Fatalf("after a create with a lost answer: applications %v, slot's %q; want one on latest, unrecorded", made, s.only().Status.ApplicationUUID)
	}

	s.pulled("solo") // tag 2 is on the server now: a new slot would be created on it
	for range 3 {
		s.slot(name)
	}
	s.w.checkState()
	s.check()
	if app := s.only().Status.ApplicationUUID; !strings.HasPrefix(made[0], app+" ") || app == "" {
		t.Fatalf("slot recorded application %q, want the one it made: %s", app, made[0])
	}
}

// Found by the model check with seed 4 at step 10000 once templates changed at random: a free
// slot's in-place update to the pool's template (its env first) found the application deleted
// by hand, forgot it, and stayed Idle: every later pass tried the update again on no
// application, and the slot never created one again (in the model a standby slot waiting for
// the deploy gate, which then never got a container; here a Stopped pool's free slot).
func TestRegressionInPlaceUpdateOfADeletedApplication(t *testing.T) {
	s := newScript(t, soloPool)
	s.pool("solo")
	s.pool("solo")
	s.pulled("solo")
	name := s.only().Name
	s.slot(name)
	s.slot(name)
	old := s.only().Status.ApplicationUUID
	s.newTag("2")
	s.w.deleteApp(old)
	s.pulled("solo") // seven minutes: Coolify has deleted the application, the slot may take tag 2
	if _, ok := s.w.sim.App(old); ok {
		t.Fatalf("application %s still there", old)
	}
	for range 20 {
		s.slot(name)
		s.pool("solo")
		if sl := s.only(); sl.Status.Phase == v1.SlotIdle && sl.Status.ApplicationUUID != "" && sl.Status.ApplicationUUID != old {
			s.check()
			return
		}
		s.advance(5 * time.Second)
	}
	t.Fatalf("the slot did not create its application again: %s", describeSlot(s.w.liveSlot(name)))
}

// Found by the model check with seed 4 at step 7865: a pool's deploy of its puller reached
// Coolify but was answered with an error, so the pool recorded no pull, and the deployment
// began to pull the tag. Then the tag was pushed again (a restartedAt). The pool's next pull
// of the tag was de-duplicated by Coolify, and the pool took the deployment in flight, which
// pulled the push before, for the pull of the new one: its status listed the tag as pulled, a
// slot was given it, and the slot's deployment pulled the new push cold (invariant 16).
func TestRegressionADeDuplicatedPullIsNotThePullOfANewerPush(t *testing.T) {
	s := newScript(t, soloPool)
	s.pool("solo")
	s.pool("solo")
	s.pulled("solo")
	name := s.only().Name
	s.slot(name)
	s.slot(name)
	s.newTag("2")

	// The pull of tag 2 is deployed; the answer is lost.
	s.w.sim.SetFault("deploy-by-tag-or-uuid", sim.Fault{ErrorRate: 1, AfterProcessing: true})
	s.pool("solo")
	s.w.sim.SetFault("deploy-by-tag-or-uuid", sim.Fault{})
	s.advance(5 * time.Second) // a worker takes it: it pulls the tag's first push
	pulling := false
	for _, d := range s.w.sim.Deployments() {
		pulling = pulling || (strings.HasPrefix(d.Ref, s.w.images[string(v1.PlatformZoom)]+":2") && d.HasWorker)
	}
	if !pulling {
		t.Fatalf("no deployment pulls tag 2: %+v", s.w.sim.Deployments())
	}

	p := s.w.api.get(s.w.api.keyOf(s.w.pools[0])).(*v1.BotPool).DeepCopy()
	s.w.pushAgain(p)
	must(s.w.api.Update(s.w.ctx, p))
	*s.w.pools[0] = *p.DeepCopy()
	s.sync()
	s.pulled("solo")
	for range 5 {
		s.slot(name)
	}
	s.runningBot("b")
	s.check()
	if s.w.liveBot("b").Status.StartedAt == nil {
		t.Fatalf("bot b did not start: %s", describeBot(s.w.liveBot("b")))
	}
}

// duoPool is soloPool on two servers, the image warm on both.
func duoPool(w *world) {
	soloPool(w)
	extra := w.sim.AddServer(sim.ServerSpec{Name: "extra-1"})
	w.sim.WarmImage(extra, w.images[string(v1.PlatformZoom)], "latest")
	p := w.api.get(w.api.keyOf(w.pools[0])).(*v1.BotPool).DeepCopy()
	p.Spec.Coolify.ServerUUID = ""
	p.Spec.Coolify.Servers = []v1.PoolServer{{UUID: w.fixture.ServerUUID, Weight: 1}, {UUID: extra, Weight: 1}}
	must(w.api.Update(w.ctx, p))
	*w.pools[0] = *p.DeepCopy()
}

// Found by the model check with seed 1 at step 23444: a slot's create took effect in Coolify
// but its answer was lost, and the slot was deleted by hand before any pass adopted the
// application. With no application recorded, its deletion dropped the finalizer at once and
// left the application behind under the slot's name. The pool's replacement of that name went
// to another server, could not adopt an application placed elsewhere, and created a second
// one of the same name (invariant 2) before the orphan sweep came by.
func TestRegressionDeletedSlotLeavesAnUnrecordedApplication(t *testing.T) {
	s := newScript(t, duoPool)
	s.pool("solo")
	s.pool("solo")
	s.pulled("solo")
	first := s.only()
	name := first.Name

	// Its create takes effect; the answer is lost.
	s.w.sim.SetFault("create-dockerimage-application", sim.Fault{ErrorRate: 1, AfterProcessing: true})
	s.slot(name)
	s.w.sim.SetFault("create-dockerimage-application", sim.Fault{})
	var made []string
	for _, a := range s.w.sim.Apps() {
		if a.Name == name && !a.Deleting {
			made = append(made, a.UUID)
		}
	}
	if len(made) != 1 || s.only().Status.ApplicationUUID != "" {
		t.Fatalf("after a create with a lost answer: applications %v, slot's %q; want one, unrecorded", made, s.only().Status.ApplicationUUID)
	}

	// Its server is cordoned, so a replacement goes to the other one; a person deletes the slot.
	p := s.w.api.get(s.w.api.keyOf(s.w.pools[0])).(*v1.BotPool).DeepCopy()
	for i := range p.Spec.Coolify.Servers {
		if p.Spec.Coolify.Servers[i].UUID == first.Spec.Server {
			p.Spec.Coolify.Servers[i].Cordoned = true
		}
	}
	must(s.w.api.Update(s.w.ctx, p))
	*s.w.pools[0] = *p.DeepCopy()
	s.w.byHand = true
	must(s.w.api.Delete(s.w.ctx, s.only().DeepCopy()))
	s.w.byHand = false
	s.sync()

	for range 60 {
		s.slot(name)
		s.pool("solo")
		if sl := s.w.liveSlot(name); sl != nil && sl.UID != first.UID {
			s.slot(name)
			break
		}
		s.advance(2 * time.Second)
	}
	s.w.checkState()
	s.check()
	if a, ok := s.w.sim.App(made[0]); ok && !a.Deleting {
		t.Fatalf("application %s the deleted slot created outlived it", made[0])
	}
	sl := s.w.liveSlot(name)
	if sl == nil || sl.UID == first.UID || sl.Spec.Server == first.Spec.Server || sl.Status.ApplicationUUID == "" {
		t.Fatalf("want a replacement with an application on the other server: %s", describeSlot(sl))
	}
}

// foundSeeds are seeds of the random mode that failed, each run to just past the step where
// it did: a fixed seed of the suite as the issue that found it asked (issue 29). A seed's
// path follows the product's behaviour, so a later change of the controllers leads it
// elsewhere; the lasting regression for each cause is the unit or script test its entry
// names, and these stay as further fixed seeds that once reached a defect.
var foundSeeds = []struct {
	seed  uint64
	steps int
	what  string
}{
	// A scale-down of a standby pool, during a Coolify outage, removed two slots waiting for
	// the deploy gate beside a standby container being deployed: legal, the model's excuse
	// did not count that container as free capacity (surplus).
	{881256409367165, 9500, "invariant 9 (model): a standby container on its way is free capacity"},
	// A slot's create took effect with its answer lost, the pool's template moved on, and the
	// next pass, unable to adopt the application on the old tag, created a second of the same
	// name (TestSlotPhasesInOnePass, "Creating beside its own application on an image it cannot adopt", controllers).
	{3457702266237806, 4700, "invariant 2: two applications of one slot's name"},
	// A settle checked a reservation 5 s into the deletion of its pool's only slot (maxSlots 1,
	// the slot retired): the model did not wait for Coolify's deletions (coolifyBusy).
	{538685351090594, 25100, "invariant 17 (model): a settle ends before Coolify's deletions do"},
	// A standby pool on a tag the registry lacks deployed a container on it in each free slot,
	// which failed, retired and was created again, forever (TestSlotPhasesInOnePass, "Idle
	// standby slot whose image's pre-pull failed", controllers).
	{3457702266237806, 5000, "settle: standby containers of an image whose pre-pull failed"},
	// seed 2061190406384971 failed at step 201,670, too far for the suite: a wave's binding
	// held a bot whose start had failed since (TestAWaveBindsAgainABotWhoseStartFailedSinceItsBinding, controllers).
	// seed 2295569671406997 failed at step 195,000, too far for the suite: a grant of a bot
	// deleted before the cache showed it held the queue (TestAWaveForgetsTheGrantOfABotDeletedBeforeItShowed, controllers).
	// seed 1579723300654347 failed at step 238,427, too far for the suite: a slot let its bot
	// go taking an older failed start for the new one, and the dispatcher held the bot as bound
	// (TestAWaveBindsAgainABotWhoseStartFailedSinceItsBinding, TestBoundInForgetsABindingThatEnded, controllers).
	// seed 4474694933379789 failed at step 160,000, too far for the suite: the model did not
	// know a server the pool took out for failing its starts as a reason a reservation is late.
	// A reservation came due on a pool whose template had moved to a tag its registry lacks,
	// no server holding a container of the old one: no slot could start, and the bot said so.
	{1579723300654357, 10000, "invariant 17 (model): a reservation of a pool whose image cannot be pulled"},
	// A pool's pre-pull failed and the pool stalled; the deploy gate still counted the pull on
	// its server, and another pool's rollout there waited for a build that was free
	// (TestDeployGateForgetsAnEndedPull, controllers).
	{4474694933379790, 11000, "invariant 16: a rollout held back by a pull that had ended"},
	// A deletion's Docker cleanup removed the image a pool had pulled; a slot's pull of it
	// started and failed before the pool recorded its pull, and the model took that failed
	// pull for one that put the image back (the model's error; OnPulled in the simulator).
	{847380336291706, 2100, "invariant 16: a cold pull after a cleanup, excused again"},
	// seed 1795973968309153 failed at step 148,037 (and, before the first of two fixes, 71,201),
	// too far for the suite: a tenant bot whose start failed went Pending when its namespace was
	// dropped while the failed slot still named it, and counted against its tenant's limit
	// (TestRefusedBotStaysQueuedWhileItsFailedSlotHoldsIt, controllers/bot).
	// seed 1795974969957143 failed at step 10,000 (and, before the next fix, 213,433): a reserved
	// bot of a tenant at its limit was not served at its start, its tenant's ad-hoc bots having
	// taken the room (now kept for it: TenantPromises, TestFairOrder); then a bot back in the
	// queue from a failed slot counted against those promises. Replayed at 10,000 steps below.
	{1795974969957143, 10001, "invariant 17: a tenant's reservation kept within its limit"},
}

// Seeds whose replay is too long for the suite (under -race it costs minutes), each kept by a
// unit test of its cause instead:
//   - 3236169675925491 (69,016 steps) and 857066198271254 (150,740): the pool's pulledAt keeps
//     whole seconds (TestRemovedByCleanup);
//   - 4367750540162643 (120,000): a settle counted a pull back-off against the rollout's time
//     (TestSettleWaitsOutAPullBackoff).

// TestModelCheckFoundSeeds replays foundSeeds.
func TestModelCheckFoundSeeds(t *testing.T) {
	for _, f := range foundSeeds {
		t.Run(fmt.Sprint(f.seed), func(t *testing.T) {
			t.Parallel()
			w := newWorld(f.seed, nil)
			w.run(f.steps)
			if len(w.violations) > 0 {
				t.Fatalf("%s:\n%s", f.what, w.report(f.steps))
			}
		})
	}
}
