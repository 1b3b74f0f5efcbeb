package pool

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/fakeapi"
	"botpool.dev/botpool/controllers/internal/metrics"
	"botpool.dev/botpool/controllers/internal/policy"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// TestWarmAt evaluates warmSchedules at single moments: which windows are open, the minIdle in
// force, and when the pool must look again (a window opens or closes), in UTC and in a zone
// across both daylight-saving changes.
func TestWarmAt(t *testing.T) {
	utc := func(s string) time.Time {
		at, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return at
	}
	win := func(schedule, dur, tz string, minIdle int32) v1.WarmWindow {
		return v1.WarmWindow{Schedule: schedule, Duration: v1.Duration(dur), TimeZone: tz, MinIdle: minIdle}
	}
	weekdayHours := win("55 * * * 1-5", "10m", "", 40) // :55 to :05 every weekday hour
	berlinMorning := win("55 8 * * *", "10m", "Europe/Berlin", 30)
	tests := []struct {
		name    string
		minIdle int32
		windows []v1.WarmWindow
		now     time.Time
		want    int    // minIdle in force
		open    []int  // indexes of the open windows
		next    string // RFC 3339, "" for never
		invalid string // a substring of the reasons, "" for none
	}{
		{name: "no window: spec.minIdle, nothing to wait for", minIdle: 3, now: utc("2026-11-27T14:00:00Z"), want: 3},
		{name: "before a window: spec.minIdle until it opens", minIdle: 3, windows: []v1.WarmWindow{weekdayHours},
			now: utc("2026-11-27T13:54:59Z"), want: 3, next: "2026-11-27T13:55:00Z"},
		{name: "the moment it opens", minIdle: 3, windows: []v1.WarmWindow{weekdayHours},
			now: utc("2026-11-27T13:55:00Z"), want: 40, open: []int{0}, next: "2026-11-27T14:05:00Z"},
		{name: "open past the hour", minIdle: 3, windows: []v1.WarmWindow{weekdayHours},
			now: utc("2026-11-27T14:04:59Z"), want: 40, open: []int{0}, next: "2026-11-27T14:05:00Z"},
		{name: "closed at its end", minIdle: 3, windows: []v1.WarmWindow{weekdayHours},
			now: utc("2026-11-27T14:05:00Z"), want: 3, next: "2026-11-27T14:55:00Z"},
		{name: "a window below spec.minIdle lowers nothing", minIdle: 50, windows: []v1.WarmWindow{weekdayHours},
			now: utc("2026-11-27T14:00:00Z"), want: 50, open: []int{0}, next: "2026-11-27T14:05:00Z"},
		{name: "Friday's last window; the next opens on Monday", windows: []v1.WarmWindow{weekdayHours},
			now: utc("2026-11-28T00:05:00Z"), want: 0, next: "2026-11-30T00:55:00Z"},
		{name: "two open windows: the larger minIdle, the earlier end",
			windows: []v1.WarmWindow{weekdayHours, win("0 14 * * *", "1h", "", 60)},
			now:     utc("2026-11-27T14:01:00Z"), want: 60, open: []int{0, 1}, next: "2026-11-27T14:05:00Z"},
		{name: "openings closer than the duration keep the window open",
			windows: []v1.WarmWindow{win("*/5 * * * *", "10m", "", 7)},
			now:     utc("2026-11-27T14:02:00Z"), want: 7, open: []int{0}, next: "2026-11-27T19:25:00Z"},
		{name: "a zone: 08:55 in Berlin is 07:55 UTC in winter", windows: []v1.WarmWindow{berlinMorning},
			now: utc("2026-11-27T07:56:00Z"), want: 30, open: []int{0}, next: "2026-11-27T08:05:00Z"},
		{name: "and 06:55 UTC in summer", windows: []v1.WarmWindow{berlinMorning},
			now: utc("2026-07-01T06:56:00Z"), want: 30, open: []int{0}, next: "2026-07-01T07:05:00Z"},
		{name: "the spring change skips a time the clock jumps over: no window that night",
			windows: []v1.WarmWindow{win("30 2 * * *", "10m", "Europe/Berlin", 5)},
			now:     utc("2026-03-28T12:00:00Z"), want: 0, next: "2026-03-30T00:30:00Z"},
		{name: "the autumn change repeats one: a window at each",
			windows: []v1.WarmWindow{win("30 2 * * *", "10m", "Europe/Berlin", 5)},
			now:     utc("2026-10-25T00:45:00Z"), want: 0, next: "2026-10-25T01:30:00Z"},
		{name: "a descriptor", windows: []v1.WarmWindow{win("@daily", "30m", "", 4)},
			now: utc("2026-11-27T00:10:00Z"), want: 4, open: []int{0}, next: "2026-11-27T00:30:00Z"},
		{name: "a schedule the parser refuses is left out and named",
			windows: []v1.WarmWindow{win("61 * * * *", "10m", "", 9), weekdayHours},
			now:     utc("2026-11-27T14:00:00Z"), want: 40, open: []int{1}, next: "2026-11-27T14:05:00Z", invalid: "warmSchedule[0]: schedule \"61 * * * *\""},
		{name: "a zone that does not exist", windows: []v1.WarmWindow{win("0 9 * * *", "1h", "Mars/Olympus", 9)},
			now: utc("2026-11-27T09:30:00Z"), want: 0, invalid: "timeZone \"Mars/Olympus\""},
		{name: "a schedule that never comes is named", windows: []v1.WarmWindow{win("0 0 30 2 *", "1h", "", 9)},
			now: utc("2026-11-27T09:30:00Z"), want: 0, invalid: "never comes"},
		{name: "Local is refused: it would be the manager's zone", windows: []v1.WarmWindow{win("0 9 * * *", "1h", "Local", 9)},
			now: utc("2026-11-27T09:30:00Z"), want: 0, invalid: "manager's own zone"},
		{name: "a zone in the schedule is refused (timeZone says it)", windows: []v1.WarmWindow{win("CRON_TZ=UTC 0 9 * * *", "1h", "", 9)},
			now: utc("2026-11-27T09:30:00Z"), want: 0, invalid: "set the zone in timeZone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := warmAt(v1.BotPoolSpec{MinIdle: tt.minIdle, WarmSchedule: tt.windows}, tt.now, nil)
			if w.minIdle != tt.want {
				t.Errorf("minIdle %d, want %d", w.minIdle, tt.want)
			}
			var open []int
			for _, o := range w.open {
				for i := range tt.windows {
					if strings.HasPrefix(o, fmt.Sprintf("%d:", i)) {
						open = append(open, i)
					}
				}
			}
			if !slices.Equal(open, tt.open) {
				t.Errorf("open windows %q, want indexes %v", w.open, tt.open)
			}
			next := ""
			if !w.next.IsZero() {
				next = w.next.UTC().Format(time.RFC3339)
			}
			if next != tt.next {
				t.Errorf("next look %q, want %q", next, tt.next)
			}
			if got := strings.Join(w.invalid, "; "); tt.invalid == "" && got != "" || !strings.Contains(got, tt.invalid) {
				t.Errorf("invalid %q, want it to name %q", got, tt.invalid)
			}
		})
	}
}

