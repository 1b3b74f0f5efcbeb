package slot

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/fakeapi"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/internal/slottoken"
	"botpool.dev/botpool/store/memory"
)

// TestSlotTakesTheTemplateInOnePass drives one slot pass per row and checks when a slot's
// application is given the pool's template (PATCH of image, tag and limits): only where its
// server pre-pulled the image, never under a running container of anyone's, before a bot's
// deployment rather than after, and on a ready standby container only once the pool admitted
// it and the slot took itself off offer under its resourceVersion.
func TestSlotTakesTheTemplateInOnePass(t *testing.T) {
	const (
		ns, slotN, app, server = "ns", "pool-zoom-001", "app-1", "srv-1"
	)
	// The token the slot recorded, and its Secret: a slot whose Secret is missing gets a new
	// credential, and a standby slot deploys on a new credential only in its next pass.
	tokenValue := "bpt_update-test"
	token := slottoken.Hash([]byte(tokenValue))
	now := time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)
	oldRef, newRef := "bot:1", "bot:2"
	poolW := func(mode v1.StandbyMode) *bt.PoolWrapper {
		return bt.MakePool(ns, "pool").UID("pool-uid").MaxSlots(3).Image("bot", "2").Standby(mode).Placement("proj", server, "production")
	}
	target := policy.PoolTemplate(poolW("").Obj(), "", "").Hash()
	oldHash := policy.PoolTemplate(bt.MakePool(ns, "pool").Image("bot", "1").Obj(), "", "").Hash()
	// pulled: the pool's status names the template, and its image finished pulling on the
	// slot's server; pulling: the template is named, its image is only on the server's old list.
	pulled := func(mode v1.StandbyMode) client.Object {
		return poolW(mode).Template(target, newRef).Cached(server, oldRef, "", now.Add(-time.Hour)).Cached(server, newRef, "", now).Obj()
	}
	pulling := func(mode v1.StandbyMode) client.Object {
		return poolW(mode).Template(target, newRef).Cached(server, oldRef, "", now.Add(-time.Hour)).Obj()
	}
	bot := func() client.Object {
		return bt.MakeBot(ns, "bot").UID("bot-uid").PoolRef("pool").InPool("pool").Phase(v1.BotDeploying).Obj()
	}
	slot := func() *bt.SlotWrapper {
		return bt.MakeSlot(ns, slotN, "pool").UID("slot-uid").Finalizers(v1.FinalizerSlot).Token(token).Server(server).
			App(app).Template(oldHash, oldRef)
	}
	// withSecret is the pool, the slot and the slot's token Secret.
	withSecret := func(pool client.Object, sl *v1.BotPoolSlot) []client.Object {
		return []client.Object{pool, sl, tokenSecret(t, tokenValue)(sl)}
	}
	// written and dropped record the keys of the env last written and the env rows deleted.
	var written, dropped []string
	api := func() *bt.Coolify {
		written, dropped = nil, nil
		return &bt.Coolify{
			ListApplicationsFn: func(context.Context, string) ([]coolify.Application, error) {
				return []coolify.Application{{UUID: app, Name: slotN, Status: "exited:unhealthy"}}, nil
			},
			UpsertEnvsFn: func(_ context.Context, _ string, e []coolify.EnvVar) ([]coolify.EnvVar, error) {
				written = nil
				for _, v := range e {
					written = append(written, v.Key)
				}
				return e, nil
			},
			// The application holds a key an earlier template had (a key since taken out of
			// the slotEnvFrom Secret), in both its rows.
			ListEnvsFn: func(context.Context, string) ([]coolify.EnvVar, error) {
				return []coolify.EnvVar{{UUID: "e1", Key: envSlotToken}, {UUID: "e2", Key: "OLD_KEY"}, {UUID: "e3", Key: "OLD_KEY", IsPreview: true}}, nil
			},
			DeleteEnvFn:         func(_ context.Context, _, row string) error { dropped = append(dropped, row); return nil },
			StopFn:              func(context.Context, string) error { return nil },
			UpdateApplicationFn: func(context.Context, string, coolify.AppUpdate) error { return nil },
			SetDescriptionFn:    func(context.Context, string, string) error { return nil },
			DeployFn: func(context.Context, string) (coolify.DeployResult, error) {
				return coolify.DeployResult{DeploymentUUID: "dep-1"}, nil
			},
			CreateDockerImageApplicationFn: func(context.Context, coolify.CreateApplicationRequest) (string, error) { return app, nil },
		}
	}
	conflict := interceptor.Funcs{SubResourcePatch: func(context.Context, client.Client, string, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
		return apierrors.NewConflict(schema.GroupResource{Group: v1.GroupVersion.Group, Resource: "botpoolslots"}, slotN, fmt.Errorf("the object has been modified"))
	}}
	ready := func() *bt.SlotWrapper {
		return slot().Phase(v1.SlotIdle).Since(now.Add(-time.Hour)).Standby(v1.StandbyReady, now.Add(-time.Hour))
	}

	type result struct {
		Template, Image string
		Phase           v1.SlotPhase
		Standby         v1.StandbyState
		// Patched: UpdateApplication was called; BeforeDeploy: and before any Deploy.
		Patched, Deployed, BeforeDeploy bool
		// Env: the keys of the env written, "" when none was; Dropped: the env rows deleted.
		Env, Dropped string
	}
	full, own := "BOTPOOL_API_URL BOTPOOL_SLOT_TOKEN POOL_SLOT_UUID", "BOTPOOL_SLOT_TOKEN POOL_SLOT_UUID"
	tests := []struct {
		name  string
		objs  []client.Object
		funcs interceptor.Funcs
		want  result
	}{{
		name: "a free slot of a Stopped pool takes the template at once once its server pulled the image",
		objs: []client.Object{pulled(v1.StandbyStopped), slot().Phase(v1.SlotIdle).Since(now.Add(-time.Hour)).Obj()},
		want: result{Template: target, Image: newRef, Phase: v1.SlotIdle, Patched: true, Env: full, Dropped: "e2 e3"},
	}, {
		name: "a free slot whose server still pulls keeps its template",
		objs: []client.Object{pulling(v1.StandbyStopped), slot().Phase(v1.SlotIdle).Since(now.Add(-time.Hour)).Obj()},
		want: result{Template: oldHash, Image: oldRef, Phase: v1.SlotIdle},
	}, {
		name: "a bound slot takes the template before its bot's deployment",
		objs: []client.Object{pulled(v1.StandbyStopped), bot(), slot().BoundTo("bot", "bot-uid").Phase(v1.SlotIdle).Since(now).Obj()},
		want: result{Template: target, Image: newRef, Phase: v1.SlotDeploying, Patched: true, Deployed: true, BeforeDeploy: true, Env: full, Dropped: "e2 e3"},
	}, {
		name: "a bound slot whose server still pulls starts its bot on the image it has, warm, with its template's env (untouched)",
		objs: []client.Object{pulling(v1.StandbyStopped), bot(), slot().BoundTo("bot", "bot-uid").Phase(v1.SlotIdle).Since(now).Obj()},
		want: result{Template: oldHash, Image: oldRef, Phase: v1.SlotDeploying, Deployed: true},
	}, {
		name: "a released slot whose server still pulls gets a fresh credential and keeps its template's env",
		objs: []client.Object{pulling(v1.StandbyStopped), slot().Phase(v1.SlotReleasing).Since(now).Obj()},
		want: result{Template: oldHash, Image: oldRef, Phase: v1.SlotIdle, Env: own},
	}, {
		name: "a released slot whose server pulled takes the template, its env and drops the keys the template lacks",
		objs: []client.Object{pulled(v1.StandbyStopped), slot().Phase(v1.SlotReleasing).Since(now).Obj()},
		want: result{Template: target, Image: newRef, Phase: v1.SlotIdle, Patched: true, Env: full, Dropped: "e2 e3"},
	}, {
		name: "a busy slot keeps its template under its bot",
		objs: []client.Object{pulled(v1.StandbyStopped), bot(), slot().BoundTo("bot", "bot-uid").Phase(v1.SlotBusy).Since(now).Obj()},
		want: result{Template: oldHash, Image: oldRef, Phase: v1.SlotBusy},
	}, {
		name: "a ready standby slot the pool has not admitted keeps its container",
		objs: []client.Object{pulled(v1.StandbyRunning), ready().Obj()},
		want: result{Template: oldHash, Image: oldRef, Phase: v1.SlotIdle, Standby: v1.StandbyLost},
	}, {
		name: "an admitted ready standby slot takes itself off offer, takes the template and deploys a fresh container",
		objs: withSecret(pulled(v1.StandbyRunning), ready().Annotate(v1.AnnotationUpdate, target).Obj()),
		want: result{Template: target, Image: newRef, Phase: v1.SlotDeploying, Standby: v1.StandbyStarting, Patched: true, Deployed: true, BeforeDeploy: true, Env: full, Dropped: "e2 e3"},
	}, {
		name:  "an admitted ready standby slot that loses the race for itself to a binding changes nothing",
		objs:  []client.Object{pulled(v1.StandbyRunning), ready().Annotate(v1.AnnotationUpdate, target).Obj()},
		funcs: conflict,
		want:  result{Template: oldHash, Image: oldRef, Phase: v1.SlotIdle, Standby: v1.StandbyReady},
	}, {
		name: "an admission for another template is no admission",
		objs: []client.Object{pulled(v1.StandbyRunning), ready().Annotate(v1.AnnotationUpdate, oldHash).Obj()},
		want: result{Template: oldHash, Image: oldRef, Phase: v1.SlotIdle, Standby: v1.StandbyLost},
	}, {
		name: "a standby slot with no container yet takes the template before its deployment",
		objs: withSecret(pulled(v1.StandbyRunning), slot().Phase(v1.SlotIdle).Since(now).Standby(v1.StandbyStarting, now).Obj()),
		want: result{Template: target, Image: newRef, Phase: v1.SlotDeploying, Standby: v1.StandbyStarting, Patched: true, Deployed: true, BeforeDeploy: true, Env: full, Dropped: "e2 e3"},
	}, {
		name: "a standby slot with no container yet whose server still pulls deploys on its template, its env untouched",
		objs: withSecret(pulling(v1.StandbyRunning), slot().Phase(v1.SlotIdle).Since(now).Standby(v1.StandbyStarting, now).Obj()),
		want: result{Template: oldHash, Image: oldRef, Phase: v1.SlotDeploying, Standby: v1.StandbyStarting, Deployed: true},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			clk := clocktesting.NewFakeClock(now)
			c := fakeapi.New(t, tt.funcs, tt.objs...)
			f := api()
			r := onePassSlots(c, c, clk, f, memory.New(memory.WithClock(clk)))
			key := client.ObjectKey{Namespace: ns, Name: slotN}
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil && tt.funcs.SubResourcePatch == nil {
				t.Fatalf("reconcile: %v", err)
			}
			var stored v1.BotPoolSlot
			if err := c.Get(ctx, key, &stored); err != nil {
				t.Fatal(err)
			}
			calls := f.Calls()
			patch := slices.IndexFunc(calls, func(c string) bool { return strings.HasPrefix(c, "UpdateApplication ") })
			deploy := slices.IndexFunc(calls, func(c string) bool { return strings.HasPrefix(c, "Deploy ") })
			got := result{Template: stored.Status.TemplateHash, Image: stored.Status.Image, Phase: stored.Status.Phase,
				Standby: stored.Status.Standby, Patched: patch >= 0, Deployed: deploy >= 0, BeforeDeploy: patch >= 0 && deploy > patch,
				Env: strings.Join(written, " "), Dropped: strings.Join(dropped, " ")}
			if got != tt.want {
				t.Errorf("got %+v\nwant %+v\ncalls %v\nmessage %q", got, tt.want, calls, stored.Status.Message)
			}
		})
	}
}

