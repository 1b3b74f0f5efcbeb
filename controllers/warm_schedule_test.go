package controllers

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
		{name: "a zone in the schedule is refused (timeZone says it)", windows: []v1.WarmWindow{win("CRON_TZ=UTC 0 9 * * *", "1h", "", 9)},
			now: utc("2026-11-27T09:30:00Z"), want: 0, invalid: "set the zone in timeZone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := warmAt(v1.BotPoolSpec{MinIdle: tt.minIdle, WarmSchedule: tt.windows}, tt.now)
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

// TestScaleDownInOnePass: the pool removes free slots above the minIdle in force and its
// waiting bots once they have been free for scaleDownDelay, highest numbers first, and looks
// again when the next one will have been; it removes nothing while a rollout runs, nothing
// bound, and leaves a cordoned server's slots to its drain.
func TestScaleDownInOnePass(t *testing.T) {
	now := time.Date(2026, 11, 27, 14, 30, 0, 0, time.UTC)
	pool := func() *bt.PoolWrapper {
		return bt.MakePool("ns", "pool").Image("bot", "2").Servers("a", "b").MinIdle(2).MaxSlots(10)
	}
	idle := func(n int, server string, freeFor time.Duration) *v1.BotPoolSlot {
		return bt.MakeSlot("ns", fmt.Sprintf("pool-zoom-%03d", n), "pool").Server(server).App(fmt.Sprintf("app-%d", n)).
			Phase(v1.SlotIdle).Since(now.Add(-freeFor)).Obj()
	}
	long, short := 11*time.Minute, 9*time.Minute
	tests := []struct {
		name    string
		pool    *v1.BotPool
		warm    warmState
		waiting int
		slots   []*v1.BotPoolSlot
		left    []int         // slot numbers left after the pass
		requeue time.Duration // 0: none asked
	}{{
		name:  "free for scaleDownDelay above minIdle: the highest numbers go",
		pool:  pool().Obj(),
		slots: []*v1.BotPoolSlot{idle(1, "a", long), idle(2, "b", long), idle(3, "a", long), idle(4, "b", long)},
		left:  []int{1, 2},
	}, {
		name:    "not free long enough: they stay, and the pool looks again when they have been",
		pool:    pool().Obj(),
		slots:   []*v1.BotPoolSlot{idle(1, "a", short), idle(2, "b", short), idle(3, "a", short), idle(4, "b", short-time.Minute)},
		left:    []int{1, 2, 3, 4},
		requeue: time.Minute,
	}, {
		name:    "only the long-free ones go, the highest numbers of them first",
		pool:    pool().Obj(),
		slots:   []*v1.BotPoolSlot{idle(1, "a", long), idle(2, "b", long), idle(3, "a", long), idle(4, "b", short)},
		left:    []int{1, 4},
		requeue: time.Minute,
	}, {
		name:    "waiting bots count as need",
		pool:    pool().Obj(),
		waiting: 3,
		slots:   []*v1.BotPoolSlot{idle(1, "a", long), idle(2, "b", long), idle(3, "a", long), idle(4, "b", long)},
		left:    []int{1, 2, 3},
	}, {
		name:  "an open warm window's minIdle counts",
		pool:  pool().Obj(),
		warm:  warmState{minIdle: 4},
		slots: []*v1.BotPoolSlot{idle(1, "a", long), idle(2, "b", long), idle(3, "a", long), idle(4, "b", long)},
		left:  []int{1, 2, 3, 4},
	}, {
		name: "a shorter scaleDownDelay",
		pool: func() *v1.BotPool { p := pool().Obj(); p.Spec.ScaleDownDelay = "5m"; return p }(),
		slots: []*v1.BotPoolSlot{idle(1, "a", long), idle(2, "b", long), idle(3, "a", 6*time.Minute),
			bt.MakeSlot("ns", "pool-zoom-004", "pool").Server("b").App("app-4").Phase(v1.SlotBusy).BoundTo("bot", "uid").Since(now.Add(-time.Hour)).Obj()},
		left: []int{1, 2, 4},
	}, {
		name: "nothing while a rollout runs: its end removes its surge",
		pool: func() *v1.BotPool {
			p := pool().Obj()
			p.Status.Rollout = &v1.RolloutStatus{StartedAt: metav1.NewTime(now), BaseSlots: 2}
			return p
		}(),
		slots: []*v1.BotPoolSlot{idle(1, "a", long), idle(2, "b", long), idle(3, "a", long)},
		left:  []int{1, 2, 3},
	}, {
		name: "a cordoned server's slots are its drain's, and count for nothing",
		pool: func() *v1.BotPool { p := pool().Obj(); p.Spec.Coolify.Servers[1].Cordoned = true; return p }(),
		slots: []*v1.BotPoolSlot{idle(1, "a", long), idle(2, "b", long), idle(3, "a", long), idle(4, "b", long),
			idle(5, "a", long)},
		left: []int{1, 2, 3, 4},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			objs := []client.Object{tt.pool}
			for _, sl := range tt.slots {
				objs = append(objs, sl)
			}
			c := fakeAPIServer(t, interceptor.Funcs{}, objs...)
			var list v1.BotPoolSlotList
			if err := c.List(ctx, &list); err != nil {
				t.Fatal(err)
			}
			if tt.warm.minIdle == 0 {
				tt.warm.minIdle = int(tt.pool.Spec.MinIdle)
			}
			r := &BotPoolReconciler{Client: c, APIReader: c, Clock: clocktesting.NewFakeClock(now), Recorder: discardEvents{}, Metrics: NewMetrics(nil)}
			s := &poolScope{pool: tt.pool, slots: list.Items, waiting: tt.waiting, warm: tt.warm}
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
	tmpl := poolTemplate(p, "", "")
	s := &poolScope{pool: p, template: &tmpl, images: imagesOf(p), warm: warmAt(p.Spec, now)}
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
