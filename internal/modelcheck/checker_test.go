package modelcheck

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/coolify/sim"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/store"
)

// The checker's own tests: each breaks the world in a way a correct operator never would (a
// corrupt write, or a reconciler swapped for a broken one) and expects the check that guards
// against it to say so. A check that cannot fail would pass every run of the model; these
// show that each one can.

// reconcilerFunc is a hand-written stand-in for a reconciler.
type reconcilerFunc func(context.Context, ctrl.Request) (ctrl.Result, error)

func (f reconcilerFunc) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return f(ctx, req)
}

var noop = reconcilerFunc(func(context.Context, ctrl.Request) (ctrl.Result, error) { return ctrl.Result{}, nil })

// pairPool is one zoom pool of two warm slots.
func pairPool(w *world) {
	w.addPool("solo", v1.PlatformZoom, 2, 2, 2, v1.Timing{})
	w.sim.WarmImage(w.fixture.ServerUUID, w.images[string(v1.PlatformZoom)], "latest")
}

// ready brings the pool's slots to Idle.
func (s *script) ready() []string {
	s.t.Helper()
	s.pool("solo")
	s.pool("solo")
	s.pulled("solo")
	var names []string
	for _, sl := range s.w.liveSlots() {
		names = append(names, sl.Name)
		s.slot(sl.Name)
		s.slot(sl.Name)
	}
	for _, sl := range s.w.liveSlots() {
		if sl.Status.Phase != v1.SlotIdle {
			s.t.Fatalf("slot %s is %s, want Idle", sl.Name, sl.Status.Phase)
		}
	}
	return names
}

func (s *script) queued(name string, priority int32) {
	b := bt.MakeBot(namespace, name).MaxDuration("1h").Priority(priority).Obj()
	must(s.w.api.Create(s.w.ctx, b))
	s.sync()
	s.bot(name)
	s.bot(name)
	if p := s.w.liveBot(name).Status.Phase; p != v1.BotQueued {
		s.t.Fatalf("bot %s is %s, want Queued", name, p)
	}
}

// write patches an object in the API server as a buggy controller would.
func (s *script) write(o client.Object, status bool, mutate func()) {
	s.t.Helper()
	patch := client.MergeFrom(o.DeepCopyObject().(client.Object))
	mutate()
	var err error
	if status {
		err = s.w.api.Status().Patch(s.w.ctx, o, patch)
	} else {
		err = s.w.api.Patch(s.w.ctx, o, patch)
	}
	if err != nil {
		s.t.Fatal(err)
	}
	s.sync()
}

func (s *script) expect(want string) {
	s.t.Helper()
	for _, v := range s.w.violations {
		if strings.Contains(v, want) {
			return
		}
	}
	s.t.Fatalf("no violation mentions %q; violations: %q", want, s.w.violations)
}

