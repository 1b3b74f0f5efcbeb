package dispatch

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/fakeapi"
	"botpool.dev/botpool/controllers/internal/metrics"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// boundBots runs one wave of pool and returns the bots bound, by slot.
func boundBots(t *testing.T, d *Dispatcher, c client.Client, pool *v1.BotPool) map[string]string {
	t.Helper()
	ctx := context.Background()
	if _, err := d.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pool)}); err != nil {
		t.Fatal(err)
	}
	var slots v1.BotPoolSlotList
	if err := c.List(ctx, &slots); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range slots.Items {
		if s.Spec.BotRef != nil {
			out[s.Spec.BotRef.Name] = s.Name
		}
	}
	return out
}

// TestAWaveBindsOneBotPerDeduplicationKey: of two queued bots with one key (their own, or the
// meeting URL in a pool that deduplicates by it) a wave binds the one created first, and the
// other stays unbound though a slot is free; bots of other keys, and without one, are bound as
// usual. A key a bound bot holds keeps every newer bot of the key off the slots.
func TestAWaveBindsOneBotPerDeduplicationKey(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
	queued := func(name string, age time.Duration) *bt.BotWrapper {
		return bt.MakeBot("ns", name).UID(types.UID("uid-" + name)).PoolRef("pool").InPool("pool").Phase(v1.BotQueued).Created(clk.Now().Add(-age))
	}
	slots := func(n int) []client.Object {
		var out []client.Object
		for i := range n {
			name := "pool-zoom-00" + string(rune('1'+i))
			out = append(out, bt.MakeSlot("ns", name, "pool").UID(types.UID("s-"+name)).Phase(v1.SlotIdle).
				Since(clk.Now().Add(-time.Duration(i+1)*time.Minute)).App("a-"+name).Obj())
		}
		return out
	}
	t.Run("own keys", func(t *testing.T) {
		pool := bt.MakePool("ns", "pool").UID("pool-uid").MaxSlots(4).Obj()
		objs := append(slots(4), pool,
			queued("first", 3*time.Minute).DeduplicationKey("standup").Obj(),
			queued("second", 2*time.Minute).DeduplicationKey("standup").Obj(),
			queued("other-meeting", time.Minute).DeduplicationKey("retro").Obj(),
			queued("no-key", time.Minute).Obj())
		c := fakeapi.New(t, interceptor.Funcs{}, objs...)
		d := &Dispatcher{Client: c, Clock: clk, Metrics: metrics.New(nil)}
		got := boundBots(t, d, c, pool)
		if got["first"] == "" || got["second"] != "" || got["other-meeting"] == "" || got["no-key"] == "" {
			t.Fatalf("bound %v; want first, other-meeting and no-key, not second", got)
		}
		// Another wave, the first one bound: the second still waits beside the free slot.
		if again := boundBots(t, d, c, pool); again["second"] != "" {
			t.Fatalf("a second wave bound the duplicate: %v", again)
		}
	})
	t.Run("meeting URL", func(t *testing.T) {
		pool := bt.MakePool("ns", "pool").UID("pool-uid").MaxSlots(3).Deduplication(v1.DeduplicationMeetingURL).Obj()
		objs := append(slots(3), pool,
			queued("zoom-a", 3*time.Minute).MeetingURL("https://us02web.zoom.us/j/85812345678?pwd=abc").Obj(),
			queued("zoom-b", 2*time.Minute).MeetingURL("https://zoom.us/j/85812345678").Obj(),
			// Its own key wins over the URL's: another meeting as far as the pool is concerned.
			queued("zoom-c", time.Minute).MeetingURL("https://zoom.us/j/85812345678").DeduplicationKey("c").Obj())
		c := fakeapi.New(t, interceptor.Funcs{}, objs...)
		d := &Dispatcher{Client: c, Clock: clk, Metrics: metrics.New(nil)}
		if got := boundBots(t, d, c, pool); got["zoom-a"] == "" || got["zoom-b"] != "" || got["zoom-c"] == "" {
			t.Fatalf("bound %v; want zoom-a and zoom-c, not zoom-b", got)
		}
	})
	t.Run("the bound bot holds the key", func(t *testing.T) {
		pool := bt.MakePool("ns", "pool").UID("pool-uid").MaxSlots(2).Obj()
		all := slots(2)
		// The younger bot was bound first (the older one was not in the cache yet).
		bound := all[1].(*v1.BotPoolSlot)
		bound.Spec.BotRef = &v1.BotReference{Name: "younger", UID: "uid-younger"}
		bound.Status.Phase = v1.SlotDeploying
		younger := queued("younger", time.Minute).DeduplicationKey("standup").Obj()
		younger.Status.Phase = v1.BotDeploying
		all = append(all, pool, younger, queued("older", time.Hour).DeduplicationKey("standup").Obj())
		c := fakeapi.New(t, interceptor.Funcs{}, all...)
		d := &Dispatcher{Client: c, Clock: clk, Metrics: metrics.New(nil)}
		if got := boundBots(t, d, c, pool); got["older"] != "" {
			t.Fatalf("bound %v; the older bot was bound beside the bound holder of its key", got)
		}
	})
	t.Run("an ended holder lets the next one in", func(t *testing.T) {
		pool := bt.MakePool("ns", "pool").UID("pool-uid").MaxSlots(1).Obj()
		done := queued("done", time.Hour).DeduplicationKey("standup").Phase(v1.BotDone).FinishedAt(clk.Now().Add(-time.Minute)).Obj()
		objs := append(slots(1), pool, done, queued("next", time.Minute).DeduplicationKey("standup").Obj())
		c := fakeapi.New(t, interceptor.Funcs{}, objs...)
		d := &Dispatcher{Client: c, Clock: clk, Metrics: metrics.New(nil)}
		if got := boundBots(t, d, c, pool); got["next"] == "" {
			t.Fatalf("bound %v; want next, whose key's holder ended", got)
		}
	})
}

