package pool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/fakeapi"
	"botpool.dev/botpool/controllers/internal/metrics"
	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/controllers/internal/policy"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// TestRolloutConditions computes a pool's status from one pass's observations and checks what
// the rollout says: SlotsUpdated, Reconciling, Stalled and Ready, updatedSlots and MutableTag.
func TestRolloutConditions(t *testing.T) {
	now := time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)
	pool := func() *bt.PoolWrapper {
		return bt.MakePool("ns", "pool").Image("bot", "2").Servers("a", "b")
	}
	tmpl := policy.PoolTemplate(pool().Obj(), "", "")
	target := tmpl.Hash()
	slot := func(name, server, hash string) v1.BotPoolSlot {
		return *bt.MakeSlot("ns", name, "pool").Server(server).App("app-"+name).Phase(v1.SlotIdle).Template(hash, "").Obj()
	}
	cached := func(refs ...string) *policy.ServerImages {
		im := &policy.ServerImages{}
		for _, r := range refs {
			im.Cached = append(im.Cached, v1.CachedImage{Image: r, PulledAt: metav1.NewTime(now)})
		}
		return im
	}
	failed := &policy.ServerImages{Cached: []v1.CachedImage{{Image: "bot:1"}}, Pull: &v1.ImagePull{Image: "bot:2", State: v1.ImagePullFailed,
		Message: "Pulling bot:2 on server b failed: manifest for bot:2 not found"}}
	type want struct {
		updated                    int32
		slotsUpdated               string // its reason; UpToDate is True
		reconciling, stalled, cold string // reasons; "" for absent (cold: Ready's reason when False)
	}
	tests := []struct {
		name   string
		pool   *v1.BotPool
		slots  []v1.BotPoolSlot
		images map[string]*policy.ServerImages
		want   want
	}{{
		name:   "every slot on the template, pulled everywhere",
		pool:   pool().Obj(),
		slots:  []v1.BotPoolSlot{slot("s1", "a", target), slot("s2", "b", target)},
		images: map[string]*policy.ServerImages{"a": cached("bot:2"), "b": cached("bot:2")},
		want:   want{updated: 2, slotsUpdated: v1.ReasonUpToDate},
	}, {
		name:   "pulling on one server: the slots wait for it",
		pool:   pool().Obj(),
		slots:  []v1.BotPoolSlot{slot("s1", "a", "t1-old"), slot("s2", "b", "t1-old")},
		images: map[string]*policy.ServerImages{"a": cached("bot:2", "bot:1"), "b": cached("bot:1")},
		want:   want{updated: 0, slotsUpdated: v1.ReasonPullingImage, reconciling: v1.ReasonPullingImage},
	}, {
		name:   "pulled everywhere, slots still differ: rolling out",
		pool:   pool().Obj(),
		slots:  []v1.BotPoolSlot{slot("s1", "a", target), slot("s2", "b", "t1-old")},
		images: map[string]*policy.ServerImages{"a": cached("bot:2"), "b": cached("bot:2")},
		want:   want{updated: 1, slotsUpdated: v1.ReasonRollingOut, reconciling: v1.ReasonRollingOut},
	}, {
		name:   "a failed pull stalls the rollout; the old image serves, so the pool stays Ready",
		pool:   pool().Obj(),
		slots:  []v1.BotPoolSlot{slot("s1", "a", "t1-old")},
		images: map[string]*policy.ServerImages{"a": cached("bot:2"), "b": failed},
		want:   want{slotsUpdated: v1.ReasonImagePullFailed, stalled: v1.ReasonImagePullFailed},
	}, {
		name:   "a new pool with nothing pulled anywhere is not Ready",
		pool:   pool().Obj(),
		images: map[string]*policy.ServerImages{},
		want:   want{slotsUpdated: v1.ReasonPullingImage, reconciling: v1.ReasonPullingImage, cold: v1.ReasonPullingImage},
	}, {
		name: "a server Coolify reports out is not waited for",
		pool: func() *v1.BotPool {
			p := pool().Obj()
			p.Status.Servers = []v1.ServerStatus{{UUID: "b", Health: v1.ServerUnreachable}}
			return p
		}(),
		slots:  []v1.BotPoolSlot{slot("s1", "a", target)},
		images: map[string]*policy.ServerImages{"a": cached("bot:2")},
		want:   want{updated: 1, slotsUpdated: v1.ReasonUpToDate},
	}, {
		// Seen by the model check: a tag the registry lacks looked up to date on no slot.
		name: "every server cordoned or out: pulled nowhere, so not up to date though no slot differs",
		pool: func() *v1.BotPool {
			p := pool().Obj()
			p.Spec.Coolify.Servers[0].Cordoned = true
			p.Status.Servers = []v1.ServerStatus{{UUID: "b", Health: v1.ServerNotFound}}
			return p
		}(),
		images: map[string]*policy.ServerImages{},
		want:   want{slotsUpdated: v1.ReasonNoUsableServer, reconciling: v1.ReasonNoUsableServer},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &poolScope{pool: tt.pool, slots: tt.slots, template: &tmpl, images: tt.images}
			setPoolStatus(s, now, true)
			p := s.pool
			reason := func(typ string, status metav1.ConditionStatus) string {
				if c := meta.FindStatusCondition(p.Status.Conditions, typ); c != nil && c.Status == status {
					return c.Reason
				}
				return ""
			}
			su := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionSlotsUpdated)
			got := want{updated: p.Status.UpdatedSlots, slotsUpdated: su.Reason,
				reconciling: reason(v1.ConditionReconciling, metav1.ConditionTrue), stalled: reason(v1.ConditionStalled, metav1.ConditionTrue),
				cold: reason(v1.ConditionReady, metav1.ConditionFalse)}
			if got != tt.want {
				t.Errorf("got %+v, want %+v\nconditions: %+v", got, tt.want, p.Status.Conditions)
			}
			if (su.Status == metav1.ConditionTrue) != (su.Reason == v1.ReasonUpToDate) {
				t.Errorf("SlotsUpdated %s with reason %s", su.Status, su.Reason)
			}
			if p.Status.TemplateHash != target || p.Status.TemplateImage != "bot:2" {
				t.Errorf("status names template %s (%s), want %s (bot:2)", p.Status.TemplateHash, p.Status.TemplateImage, target)
			}
			if meta.FindStatusCondition(p.Status.Conditions, v1.ConditionMutableTag) != nil {
				t.Errorf("MutableTag on pinned tag 2")
			}
		})
	}
}

