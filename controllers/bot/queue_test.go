package bot

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
	bt "botpool.dev/botpool/internal/botpooltest"
)

func TestQueueOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	bot := func(name string, prio int32, queued time.Duration) *v1.Bot {
		b := &v1.Bot{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0)}}
		b.Spec.Priority = prio
		at := metav1.NewTime(t0.Add(queued))
		b.Status.QueuedAt = &at
		return b
	}
	q := []*v1.Bot{bot("late-low", 0, 3*time.Second), bot("vip", 100, 5*time.Second), bot("early-low", 0, time.Second),
		bot("negative", -5, 0), bot("vip-earlier", 100, 4*time.Second), bot("b-tie", 0, time.Second)}
	policy.SortQueue(q)
	var got []string
	for _, b := range q {
		got = append(got, b.Name)
	}
	want := []string{"vip-earlier", "vip", "b-tie", "early-low", "late-low", "negative"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("queue order %v, want %v", got, want)
		}
	}
}

func TestSlotOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	slot := func(name string, used *time.Duration) *v1.BotPoolSlot {
		s := &v1.BotPoolSlot{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if used != nil {
			at := metav1.NewTime(t0.Add(*used))
			s.Status.LastUsedAt = &at
		}
		return s
	}
	d := func(x time.Duration) *time.Duration { return &x }
	slots := []*v1.BotPoolSlot{slot("c-recent", d(time.Hour)), slot("b-never", nil), slot("d-old", d(time.Minute)), slot("a-never", nil)}
	policy.SortSlots(slots)
	want := []string{"a-never", "b-never", "d-old", "c-recent"}
	for i, s := range slots {
		if s.Name != want[i] {
			t.Fatalf("slot %d = %s, want order %v", i, s.Name, want)
		}
	}
}

func TestQueueTimeoutOfABot(t *testing.T) {
	pool := &v1.BotPool{}
	pool.Spec.Queue = v1.QueuePolicy{DefaultTimeout: "5m", MaxTimeout: "8m"}
	tests := []struct {
		own  v1.Duration
		want time.Duration
	}{
		{"", 5 * time.Minute},
		{"2m", 2 * time.Minute},
		{"10m", 8 * time.Minute}, // capped by the pool
	}
	for _, tt := range tests {
		b := &v1.Bot{}
		b.Spec.QueueTimeout = tt.own
		if got := QueueTimeout(b, pool); got != tt.want {
			t.Errorf("queueTimeout(%q) = %v, want %v", tt.own, got, tt.want)
		}
	}
}

func TestPositionChanged(t *testing.T) {
	tests := []struct {
		old, updated int32
		want         bool
	}{
		{0, 500, true}, {500, 500, false}, {500, 499, false}, {500, 450, true},
		{100, 95, false}, {100, 90, true}, {12, 10, true}, {5, 4, true},
	}
	for _, tt := range tests {
		if got := policy.PositionChanged(tt.old, tt.updated); got != tt.want {
			t.Errorf("positionChanged(%d, %d) = %v, want %v", tt.old, tt.updated, got, tt.want)
		}
	}
}

// TestQueueDeadline: a retried bot keeps its queuedAt (its place) but its wait counts from its
// last failed start.
func TestQueueDeadline(t *testing.T) {
	queued := time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)
	pool := bt.MakePool("ns", "pool").Obj()
	bot := bt.MakeBot("ns", "bot").Phase(v1.BotQueued).Obj()
	bot.Status.QueuedAt = &metav1.Time{Time: queued}
	if got, want := QueueDeadline(bot, pool), queued.Add(v1.DefaultQueueTimeout); !got.Equal(want) {
		t.Fatalf("deadline %s, want %s", got, want)
	}
	failed := queued.Add(7 * time.Minute)
	bot.Status.StartAttempts = []v1.StartAttempt{{SlotName: "s", Reason: v1.ReasonDeploymentFailed, At: metav1.NewTime(failed)}}
	if got, want := QueueDeadline(bot, pool), failed.Add(v1.DefaultQueueTimeout); !got.Equal(want) {
		t.Fatalf("deadline of a retried bot %s, want %s (from its failed start)", got, want)
	}
}
