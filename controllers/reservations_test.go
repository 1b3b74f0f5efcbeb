package controllers

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// TestRoomFor: a reservation or an ad-hoc bot fits when, at every instant of its hold, the
// holds already there leave a slot of maxSlots.
func TestRoomFor(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	h := func(from, until int) hold { return hold{from: at(from), until: at(until)} }
	tests := []struct {
		name        string
		holds       []hold
		from, until int
		maxSlots    int
		want        bool
		peak        int
	}{
		{"an empty pool", nil, 0, 60, 1, true, 0},
		{"full at the start", []hold{h(0, 60), h(-30, 30)}, 0, 60, 2, false, 2},
		{"full only later in the hold: a reservation at 14:30", []hold{h(30, 90), h(30, 90)}, 0, 60, 2, false, 2},
		{"a hold that ends as this one starts does not count", []hold{h(-60, 0), h(-60, 0)}, 0, 60, 1, true, 0},
		{"one that starts as this one ends does not count", []hold{h(60, 120)}, 0, 60, 1, true, 0},
		{"holds that never overlap each other count one at a time", []hold{h(0, 20), h(20, 40), h(40, 60)}, 0, 60, 2, true, 1},
		{"the peak, not the sum", []hold{h(0, 30), h(10, 40), h(20, 50), h(45, 60)}, 0, 60, 3, false, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := peakHolds(tt.holds, at(tt.from), at(tt.until)); got != tt.peak {
				t.Errorf("peak %d, want %d", got, tt.peak)
			}
			if got := roomFor(tt.holds, at(tt.from), at(tt.until), tt.maxSlots); got != tt.want {
				t.Errorf("roomFor %v, want %v", got, tt.want)
			}
		})
	}
}

// TestDecideReservation: a scheduled bot created at least the lead ahead is reserved when its
// meeting fits beside what the pool's other bots hold or were promised; otherwise it is told
// why (TooLate, PoolFull), and what ended, was deleted or is the bot itself counts for nothing.
func TestDecideReservation(t *testing.T) {
	now := time.Date(2026, 11, 27, 13, 30, 0, 0, time.UTC)
	start := now.Add(30 * time.Minute) // 14:00
	pool := bt.MakePool("ns", "pool").MaxSlots(2).Obj()
	bot := func(name string, mutate ...func(*v1.Bot)) v1.Bot {
		b := v1.Bot{}
		b.Name, b.UID, b.CreationTimestamp = name, types.UID("uid-"+name), metav1.NewTime(now)
		b.Spec.StartTime = &metav1.Time{Time: start}
		for _, m := range mutate {
			m(&b)
		}
		return b
	}
	reserved := func(at time.Time) func(*v1.Bot) {
		return func(b *v1.Bot) {
			b.Spec.StartTime = &metav1.Time{Time: at}
			b.Status.Conditions = []metav1.Condition{{Type: v1.ConditionReserved, Status: metav1.ConditionTrue, Reason: v1.ReasonCapacityReserved}}
		}
	}
	running := func(since time.Time) func(*v1.Bot) {
		return func(b *v1.Bot) {
			b.Spec.StartTime = nil
			b.Status.Phase, b.Status.SlotName, b.Status.StartedAt = v1.BotInCall, "pool-zoom-001", &metav1.Time{Time: since}
		}
	}
	tests := []struct {
		name   string
		bot    v1.Bot
		others []v1.Bot
		want   string
	}{
		{"an empty pool", bot("b"), nil, v1.ReasonCapacityReserved},
		{"decided too close to its start", bot("b", func(b *v1.Bot) { b.Spec.StartTime = &metav1.Time{Time: now.Add(9 * time.Minute)} }), nil, v1.ReasonTooLate},
		{"two reservations at the same start fill maxSlots 2", bot("b"), []v1.Bot{bot("r1", reserved(start)), bot("r2", reserved(start))}, v1.ReasonPoolFull},
		{"a reservation that starts during the meeting counts", bot("b"), []v1.Bot{bot("r1", reserved(start)), bot("r2", reserved(start.Add(50*time.Minute)))}, v1.ReasonPoolFull},
		{"one that starts after it (maxDuration 1h and the leave) does not", bot("b"), []v1.Bot{bot("r1", reserved(start)), bot("r2", reserved(start.Add(2*time.Hour)))}, v1.ReasonCapacityReserved},
		{"a bot in a call that may last past the start counts", bot("b"), []v1.Bot{bot("r1", reserved(start)), bot("a", running(now.Add(-10*time.Minute)))}, v1.ReasonPoolFull},
		{"one whose maxDuration ends before the start does not", bot("b"), []v1.Bot{bot("r1", reserved(start)), bot("a", running(now.Add(-2*time.Hour)))}, v1.ReasonCapacityReserved},
		{"a refused reservation holds nothing", bot("b"), []v1.Bot{bot("r1", reserved(start)), bot("r2")}, v1.ReasonCapacityReserved},
		{"ended and deleted bots hold nothing", bot("b"), []v1.Bot{bot("r1", reserved(start)), bot("r2", reserved(start), func(b *v1.Bot) { b.Status.Phase = v1.BotDone }),
			bot("r3", reserved(start), func(b *v1.Bot) { b.DeletionTimestamp = &metav1.Time{Time: now} })}, v1.ReasonCapacityReserved},
		{"the bot itself is not counted", bot("b", reserved(start)), []v1.Bot{bot("b", reserved(start)), bot("r1", reserved(start))}, v1.ReasonCapacityReserved},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := decideReservation(&tt.bot, pool, tt.others, now, defaultReservationLead)
			if v.reason != tt.want || v.granted != (tt.want == v1.ReasonCapacityReserved) || v.message == "" {
				t.Errorf("verdict %+v, want %s", v, tt.want)
			}
		})
	}
}