// TestMutableTagCondition: a floating tag (latest by default) gets MutableTag True with what to
// do; a pinned one none.
func TestMutableTagCondition(t *testing.T) {
	for tag, want := range map[string]bool{"": true, "latest": true, "Main": true, "v1.2.3": false, "2026-11-27": false} {
		p := bt.MakePool("ns", "pool").Image("bot", tag).Obj()
		tmpl := policy.PoolTemplate(p, "", "")
		setPoolStatus(&poolScope{pool: p, template: &tmpl}, time.Now(), true)
		c := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionMutableTag)
		if got := c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1.ReasonFloatingTag; got != want {
			t.Errorf("tag %q: MutableTag %+v, want %v", tag, c, want)
		}
		if want && !strings.Contains(c.Message, v1.AnnotationRestartedAt) {
			t.Errorf("tag %q: the message does not say how to roll a new push out: %s", tag, c.Message)
		}
	}
}

// TestRolloutAdmitsWithinTheStrategy runs the rollout step of a standby pool's pass on a fake
// API server and checks which ready slots it admits (annotation botpool.dev/update) and how
// many surge slots it asks supply for, against spec.updateStrategy.
func TestRolloutAdmitsWithinTheStrategy(t *testing.T) {
	now := time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)
	poolW := func(minIdle, maxSlots int32, maxUnavailable, maxSurge intstr.IntOrString) *v1.BotPool {
		p := bt.MakePool("ns", "pool").Image("bot", "2").Standby(v1.StandbyRunning).Placement("proj", "srv", "production").
			MinIdle(minIdle).MaxSlots(maxSlots).Cached("srv", "bot:2", "", now).Obj()
		p.Spec.UpdateStrategy = v1.UpdateStrategy{MaxUnavailable: &maxUnavailable, MaxSurge: &maxSurge}
		t := policy.PoolTemplate(p, "", "")
		p.Status.TemplateHash, p.Status.TemplateImage = t.Hash(), t.Ref()
		return p
	}
	serverFull := func(p *v1.BotPool, n int32) *v1.BotPool {
		p.Spec.Coolify.ServerUUID = ""
		p.Spec.Coolify.Servers = []v1.PoolServer{{UUID: "srv", Weight: 1, MaxSlots: &n}}
		return p
	}
	readySlot := func(i int, hash string) *v1.BotPoolSlot {
		return bt.MakeSlot("ns", fmt.Sprintf("pool-zoom-%03d", i), "pool").Server("srv").App(fmt.Sprintf("app-%d", i)).
			Phase(v1.SlotIdle).Standby(v1.StandbyReady, now).Template(hash, "").Obj()
	}
	tests := []struct {
		name        string
		pool        *v1.BotPool
		ready, new  int // ready slots on the old template, and on the new one
		creating    int // slots just created (no application yet): surge on its way
		admitted    int
		surge       int
		wantRollout bool
	}{
		{"defaults keep minIdle ready: no admission, a quarter of minIdle as surge", poolW(4, 10, intstr.FromInt32(0), intstr.FromString("25%")), 4, 0, 0, 0, 1, true},
		{"surge ready: one admitted", poolW(4, 10, intstr.FromInt32(0), intstr.FromString("25%")), 4, 1, 0, 1, 0, true},
		{"maxUnavailable 2: two admitted at once", poolW(4, 10, intstr.FromInt32(2), intstr.FromInt32(0)), 4, 0, 0, 2, 0, true},
		{"no room at maxSlots, no surge: one at a time below the floor", poolW(4, 4, intstr.FromInt32(0), intstr.FromInt32(0)), 4, 0, 0, 1, 0, true},
		{"nothing outdated: no rollout", poolW(2, 4, intstr.FromInt32(0), intstr.FromInt32(1)), 0, 2, 0, 0, 0, false},
		// The server's own maxSlots leaves no room for surge though the pool's would: one at
		// a time, as at maxSlots (surge asked for and never placed admitted nothing, ever).
		{"the server is full: one at a time below the floor", serverFull(poolW(4, 10, intstr.FromInt32(0), intstr.FromString("25%")), 4), 4, 0, 0, 1, 0, true},
		// A surge slot just created counts as on its way to Ready: no admission below the
		// floor meanwhile (the end-to-end test saw one before it was counted).
		{"a surge slot being created: wait for it", poolW(2, 4, intstr.FromInt32(0), intstr.FromString("25%")), 2, 0, 1, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			objs := []client.Object{tt.pool}
			var slots []v1.BotPoolSlot
			for i := 0; i < tt.ready+tt.new; i++ {
				hash := "t1-old"
				if i >= tt.ready {
					hash = tt.pool.Status.TemplateHash
				}
				sl := readySlot(i+1, hash)
				objs = append(objs, sl)
			}
			if tt.creating > 0 { // the rollout began before the surge slot was made
				tt.pool.Status.Rollout = &v1.RolloutStatus{StartedAt: metav1.NewTime(now), BaseSlots: int32(tt.ready + tt.new)}
			}
			for i := 0; i < tt.creating; i++ {
				objs = append(objs, bt.MakeSlot("ns", fmt.Sprintf("pool-zoom-%03d", 100+i), "pool").Server("srv").Obj())
			}
			c := fakeapi.New(t, interceptor.Funcs{}, objs...)
			var list v1.BotPoolSlotList
			if err := c.List(ctx, &list); err != nil {
				t.Fatal(err)
			}
			slots = list.Items
			tmpl := policy.PoolTemplate(tt.pool, "", "")
			r := &Reconciler{Client: c, APIReader: c, Clock: clocktesting.NewFakeClock(now), Recorder: bt.DiscardEvents{}, Metrics: metrics.New(nil)}
			s := &poolScope{pool: tt.pool, slots: slots, template: &tmpl, images: policy.ImagesOf(tt.pool), warm: warmAt(tt.pool.Spec, now, nil)}
			if err := r.rollout(ctx, s); err != nil {
				t.Fatal(err)
			}
			if err := c.List(ctx, &list); err != nil {
				t.Fatal(err)
			}
			admitted := 0
			for _, sl := range list.Items {
				if sl.Annotations[v1.AnnotationUpdate] == tmpl.Hash() {
					admitted++
					if sl.Status.TemplateHash == tmpl.Hash() {
						t.Errorf("slot %s admitted though up to date", sl.Name)
					}
				}
			}
			if admitted != tt.admitted || s.surge != tt.surge || (tt.pool.Status.Rollout != nil) != tt.wantRollout {
				t.Errorf("admitted %d, surge %d, rollout %v; want %d, %d, %v", admitted, s.surge, tt.pool.Status.Rollout, tt.admitted, tt.surge, tt.wantRollout)
			}
		})
	}
}

