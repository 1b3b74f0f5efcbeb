package policy

import (
	"math/rand/v2"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "botpool.dev/botpool/api/v1alpha1"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// TestRoomFor: a reservation or an ad-hoc bot fits when, at every instant of its hold, the
// holds already there leave a slot of maxSlots.
func TestRoomFor(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	h := func(from, until int) Hold { return Hold{From: at(from), Until: at(until)} }
	tests := []struct {
		name        string
		holds       []Hold
		from, until int
		maxSlots    int
		want        bool
		peak        int
	}{
		{"an empty pool", nil, 0, 60, 1, true, 0},
		{"full at the start", []Hold{h(0, 60), h(-30, 30)}, 0, 60, 2, false, 2},
		{"full only later in the hold: a reservation at 14:30", []Hold{h(30, 90), h(30, 90)}, 0, 60, 2, false, 2},
		{"a hold that ends as this one starts does not count", []Hold{h(-60, 0), h(-60, 0)}, 0, 60, 1, true, 0},
		{"one that starts as this one ends does not count", []Hold{h(60, 120)}, 0, 60, 1, true, 0},
		{"holds that never overlap each other count one at a time", []Hold{h(0, 20), h(20, 40), h(40, 60)}, 0, 60, 2, true, 1},
		{"the peak, not the sum", []Hold{h(0, 30), h(10, 40), h(20, 50), h(45, 60)}, 0, 60, 3, false, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PeakHolds(tt.holds, at(tt.from), at(tt.until)); got != tt.peak {
				t.Errorf("peak %d, want %d", got, tt.peak)
			}
			if got := RoomFor(tt.holds, at(tt.from), at(tt.until), tt.maxSlots); got != tt.want {
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
		return func(b *v1.Bot) { bt.Grant(b, at) }
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
		bound  map[types.UID]bool // bound by a slot's botRef
	}{
		{"an empty pool", bot("b"), nil, v1.ReasonCapacityReserved, nil},
		{"decided too close to its start", bot("b", func(b *v1.Bot) { b.Spec.StartTime = &metav1.Time{Time: now.Add(9 * time.Minute)} }), nil, v1.ReasonTooLate, nil},
		{"two reservations at the same start fill maxSlots 2", bot("b"), []v1.Bot{bot("r1", reserved(start)), bot("r2", reserved(start))}, v1.ReasonPoolFull, nil},
		{"a reservation that starts during the meeting counts", bot("b"), []v1.Bot{bot("r1", reserved(start)), bot("r2", reserved(start.Add(50*time.Minute)))}, v1.ReasonPoolFull, nil},
		{"one that starts after it (maxDuration 1h and the leave) does not", bot("b"), []v1.Bot{bot("r1", reserved(start)), bot("r2", reserved(start.Add(2*time.Hour)))}, v1.ReasonCapacityReserved, nil},
		{"a bot in a call that may last past the start counts", bot("b"), []v1.Bot{bot("r1", reserved(start)), bot("a", running(now.Add(-10*time.Minute)))}, v1.ReasonPoolFull, nil},
		{"one whose maxDuration ends before the start does not", bot("b"), []v1.Bot{bot("r1", reserved(start)), bot("a", running(now.Add(-2*time.Hour)))}, v1.ReasonCapacityReserved, nil},
		{"a refused reservation holds nothing", bot("b"), []v1.Bot{bot("r1", reserved(start)), bot("r2")}, v1.ReasonCapacityReserved, nil},
		{"ended and deleted bots hold nothing", bot("b"), []v1.Bot{bot("r1", reserved(start)), bot("r2", reserved(start), func(b *v1.Bot) { b.Status.Phase = v1.BotDone }),
			bot("r3", reserved(start), func(b *v1.Bot) { b.DeletionTimestamp = &metav1.Time{Time: now} })}, v1.ReasonCapacityReserved, nil},
		{"the bot itself is not counted", bot("b", reserved(start)), []v1.Bot{bot("b", reserved(start)), bot("r1", reserved(start))}, v1.ReasonCapacityReserved, nil},
		{name: "a bot a slot's botRef binds, not mirrored on the bot yet, counts", bot: bot("b"), others: []v1.Bot{bot("r1", reserved(start)),
			bot("a", func(b *v1.Bot) { b.Spec.StartTime, b.Status.Phase = nil, v1.BotQueued })}, want: v1.ReasonPoolFull, bound: map[types.UID]bool{"uid-a": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := DecideReservation(&tt.bot, pool, tt.others, tt.bound, now, v1.DefaultReservationMinLead, 0)
			if v.Reason != tt.want || v.Granted != (tt.want == v1.ReasonCapacityReserved) || v.Message == "" {
				t.Errorf("verdict %+v, want %s", v, tt.want)
			}
		})
	}
}

// TestDecideReservationWithinHorizonAndTenantLimit: a reservation further ahead than the
// pool's horizon is not decided yet; one that would let a tenant hold more than its limit at
// some moment is refused (another tenant's reservations do not count against it).
func TestDecideReservationWithinHorizonAndTenantLimit(t *testing.T) {
	now := time.Date(2026, 11, 27, 13, 30, 0, 0, time.UTC)
	start := now.Add(30 * time.Minute)
	pool := bt.MakePool("platform", "pool").MaxSlots(10).Obj()
	pool.Spec.Tenancy = &v1.Tenancy{Key: v1.TenantByNamespace, Tenants: []v1.TenantPolicy{
		{Name: "team-a", TenantShare: v1.TenantShare{Limit: ptr.To[int32](2)}}}}
	bot := func(ns, name string, at time.Time, granted bool) v1.Bot {
		b := v1.Bot{}
		b.Namespace, b.Name, b.UID, b.CreationTimestamp = ns, name, types.UID("uid-"+ns+name), metav1.NewTime(now)
		b.Spec.StartTime = &metav1.Time{Time: at}
		if granted {
			bt.Grant(&b, at)
		}
		return b
	}
	tests := []struct {
		name   string
		bot    v1.Bot
		others []v1.Bot
		want   string
	}{
		{"beyond the default horizon of 7 days", bot("team-a", "b", now.Add(8*24*time.Hour), false), nil, v1.ReasonBeyondHorizon},
		{"within it", bot("team-a", "b", now.Add(6*24*time.Hour), false), nil, v1.ReasonCapacityReserved},
		{"the tenant's limit promised at that time", bot("team-a", "b", start, false),
			[]v1.Bot{bot("team-a", "r1", start, true), bot("team-a", "r2", start.Add(30*time.Minute), true)}, v1.ReasonTenantLimit},
		{"its limit promised at another time", bot("team-a", "b", start, false),
			[]v1.Bot{bot("team-a", "r1", start, true), bot("team-a", "r2", start.Add(3*time.Hour), true)}, v1.ReasonCapacityReserved},
		{"another tenant's promises are not its", bot("team-a", "b", start, false),
			[]v1.Bot{bot("team-b", "r1", start, true), bot("team-b", "r2", start, true), bot("team-a", "r3", start, true)}, v1.ReasonCapacityReserved},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := DecideReservation(&tt.bot, pool, tt.others, nil, now, v1.DefaultReservationMinLead, 0)
			if v.Reason != tt.want || v.Granted != (tt.want == v1.ReasonCapacityReserved) || v.Message == "" {
				t.Errorf("verdict %+v, want %s", v, tt.want)
			}
		})
	}
	// A horizon of its own.
	pool.Spec.Reservations = &v1.ReservationPolicy{MaxHorizon: "24h"}
	if v := DecideReservation(ptr.To(bot("team-a", "b", now.Add(25*time.Hour), false)), pool, nil, nil, now, v1.DefaultReservationMinLead, 0); v.Reason != v1.ReasonBeyondHorizon {
		t.Errorf("25h ahead with a 24h horizon: %+v", v)
	}
}

// TestPeakHoldsAgreesWithCountingEveryInstant: the sweep finds the same peak as counting the
// overlaps at every instant a hold begins (the rule it replaced), on random holds.
func TestPeakHoldsAgreesWithCountingEveryInstant(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(18, 1))
	at := func() time.Time { return t0.Add(time.Duration(rng.IntN(24)) * 5 * time.Minute) }
	counted := func(holds []Hold, from, until time.Time) int {
		most := 0
		for _, i := range append([]Hold{{From: from}}, holds...) {
			if i.From.Before(from) || !i.From.Before(until) {
				continue
			}
			n := 0
			for _, h := range holds {
				if !i.From.Before(h.From) && i.From.Before(h.Until) {
					n++
				}
			}
			most = max(most, n)
		}
		return most
	}
	for round := range 2000 {
		holds := make([]Hold, rng.IntN(12))
		for i := range holds {
			a, b := at(), at()
			if b.Before(a) {
				a, b = b, a
			}
			holds[i] = Hold{From: a, Until: b}
		}
		from, until := at(), at()
		if !from.Before(until) {
			continue
		}
		if got, want := PeakHolds(holds, from, until), counted(holds, from, until); got != want {
			t.Fatalf("round %d: peak %d, counting every instant %d; holds %v over [%s, %s)", round, got, want, holds, from, until)
		}
	}
}