// TestUnreservedInOnePass: the dispatcher binds an ad-hoc bot only while every reservation not
// yet bound keeps its slot through the bot's meeting; a reserved bot takes its own; the first
// that does not fit ends the wave.
func TestUnreservedInOnePass(t *testing.T) {
	now := time.Date(2026, 11, 27, 13, 30, 0, 0, time.UTC)
	pool := bt.MakePool("ns", "pool").MaxSlots(2).Obj()
	bot := func(name string, mutate ...func(*v1.Bot)) *v1.Bot {
		b := &v1.Bot{}
		b.Namespace, b.Name, b.UID = "ns", name, types.UID("uid-"+name)
		b.Status.Pool, b.Status.Phase = "pool", v1.BotQueued
		for _, m := range mutate {
			m(b)
		}
		return b
	}
	reservedAt := func(d time.Duration) func(*v1.Bot) {
		return func(b *v1.Bot) {
			b.Spec.StartTime = &metav1.Time{Time: now.Add(d)}
			b.Status.Conditions = []metav1.Condition{{Type: v1.ConditionReserved, Status: metav1.ConditionTrue, Reason: v1.ReasonCapacityReserved}}
		}
	}
	scheduled := func(b *v1.Bot) { b.Status.Phase = v1.BotScheduled }
	tests := []struct {
		name string
		all  []*v1.Bot // the pool's bots in the cache
		head []string  // the head of the queue, in order
		want int
	}{
		{"no reservation: every bot", []*v1.Bot{bot("a"), bot("b")}, []string{"a", "b"}, 2},
		{"a reservation in half an hour keeps one slot from the second bot",
			[]*v1.Bot{bot("r", reservedAt(30*time.Minute), scheduled), bot("a"), bot("b")}, []string{"a", "b"}, 1},
		{"one in two hours, after the meetings' maxDuration, keeps nothing", []*v1.Bot{bot("r", reservedAt(2*time.Hour), scheduled), bot("a"), bot("b")},
			[]string{"a", "b"}, 2},
		{"a reserved bot at its start takes the slot held for it",
			[]*v1.Bot{bot("r", reservedAt(0)), bot("r2", reservedAt(0))}, []string{"r", "r2"}, 2},
		{"the first that does not fit ends the wave", []*v1.Bot{bot("r", reservedAt(30*time.Minute), scheduled), bot("r2", reservedAt(30*time.Minute), scheduled), bot("a")},
			[]string{"a"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := []client.Object{pool}
			byName := map[string]*v1.Bot{}
			for _, b := range tt.all {
				objs = append(objs, b)
				byName[b.Name] = b
			}
			c := fakeAPIServer(t, interceptor.Funcs{}, objs...)
			d := &Dispatcher{Client: c, Clock: clocktesting.NewFakeClock(now)}
			var head []*v1.Bot
			for _, n := range tt.head {
				head = append(head, byName[n])
			}
			got, err := d.unreserved(context.Background(), pool, head)
			if err != nil || got != tt.want {
				t.Errorf("unreserved %d (%v), want %d", got, err, tt.want)
			}
		})
	}
}
