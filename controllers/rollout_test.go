package controllers

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
	poolctrl "botpool.dev/botpool/controllers/pool"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/internal/simbot"
)

// pullLog records every pull the simulator's deployments start (Hooks.OnPull).
type pullLog struct {
	mu    sync.Mutex
	pulls []sim.PullInfo
}

func (l *pullLog) add(p sim.PullInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pulls = append(l.pulls, p)
}

// coldStarts are the cold pulls of slots' applications: a bot's or a standby container's
// deployment that downloaded its image. The pool's puller is the only one allowed to.
func (l *pullLog) coldStarts() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, p := range l.pulls {
		if p.Cold && !strings.HasPrefix(p.AppName, poolctrl.PullerPrefix) {
			out = append(out, fmt.Sprintf("%s pulled %s cold on %s", p.AppName, p.Ref, p.ServerUUID))
		}
	}
	return out
}

// waitPool waits until the pool's status satisfies cond, moving the fake clock on by step each
// time it does not (pulls and deployments take the simulator's time), at most maxSteps times.
func (sc *scenario) waitPool(what string, step time.Duration, maxSteps int, cond func(*v1.BotPool) bool) *v1.BotPool {
	sc.t.Helper()
	var p *v1.BotPool
	steps := 0
	kubetest.Eventually(sc.t, 30*time.Second, func() error {
		p = sc.poolNow()
		if cond(p) {
			return nil
		}
		if steps < maxSteps {
			clk.Step(step)
			steps++
		}
		su := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionSlotsUpdated)
		return fmt.Errorf("pool is not %s yet: updated %d of %+v, SlotsUpdated %+v, servers %+v", what, p.Status.UpdatedSlots, p.Status.Slots, su, p.Status.Servers)
	})
	return p
}

// upToDate: every slot runs the template the pool names, and the pool says so.
func upToDate(want int32) func(*v1.BotPool) bool {
	return func(p *v1.BotPool) bool {
		return p.Status.Slots != nil && p.Status.Slots.Total == want && p.Status.UpdatedSlots == want &&
			meta.IsStatusConditionTrue(p.Status.Conditions, v1.ConditionSlotsUpdated) && p.Status.ObservedGeneration == p.Generation
	}
}

// slotsOnImage checks that every slot's application in the simulator runs ref.
func (sc *scenario) slotsOnImage(ref string) {
	sc.t.Helper()
	for _, s := range listSlots(sc.t, sc.ns) {
		app, ok := sc.sim.App(s.Status.ApplicationUUID)
		if !ok {
			sc.t.Errorf("slot %s: application %s not in the simulator", s.Name, s.Status.ApplicationUUID)
			continue
		}
		if got := app.Image; got != ref || s.Status.Image != ref {
			sc.t.Errorf("slot %s: application runs %s, status says %s, want %s", s.Name, got, s.Status.Image, ref)
		}
	}
}

