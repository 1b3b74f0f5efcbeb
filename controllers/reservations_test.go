package controllers

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/fakeapi"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// TestRoomFor: a reservation or an ad-hoc bot fits when, at every instant of its hold, the
// holds already there leave a slot of maxSlots.
func TestRoomFor(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	h := func(from, until int) policy.Hold { return policy.Hold{From: at(from), Until: at(until)} }
	tests := []struct {
		name        string
		holds       []policy.Hold
		from, until int
		maxSlots    int
		want        bool
		peak        int
	}{
		{"an empty pool", nil, 0, 60, 1, true, 0},
		{"full at the start", []policy.Hold{h(0, 60), h(-30, 30)}, 0, 60, 2, false, 2},
		{"full only later in the hold: a reservation at 14:30", []policy.Hold{h(30, 90), h(30, 90)}, 0, 60, 2, false, 2},
		{"a hold that ends as this one starts does not count", []policy.Hold{h(-60, 0), h(-60, 0)}, 0, 60, 1, true, 0},
		{"one that starts as this one ends does not count", []policy.Hold{h(60, 120)}, 0, 60, 1, true, 0},
		{"holds that never overlap each other count one at a time", []policy.Hold{h(0, 20), h(20, 40), h(40, 60)}, 0, 60, 2, true, 1},
		{"the peak, not the sum", []policy.Hold{h(0, 30), h(10, 40), h(20, 50), h(45, 60)}, 0, 60, 3, false, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := policy.PeakHolds(tt.holds, at(tt.from), at(tt.until)); got != tt.peak {
				t.Errorf("peak %d, want %d", got, tt.peak)
			}
			if got := policy.RoomFor(tt.holds, at(tt.from), at(tt.until), tt.maxSlots); got != tt.want {
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
			v := policy.DecideReservation(&tt.bot, pool, tt.others, tt.bound, now, v1.DefaultReservationMinLead, 0)
			if v.Reason != tt.want || v.Granted != (tt.want == v1.ReasonCapacityReserved) || v.Message == "" {
				t.Errorf("verdict %+v, want %s", v, tt.want)
			}
		})
	}
}

