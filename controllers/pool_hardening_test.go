package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/botapi/botclient"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/metrics"
	poolctrl "botpool.dev/botpool/controllers/pool"
	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/internal/slottoken"
)

// tag is the Coolify tag this suite's cluster gives the scenario's pool.
func (sc *scenario) tag() string {
	return coolifyview.ClusterPoolTag(suiteCluster, sc.ns, sc.pool.Name)
}

// ignoringFilter is a Coolify whose list ignores the tag filter, as servers before tags did:
// every list answers the whole team.
type ignoringFilter struct{ coolify.API }

func (f ignoringFilter) ListApplications(ctx context.Context, _ string) ([]coolify.Application, error) {
	return f.API.ListApplications(ctx, "")
}

// createApp creates an application in the scenario's Coolify as another party would.
func (sc *scenario) createApp(name string, tags []string, desc string) string {
	sc.t.Helper()
	uuid, err := sc.api.CreateDockerImageApplication(context.Background(), coolify.CreateApplicationRequest{
		ProjectUUID: fixture.ProjectUUID, ServerUUID: fixture.ServerUUID, EnvironmentName: fixture.EnvironmentName,
		Image: sc.pool.Spec.Image, Name: name, Tags: tags, Description: desc,
	})
	if err != nil {
		sc.t.Fatal(err)
	}
	return uuid
}

func TestClusterPoolTag(t *testing.T) {
	staging, production := coolifyview.ClusterPoolTag("uid:a", "bots", "zoom"), coolifyview.ClusterPoolTag("uid:b", "bots", "zoom")
	if staging == production {
		t.Errorf("two clusters share the tag %s", staging)
	}
	if legacy := coolifyview.ClusterPoolTag("", "bots", "zoom"); legacy != coolifyview.PoolTagOf("bots", "zoom") {
		t.Errorf("without an identity the tag is %s, want the legacy %s", legacy, coolifyview.PoolTagOf("bots", "zoom"))
	}
	if !strings.HasPrefix(staging, "botpool-zoom-") || len(staging) > 70 {
		t.Errorf("tag %q: want readable and short", staging)
	}
}

func TestOwnerMarkAndAdoption(t *testing.T) {
	pool := newPool("bots", "zoom", func(p *v1.BotPool) { p.Spec.ImageTag = "1.2" })
	tag := coolifyview.ClusterPoolTag("uid:a", "bots", "zoom")
	mine := coolify.Application{Description: coolifyview.Marked(strings.Repeat("x", 300), coolifyview.OwnerMark(tag, pool, pool.Spec.Coolify.ServerUUID)),
		DockerRegistryImageName: pool.Spec.Image, DockerRegistryImageTag: "1.2"}
	if len(mine.Description) > coolifyview.MaxDescription {
		t.Errorf("description of %d characters: Coolify answers 500 above %d", len(mine.Description), coolifyview.MaxDescription)
	}
	if !coolifyview.Adoptable(&mine, tag, pool, pool.Spec.Coolify.ServerUUID) || !coolifyview.CarriesTag(&mine, tag) {
		t.Error("the slot's own application is not adoptable")
	}
	otherImage := mine
	otherImage.DockerRegistryImageTag = "1.1"
	moved := newPool("bots", "zoom", func(p *v1.BotPool) { p.Spec.ImageTag = "1.2"; p.Spec.Coolify.ServerUUID = "srv-2" })
	otherCluster := coolifyview.ClusterPoolTag("uid:b", "bots", "zoom")
	for what, ok := range map[string]bool{
		"another image":          coolifyview.Adoptable(&otherImage, tag, pool, pool.Spec.Coolify.ServerUUID),
		"another server":         coolifyview.Adoptable(&mine, tag, moved, moved.Spec.Coolify.ServerUUID),
		"another cluster's mark": coolifyview.Adoptable(&mine, otherCluster, pool, pool.Spec.Coolify.ServerUUID),
		"no mark":                coolifyview.Adoptable(&coolify.Application{DockerRegistryImageName: pool.Spec.Image, DockerRegistryImageTag: "1.2"}, tag, pool, pool.Spec.Coolify.ServerUUID),
	} {
		if ok {
			t.Errorf("an application with %s is adoptable", what)
		}
	}
	if coolifyview.CarriesTag(&mine, otherCluster) {
		t.Error("another cluster's sweep would take the application for its own")
	}
}