// TestRolloutOfAStoppedPool: a pool of three slots (two free, one running a bot) moves from
// tag 1 to tag 2. The image is pulled on the server first, off the start path: a bot arriving
// meanwhile starts warm on the old image. Once pulled, the free slots move over at once, the
// busy ones after their bots; no bot fails and no slot's deployment pulls cold. Then a tag the
// registry lacks stalls the rollout with the old slots serving, and reverting recovers.
func TestRolloutOfAStoppedPool(t *testing.T) {
	pulls := &pullLog{}
	sc := newScenario(t, "rollstop", sim.Config{ColdPull: 30 * time.Second, Hooks: sim.Hooks{OnPull: pulls.add}}, func(p *v1.BotPool) {
		p.Spec.MaxSlots, p.Spec.MinIdle, p.Spec.ImageTag = 3, 2, "1"
	})
	image := sc.pool.Spec.Image
	sc.sim.WarmImage(fixture.ServerUUID, image, "1")
	sc.sim.PushImage(image, "2")
	first := sc.waitPool("on tag 1 with two slots", time.Second, 60, upToDate(2))
	if !meta.IsStatusConditionTrue(first.Status.Conditions, v1.ConditionReady) {
		t.Fatalf("pool up to date but not Ready: %+v", first.Status.Conditions)
	}
	h1 := first.Status.TemplateHash

	// A bot runs on tag 1 through the rollout.
	b1 := newBot(t, sc.ns, "early", sc.pool.Name)
	busy := slotOf(t, b1)
	sc.waitSlot(busy.Name, "Busy", func(s *v1.BotPoolSlot) bool { return s.Status.Phase == v1.SlotBusy }, 20*time.Millisecond)

	sc.updatePool(func(p *v1.BotPool) { p.Spec.ImageTag = "2" })
	pulling := sc.waitPool("pulling tag 2", 100*time.Millisecond, 5, func(p *v1.BotPool) bool {
		c := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionSlotsUpdated)
		return c != nil && c.Reason == v1.ReasonPullingImage && p.Status.TemplateHash != h1
	})
	h2 := pulling.Status.TemplateHash
	// Mid-pull, a bot starts on a free slot of tag 1: warm.
	b2 := newBot(t, sc.ns, "mid", sc.pool.Name)
	mid := slotOf(t, b2)
	sc.waitSlot(mid.Name, "Busy", func(s *v1.BotPoolSlot) bool { return s.Status.Phase == v1.SlotBusy }, 20*time.Millisecond)
	if got := sc.slotNamed(mid.Name).Status.Image; got != image+":1" {
		t.Errorf("the bot that started mid-pull runs %s, want the old image", got)
	}

	// The pull finishes; the free slot moves over at once, the busy ones stay.
	sc.waitPool("pulled with the free slot on tag 2", time.Second, 60, func(p *v1.BotPool) bool {
		return policy.CachedOn(p, fixture.ServerUUID, image+":2", "") && p.Status.UpdatedSlots >= 1
	})
	for _, s := range listSlots(t, sc.ns) {
		if s.Spec.BotRef != nil && s.Status.TemplateHash != h1 {
			t.Errorf("busy slot %s left its template %s under its bot (now %s)", s.Name, h1, s.Status.TemplateHash)
		}
	}
	// The bots end; their slots follow.
	for _, b := range []string{"early", "mid"} {
		if err := env.Client.Delete(context.Background(), sc.bot(b)); err != nil {
			t.Fatal(err)
		}
	}
	done := sc.waitPool("on tag 2", 500*time.Millisecond, 200, upToDate(3))
	if done.Status.TemplateHash != h2 || done.Status.Rollout != nil {
		t.Errorf("after the rollout: template %s (want %s), rollout %+v", done.Status.TemplateHash, h2, done.Status.Rollout)
	}
	sc.slotsOnImage(image + ":2")
	if cold := pulls.coldStarts(); len(cold) > 0 {
		t.Errorf("slots pulled cold during the rollout: %v", cold)
	}

	// A tag the registry lacks: the pre-pull fails at once, nothing moves, the pool serves.
	sc.sim.FailPulls(image+":nope", -1)
	sc.updatePool(func(p *v1.BotPool) { p.Spec.ImageTag = "nope" })
	bad := sc.waitPool("stalled on the bad tag", time.Second, 20, func(p *v1.BotPool) bool {
		return meta.IsStatusConditionTrue(p.Status.Conditions, v1.ConditionStalled)
	})
	if c := meta.FindStatusCondition(bad.Status.Conditions, v1.ConditionStalled); c.Reason != v1.ReasonImagePullFailed || !strings.Contains(c.Message, "nope") {
		t.Errorf("Stalled %s: %s", c.Reason, c.Message)
	}
	if !meta.IsStatusConditionTrue(bad.Status.Conditions, v1.ConditionReady) {
		t.Errorf("a failed pre-pull took the pool out of Ready: %+v", bad.Status.Conditions)
	}
	b3 := newBot(t, sc.ns, "during-stall", sc.pool.Name)
	stalledSlot := slotOf(t, b3)
	sc.waitSlot(stalledSlot.Name, "Busy", func(s *v1.BotPoolSlot) bool { return s.Status.Phase == v1.SlotBusy }, 20*time.Millisecond)
	sc.slotsOnImage(image + ":2")

	// Reverting resumes: tag 2 is cached, so the pool is up to date again at once.
	sc.sim.FailPulls(image+":nope", 0)
	sc.updatePool(func(p *v1.BotPool) { p.Spec.ImageTag = "2" })
	back := sc.waitPool("back on tag 2", 100*time.Millisecond, 50, func(p *v1.BotPool) bool {
		return upToDate(3)(p) && !meta.IsStatusConditionTrue(p.Status.Conditions, v1.ConditionStalled)
	})
	if back.Status.TemplateHash != h2 {
		t.Errorf("reverted to template %s, want %s", back.Status.TemplateHash, h2)
	}
	if b := sc.bot("during-stall"); b.Status.Phase == v1.BotFatal {
		t.Errorf("the bot started during the stall failed: %s", b.Status.Reason)
	}
}

// waitSlot waits until the named slot satisfies cond, moving the fake clock by step each time
// it does not.
func (sc *scenario) waitSlot(name, what string, cond func(*v1.BotPoolSlot) bool, step time.Duration) *v1.BotPoolSlot {
	sc.t.Helper()
	var got *v1.BotPoolSlot
	kubetest.Eventually(sc.t, 20*time.Second, func() error {
		got = sc.slotNamed(name)
		if cond(got) {
			return nil
		}
		clk.Step(step)
		return fmt.Errorf("slot %s is %s (%s), want %s", name, got.Status.Phase, got.Status.Message, what)
	})
	return got
}