// TestReservedBotWaitsForItsStart: in single passes of the bot controller, a bot scheduled half
// an hour ahead on a standby Running pool is reserved at its first pass and stays Scheduled
// until its start, not the schedule lead before it (it is bound at its start, from the ready
// slot held for it); a bot too late for a reservation joins the queue the schedule lead ahead,
// like any scheduled bot. Past the grace with no slot, the reserved bot says why.
func TestReservedBotWaitsForItsStart(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 27, 13, 30, 0, 0, time.UTC))
	start := clk.Now().Add(30 * time.Minute)
	reservedBot := bt.MakeBot("ns", "reserved").UID("uid-reserved").MeetingURL("https://zoom.us/j/1").Obj()
	reservedBot.Spec.StartTime = &metav1.Time{Time: start}
	lateBot := bt.MakeBot("ns", "late").UID("uid-late").MeetingURL("https://zoom.us/j/2").Obj()
	lateBot.Spec.StartTime = &metav1.Time{Time: clk.Now().Add(5 * time.Minute)}
	c := fakeapi.New(t, interceptor.Funcs{}, bt.MakePool("ns", "pool").Platform(v1.PlatformZoom).MaxSlots(2).Standby(v1.StandbyRunning).Obj(), reservedBot, lateBot)
	r := &BotReconciler{Client: c, Clock: clk, Recorder: discardEvents{}, Store: bt.NopLiveness{}, ScheduleLead: 2 * time.Minute}
	pass := func(b *v1.Bot) (*v1.Bot, time.Duration) {
		t.Helper()
		res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)})
		if err != nil {
			t.Fatalf("Reconcile %s: %v", b.Name, err)
		}
		got := &v1.Bot{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(b), got); err != nil {
			t.Fatal(err)
		}
		return got, res.RequeueAfter
	}
	expect := func(b *v1.Bot, phase v1.BotPhase, reason string) {
		t.Helper()
		c := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionReserved)
		if b.Status.Phase != phase || c == nil || c.Reason != reason {
			t.Fatalf("%s at %s: phase %q, Reserved %+v; want %s, %s", b.Name, clk.Now().Format(time.Kitchen), b.Status.Phase, c, phase, reason)
		}
	}

	decided := &bt.Events{}
	r.Recorder = decided
	got, after := pass(reservedBot)
	expect(got, v1.BotScheduled, v1.ReasonCapacityReserved)
	pass(reservedBot)
	if n := decided.Count(v1.ReasonCapacityReserved); n != 1 || !decided.Has("Normal/"+v1.ReasonCapacityReserved) {
		t.Errorf("%d CapacityReserved Events over two passes (%v), want one Normal", n, decided.Reasons())
	}
	if after != 30*time.Minute {
		t.Errorf("reserved bot looks again in %s, want at its start (30m)", after)
	}
	got, after = pass(lateBot)
	expect(got, v1.BotScheduled, v1.ReasonTooLate)
	if after != 3*time.Minute {
		t.Errorf("late bot looks again in %s, want the schedule lead before its start (3m)", after)
	}

	clk.SetTime(start.Add(-time.Minute)) // inside the schedule lead, before the start
	got, after = pass(reservedBot)
	expect(got, v1.BotScheduled, v1.ReasonCapacityReserved)
	if after != time.Minute {
		t.Errorf("reserved bot looks again in %s, want at its start (1m)", after)
	}
	clk.SetTime(start)
	got, _ = pass(reservedBot)
	expect(got, v1.BotQueued, v1.ReasonCapacityReserved)
	if !got.Status.QueuedAt.Time.Equal(start) {
		t.Errorf("queuedAt %s, want its start %s", got.Status.QueuedAt, start)
	}

	// No slot 10s after its start: it waits, and looks again when the grace ends.
	clk.SetTime(start.Add(10 * time.Second))
	got, after = pass(reservedBot)
	if c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady); c == nil || c.Reason != v1.ReasonWaiting {
		t.Errorf("10s after its start: Ready %+v, want Waiting", c)
	}
	if after != reservationGrace-10*time.Second {
		t.Errorf("10s after its start it looks again in %s, want when the grace ends (%s)", after, reservationGrace-10*time.Second)
	}
	// Past the grace, with the pool's server out: the bot says so, once in an Event too.
	pool := &v1.BotPool{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "pool"}, pool); err != nil {
		t.Fatal(err)
	}
	pool.Status.Conditions = []metav1.Condition{{Type: v1.ConditionServerOut, Status: metav1.ConditionTrue, Reason: "Unreachable",
		Message: "server s1 is unreachable", LastTransitionTime: metav1.NewTime(start)}}
	if err := c.Status().Update(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	events := &bt.Events{}
	r.Recorder = events
	clk.SetTime(start.Add(reservationGrace))
	got, _ = pass(reservedBot)
	ready := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady)
	if ready == nil || ready.Reason != v1.ReasonReservationLate || !strings.Contains(ready.Message, "server s1 is unreachable") {
		t.Fatalf("past the grace: Ready %+v, want ReservationLate saying the server is out", ready)
	}
	clk.SetTime(start.Add(time.Minute))
	got, _ = pass(reservedBot)
	if n := events.Count(v1.ReasonReservationLate); n != 1 {
		t.Errorf("%d ReservationLate Events over two passes, want 1", n)
	}
	// The message says the same a minute later: a count of the time since the start would
	// write the status at every pass.
	if later := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady); later == nil || later.Message != ready.Message {
		t.Errorf("a minute later Ready says %q, want the same message as before: %q", later.Message, ready.Message)
	}
}

// TestWarming: the k-th pending reservation (by start) is warmed once its start is within the
// lead of k slots, and every one before it with it; the pool looks again when the next is.
func TestWarming(t *testing.T) {
	now := time.Date(2026, 11, 27, 13, 30, 0, 0, time.UTC)
	at := func(m ...int) []time.Time {
		var out []time.Time
		for _, x := range m {
			out = append(out, now.Add(time.Duration(x)*time.Minute))
		}
		return out
	}
	// 2 at once, a minute each, no pull: lead(1..2) = 1m+2m, lead(3..4) = 2m+2m, lead(5..6) = 3m+2m.
	warm := leadModel{start: time.Minute, parallel: 2}
	cold := leadModel{pull: 7 * time.Minute, start: time.Minute, parallel: 2}
	tests := []struct {
		name   string
		starts []time.Time
		m      leadModel
		want   int
		next   time.Duration // from now; 0: none
	}{
		{"none pending", nil, warm, 0, 0},
		{"one far ahead", at(30), warm, 0, 27 * time.Minute},
		{"one within its lead", at(3), warm, 1, 0},
		{"one already due (its bot not queued yet)", at(-1), warm, 1, 0},
		{"six at one start need three batches", at(5, 5, 5, 5, 5, 5), warm, 6, 0},
		{"six at one start, a minute before their lead: all begin together", at(6, 6, 6, 6, 6, 6), warm, 0, time.Minute},
		{"a later one does not hold back an earlier", at(3, 30), warm, 1, 27 * time.Minute},
		{"a cold pull makes the lead 10m", at(11, 20), cold, 0, time.Minute},
		{"the pull inside the lead", at(10, 20), cold, 1, 10 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, next := warming(tt.starts, now, tt.m)
			if n != tt.want {
				t.Errorf("warming %d, want %d", n, tt.want)
			}
			var gotNext time.Duration
			if !next.IsZero() {
				gotNext = next.Sub(now)
			}
			if gotNext != tt.next {
				t.Errorf("next in %s, want %s", gotNext, tt.next)
			}
		})
	}
}