func TestCheckerCatches(t *testing.T) {
	cases := []struct {
		name, want string
		run        func(s *script)
	}{
		{"a bot bound to two slots", "invariant 1", func(s *script) {
			slots := s.ready()
			s.queued("b", 0)
			uid := s.w.liveBot("b").UID
			for _, n := range slots {
				sl := s.w.liveSlot(n)
				s.write(sl, false, func() { sl.Spec.BotRef = &v1.BotReference{Name: "b", UID: uid} })
			}
			s.w.checkState()
		}},
		{"more slots than maxSlots", "invariant 2", func(s *script) {
			s.ready()
			extra := bt.MakeSlot(namespace, "pool-zoom-099", "solo").Obj()
			must(s.w.api.Create(s.w.ctx, extra))
			s.w.checkState()
		}},
		{"a pool that keeps free slots above a lowered maxSlots", "keeps the free ones", func(s *script) {
			s.ready()
			p := s.w.pools[0].DeepCopy()
			p.ResourceVersion = s.w.api.live(s.w.api.keyOf(p)).GetResourceVersion()
			p.Spec.MaxSlots, p.Spec.MinIdle = 1, 0
			must(s.w.api.Update(s.w.ctx, p))
			s.w.pools[0] = p
			s.w.op.pools = noop
			s.w.checkSettled("test")
		}},
		{"a bot Deploying without a slot", "invariant 5", func(s *script) {
			s.ready()
			s.queued("b", 0)
			b := s.w.liveBot("b")
			s.write(b, true, func() { b.Status.Phase = v1.BotDeploying })
			s.w.checkState()
		}},
		{"a queued bot without a timer", "invariant 5", func(s *script) {
			s.ready()
			real := s.w.op.bots
			s.w.op.bots = reconcilerFunc(func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
				_, err := real.Reconcile(ctx, req)
				return ctrl.Result{}, err
			})
			s.queued("b", 0)
		}},
		{"a dispatcher that binds nobody", "invariant 3", func(s *script) {
			s.ready()
			s.w.op.disp = noop
			s.queued("b", 0)
			s.dispatch("solo")
		}},
		{"a dispatcher that serves the lowest priority first", "invariant 4", func(s *script) {
			slots := s.ready()
			s.queued("low", 0)
			s.queued("high", 100)
			low := s.w.liveBot("low")
			s.w.op.disp = reconcilerFunc(func(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
				sl := s.w.liveSlot(slots[0])
				patch := client.MergeFromWithOptions(sl.DeepCopy(), client.MergeFromWithOptimisticLock{})
				sl.Spec.BotRef = &v1.BotReference{Name: low.Name, UID: low.UID}
				return ctrl.Result{}, s.w.api.Patch(ctx, sl, patch)
			})
			s.dispatch("solo")
		}},
		{"a dispatcher that binds a tenant past its limit", "invariant 18", func(s *script) {
			slots := s.ready()
			p := s.w.api.get(s.w.api.keyOf(s.w.pools[0])).(*v1.BotPool)
			p.Spec.Tenancy = &v1.Tenancy{Key: v1.TenantByNamespace, Tenants: []v1.TenantPolicy{
				{Name: namespace, TenantShare: v1.TenantShare{Limit: ptr.To[int32](1)}}}}
			must(s.w.api.Update(s.w.ctx, p))
			s.queued("a", 0)
			s.queued("b", 0)
			s.w.op.disp = bindEach(s, slots, "a", "b")
			s.dispatch("solo")
		}},
		{"a dispatcher that binds a bot of a namespace the pool does not admit", "invariant 19", func(s *script) {
			slots := s.ready()
			s.w.tenant.droppedAt = s.w.clk.Now().Add(-time.Minute) // dropped a minute ago
			b := bt.MakeBot(tenantNamespace, tenantBotPrefix+"x").MaxDuration("1h").Obj()
			must(s.w.api.Create(s.w.ctx, b))
			s.w.op.disp = bindEach(s, slots, b.Name)
			s.dispatch("solo")
		}},
		{"a tenant's bot that shows the pool's application", "invariant 20", func(s *script) {
			slots := s.ready()
			b := bt.MakeBot(tenantNamespace, tenantBotPrefix+"x").MaxDuration("1h").Obj()
			must(s.w.api.Create(s.w.ctx, b))
			b = s.w.liveBot(b.Name)
			s.write(b, true, func() { b.Status.ApplicationUUID = s.w.liveSlot(slots[0]).Status.ApplicationUUID })
			s.w.checkState()
		}},
		{"a dispatcher that serves a tenant above its guarantee first", "invariant 21", func(s *script) {
			slots := s.ready()
			p := s.w.api.get(s.w.api.keyOf(s.w.pools[0])).(*v1.BotPool)
			p.Spec.Tenancy = &v1.Tenancy{Key: v1.TenantByLabel, Label: "customer", Tenants: []v1.TenantPolicy{
				{Name: "small", TenantShare: v1.TenantShare{Guaranteed: 1}}}}
			must(s.w.api.Update(s.w.ctx, p))
			for _, n := range []string{"big", "small"} {
				b := bt.MakeBot(namespace, n).MaxDuration("1h").Obj()
				b.Labels = map[string]string{"customer": n}
				must(s.w.api.Create(s.w.ctx, b))
				s.sync()
				s.bot(n)
				s.bot(n)
			}
			s.w.op.disp = bindEach(s, slots[:1], "big")
			s.dispatch("solo")
		}},
		{"a slot controller that keeps a finished bot's slot", "invariant 6", func(s *script) {
			s.ready()
			s.queued("b", 0)
			s.dispatch("solo")
			b := s.w.liveBot("b")
			s.write(b, true, func() { b.Status.Phase = v1.BotDone })
			s.w.op.slots = noop
			for _, sl := range s.w.liveSlots() {
				s.slot(sl.Name)
			}
		}},
		{"a bot controller that looks at a silent bot only after the grace period", "invariant 7", func(s *script) {
			s.w.op.bots = stretched(s.w.op.bots, 30*time.Second)
			s.running("b")
			c := s.container("b")
			c.silent = true
			s.advance(45 * time.Second)
			s.bot("b")
			c.silent = false
			s.w.heartbeat(c)
		}},
		{"a stale-deploying recovery that fails a beating bot", "invariant 8", func(s *script) {
			slot := s.running("b")
			sl := s.w.liveSlot(slot)
			s.write(sl, true, func() {
				sl.Status.Phase, sl.Status.Reason = v1.SlotError, string(v1.ReasonDeployingTimeout)
			})
		}},
		{"a slot that fails while every Coolify call fails", "invariant 9", func(s *script) {
			slot := s.running("b")
			s.w.setCoolify("outage")
			sl := s.w.liveSlot(slot)
			s.write(sl, true, func() { sl.Status.Phase, sl.Status.Reason = v1.SlotError, "StopFailed" })
		}},
		{"a heartbeat timeout during a store outage", "invariant 10", func(s *script) {
			s.running("b")
			s.w.postgres = true
			s.w.store.setDown(true)
			b := s.w.liveBot("b")
			s.write(b, true, func() { b.Status.Phase, b.Status.Reason = v1.BotFatal, v1.ReasonHeartbeatTimeout })
		}},
		{"a slot Busy before its container runs", "turned Busy", func(s *script) {
			slots := s.ready()
			s.queued("b", 0)
			s.dispatch("solo")
			for _, n := range slots {
				if sl := s.w.liveSlot(n); sl.Spec.BotRef != nil {
					s.write(sl, true, func() { sl.Status.Phase = v1.SlotBusy })
				}
			}
		}},
		{"a bot leaving Done", "left terminal phase", func(s *script) {
			s.running("b")
			b := s.w.liveBot("b")
			s.write(b, true, func() { b.Status.Phase = v1.BotDone })
			b = s.w.liveBot("b")
			s.write(b, true, func() { b.Status.Phase = v1.BotInCall })
		}},
		{"a bot that ran sent back to the queue", "retried starts", func(s *script) {
			s.running("b")
			b := s.w.liveBot("b")
			s.write(b, true, func() {
				b.Status.Phase = v1.BotQueued
				b.Status.StartAttempts = append(b.Status.StartAttempts, v1.StartAttempt{SlotName: b.Status.SlotName,
					Reason: v1.ReasonDeploymentFailed, At: metav1.NewTime(s.w.clk.Now())})
			})
		}},
		{"a retried start not recorded", "retried starts", func(s *script) {
			s.ready()
			s.queued("b", 0)
			b := s.w.liveBot("b")
			s.write(b, true, func() { b.Status.Phase = v1.BotDeploying })
			b = s.w.liveBot("b")
			s.write(b, true, func() { b.Status.Phase = v1.BotQueued })
		}},
		{"a binding mirrored one way only", "mirror", func(s *script) {
			s.running("b")
			b := s.w.liveBot("b")
			s.write(b, true, func() { b.Status.SlotName = "pool-zoom-042" })
			s.w.checkSettled("test")
		}},
		{"an application without a slot", "leak", func(s *script) {
			s.ready()
			tag := s.w.sim.Apps()[0].Tags
			api, err := coolify.New("http://coolify.model", sim.DefaultToken, coolify.WithHTTPClient(&http.Client{Transport: s.w.coolify}))
			must(err)
			_, err = api.CreateDockerImageApplication(s.w.ctx, coolify.CreateApplicationRequest{
				ProjectUUID: s.w.fixture.ProjectUUID, ServerUUID: s.w.fixture.ServerUUID, EnvironmentName: s.w.fixture.EnvironmentName,
				Image: "ghcr.io/example/zoom-bot", Tag: "latest", PortsExposes: "3000", Name: "pool-zoom-077", Tags: tag})
			must(err)
			s.w.checkSettled("test")
		}},
		{"a slot controller that gives its application an image its server has not pulled", "invariant 16", func(s *script) {
			s.ready()
			s.newTag("2")
			// Before every pass, the slot's application is given the pool's image, as if
			// templateReady answered true whatever the pool's status says.
			api, err := coolify.New("http://coolify.model", sim.DefaultToken, coolify.WithHTTPClient(&http.Client{Transport: s.w.coolify}))
			must(err)
			real := s.w.op.slots
			s.w.op.slots = reconcilerFunc(func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
				if sl := s.w.liveSlot(req.Name); sl != nil && sl.Status.ApplicationUUID != "" {
					p := s.w.pool(sl.Spec.Pool)
					must(api.UpdateApplication(ctx, sl.Status.ApplicationUUID, coolify.AppUpdate{Image: p.Spec.Image, Tag: p.Spec.ImageTag}))
				}
				return real.Reconcile(ctx, req)
			})
			s.runningBot("b")
		}},
		{"a pool that records a pull that has not finished", "invariant 16", func(s *script) {
			s.ready()
			s.newTag("2")
			s.pool("solo")
			p := s.w.api.get(s.w.api.keyOf(s.w.pools[0])).(*v1.BotPool)
			s.write(p, true, func() {
				for i := range p.Status.Servers {
					st := &p.Status.Servers[i]
					st.Pull = nil
					st.Cached = append([]v1.CachedImage{{Image: p.Status.TemplateImage, PulledAt: metav1.NewTime(s.w.clk.Now())}}, st.Cached...)
				}
			})
			s.runningBot("b")
		}},
		{"a slot controller that never takes the pool's template", "rollout does not end", func(s *script) {
			s.ready()
			s.newTag("2")
			s.w.op.slots = noop
			s.pulled("solo")
			s.w.checkRolloutSettled("test")
		}},
		{"a pool up to date on a tag the registry lacks", "yet says SlotsUpdated True", func(s *script) {
			s.ready()
			s.w.tpl.bad["solo"] = "latest"
			s.newTag("missing")
			s.pool("solo")
			p := s.w.api.get(s.w.api.keyOf(s.w.pools[0])).(*v1.BotPool)
			s.write(p, true, func() {
				meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: v1.ConditionSlotsUpdated, Status: metav1.ConditionTrue, Reason: v1.ReasonUpToDate})
			})
			s.w.checkRolloutSettled("test")
		}},
		{"a reservation not served once the operator is quiet", "invariant 17 (test)", func(s *script) {
			s.ready()
			s.reserved("r", 15*time.Minute)
			s.w.op.disp = noop
			s.advance(15*time.Minute + 31*time.Second)
			s.bot("r")
			s.w.checkSettled("test")
		}},
		{"a reserved bot late without saying why", "does not say why", func(s *script) {
			s.ready()
			s.reserved("r", 15*time.Minute)
			s.w.op.disp = noop
			real := s.w.op.bots
			s.w.op.bots = reconcilerFunc(func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
				res, err := real.Reconcile(ctx, req)
				if b := s.w.liveBot(req.Name); b != nil && err == nil {
					patch := client.MergeFrom(b.DeepCopy())
					meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse,
						Reason: v1.ReasonWaiting, Message: "Waiting for a free slot"})
					must(s.w.api.Status().Patch(ctx, b, patch))
				}
				return res, err
			})
			s.advance(15*time.Minute + 31*time.Second)
			s.bot("r")
		}},
		{"a projection the store refuses", "store:", func(s *script) {
			for _, name := range []string{"x", "y"} {
				_ = s.w.store.UpsertSlot(s.w.ctx, store.SlotRecord{Namespace: namespace, Name: name, Pool: "solo", ApplicationUUID: "same"})
			}
			s.w.checkState()
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newScript(t, pairPool)
			c.run(s)
			s.expect(c.want)
		})
	}
}