// TestWarmSoon: the scale-down keeps the minIdle of a window that opens within scaleDownDelay,
// so the slots of one window are not removed just before the next opens.
func TestWarmSoon(t *testing.T) {
	now := time.Date(2026, 11, 27, 14, 10, 0, 0, time.UTC) // a Friday
	spec := v1.BotPoolSpec{MinIdle: 2, WarmSchedule: []v1.WarmWindow{{Schedule: "55 * * * 1-5", Duration: "10m", MinIdle: 40}}}
	for _, tt := range []struct {
		delay v1.Duration
		soon  int
	}{{"", 2}, {"45m", 40}, {"44m", 2}} {
		spec.ScaleDownDelay = tt.delay
		if w := warmAt(spec, now, nil); w.soon != tt.soon || w.minIdle != 2 {
			t.Errorf("scaleDownDelay %q: soon %d, minIdle %d; want %d, 2", tt.delay, w.soon, w.minIdle, tt.soon)
		}
	}
}

// TestScaleDownInOnePass: the pool removes what it holds above its need (the minIdle in force,
// that of a window opening soon, its waiting bots) once the surplus has lasted scaleDownDelay
// (status.surplusSince, recorded when first seen, cleared when gone), standby slots not Ready
// first, then the highest numbers; nothing while a rollout runs or slots are being created,
// nothing bound, and a cordoned server's slots are its drain's. Slots a shrink removed earlier
// in the pass are not counted again.
func TestScaleDownInOnePass(t *testing.T) {
	now := time.Date(2026, 11, 27, 14, 30, 0, 0, time.UTC)
	ago := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(-d)} }
	pool := func(surplusFor time.Duration) *bt.PoolWrapper {
		w := bt.MakePool("ns", "pool").Image("bot", "2").Servers("a", "b").MinIdle(2).MaxSlots(10)
		if surplusFor > 0 {
			w.Obj().Status.SurplusSince = ago(surplusFor)
		}
		return w
	}
	idle := func(n int, server string) *bt.SlotWrapper {
		return bt.MakeSlot("ns", fmt.Sprintf("pool-zoom-%03d", n), "pool").Server(server).App(fmt.Sprintf("app-%d", n)).
			Phase(v1.SlotIdle).Since(now.Add(-time.Hour))
	}
	four := func() []*v1.BotPoolSlot {
		return []*v1.BotPoolSlot{idle(1, "a").Obj(), idle(2, "b").Obj(), idle(3, "a").Obj(), idle(4, "b").Obj()}
	}
	long := 11 * time.Minute
	tests := []struct {
		name        string
		pool        *v1.BotPool
		warm        *warmState
		waiting     int
		slots       []*v1.BotPoolSlot
		shrinkFirst bool          // supply (its shrink above maxSlots) runs first in the pass
		left        []int         // slot numbers left after the pass
		requeue     time.Duration // 0: none asked
		since       *metav1.Time  // status.surplusSince after the pass
	}{{
		name:  "a surplus that lasted scaleDownDelay: the highest numbers go",
		pool:  pool(long).Obj(),
		slots: four(),
		left:  []int{1, 2}, since: ago(long),
	}, {
		name:  "a surplus first seen: recorded, nothing removed yet",
		pool:  pool(0).Obj(),
		slots: four(),
		left:  []int{1, 2, 3, 4}, requeue: v1.DefaultScaleDownDelay, since: ago(0),
	}, {
		name:  "a surplus not yet as old as scaleDownDelay: the pool looks again when it is",
		pool:  pool(9 * time.Minute).Obj(),
		slots: four(),
		left:  []int{1, 2, 3, 4}, requeue: time.Minute, since: ago(9 * time.Minute),
	}, {
		name:  "no surplus: the record goes",
		pool:  pool(long).Obj(),
		slots: four()[:2],
		left:  []int{1, 2},
	}, {
		name:    "waiting bots count as need",
		pool:    pool(long).Obj(),
		waiting: 3,
		slots:   four(),
		left:    []int{1, 2, 3}, since: ago(long),
	}, {
		name:  "an open window's minIdle counts",
		pool:  pool(long).Obj(),
		warm:  &warmState{minIdle: 4, soon: 4},
		slots: four(),
		left:  []int{1, 2, 3, 4},
	}, {
		name:  "so does that of a window opening within scaleDownDelay",
		pool:  pool(long).Obj(),
		warm:  &warmState{minIdle: 2, soon: 3},
		slots: four(),
		left:  []int{1, 2, 3}, since: ago(long),
	}, {
		name: "nothing while a rollout runs: its end removes its surge",
		pool: func() *v1.BotPool {
			p := pool(long).Obj()
			p.Status.Rollout = &v1.RolloutStatus{StartedAt: metav1.NewTime(now), BaseSlots: 2}
			return p
		}(),
		slots: four(),
		left:  []int{1, 2, 3, 4}, since: ago(long),
	}, {
		name:  "nothing while the pool grows (a slot is being created)",
		pool:  pool(long).Obj(),
		slots: append(four(), idle(5, "a").Phase(v1.SlotCreating).Obj()),
		left:  []int{1, 2, 3, 4, 5}, since: ago(long),
	}, {
		name:  "never a bound slot",
		pool:  pool(long).Obj(),
		slots: []*v1.BotPoolSlot{idle(1, "a").Obj(), idle(2, "b").Obj(), idle(3, "a").Obj(), idle(4, "b").Phase(v1.SlotBusy).BoundTo("bot", "uid").Obj()},
		left:  []int{1, 2, 4}, since: ago(long),
	}, {
		name:  "a cordoned server's slots are its drain's, and count for nothing",
		pool:  func() *v1.BotPool { p := pool(long).Obj(); p.Spec.Coolify.Servers[1].Cordoned = true; return p }(),
		slots: append(four(), idle(5, "a").Obj()),
		left:  []int{1, 2, 3, 4}, since: ago(long),
	}, {
		name: "standby: the slots whose container is not Ready go first, whatever their numbers",
		pool: func() *v1.BotPool { p := pool(long).Standby(v1.StandbyRunning).Obj(); return p }(),
		slots: []*v1.BotPoolSlot{idle(1, "a").Standby(v1.StandbyStarting, now).Obj(), idle(2, "b").Standby(v1.StandbyReady, now).Obj(),
			idle(3, "a").Standby(v1.StandbyReady, now).Obj(), idle(4, "b").Standby(v1.StandbyReady, now).Obj()},
		left: []int{2, 3}, since: ago(long),
	}, {
		name:        "a shrink above a lowered maxSlots in the same pass is not counted again",
		pool:        func() *v1.BotPool { p := pool(long).Obj(); p.Spec.MaxSlots = 4; return p }(),
		slots:       append(four(), idle(5, "a").Obj()),
		shrinkFirst: true,
		left:        []int{1, 2}, since: ago(long),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			objs := []client.Object{tt.pool}
			for _, sl := range tt.slots {
				objs = append(objs, sl)
			}
			c := fakeapi.New(t, interceptor.Funcs{}, objs...)
			var list v1.BotPoolSlotList
			if err := c.List(ctx, &list); err != nil {
				t.Fatal(err)
			}
			warm := warmState{minIdle: int(tt.pool.Spec.MinIdle), soon: int(tt.pool.Spec.MinIdle)}
			if tt.warm != nil {
				warm = *tt.warm
			}
			r := &Reconciler{Client: c, APIReader: c, Clock: clocktesting.NewFakeClock(now), Recorder: bt.DiscardEvents{}, Metrics: metrics.New(nil)}
			s := &poolScope{pool: tt.pool, slots: list.Items, waiting: tt.waiting, warm: warm}
			if tt.shrinkFirst {
				if err := r.supply(ctx, s); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.scaleDown(ctx, s); err != nil {
				t.Fatal(err)
			}
			if err := c.List(ctx, &list); err != nil {
				t.Fatal(err)
			}
			var left []int
			for _, sl := range list.Items {
				if n, ok := slotNumber("pool-zoom-", sl.Name); ok && sl.DeletionTimestamp.IsZero() {
					left = append(left, n)
				}
			}
			slices.Sort(left)
			if !slices.Equal(left, tt.left) {
				t.Errorf("slots left %v, want %v", left, tt.left)
			}
			if s.requeue != tt.requeue {
				t.Errorf("next look in %v, want %v", s.requeue, tt.requeue)
			}
			if got := tt.pool.Status.SurplusSince; (got == nil) != (tt.since == nil) || got != nil && !got.Equal(tt.since) {
				t.Errorf("surplusSince %v, want %v", got, tt.since)
			}
		})
	}
}