// TestAWaveSkipsBotsWaitingForTheirParameters: a queued bot whose ParametersReady is False is
// not bound and loses its queue position; the bot behind it takes the free slot.
func TestAWaveSkipsBotsWaitingForTheirParameters(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
	pool := bt.MakePool("ns", "pool").UID("pool-uid").MaxSlots(1).Obj()
	held := bt.MakeBot("ns", "held").UID("uid-held").PoolRef("pool").InPool("pool").Phase(v1.BotQueued).
		Priority(10).Created(clk.Now().Add(-time.Hour)).Obj()
	held.Status.QueuePosition = 1
	held.Status.Conditions = []metav1.Condition{{Type: v1.ConditionParametersReady, Status: metav1.ConditionFalse,
		Reason: v1.ReasonParameterSecretNotFound, LastTransitionTime: metav1.NewTime(clk.Now())}}
	next := bt.MakeBot("ns", "next").UID("uid-next").PoolRef("pool").InPool("pool").Phase(v1.BotQueued).Created(clk.Now()).Obj()
	third := bt.MakeBot("ns", "third").UID("uid-third").PoolRef("pool").InPool("pool").Phase(v1.BotQueued).Created(clk.Now()).Obj()
	slot := bt.MakeSlot("ns", "pool-zoom-001", "pool").UID("s1").Phase(v1.SlotIdle).Since(clk.Now().Add(-time.Hour)).App("a1").Obj()
	c := fakeapi.New(t, interceptor.Funcs{}, pool, held, next, third, slot)
	d := &Dispatcher{Client: c, Clock: clk, Metrics: metrics.New(nil)}
	got := boundBots(t, d, c, pool)
	if got["held"] != "" || len(got) != 1 {
		t.Fatalf("bound %v; want one bot, not the one waiting for its parameters", got)
	}
	// The next wave (no slot free) writes the positions: none for the held bot.
	boundBots(t, d, c, pool)
	after := &v1.Bot{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(held), after); err != nil {
		t.Fatal(err)
	}
	if after.Status.QueuePosition != 0 || after.Status.EstimatedWait != nil {
		t.Fatalf("the held bot kept queue position %d (wait %v); want none", after.Status.QueuePosition, after.Status.EstimatedWait)
	}
}
