package bot

import (
	"context"
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
	bt "botpool.dev/botpool/internal/botpooltest"
)

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
	r := &Reconciler{Client: c, Clock: clk, Recorder: bt.DiscardEvents{}, Store: bt.NopLiveness{}, ScheduleLead: 2 * time.Minute}
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
	r := &Reconciler{Client: c, Clock: clk, Recorder: bt.DiscardEvents{}, Store: bt.NopLiveness{}, ScheduleLead: 2 * time.Minute}
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