// slotNamed reads one slot.
func (sc *scenario) slotNamed(name string) *v1.BotPoolSlot {
	sc.t.Helper()
	s := &v1.BotPoolSlot{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: sc.ns, Name: name}, s); err != nil {
		sc.t.Fatal(err)
	}
	return s
}

// TestRolloutOfAStandbyPool: a standby pool (minIdle 2, maxSlots 4, the default strategy:
// maxUnavailable 0, maxSurge 25%) moves from tag 1 to tag 2. After the pre-pull it adds a
// surge slot on the new template, replaces one ready container at a time while two others stay
// ready, and removes the surge slot at the end: every slot on tag 2, two slots again, never
// fewer than minIdle ready free slots once the pool was warm, no container pulled cold. A bot
// started after the rollout runs on the new image.
func TestRolloutOfAStandbyPool(t *testing.T) {
	pulls := &pullLog{}
	cs := newContainers(t, simbot.Behaviour{MeetingLength: 50 * time.Millisecond, HeartbeatEvery: 10 * time.Millisecond, PollEvery: 20 * time.Millisecond})
	hooks := cs.hooks()
	hooks.OnPull = pulls.add
	sc := newScenario(t, "rollstandby", sim.Config{ColdPull: 20 * time.Second, Hooks: hooks}, func(p *v1.BotPool) {
		p.Spec.Standby, p.Spec.MaxSlots, p.Spec.MinIdle, p.Spec.ImageTag = v1.StandbyRunning, 4, 2, "1"
	})
	image := sc.pool.Spec.Image
	sc.sim.WarmImage(fixture.ServerUUID, image, "1")
	cs.mu.Lock()
	cs.coolify = sc.sim
	cs.mu.Unlock()

	warm := func(p *v1.BotPool) bool { return upToDate(2)(p) && p.Status.Slots.Ready == 2 }
	sc.waitPool("warm on tag 1", time.Second, 60, func(p *v1.BotPool) bool {
		if warm(p) {
			return true
		}
		sc.advance()
		return false
	})
	sc.sim.PushImage(image, "2")
	sc.updatePool(func(p *v1.BotPool) { p.Spec.ImageTag = "2" })
	minReady, maxTotal := int32(2), int32(2)
	done := sc.waitPool("rolled out to tag 2", time.Second, 40, func(p *v1.BotPool) bool {
		if p.Status.Slots != nil {
			minReady, maxTotal = min(minReady, p.Status.Slots.Ready), max(maxTotal, p.Status.Slots.Total)
		}
		if p.Spec.ImageTag == "2" && p.Status.TemplateImage == image+":2" && warm(p) && p.Status.Rollout == nil {
			return true
		}
		sc.advance()
		return false
	})
	if minReady < 2 {
		t.Errorf("ready free slots dropped to %d during the rollout, below minIdle 2 (maxUnavailable 0)", minReady)
	}
	if maxTotal != 3 {
		t.Errorf("the pool held at most %d slots during the rollout, want 3 (one surge slot: 25%% of minIdle 2, rounded up)", maxTotal)
	}
	sc.slotsOnImage(image + ":2")
	if cold := pulls.coldStarts(); len(cold) > 0 {
		t.Errorf("containers pulled cold during the rollout: %v", cold)
	}
	if done.Status.UpdatedSlots != 2 {
		t.Errorf("updatedSlots %d, want 2", done.Status.UpdatedSlots)
	}

	b := newBot(t, sc.ns, "after", sc.pool.Name)
	slot := slotOf(t, b)
	if slot.Status.Image != image+":2" {
		t.Errorf("the bot after the rollout got a slot on %s", slot.Status.Image)
	}
	cs.mu.Lock()
	errs := cs.errs
	cs.mu.Unlock()
	if len(errs) > 0 {
		t.Errorf("containers failed: %v", errs)
	}
}