func TestTruncateSlotStatus(t *testing.T) {
	st := v1.BotPoolSlotStatus{Message: strings.Repeat("m", 5000), Reason: strings.Repeat("R", 500),
		Conditions: []metav1.Condition{{Type: v1.ConditionStalled, Message: strings.Repeat("c", 40000)}}}
	st.TruncateTexts()
	if len(st.Message) > v1.MaxMessageLength || len(st.Reason) > v1.MaxReasonLength || len(st.Conditions[0].Message) > v1.MaxConditionMessageLength {
		t.Errorf("lengths after truncation: message %d, reason %d, condition %d", len(st.Message), len(st.Reason), len(st.Conditions[0].Message))
	}
}

// TestOrphanSweepChecksOwnershipItself: with a Coolify that ignores the tag filter, the sweep
// deletes only a stopped application that carries this pool's owner mark; another cluster's
// application, an unmarked one and a running one are left alone.
func TestOrphanSweepChecksOwnershipItself(t *testing.T) {
	sc := newScenario(t, "foreignapps", sim.Config{})
	connector.use(sc.pool.Name, ignoringFilter{sc.api})
	sc.phase(v1.SlotIdle)
	sc.sim.SetFault("list-applications", sim.Fault{ErrorRate: 1}) // no sweep while we set up
	other := coolifyview.ClusterPoolTag("uid:another-cluster", sc.ns, sc.pool.Name)
	foreign := sc.createApp(poolctrl.SlotName(v1.PlatformZoom, 7), []string{other}, coolifyview.Marked("[IDLE]", coolifyview.OwnerMark(other, sc.pool, sc.pool.Spec.Coolify.ServerUUID)))
	unmarked := sc.createApp(poolctrl.SlotName(v1.PlatformZoom, 8), nil, "")
	orphan := sc.createApp(poolctrl.SlotName(v1.PlatformZoom, 9), []string{sc.tag()}, coolifyview.Marked("[IDLE]", coolifyview.OwnerMark(sc.tag(), sc.pool, sc.pool.Spec.Coolify.ServerUUID)))
	running := sc.createApp(poolctrl.SlotName(v1.PlatformZoom, 6), []string{sc.tag()}, coolifyview.Marked("[BUSY]", coolifyview.OwnerMark(sc.tag(), sc.pool, sc.pool.Spec.Coolify.ServerUUID)))
	sc.warm()
	if _, err := sc.api.Deploy(context.Background(), running); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 10*time.Second, func() error {
		step(30 * time.Second)
		if app, _ := sc.sim.App(running); !strings.HasPrefix(app.Status, "running") {
			return fmt.Errorf("the running orphan shows %s", app.Status)
		}
		return nil
	})
	sc.sim.SetFault("list-applications", sim.Fault{})
	kubetest.Eventually(t, 10*time.Second, func() error {
		step(time.Second)
		if app, ok := sc.sim.App(orphan); ok && !app.Deleting {
			return fmt.Errorf("orphan %s still there", orphan)
		}
		return nil
	})
	for range 5 {
		step(time.Second)
	}
	for what, uuid := range map[string]string{"another cluster's": foreign, "an unmarked": unmarked, "a running": running} {
		if app, ok := sc.sim.App(uuid); !ok || app.Deleting {
			t.Errorf("%s application was deleted", what)
		}
	}
}