// TestNewSlotStartsOnTheImageItsServerHolds: mid-rollout, a new slot's application is created
// with the newest image its server pre-pulled, not the template's still pulling there, so a bot
// bound to it starts warm; once the server holds the template's image, with that.
func TestNewSlotStartsOnTheImageItsServerHolds(t *testing.T) {
	at := time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)
	pool := func() *bt.PoolWrapper { return bt.MakePool("ns", "pool").Image("reg:5000/team/bot", "2") }
	tests := []struct {
		name      string
		pool      *v1.BotPool
		image     string
		tag       string
		adoptable []string // application images adoptable as the slot's
	}{
		{"nothing pulled yet: the template's", pool().Obj(), "reg:5000/team/bot", "2", []string{"reg:5000/team/bot:2"}},
		// A create whose answer was lost while the server held only tag 1 made an application
		// on 1; it is still this slot's once the pull of 2 finished.
		{"template pulled", pool().Cached("srv", "reg:5000/team/bot:1", "", at).Cached("srv", "reg:5000/team/bot:2", "", at).Obj(), "reg:5000/team/bot", "2", []string{"reg:5000/team/bot:1", "reg:5000/team/bot:2"}},
		{"template still pulling: the newest pulled", pool().Cached("srv", "reg:5000/team/bot:1", "", at).Obj(), "reg:5000/team/bot", "1", []string{"reg:5000/team/bot:1", "reg:5000/team/bot:2"}},
		{"pulled on another server only", pool().Cached("other", "reg:5000/team/bot:1", "", at).Obj(), "reg:5000/team/bot", "2", []string{"reg:5000/team/bot:2"}},
		{"a restart pulls again: the same image meanwhile", pool().Annotate(v1.AnnotationRestartedAt, "now").Cached("srv", "reg:5000/team/bot:2", "", at).Obj(), "reg:5000/team/bot", "2", []string{"reg:5000/team/bot:2"}},
		// The tag was pushed again: its old pull is no longer what a deployment of it gets.
		{"a restart pulls again: another image pulled meanwhile", pool().Annotate(v1.AnnotationRestartedAt, "now").Cached("srv", "reg:5000/team/bot:1", "", at).Cached("srv", "reg:5000/team/bot:2", "", at).Obj(), "reg:5000/team/bot", "1", []string{"reg:5000/team/bot:1", "reg:5000/team/bot:2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			image, tag := policy.CreateImage(tt.pool, "srv")
			if image != tt.image || tag != tt.tag {
				t.Errorf("createImage = %s:%s, want %s:%s", image, tag, tt.image, tt.tag)
			}
			tagName := coolifyview.ClusterPoolTag("", "ns", "pool")
			for _, ref := range []string{"reg:5000/team/bot:1", "reg:5000/team/bot:2", "reg:5000/team/other:2"} {
				img, tg := policy.SplitRef(ref)
				app := &coolify.Application{Description: coolifyview.Marked("x", coolifyview.OwnerMark(tagName, tt.pool, "srv")), DockerRegistryImageName: img, DockerRegistryImageTag: tg}
				if got, want := coolifyview.Adoptable(app, tagName, tt.pool, "srv"), slices.Contains(tt.adoptable, ref); got != want {
					t.Errorf("adoptable(%s) = %v, want %v", ref, got, want)
				}
			}
		})
	}
}
