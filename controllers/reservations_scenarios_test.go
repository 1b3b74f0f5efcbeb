package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
	poolctrl "botpool.dev/botpool/controllers/pool"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/kubetest"
)

// TestReservationsAreGrantedAndRefused: on a pool of one slot, a bot scheduled 30 minutes
// ahead is reserved, one whose meeting would overlap it is refused (PoolFull), one scheduled 5
// minutes ahead is not reserved (TooLate), each said at once. (TestReservedBotWaitsForItsStart
// holds a reserved bot in Scheduled until its start, in single passes.)
func TestReservationsAreGrantedAndRefused(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	if err := env.Client.Create(ctx, newPool(ns, "one", func(p *v1.BotPool) { p.Spec.MaxSlots = 1 })); err != nil {
		t.Fatal(err)
	}
	now := clk.Now()
	at := func(d time.Duration) func(*v1.Bot) {
		return func(b *v1.Bot) { b.Spec.StartTime = &metav1.Time{Time: now.Add(d)} }
	}
	first := newBot(t, ns, "first", "one", at(30*time.Minute))
	waitReserved(t, first, metav1.ConditionTrue, v1.ReasonCapacityReserved)
	second := newBot(t, ns, "second", "one", at(40*time.Minute))
	waitReserved(t, second, metav1.ConditionFalse, v1.ReasonPoolFull)
	late := newBot(t, ns, "late", "one", at(5*time.Minute))
	waitReserved(t, late, metav1.ConditionFalse, v1.ReasonTooLate)
}

func waitReserved(t *testing.T, bot *v1.Bot, status metav1.ConditionStatus, reason string) {
	t.Helper()
	kubetest.Eventually(t, 15*time.Second, func() error {
		var b v1.Bot
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(bot), &b); err != nil {
			return err
		}
		c := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionReserved)
		if c == nil || c.Status != status || c.Reason != reason {
			return fmt.Errorf("bot %s: Reserved %+v, want %s/%s", bot.Name, c, status, reason)
		}
		return nil
	})
}