// TestSlotNeverAdoptsAnotherClustersApplication: another cluster runs a pool of the same
// namespace and name on the same Coolify team (and the server ignores the tag filter): its
// application of the same name, image and placement is not adopted.
func TestSlotNeverAdoptsAnotherClustersApplication(t *testing.T) {
	sc := newScenario(t, "twoclusters", sim.Config{}, func(p *v1.BotPool) { p.Spec.MinIdle = 0 })
	connector.use(sc.pool.Name, ignoringFilter{sc.api})
	other := coolifyview.ClusterPoolTag("uid:production", sc.ns, sc.pool.Name)
	theirs := sc.createApp(poolctrl.SlotName(v1.PlatformZoom, 1), []string{other}, coolifyview.Marked("[IDLE] Available - never used", coolifyview.OwnerMark(other, sc.pool, sc.pool.Spec.Coolify.ServerUUID)))
	legacy := coolifyview.ClusterPoolTag("", sc.ns, sc.pool.Name)
	oldOnes := sc.createApp(poolctrl.SlotName(v1.PlatformZoom, 1), []string{legacy}, coolifyview.Marked("[IDLE] Available - never used", coolifyview.OwnerMark(legacy, sc.pool, sc.pool.Spec.Coolify.ServerUUID)))
	patch := client.MergeFrom(sc.pool.DeepCopy())
	sc.pool.Spec.MinIdle = 1
	if err := env.Client.Patch(context.Background(), sc.pool, patch); err != nil {
		t.Fatal(err)
	}
	idle := sc.phase(v1.SlotIdle)
	if uuid := idle.Status.ApplicationUUID; uuid == theirs || uuid == oldOnes {
		t.Fatalf("the slot adopted another cluster's application %s", uuid)
	}
	if idle.Status.ApplicationTag != sc.tag() {
		t.Errorf("applicationTag %q, want %q", idle.Status.ApplicationTag, sc.tag())
	}
	if app, _ := sc.sim.App(idle.Status.ApplicationUUID); !coolifyview.CarriesTag(&coolify.Application{Description: app.Description}, sc.tag()) {
		t.Errorf("the new application's description %q lacks the owner mark", app.Description)
	}
}

// TestLegacyTaggedSlotKeepsItsApplication: the upgrade path. A slot recorded by a version
// whose tags had no cluster identity (no applicationTag, no coolifyInstance) keeps its
// application, serves a bot on it, and has it marked as its own; the sweep, which looks only
// at this cluster's tag, never touches it.
func TestLegacyTaggedSlotKeepsItsApplication(t *testing.T) {
	sc := newScenario(t, "upgraded", sim.Config{})
	idle := sc.phase(v1.SlotIdle)
	legacyTag := coolifyview.PoolTagOf(sc.ns, sc.pool.Name)
	legacy := sc.createApp(idle.Name, []string{legacyTag}, "[IDLE] Available - never used")
	// What the old version recorded: the application's uuid alone.
	kubetest.Eventually(t, 10*time.Second, func() error {
		var s v1.BotPoolSlot
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(idle), &s); err != nil {
			return err
		}
		s.Status.ApplicationUUID, s.Status.ApplicationTag, s.Status.CoolifyInstance = legacy, "", ""
		return env.Client.Status().Update(context.Background(), &s)
	})
	sc.slot("on the legacy application", func(s *v1.BotPoolSlot) bool {
		return s.Status.ApplicationUUID == legacy && s.Status.CoolifyInstance == coolifyview.InstanceOf(sc.api)
	})
	bot, busy := sc.running("after-upgrade")
	if busy.Status.ApplicationUUID != legacy || busy.Status.ApplicationTag != "" {
		t.Fatalf("bot %s runs on %s (tag %q), want the legacy application %s", bot.Name, busy.Status.ApplicationUUID, busy.Status.ApplicationTag, legacy)
	}
	app, ok := sc.sim.App(legacy)
	if !ok || app.Deleting || !app.Running {
		t.Fatalf("legacy application: exists %v, %+v", ok, app)
	}
	if !coolifyview.CarriesTag(&coolify.Application{Description: app.Description}, legacyTag) {
		t.Errorf("legacy application's description %q lacks its owner mark", app.Description)
	}
	for range 5 { // the sweep, which lists only this cluster's tag, leaves it alone
		step(time.Second)
	}
	if app, ok := sc.sim.App(legacy); !ok || app.Deleting {
		t.Error("the legacy application was deleted")
	}
}

// claimBinding is the slot's container fetching its config with the slot's token: the client
// keeps the binding credential the answer carries, which the bot calls need.
func claimBinding(t *testing.T, slot *v1.BotPoolSlot) *botclient.Client {
	t.Helper()
	var secret corev1.Secret
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: slot.Namespace, Name: slottoken.SecretName(slot.Name)}, &secret); err != nil {
		t.Fatal(err)
	}
	cl := botclient.New("http://"+botAPIAddr, slot.Status.ApplicationUUID, string(secret.Data[slottoken.Key]), nil)
	kubetest.Eventually(t, 10*time.Second, func() error {
		_, err := cl.Config(context.Background())
		return err
	})
	return cl
}

// heartbeat sends one heartbeat of bot through the bot API with its binding credential.
func heartbeat(t *testing.T, cl *botclient.Client, bot *v1.Bot) botclient.Action {
	t.Helper()
	var hb botclient.HeartbeatResponse
	kubetest.Eventually(t, 10*time.Second, func() error {
		var err error
		hb, err = cl.Heartbeat(context.Background(), bot.Name)
		return err
	})
	return hb.Action
}