// TestObservedLead: the lead of a pool's reservations follows what it observed on the servers
// that take slots: the newest pull where the image is missing (less what a pull in flight has
// done), the slowest standby start, what the servers and the pool's deploy bound run at once;
// with nothing observed, the pessimistic defaults.
func TestObservedLead(t *testing.T) {
	now := time.Date(2026, 11, 27, 13, 30, 0, 0, time.UTC)
	const ref = "ghcr.io/acme/bot:v2"
	d := func(x time.Duration) *metav1.Duration { return &metav1.Duration{Duration: x} }
	cached := func(image string, took time.Duration) []v1.CachedImage {
		return []v1.CachedImage{{Image: image, PulledAt: metav1.NewTime(now.Add(-time.Hour)), PullDuration: d(took)}}
	}
	srv := func(uuid string, mutate ...func(*v1.ServerStatus)) v1.ServerStatus {
		st := v1.ServerStatus{UUID: uuid, State: v1.ServerActive, Health: v1.ServerHealthy}
		for _, m := range mutate {
			m(&st)
		}
		return st
	}
	warm := func(st *v1.ServerStatus) { st.Cached, st.SlotStart = cached(ref, 7*time.Minute), d(20*time.Second) }
	lacks := func(st *v1.ServerStatus) {
		st.Cached, st.SlotStart = cached("ghcr.io/acme/bot:v1", 6*time.Minute), d(20*time.Second)
	}
	settings := map[string]coolify.ServerSettings{"s1": {ConcurrentBuilds: 2}, "s2": {ConcurrentBuilds: 3}}
	tests := []struct {
		name    string
		mode    v1.StandbyMode
		limit   int32
		servers []v1.ServerStatus
		known   map[string]coolify.ServerSettings
		want    leadModel
	}{
		{"nothing observed yet", v1.StandbyRunning, 0, nil, nil, leadModel{pull: unobservedPull, start: unobservedStart, parallel: unobservedRuns}},
		{"image on both servers: their starts, their builds", v1.StandbyRunning, 0, []v1.ServerStatus{srv("s1", warm), srv("s2", warm)}, settings,
			leadModel{start: 20 * time.Second, parallel: 5}},
		{"a server without the image: its last pull", v1.StandbyRunning, 0, []v1.ServerStatus{srv("s1", warm), srv("s2", lacks)}, settings,
			leadModel{pull: 6 * time.Minute, start: 20 * time.Second, parallel: 5}},
		{"a pull two minutes in", v1.StandbyRunning, 0, []v1.ServerStatus{srv("s1", lacks, func(st *v1.ServerStatus) {
			st.Pull = &v1.ImagePull{Image: ref, State: v1.ImagePulling, Since: metav1.NewTime(now.Add(-2 * time.Minute))}
		})}, settings, leadModel{pull: 4 * time.Minute, start: 20 * time.Second, parallel: 2}},
		{"a restartedAt dropped the pull's cached entry: the last pull observed there, two minutes in", v1.StandbyRunning, 0, []v1.ServerStatus{srv("s1", func(st *v1.ServerStatus) {
			st.PullDuration, st.SlotStart = d(7*time.Minute), d(20*time.Second)
			st.Pull = &v1.ImagePull{Image: ref, State: v1.ImagePulling, Since: metav1.NewTime(now.Add(-2 * time.Minute))}
		})}, settings, leadModel{pull: 5 * time.Minute, start: 20 * time.Second, parallel: 2}},
		{"never pulled there, no start seen", v1.StandbyRunning, 0, []v1.ServerStatus{srv("s1")}, settings,
			leadModel{pull: unobservedPull, start: unobservedStart, parallel: 2}},
		{"a cordoned and an out server do not count", v1.StandbyRunning, 0, []v1.ServerStatus{srv("s1", warm),
			srv("s2", lacks, func(st *v1.ServerStatus) { st.State = v1.ServerCordoned }),
			srv("s3", func(st *v1.ServerStatus) { st.Health = v1.ServerUnreachable })}, settings, leadModel{start: 20 * time.Second, parallel: 2}},
		{"the pool's deploy bound", v1.StandbyRunning, 1, []v1.ServerStatus{srv("s1", warm), srv("s2", warm)}, settings,
			leadModel{start: 20 * time.Second, parallel: 1}},
		{"settings unknown: 2 a server, 4 for the pool", v1.StandbyRunning, 0, []v1.ServerStatus{srv("s1", warm), srv("s2", warm), srv("s3", warm)}, nil,
			leadModel{start: 20 * time.Second, parallel: 4}},
		{"a Stopped pool's free slot starts nothing", v1.StandbyStopped, 0, []v1.ServerStatus{srv("s1", warm)}, settings, leadModel{parallel: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := bt.MakePool("ns", "pool").Image("ghcr.io/acme/bot", "v2").Standby(tt.mode).MaxConcurrentDeployments(tt.limit).Obj()
			tmpl := policy.PoolTemplate(pool, "", "")
			s := &poolScope{pool: pool, template: &tmpl, servers: tt.known}
			if got := observedLead(s, tt.servers, now); got != tt.want {
				t.Errorf("lead model %+v, want %+v", got, tt.want)
			}
		})
	}
	// A pull requested at a fraction of a second, its since stored to the second: no time has
	// passed, so none of it is gone (TestReservationWarmedByTheObservedLead failed in the full
	// suite, whose shared clock had a fraction, as the lead dropped a minute).
	at := now.Add(700 * time.Millisecond)
	pulling := srv("s1", lacks, func(st *v1.ServerStatus) {
		st.Pull = &v1.ImagePull{Image: ref, State: v1.ImagePulling, Since: metav1.NewTime(at.Truncate(time.Second))}
	})
	pool := bt.MakePool("ns", "pool").Image("ghcr.io/acme/bot", "v2").Obj()
	tmpl := policy.PoolTemplate(pool, "", "")
	if got := observedLead(&poolScope{pool: pool, template: &tmpl, servers: settings}, []v1.ServerStatus{pulling}, at); got.pull != 6*time.Minute {
		t.Errorf("a pull just requested at a fraction of a second has %s left, want all of its 6m", got.pull)
	}
}