// TestPoolStatusShowsTheMinIdleInForce: the status says the minIdle in force, the open
// windows and the slots' selector (the scale subresource's), and a window the manager cannot
// read stalls the pool's spec with what to mend while the pool goes on serving.
func TestPoolStatusShowsTheMinIdleInForce(t *testing.T) {
	now := time.Date(2026, 11, 27, 13, 58, 0, 0, time.UTC)
	p := bt.MakePool("ns", "pool").Image("bot", "2").Servers("a").MinIdle(2).Cached("a", "bot:2", "", now).Obj()
	p.Spec.WarmSchedule = []v1.WarmWindow{
		{Schedule: "55 * * * 1-5", Duration: "10m", MinIdle: 40},
		{Schedule: "0 9 * * *", Duration: "1h", TimeZone: "Atlantis/Capital", MinIdle: 90},
	}
	tmpl := policy.PoolTemplate(p, "", "")
	s := &poolScope{pool: p, template: &tmpl, images: policy.ImagesOf(p), warm: warmAt(p.Spec, now, nil)}
	setPoolStatus(s, now, true)
	if p.Status.MinIdle != 40 || !slices.Equal(p.Status.WarmWindows, []string{`0: "55 * * * 1-5" in UTC`}) || p.Status.Selector != "botpool.dev/pool=pool" {
		t.Errorf("status minIdle %d, warmWindows %q, selector %q", p.Status.MinIdle, p.Status.WarmWindows, p.Status.Selector)
	}
	stalled := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionStalled)
	if stalled == nil || stalled.Reason != v1.ReasonInvalidWarmSchedule || !strings.Contains(stalled.Message, `timeZone "Atlantis/Capital"`) {
		t.Errorf("Stalled %+v, want InvalidWarmSchedule naming the zone", stalled)
	}
	if !meta.IsStatusConditionTrue(p.Status.Conditions, v1.ConditionReady) {
		t.Errorf("the pool is not Ready for a bad window: %+v", p.Status.Conditions)
	}
}