// deletePool deletes the scenario's pool and waits until its slot is being deleted.
func (sc *scenario) deletePool() *v1.BotPoolSlot {
	sc.t.Helper()
	if err := env.Client.Delete(context.Background(), sc.pool); err != nil {
		sc.t.Fatal(err)
	}
	return sc.slot("deleted", func(s *v1.BotPoolSlot) bool { return !s.DeletionTimestamp.IsZero() && s.Status.DrainingSince != nil })
}

// TestDeletingAPoolLetsRunningBotsLeave: deleting a pool (a GitOps prune, say) does not cut a
// live meeting: the running bot's heartbeats answer leave, the pool says it is draining, and
// the application is deleted only once the bot has left.
func TestDeletingAPoolLetsRunningBotsLeave(t *testing.T) {
	sc := newScenario(t, "drained", sim.Config{})
	bot, slot := sc.running("in-a-call")
	cl := claimBinding(t, slot)
	if a := heartbeat(t, cl, bot); a != botclient.ActionContinue {
		t.Fatalf("before the deletion the bot is told %q", a)
	}
	sc.deletePool()
	if a := heartbeat(t, cl, bot); a != botclient.ActionLeave {
		t.Errorf("a bot of a deleted pool is told %q, want leave", a)
	}
	kubetest.Eventually(t, 10*time.Second, func() error {
		var p v1.BotPool
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(sc.pool), &p); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionReconciling); c == nil || c.Reason != v1.ReasonDraining || !strings.Contains(c.Message, "1 bot(s) still leaving") {
			return fmt.Errorf("pool conditions %+v, want Reconciling/Draining", p.Status.Conditions)
		}
		return nil
	})
	step(5 * time.Second) // within leaveGracePeriod
	if app, _ := sc.sim.App(slot.Status.ApplicationUUID); !app.Running || app.Deleting {
		t.Fatalf("the application was stopped or deleted while its bot was leaving: %+v", app)
	}
	if b := sc.bot(bot.Name); b.Status.Phase.Terminal() {
		t.Fatalf("the bot ended %s/%s before it left", b.Status.Phase, b.Status.Reason)
	}
	finish(t, bot) // the bot left and reports Done
	slotGone(t, slot)
	if app, ok := sc.sim.App(slot.Status.ApplicationUUID); ok && !app.Deleting {
		t.Error("the application was not deleted after the bot left")
	}
	if b := sc.bot(bot.Name); b.Status.Phase != v1.BotDone {
		t.Errorf("bot ended %s/%s, want Done", b.Status.Phase, b.Status.Reason)
	}
}

// TestDeletedPoolEndsBotsThatDoNotLeave: a bot that ignores leave is ended with SlotLost once
// leaveGracePeriod has passed, and the application is deleted then, not before.
func TestDeletedPoolEndsBotsThatDoNotLeave(t *testing.T) {
	sc := newScenario(t, "stubborn", sim.Config{})
	bot, slot := sc.running("stays")
	sc.deletePool()
	step(10 * time.Second)
	if app, _ := sc.sim.App(slot.Status.ApplicationUUID); app.Deleting {
		t.Fatal("the application was deleted within leaveGracePeriod")
	}
	step(6 * time.Second) // past the 15 s leaveGracePeriod
	sc.botFails(bot.Name, string(v1.ReasonSlotLost))
	slotGone(t, slot)
}