// reserved creates a bot scheduled ahead and lets the bot controller reserve its slot.
func (s *script) reserved(name string, ahead time.Duration) {
	s.t.Helper()
	b := bt.MakeBot(namespace, name).MaxDuration("1h").Obj()
	b.Spec.StartTime = &metav1.Time{Time: s.w.clk.Now().Add(ahead)}
	must(s.w.api.Create(s.w.ctx, b))
	s.sync()
	s.bot(name)
	s.bot(name)
	if got := s.w.liveBot(name); !isReserved(got) || got.Status.Phase != v1.BotScheduled {
		s.t.Fatalf("bot %s is %s, reserved %v; want Scheduled with a reservation", name, got.Status.Phase, isReserved(got))
	}
}

// newTag puts the pool on a new tag of its image, pushed to the registry: no server holds it.
func (s *script) newTag(tag string) {
	p := s.w.api.get(s.w.api.keyOf(s.w.pools[0])).(*v1.BotPool).DeepCopy()
	s.w.sim.PushImage(p.Spec.Image, tag)
	p.Spec.ImageTag = tag
	must(s.w.api.Update(s.w.ctx, p))
	*s.w.pools[0] = *p.DeepCopy()
	s.sync()
}

// runningBot queues a bot and runs the slots, the dispatcher and the bot until it started or
// a check failed.
func (s *script) runningBot(name string) {
	s.t.Helper()
	s.queued(name, 0)
	for range 40 {
		s.dispatch("solo")
		for _, sl := range s.w.liveSlots() {
			s.slot(sl.Name)
		}
		s.bot(name)
		if len(s.w.violations) > 0 || s.w.liveBot(name).Status.StartedAt != nil {
			return
		}
		s.advance(5 * time.Second)
	}
}

