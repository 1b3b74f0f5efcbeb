package dispatch

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/fakeapi"
	bt "botpool.dev/botpool/internal/botpooltest"
)

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
		return func(b *v1.Bot) { bt.Grant(b, now.Add(d)) }
	}
	scheduled := func(b *v1.Bot) { b.Status.Phase = v1.BotScheduled }
	lasting := func(d v1.Duration) func(*v1.Bot) { return func(b *v1.Bot) { b.Spec.MaxDuration = d } }
	// inCall is a bot in its meeting since ago, for an hour at most.
	inCall := func(name string, ago time.Duration) *v1.Bot {
		return bot(name, lasting("1h"), func(b *v1.Bot) {
			b.Status.Phase, b.Status.StartedAt = v1.BotInCall, &metav1.Time{Time: now.Add(-ago)}
		})
	}
	boundSlots := func(bots ...string) []*v1.BotPoolSlot {
		var out []*v1.BotPoolSlot
		for i, b := range bots {
			out = append(out, bt.MakeSlot("ns", fmt.Sprintf("pool-zoom-%03d", i+1), "pool").BoundTo(b, types.UID("uid-"+b)).Obj())
		}
		return out
	}
	tests := []struct {
		name    string
		all     []*v1.Bot // the pool's bots in the cache
		head    []string  // the head of the queue, in order
		want    int
		free    int               // free slots (default: as many as the head)
		warming int32             // the pool's status.reservations.warming
		slots   []*v1.BotPoolSlot // slots in the cache
	}{
		{"no reservation: every bot", []*v1.Bot{bot("a"), bot("b")}, []string{"a", "b"}, 2, 0, 0, nil},
		{"a reservation in half an hour keeps one slot from the second bot",
			[]*v1.Bot{bot("r", reservedAt(30*time.Minute), scheduled), bot("a"), bot("b")}, []string{"a", "b"}, 1, 0, 0, nil},
		{"one in two hours, after the meetings' maxDuration, keeps nothing", []*v1.Bot{bot("r", reservedAt(2*time.Hour), scheduled), bot("a"), bot("b")},
			[]string{"a", "b"}, 2, 0, 0, nil},
		{"a reserved bot at its start takes the slot held for it",
			[]*v1.Bot{bot("r", reservedAt(0)), bot("r2", reservedAt(0))}, []string{"r", "r2"}, 2, 0, 0, nil},
		{"the first that does not fit ends the wave", []*v1.Bot{bot("r", reservedAt(30*time.Minute), scheduled), bot("r2", reservedAt(30*time.Minute), scheduled), bot("a")},
			[]string{"a"}, 0, 0, 0, nil},
		{name: "the free slot warmed for a reservation due in a minute is not an ad-hoc bot's",
			all: []*v1.Bot{bot("r", reservedAt(time.Minute), scheduled), bot("a", func(b *v1.Bot) { b.Spec.MaxDuration = "10m" })}, head: []string{"a"},
			want: 0, free: 1, warming: 1},
		{name: "a meeting that ends well before the reservation may use the warmed slot",
			all: []*v1.Bot{bot("r", reservedAt(30*time.Minute), scheduled), bot("a", func(b *v1.Bot) { b.Spec.MaxDuration = "10m" })}, head: []string{"a"},
			want: 1, free: 1, warming: 1},
		{name: "a free slot beside the warmed one is",
			all: []*v1.Bot{bot("r", reservedAt(time.Minute), scheduled), bot("a", func(b *v1.Bot) { b.Spec.MaxDuration = "10m" })}, head: []string{"a"},
			want: 1, free: 2, warming: 1},
		{name: "a bot bound by a slot's botRef the bot does not mirror yet holds its slot",
			all: []*v1.Bot{bot("r", reservedAt(30*time.Minute), scheduled), bot("a"), bot("b")}, head: []string{"b"}, want: 0, free: 1,
			slots: []*v1.BotPoolSlot{bt.MakeSlot("ns", "pool-zoom-001", "pool").BoundTo("a", "uid-a").Obj()}},
		// Seed 3457702266237806 of the model check: the reserved bot's slot names it while
		// its status still says Queued; it promised nothing more, and the queue waited beside
		// a free slot for a reservation already served.
		{name: "a reserved bot a slot's botRef names, its status still Queued, promises nothing more",
			all:  []*v1.Bot{bot("r", reservedAt(-7*time.Minute)), inCall("c", 0), bot("a")},
			head: []string{"a"}, want: 1, free: 1,
			slots: []*v1.BotPoolSlot{bt.MakeSlot("ns", "pool-zoom-001", "pool").BoundTo("r", "uid-r").Obj(),
				bt.MakeSlot("ns", "pool-zoom-002", "pool").BoundTo("c", "uid-c").Obj()}},
		// Seed 3457702266237803: the reserved bot at the head was bound in the wave, and
		// still held the bot behind it back as a promise.
		{name: "a reserved bot the wave binds promises nothing more to the bots behind it",
			all:  []*v1.Bot{bot("r", reservedAt(-time.Minute)), inCall("c", 0), bot("a", lasting("30m"))},
			head: []string{"r", "a"}, want: 2, free: 2, slots: boundSlots("c")},
		{name: "a pool above a lowered maxSlots serves its queue while the meeting ends before the reservation",
			all:  []*v1.Bot{bot("r", reservedAt(3*time.Hour), scheduled), inCall("c1", 0), inCall("c2", 0), inCall("c3", 0), bot("a", lasting("30m"))},
			head: []string{"a"}, want: 1, free: 1, slots: boundSlots("c1", "c2", "c3")},
		{name: "and holds it when the meeting would reach into the reservation",
			all:  []*v1.Bot{bot("r", reservedAt(20*time.Minute), scheduled), inCall("c1", 0), inCall("c2", 0), inCall("c3", 0), bot("a", lasting("30m"))},
			head: []string{"a"}, want: 0, free: 1, slots: boundSlots("c1", "c2", "c3")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := pool.DeepCopy()
			if tt.warming > 0 {
				pool.Status.Reservations = &v1.ReservationStatus{Pending: 1, Warming: tt.warming}
			}
			objs := []client.Object{pool}
			byName := map[string]*v1.Bot{}
			for _, b := range tt.all {
				objs = append(objs, b)
				byName[b.Name] = b
			}
			for _, sl := range tt.slots {
				objs = append(objs, sl)
			}
			c := fakeapi.New(t, interceptor.Funcs{}, objs...)
			d := &Dispatcher{Client: c, Clock: clocktesting.NewFakeClock(now)}
			var head []*v1.Bot
			for _, n := range tt.head {
				head = append(head, byName[n])
			}
			free := tt.free
			if free == 0 {
				free = len(head)
			}
			got, err := d.unreserved(context.Background(), pool, head, free)
			if err != nil || got != tt.want {
				t.Errorf("unreserved %d (%v), want %d", got, err, tt.want)
			}
		})
	}
}