// TestRolloutOfSettingsAndSecret: a change of the slots' limits, then of the slotEnvFrom
// Secret's content, rolls the free slots out like an image change (the image is cached, so
// no pull is needed first): their applications get the new limits and the new env.
func TestRolloutOfSettingsAndSecret(t *testing.T) {
	ctx := context.Background()
	sc := newScenario(t, "rollenv", sim.Config{}, func(p *v1.BotPool) {
		p.Spec.MaxSlots, p.Spec.MinIdle, p.Spec.ImageTag = 2, 2, "1"
		p.Spec.SlotEnvFrom = &v1.SecretReference{Name: "bot-env"}
	})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sc.ns, Name: "bot-env", Labels: map[string]string{v1.LabelAllowPoolUse: "true"}},
		Data: map[string][]byte{"MEETING_LANG": []byte("en")}}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	sc.sim.WarmImage(fixture.ServerUUID, sc.pool.Spec.Image, "1")
	first := sc.waitPool("up to date", time.Second, 30, upToDate(2))

	sc.updatePool(func(p *v1.BotPool) { p.Spec.Resources = v1.SlotResources{CPUs: "1.5", Memory: "2g"} })
	limits := sc.waitPool("on the new limits", 100*time.Millisecond, 20, func(p *v1.BotPool) bool {
		return p.Status.TemplateHash != first.Status.TemplateHash && upToDate(2)(p)
	})
	for _, s := range listSlots(t, sc.ns) {
		if app, _ := sc.sim.App(s.Status.ApplicationUUID); app.LimitsCPUs != "1.5" || app.LimitsMemory != "2g" {
			t.Errorf("slot %s: application limits %q/%q, want 1.5/2g", s.Name, app.LimitsCPUs, app.LimitsMemory)
		}
	}

	secret.Data["MEETING_LANG"] = []byte("de")
	if err := env.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	// The Secret is read again within envDigestTTL and a pool pass (at most templateRecheck).
	envd := sc.waitPool("on the new env", 5*time.Second, 30, func(p *v1.BotPool) bool {
		return p.Status.TemplateHash != limits.Status.TemplateHash && upToDate(2)(p)
	})
	for _, s := range listSlots(t, sc.ns) {
		if app, _ := sc.sim.App(s.Status.ApplicationUUID); app.Env["MEETING_LANG"] != "de" {
			t.Errorf("slot %s: MEETING_LANG %q in its application, want de", s.Name, app.Env["MEETING_LANG"])
		}
	}
	if envd.Status.UpdatedSlots != 2 {
		t.Errorf("updatedSlots %d after the Secret change, want 2", envd.Status.UpdatedSlots)
	}

	// A key taken out of the Secret (a leaked credential, say) leaves every application: an
	// upsert alone would keep it there for every later bot.
	secret.Data = map[string][]byte{"MEETING_REGION": []byte("eu")}
	if err := env.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	sc.waitPool("without the removed key", 5*time.Second, 30, func(p *v1.BotPool) bool {
		return p.Status.TemplateHash != envd.Status.TemplateHash && upToDate(2)(p)
	})
	for _, s := range listSlots(t, sc.ns) {
		app, _ := sc.sim.App(s.Status.ApplicationUUID)
		if _, kept := app.Env["MEETING_LANG"]; kept || app.Env["MEETING_REGION"] != "eu" {
			t.Errorf("slot %s: application env %v, want MEETING_REGION=eu and no MEETING_LANG", s.Name, app.Env)
		}
	}
}

// TestRolloutWaitsForEachServer: a pool over two servers whose new image cannot be pulled on
// one of them (no registry login there) moves its slots on the other server and keeps those
// on the failing one as they are, Stalled with Docker's error; once the login is fixed the
// retried pull lets them follow.
func TestRolloutWaitsForEachServer(t *testing.T) {
	sc, home, other := twoServerPool(t, "rollservers", 4)
	image := sc.pool.Spec.Image
	for _, srv := range []string{home, other} {
		sc.sim.WarmImage(srv, image, "")
	}
	sc.waitPool("up to date on both servers", 30*time.Second, 40, upToDate(2)) // pulled cold: it began before the warm-up
	sc.sim.PushImage(image, "2")
	sc.sim.WarmImage(home, image, "2")
	sc.sim.FailPullsOn(other, image+":2", -1)
	sc.updatePool(func(p *v1.BotPool) { p.Spec.ImageTag = "2" })
	stalled := sc.waitPool("stalled on the other server", time.Second, 30, func(p *v1.BotPool) bool {
		return meta.IsStatusConditionTrue(p.Status.Conditions, v1.ConditionStalled) && p.Status.UpdatedSlots == 1
	})
	// The suite's token may not read deployment logs (read:sensitive): the message says so.
	if c := meta.FindStatusCondition(stalled.Status.Conditions, v1.ConditionStalled); c.Reason != v1.ReasonImagePullFailed || !strings.Contains(c.Message, "on server "+other+" failed") {
		t.Errorf("Stalled %s: %q, want the failed pull on server %s", c.Reason, c.Message, other)
	}
	for _, s := range listSlots(t, sc.ns) {
		onNew := s.Status.Image == image+":2"
		if onNew != (s.Spec.Server == home) {
			t.Errorf("slot %s on server %s runs %s", s.Name, s.Spec.Server, s.Status.Image)
		}
	}
	sc.sim.FailPullsOn(other, image+":2", 0)
	sc.waitPool("up to date after the retry", 30*time.Second, 40, func(p *v1.BotPool) bool {
		return upToDate(2)(p) && !meta.IsStatusConditionTrue(p.Status.Conditions, v1.ConditionStalled)
	})
	sc.slotsOnImage(image + ":2")
}