// TestSwitchingCoolifyInstanceIsRefused: credentials pointing at another Coolify instance
// would leave the old applications (with valid bot credentials in their env) behind. The pool
// and its slot stall with CoolifyInstanceChanged instead, nothing is created on the new
// instance, and restoring the URL cleans up as usual on deletion.
func TestSwitchingCoolifyInstanceIsRefused(t *testing.T) {
	sc := newScenario(t, "moved", sim.Config{})
	idle := sc.phase(v1.SlotIdle)
	if idle.Status.CoolifyInstance == "" || idle.Status.CoolifyInstance != coolifyview.InstanceOf(sc.api) {
		t.Fatalf("coolifyInstance %q, want %q", idle.Status.CoolifyInstance, coolifyview.InstanceOf(sc.api))
	}
	other := newSim(sim.Config{})
	t.Cleanup(other.Close)
	other.SeedDefault()
	otherAPI, err := testRegistry.Client(other.URL, sim.DefaultToken)
	if err != nil {
		t.Fatal(err)
	}
	connector.use(sc.pool.Name, otherAPI)
	stalled := func(conds []metav1.Condition) error {
		if c := meta.FindStatusCondition(conds, v1.ConditionStalled); c == nil || c.Reason != v1.ReasonCoolifyInstanceChanged {
			return fmt.Errorf("conditions %+v, want Stalled/%s", conds, v1.ReasonCoolifyInstanceChanged)
		}
		return nil
	}
	kubetest.Eventually(t, 10*time.Second, func() error {
		step(time.Minute)
		var p v1.BotPool
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(sc.pool), &p); err != nil {
			return err
		}
		return stalled(p.Status.Conditions)
	})
	sc.slot("stalled", func(s *v1.BotPoolSlot) bool { return stalled(s.Status.Conditions) == nil })
	// Deleting the pool now would delete nothing on the old instance: it waits instead.
	if err := env.Client.Delete(context.Background(), sc.pool); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		step(time.Minute)
	}
	if apps := other.Apps(); len(apps) != 0 {
		t.Errorf("applications created on the new instance: %+v", apps)
	}
	if app, ok := sc.sim.App(idle.Status.ApplicationUUID); !ok || app.Deleting {
		t.Fatal("the old application was given up")
	}
	sc.slot("still held", func(s *v1.BotPoolSlot) bool { return !s.DeletionTimestamp.IsZero() })
	connector.use(sc.pool.Name, sc.api) // the URL restored: deletion cleans the old instance
	sc.nudge()
	kubetest.Eventually(t, 10*time.Second, func() error {
		step(time.Second)
		if app, ok := sc.sim.App(idle.Status.ApplicationUUID); ok && !app.Deleting {
			return fmt.Errorf("application %s not deleted yet", app.UUID)
		}
		return nil
	})
}

// TestHandWrittenQueuedStatusWithoutQueuedAt: a Bot whose status says Queued without queuedAt
// (written by hand, or restored from a backup) is handled: its wait starts now.
func TestHandWrittenQueuedStatusWithoutQueuedAt(t *testing.T) {
	ns := env.Namespace(t)
	connector.fail("noqueuedat", coolifyview.ErrCredentialsNotFound) // no slots: the bot stays queued
	if err := env.Client.Create(context.Background(), newPool(ns, "noqueuedat")); err != nil {
		t.Fatal(err)
	}
	bot := newBot(t, ns, "handwritten", "noqueuedat")
	waitBot(t, bot, "Queued", func(b *v1.Bot) bool { return b.Status.Phase == v1.BotQueued && b.Status.QueuedAt != nil })
	kubetest.Eventually(t, 10*time.Second, func() error {
		b := &v1.Bot{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(bot), b); err != nil {
			return err
		}
		b.Status.Phase, b.Status.QueuedAt = v1.BotQueued, nil
		return env.Client.Status().Update(context.Background(), b)
	})
	touch(t, bot)
	waitBot(t, bot, "queued again with queuedAt", func(b *v1.Bot) bool { return b.Status.Phase == v1.BotQueued && b.Status.QueuedAt != nil })
}

// TestPoolDeletionForgetsPerPoolState: once a pool is gone, its cached Coolify client and
// application lists are dropped (the dispatcher's state: TestForgetDropsAPoolsState).
func TestPoolDeletionForgetsPerPoolState(t *testing.T) {
	key := types.NamespacedName{Namespace: "gone", Name: "pool"}
	sc := &coolifyview.SecretConnector{Clients: map[types.NamespacedName]coolifyview.CachedClient{key: {}}}
	bulk := &coolifyview.BulkReader{Clock: clk, AppSnapshots: map[string]coolifyview.Snapshot[map[string]coolify.Application]{
		coolifyview.ClusterPoolTag("uid:x", key.Namespace, key.Name): {}, coolifyview.PoolTagOf(key.Namespace, key.Name): {}}}
	r := &poolctrl.Reconciler{Connector: sc, Coolify: bulk, Metrics: metrics.New(nil), ClusterID: "uid:x"}
	r.Forget(key)
	if len(sc.Clients) != 0 || len(bulk.AppSnapshots) != 0 {
		t.Errorf("kept %d clients and %d application lists of a deleted pool", len(sc.Clients), len(bulk.AppSnapshots))
	}
}