// TestBoundInForgetsABindingThatEnded: a wave's binding counts until the cache shows it, but
// not once it ended: the bot's start failed after it (seed 881256409367164), or the cache
// shows its slot in a version past the bind without the bot, or no longer holds the slot
// (seed 1579723300654347: the slot let the bot go taking an older failed start for its own).
// The model check found the queue, that very bot at its head, waiting beside a free slot for
// a slot its own ended binding still held.
func TestBoundInForgetsABindingThatEnded(t *testing.T) {
	now := time.Date(2026, 11, 27, 13, 30, 0, 0, time.UTC)
	pool := bt.MakePool("ns", "pool").MaxSlots(2).Obj()
	// The cache shows s1 as the wave found it (the bind not yet), s2 past the bind, let go.
	s1 := bt.MakeSlot("ns", "pool-zoom-001", "pool").UID("s1").Phase(v1.SlotIdle).Obj()
	s2 := bt.MakeSlot("ns", "pool-zoom-002", "pool").UID("s2").Phase(v1.SlotError).Obj()
	c := fakeapi.New(t, interceptor.Funcs{}, pool, s1, s2)
	version := func(s *v1.BotPoolSlot) string {
		t.Helper()
		got := &v1.BotPoolSlot{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(s), got); err != nil {
			t.Fatal(err)
		}
		return got.ResourceVersion
	}
	l := &Ledger{}
	at := now.Add(-10 * time.Second)
	unseen := waveBinding{at: at, slot: "s1", version: version(s1)}
	for _, uid := range []types.UID{"uid-failed", "uid-bound", "uid-failed-before"} {
		l.bound(uid, unseen)
	}
	l.bound("uid-let-go", waveBinding{at: at, slot: "s2", version: "an older version"})
	l.bound("uid-slot-gone", waveBinding{at: at, slot: "s3", version: "1"})
	bot := func(uid types.UID, failedAt ...time.Time) v1.Bot {
		b := v1.Bot{}
		b.UID = uid
		for _, at := range failedAt {
			b.Status.StartAttempts = append(b.Status.StartAttempts, v1.StartAttempt{SlotName: "pool-zoom-001", Reason: "DeploymentFailed", At: metav1.Time{Time: at}})
		}
		return b
	}
	bots := []v1.Bot{bot("uid-failed", now.Add(-time.Minute), now.Add(-5*time.Second)), bot("uid-bound"), bot("uid-failed-before", now.Add(-time.Minute)),
		bot("uid-let-go", now.Add(-time.Hour)), bot("uid-slot-gone")}
	got, err := l.BoundIn(context.Background(), c, pool, bots, now)
	if err != nil {
		t.Fatal(err)
	}
	want := map[types.UID]bool{"uid-bound": true, "uid-failed-before": true}
	if !maps.Equal(got, want) {
		t.Fatalf("bound %v, want %v: a binding that ended since still counts, or a live one does not", got, want)
	}
}