// TestRolloutEndKeepsReadySlots: when a standby pool's rollout ends with more slots than it
// needs, the slots removed are those whose container is not Ready yet, whatever their numbers,
// so that minIdle ready slots stay; Ready ones go only when not enough others are removable.
func TestRolloutEndKeepsReadySlots(t *testing.T) {
	tests := []struct {
		name     string
		starting []int // numbers of the free slots still Starting; the others of 1..6 are Ready
		base     int32 // status.rollout.baseSlots
		want     []string
	}{
		{"the late admissions, not the Ready surge", []int{1, 2}, 4, []string{"pool-zoom-003", "pool-zoom-004", "pool-zoom-005", "pool-zoom-006"}},
		{"the Starting slots first, then the highest Ready one", []int{2}, 4, []string{"pool-zoom-001", "pool-zoom-003", "pool-zoom-004", "pool-zoom-005"}},
		{"all Ready: highest numbers first", nil, 5, []string{"pool-zoom-001", "pool-zoom-002", "pool-zoom-003", "pool-zoom-004", "pool-zoom-005"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rp := newStandbyRollout(4, 10, time.Hour, tt.base)
			var slots []*v1.BotPoolSlot
			for i := 1; i <= 6; i++ {
				state := v1.StandbyReady
				if slices.Contains(tt.starting, i) {
					state = v1.StandbyStarting
				}
				slots = append(slots, rp.slot(i, state).Obj())
			}
			after := rp.pass(t, slots...)
			if rp.pool.Status.Rollout != nil {
				t.Errorf("rollout still recorded after every slot is on the template: %+v", rp.pool.Status.Rollout)
			}
			var left []string
			for _, sl := range after {
				if sl.DeletionTimestamp.IsZero() {
					left = append(left, sl.Name)
				}
			}
			if got := strings.Join(left, " "); got != strings.Join(tt.want, " ") {
				t.Errorf("slots left %v, want %v", left, tt.want)
			}
		})
	}
}