// stretched makes a reconciler look again no sooner than every d, as the bot controller did
// before it rechecked silent bots every heartbeat interval.
func stretched(r interface {
	Reconcile(context.Context, ctrl.Request) (ctrl.Result, error)
}, d time.Duration) reconcilerFunc {
	return func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
		res, err := r.Reconcile(ctx, req)
		if res.RequeueAfter > 0 && res.RequeueAfter < d {
			res.RequeueAfter = d
		}
		return res, err
	}
}

// The API server refuses what the CRD's CEL rules refuse: rebinding a bound slot.
func TestAPIServerRefusesRebinding(t *testing.T) {
	s := newScript(t, pairPool)
	slots := s.ready()
	s.queued("b", 0)
	s.dispatch("solo")
	for _, n := range slots {
		sl := s.w.liveSlot(n)
		if sl.Spec.BotRef == nil {
			continue
		}
		patch := client.MergeFrom(sl.DeepCopy())
		sl.Spec.BotRef = &v1.BotReference{Name: "other", UID: "uid-other"}
		if err := s.w.api.Patch(s.w.ctx, sl, patch); !apierrors.IsInvalid(err) {
			t.Fatalf("rebinding slot %s: %v, want Invalid", n, err)
		}
		return
	}
	t.Fatal("no slot was bound")
}

// bindEach is a dispatcher that binds the named bots to slots, one each, whatever the rules.
func bindEach(s *script, slots []string, bots ...string) reconcile.Reconciler {
	return reconcilerFunc(func(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
		for i, name := range bots {
			b := s.w.liveBot(name)
			sl := s.w.liveSlot(slots[i])
			patch := client.MergeFromWithOptions(sl.DeepCopy(), client.MergeFromWithOptimisticLock{})
			sl.Spec.BotRef = v1.ReferenceTo(b, sl.Namespace)
			if err := s.w.api.Patch(ctx, sl, patch); err != nil {
				return ctrl.Result{}, err
			}
		}
		return ctrl.Result{}, nil
	})
}