// TestPeakHoldsAgreesWithCountingEveryInstant: the sweep finds the same peak as counting the
// overlaps at every instant a hold begins (the rule it replaced), on random holds.
func TestPeakHoldsAgreesWithCountingEveryInstant(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(18, 1))
	at := func() time.Time { return t0.Add(time.Duration(rng.IntN(24)) * 5 * time.Minute) }
	counted := func(holds []policy.Hold, from, until time.Time) int {
		most := 0
		for _, i := range append([]policy.Hold{{From: from}}, holds...) {
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
		holds := make([]policy.Hold, rng.IntN(12))
		for i := range holds {
			a, b := at(), at()
			if b.Before(a) {
				a, b = b, a
			}
			holds[i] = policy.Hold{From: a, Until: b}
		}
		from, until := at(), at()
		if !from.Before(until) {
			continue
		}
		if got, want := policy.PeakHolds(holds, from, until), counted(holds, from, until); got != want {
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
	running := policy.ReservationWindow(bot, bt.MakePool("ns", "warm").Standby(v1.StandbyRunning).Obj(), 2*time.Minute)
	stopped := policy.ReservationWindow(bot, bt.MakePool("ns", "cold").Obj(), 2*time.Minute)
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
		if got := policy.Within(tt.w, running); got != tt.keep {
			t.Errorf("%s: kept %v, want %v", tt.name, got, tt.keep)
		}
	}
}

// TestReservationDecidedAgainWhenItsWindowMoves: on a one-slot pool, bots x (in half an hour)
// and y (in five hours) are both reserved; y moved onto x's meeting is decided again and
// refused (PoolFull), and its window is forgotten; x's meeting shortened keeps its grant, with
// the shorter window recorded.
func TestReservationDecidedAgainWhenItsWindowMoves(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 27, 13, 30, 0, 0, time.UTC))
	at := func(name string, d time.Duration) *v1.Bot {
		b := bt.MakeBot("ns", name).UID(types.UID("uid-" + name)).MeetingURL("https://zoom.us/j/" + name).MaxDuration("1h").Obj()
		b.Spec.StartTime = &metav1.Time{Time: clk.Now().Add(d)}
		return b
	}
	x, y := at("x", 30*time.Minute), at("y", 5*time.Hour)
	c := fakeapi.New(t, interceptor.Funcs{}, bt.MakePool("ns", "pool").Platform(v1.PlatformZoom).MaxSlots(1).Standby(v1.StandbyRunning).Obj(), x, y)
	r := &BotReconciler{Client: c, Clock: clk, Recorder: discardEvents{}, Store: bt.NopLiveness{}, ScheduleLead: 2 * time.Minute}
	pass := func(name string) *v1.Bot {
		t.Helper()
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: name}}); err != nil {
			t.Fatalf("Reconcile %s: %v", name, err)
		}
		got := &v1.Bot{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	change := func(name string, mutate func(*v1.Bot)) {
		t.Helper()
		b := &v1.Bot{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, b); err != nil {
			t.Fatal(err)
		}
		mutate(b)
		if err := c.Update(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"x", "y"} {
		if got := pass(name); !policy.Reserved(got) {
			t.Fatalf("bot %s not reserved: %+v", name, got.Status.Conditions)
		}
	}

	change("y", func(b *v1.Bot) { b.Spec.StartTime = x.Spec.StartTime })
	got := pass("y")
	if c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReserved); c == nil || c.Reason != v1.ReasonPoolFull || got.Status.Reservation != nil {
		t.Errorf("y moved onto x's meeting: Reserved %+v, window %+v; want PoolFull and none", c, got.Status.Reservation)
	}

	change("x", func(b *v1.Bot) { b.Spec.MaxDuration = "20m" })
	got = pass("x")
	if !policy.Reserved(got) || !got.Status.Reservation.Until.Time.Equal(x.Spec.StartTime.Add(20*time.Minute)) {
		t.Errorf("x shortened: reserved %v, window %+v; want kept, until 20m after its start", policy.Reserved(got), got.Status.Reservation)
	}
}