// standbyRollout is one rollout pass of a standby pool whose image is pulled on its server srv
// and whose slots all carry its template: the tests of what a rollout's end removes or keeps.
type standbyRollout struct {
	now  time.Time
	pool *v1.BotPool
	tmpl policy.SlotTemplate
}

// newStandbyRollout makes the pool, its rollout begun ago with base slots.
func newStandbyRollout(minIdle, maxSlots int32, ago time.Duration, base int32) *standbyRollout {
	now := time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)
	p := bt.MakePool("ns", "pool").Image("bot", "2").Standby(v1.StandbyRunning).Placement("proj", "srv", "production").
		MinIdle(minIdle).MaxSlots(maxSlots).Cached("srv", "bot:2", "", now).Obj()
	tmpl := policy.PoolTemplate(p, "", "")
	p.Status.TemplateHash, p.Status.TemplateImage = tmpl.Hash(), tmpl.Ref()
	p.Status.Rollout = &v1.RolloutStatus{StartedAt: metav1.NewTime(now.Add(-ago)), BaseSlots: base}
	return &standbyRollout{now: now, pool: p, tmpl: tmpl}
}

// slot is the pool's free slot number n on the template, its container in state.
func (rp *standbyRollout) slot(n int, state v1.StandbyState) *bt.SlotWrapper {
	return bt.MakeSlot("ns", fmt.Sprintf("pool-zoom-%03d", n), "pool").Server("srv").App(fmt.Sprintf("app-%d", n)).
		Phase(v1.SlotIdle).Standby(state, rp.now).Template(rp.tmpl.Hash(), rp.tmpl.Ref())
}