// TestReservationWindow: a reservation holds its slot from the bot's binding — its start on a
// standby Running pool, the schedule lead before it on a Stopped pool, whose start is a
// deployment — for its maxDuration; a spec change keeps the grant only inside that window.
func TestReservationWindow(t *testing.T) {
	start := time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)
	bot := bt.MakeBot("ns", "b").MaxDuration("30m").Obj()
	bot.Spec.StartTime = &metav1.Time{Time: start}
	running := ReservationWindow(bot, bt.MakePool("ns", "warm").Standby(v1.StandbyRunning).Obj(), 2*time.Minute)
	stopped := ReservationWindow(bot, bt.MakePool("ns", "cold").Obj(), 2*time.Minute)
	if !running.From.Time.Equal(start) || !running.Until.Time.Equal(start.Add(30*time.Minute)) || running.Pool != "warm" {
		t.Errorf("Running pool: %+v, want from its start for 30m", running)
	}
	if !stopped.From.Time.Equal(start.Add(-2*time.Minute)) || !stopped.Until.Time.Equal(start.Add(28*time.Minute)) {
		t.Errorf("Stopped pool: %+v, want from the schedule lead before its start for 30m", stopped)
	}
	shift := func(w v1.BotReservation, from, until time.Duration) v1.BotReservation {
		w.From.Time, w.Until.Time = w.From.Add(from), w.Until.Add(until)
		return w
	}
	for _, tt := range []struct {
		name string
		w    v1.BotReservation
		keep bool
	}{
		{"the same window", running, true},
		{"a shorter meeting", shift(running, 0, -10*time.Minute), true},
		{"a later start, as long", shift(running, 5*time.Minute, 5*time.Minute), false},
		{"an earlier start", shift(running, -time.Minute, 0), false},
		{"another pool", v1.BotReservation{Pool: "cold", From: running.From, Until: running.Until}, false},
	} {
		if got := Within(tt.w, running); got != tt.keep {
			t.Errorf("%s: kept %v, want %v", tt.name, got, tt.keep)
		}
	}
}