// TestPoolTroubles: a late reservation names what keeps its pool from serving, all of it,
// servers without room for a slot among it (the model check found reserved bots saying no
// problem was known, or naming a failed pre-pull only, while their pool could place no slot,
// every server being cordoned or at its maxSlots).
func TestPoolTroubles(t *testing.T) {
	cond := func(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason}
	}
	for _, tt := range []struct {
		name  string
		conds []metav1.Condition
		want  []string // the reasons, in order
	}{
		{"nothing wrong", []metav1.Condition{cond(v1.ConditionReady, metav1.ConditionTrue, "Available")}, nil},
		{"stalled, then not ready", []metav1.Condition{cond(v1.ConditionReady, metav1.ConditionFalse, "X"), cond(v1.ConditionStalled, metav1.ConditionTrue, "ImagePullFailed")},
			[]string{"ImagePullFailed", "X"}},
		{"a server out", []metav1.Condition{cond(v1.ConditionServerOut, metav1.ConditionTrue, "Unreachable")}, []string{"Unreachable"}},
		{"a failed pull and servers full", []metav1.Condition{cond(v1.ConditionReady, metav1.ConditionTrue, "Available"),
			cond(v1.ConditionStalled, metav1.ConditionTrue, v1.ReasonImagePullFailed), cond(v1.ConditionReconciling, metav1.ConditionTrue, v1.ReasonServersFull)},
			[]string{v1.ReasonImagePullFailed, v1.ReasonServersFull}},
		{"no usable server", []metav1.Condition{cond(v1.ConditionReconciling, metav1.ConditionTrue, v1.ReasonNoUsableServer)}, []string{v1.ReasonNoUsableServer}},
		{"reconciling for another reason is no trouble", []metav1.Condition{cond(v1.ConditionReconciling, metav1.ConditionTrue, "WarmingStandby")}, nil},
		{"not ready", []metav1.Condition{cond(v1.ConditionReady, metav1.ConditionFalse, "CoolifyUnreachable")}, []string{"CoolifyUnreachable"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pool := &v1.BotPool{}
			pool.Status.Conditions = tt.conds
			var got []string
			for _, c := range poolTroubles(pool) {
				got = append(got, c.Reason)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("poolTroubles says %v, want %v", got, tt.want)
			}
		})
	}
}