// pass runs the pool's rollout once over the slots (on a fake API server) and returns the
// slots after it.
func (rp *standbyRollout) pass(t *testing.T, slots ...*v1.BotPoolSlot) []v1.BotPoolSlot {
	t.Helper()
	ctx := context.Background()
	objs := []client.Object{rp.pool}
	for _, sl := range slots {
		objs = append(objs, sl)
	}
	c := fakeapi.New(t, interceptor.Funcs{}, objs...)
	var list v1.BotPoolSlotList
	if err := c.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: c, APIReader: c, Clock: clocktesting.NewFakeClock(rp.now), Recorder: bt.DiscardEvents{}, Metrics: metrics.New(nil)}
	s := &poolScope{pool: rp.pool, slots: list.Items, template: &rp.tmpl, images: policy.ImagesOf(rp.pool), warm: warmAt(rp.pool.Spec, rp.now, nil)}
	if err := r.rollout(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := c.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// TestUnreadableTemplateStallsTheRollout: a pool whose slotEnvFrom Secret is gone or lacks its
// opt-in label cannot say what its slots should run: the rollout is Stalled with the reason a
// person must act on (so GitOps health does not call the spec applied); a passing error (the
// API server did not answer) changes nothing.
func TestUnreadableTemplateStallsTheRollout(t *testing.T) {
	for _, tt := range []struct {
		err    error
		reason string // "" for no stall
	}{
		{fmt.Errorf("slotEnvFrom Secret env: %w", pass.ErrSlotEnvNotFound), v1.ReasonSlotEnvNotFound},
		{fmt.Errorf("slotEnvFrom Secret env: %w", policy.ErrSecretNotAllowed), v1.ReasonSlotEnvNotAllowed},
		{errors.New("the server was unable to return a response in the time allotted"), ""},
	} {
		p := bt.MakePool("ns", "pool").Image("bot", "v1").Obj()
		p.Generation = 2
		setPoolStatus(&poolScope{pool: p, templateErr: tt.err}, time.Now(), true)
		stalled := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionStalled)
		if tt.reason == "" {
			if stalled != nil {
				t.Errorf("%v: Stalled %+v, want none", tt.err, stalled)
			}
			continue
		}
		if stalled == nil || stalled.Status != metav1.ConditionTrue || stalled.Reason != tt.reason || stalled.ObservedGeneration != 2 ||
			!strings.Contains(stalled.Message, "cannot be read") {
			t.Errorf("%v: Stalled %+v, want True/%s at generation 2", tt.err, stalled, tt.reason)
		}
		if su := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionSlotsUpdated); su == nil || su.Status != metav1.ConditionFalse || su.Reason != tt.reason {
			t.Errorf("%v: SlotsUpdated %+v, want False/%s", tt.err, su, tt.reason)
		}
	}
}

// TestSpentAdmissionsAreTakenOff: the pool takes botpool.dev/update off a slot Ready on the
// template it was admitted for, and off one admitted for another template, and leaves it on a
// slot still replacing its container, whose rollout therefore goes on: a slot's later
// recycles (after a bot) are never taken for the rollout's work, and a deploying admitted slot
// is never the reason its ready surge neighbour is removed.
func TestSpentAdmissionsAreTakenOff(t *testing.T) {
	rp := newStandbyRollout(2, 4, time.Minute, 2)
	target := rp.tmpl.Hash()
	after := rp.pass(t,
		rp.slot(1, v1.StandbyReady).Annotate(v1.AnnotationUpdate, target).Obj(),
		rp.slot(2, v1.StandbyStarting).Annotate(v1.AnnotationUpdate, target).Obj(),
		rp.slot(3, v1.StandbyReady).Annotate(v1.AnnotationUpdate, "t1-older").Obj())
	if rp.pool.Status.Rollout == nil {
		t.Errorf("the rollout ended while pool-zoom-002, admitted, still deploys its container")
	}
	got := map[string]string{}
	for _, sl := range after {
		got[sl.Name] = sl.Annotations[v1.AnnotationUpdate]
	}
	want := map[string]string{"pool-zoom-001": "", "pool-zoom-002": target, "pool-zoom-003": ""}
	if !maps.Equal(got, want) {
		t.Errorf("admissions after the pass %v, want %v", got, want)
	}
}