// TestReservationWarmedByTheObservedLead: a pool warms the slots of its reservations the lead
// ahead that its server was observed to need, not earlier and not later. Its first pull is
// timed (status.servers[].cached[].pullDuration); while a fresh pull runs, the lead of two
// reservations is what is left of it and the margin; once the image is back, the margin alone
// (a Stopped pool starts no container ahead). Nothing is created before the lead (the passes
// that changed the lead created nothing; TestWarming holds the edge to the second); at the
// lead both slots are; at their window's start (the schedule lead before their start: the pool
// is Stopped) both bots are bound, neither before.
func TestReservationWarmedByTheObservedLead(t *testing.T) {
	sc := newScenario(t, "leads", sim.Config{}, func(p *v1.BotPool) { p.Spec.MaxSlots, p.Spec.MinIdle = 3, 0 })
	key := client.ObjectKeyFromObject(sc.pool)
	pulledAt := clk.Now()
	sc.prePulled() // a cold pull, timed by the pool
	st := serverStatusOf(sc.poolNow(), fixture.ServerUUID)
	if st == nil || len(st.Cached) == 0 || st.Cached[0].PullDuration == nil || st.Cached[0].PullDuration.Duration <= 0 ||
		st.Cached[0].PullDuration.Duration > clk.Since(pulledAt) {
		t.Fatalf("the pool's pull took %s of the clock, its status records %+v", clk.Since(pulledAt), st)
	}
	pull := st.Cached[0].PullDuration.Duration

	start := clk.Now().Add(30 * time.Minute).Truncate(time.Minute)
	bind := start.Add(-suiteScheduleLead) // a Stopped pool binds the schedule lead ahead: its start is a deployment
	at := func(b *v1.Bot) { b.Spec.StartTime = &metav1.Time{Time: start} }
	bots := []*v1.Bot{newBot(t, sc.ns, "one", sc.pool.Name, at), newBot(t, sc.ns, "two", sc.pool.Name, at)}
	for _, b := range bots {
		waitReserved(t, b, metav1.ConditionTrue, v1.ReasonCapacityReserved)
	}
	reservations := func(what string, want v1.ReservationStatus) {
		t.Helper()
		waitPool(t, key, what, func(p *v1.BotPool) bool {
			r := p.Status.Reservations
			return r != nil && r.Pending == want.Pending && r.Warming == want.Warming && r.Lead == want.Lead &&
				r.NextStart != nil && r.NextStart.Time.Equal(bind)
		})
	}
	reservations("two pending, the margin ahead", v1.ReservationStatus{Pending: 2, Lead: metav1.Duration{Duration: policy.ReservationMargin}})

	// A new push of the tag: the server must pull again, and the lead waits for that pull as
	// long as the last one took (the clock stands still while it is requested).
	sc.updatePool(func(p *v1.BotPool) { p.Annotations = map[string]string{v1.AnnotationRestartedAt: "push-2"} })
	reservations("the observed pull ahead while it runs (rounded up to the minute)", v1.ReservationStatus{Pending: 2, Lead: metav1.Duration{Duration: poolctrl.CeilMinute(pull + policy.ReservationMargin)}})
	sc.prePulled()
	reservations("the margin again", v1.ReservationStatus{Pending: 2, Lead: metav1.Duration{Duration: policy.ReservationMargin}})
	if n := len(listLiveSlots(t, sc.ns)); n != 0 {
		t.Fatalf("%d slots before the lead, want none", n)
	}

	clk.SetTime(bind.Add(-policy.ReservationMargin))
	reservations("warming both at the lead", v1.ReservationStatus{Pending: 2, Warming: 2, Lead: metav1.Duration{Duration: policy.ReservationMargin}})
	waitPool(t, key, "two free slots for them", func(p *v1.BotPool) bool { return p.Status.Slots != nil && p.Status.Slots.Idle == 2 })
	for _, b := range bots {
		if got := sc.bot(b.Name); got.Status.Phase != v1.BotScheduled || got.Status.SlotName != "" {
			t.Errorf("bot %s before its start: %s, slot %q; want Scheduled, unbound", b.Name, got.Status.Phase, got.Status.SlotName)
		}
	}

	clk.SetTime(bind) // a bot's own timer runs in real time: wake it as the timer would
	for _, b := range bots {
		touch(t, b)
	}
	for _, b := range bots {
		got := sc.waitBot(b.Name, "bound at its window's start", func(b *v1.Bot) bool { return b.Status.SlotName != "" })
		if !got.Status.QueuedAt.Time.Equal(bind) {
			t.Errorf("bot %s joined the queue at %s, want the schedule lead before its start, %s", b.Name, got.Status.QueuedAt, bind)
		}
	}
}

// TestReservationsAcrossAManagerRestart: a restart between a reservation and its start loses
// nothing: the new manager counts the granted reservation (a bot that would overlap it on a
// one-slot pool is refused), warms its slot at the lead and binds the bot at its start.
func TestReservationsAcrossAManagerRestart(t *testing.T) {
	sc := newScenario(t, "restarted", sim.Config{}, func(p *v1.BotPool) { p.Spec.MaxSlots, p.Spec.MinIdle = 1, 0 })
	sc.warm()
	start := clk.Now().Add(20 * time.Minute).Truncate(time.Minute)
	first := newBot(t, sc.ns, "first", sc.pool.Name, func(b *v1.Bot) { b.Spec.StartTime = &metav1.Time{Time: start} })
	waitReserved(t, first, metav1.ConditionTrue, v1.ReasonCapacityReserved)

	restartManager(t)
	second := newBot(t, sc.ns, "second", sc.pool.Name, func(b *v1.Bot) { b.Spec.StartTime = &metav1.Time{Time: start.Add(10 * time.Minute)} })
	waitReserved(t, second, metav1.ConditionFalse, v1.ReasonPoolFull)
	waitPool(t, client.ObjectKeyFromObject(sc.pool), "one reservation pending after the restart", func(p *v1.BotPool) bool {
		return p.Status.Reservations != nil && p.Status.Reservations.Pending == 1
	})
	clk.SetTime(start.Add(-suiteScheduleLead - policy.ReservationMargin))
	waitPool(t, client.ObjectKeyFromObject(sc.pool), "its slot warmed at the lead", func(p *v1.BotPool) bool {
		return p.Status.Slots != nil && p.Status.Slots.Idle == 1 && p.Status.Reservations.Warming == 1
	})
	clk.SetTime(start.Add(-suiteScheduleLead))
	touch(t, first)
	sc.waitBot(first.Name, "bound at its start", func(b *v1.Bot) bool { return b.Status.SlotName != "" })
}
