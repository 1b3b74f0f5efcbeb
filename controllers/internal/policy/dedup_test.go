package policy

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "botpool.dev/botpool/api/v1alpha1"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// TestHolderOfAKey: which of the bots sharing a deduplication key holds it.
func TestHolderOfAKey(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	mk := func(name string, phase v1.BotPhase, age time.Duration) *v1.Bot {
		return bt.MakeBot("ns", name).Phase(phase).Created(t0.Add(-age)).Obj()
	}
	held := mk("held", v1.BotQueued, time.Hour)
	held.Status.Conditions = []metav1.Condition{{Type: v1.ConditionParametersReady, Status: metav1.ConditionFalse, Reason: v1.ReasonParameterSecretNotFound}}
	deleted := mk("deleted", v1.BotQueued, time.Hour)
	deleted.DeletionTimestamp = &metav1.Time{Time: t0}
	boundNames := map[string]bool{}
	bound := func(b *v1.Bot) bool { return boundNames[b.Name] }
	cases := []struct {
		name  string
		bots  []*v1.Bot
		bound []string
		want  string
	}{
		{"the first created of the queue", []*v1.Bot{mk("b", v1.BotQueued, time.Minute), mk("a", v1.BotQueued, time.Hour)}, nil, "a"},
		{"by name at the same instant", []*v1.Bot{mk("b", v1.BotQueued, time.Minute), mk("a", v1.BotQueued, time.Minute)}, nil, "a"},
		{"a bound one over an older one", []*v1.Bot{mk("old", v1.BotQueued, time.Hour), mk("young", v1.BotDeploying, time.Minute)}, []string{"young"}, "young"},
		{"tomorrow's scheduled bot holds nothing today", []*v1.Bot{mk("tomorrow", v1.BotScheduled, time.Hour), mk("today", v1.BotQueued, time.Minute)}, nil, "today"},
		{"a pending bot holds nothing", []*v1.Bot{mk("new", v1.BotPending, time.Hour)}, nil, ""},
		{"an ended bot holds nothing", []*v1.Bot{mk("done", v1.BotDone, time.Hour), mk("next", v1.BotQueued, time.Minute)}, nil, "next"},
		{"a bot waiting for its parameters holds nothing", []*v1.Bot{held, mk("fixed", v1.BotQueued, time.Minute)}, nil, "fixed"},
		{"a deleted bot not bound holds nothing", []*v1.Bot{deleted, mk("other", v1.BotQueued, time.Minute)}, nil, "other"},
		{"a deleted bot still bound holds its key", []*v1.Bot{deleted, mk("other", v1.BotQueued, time.Minute)}, []string{"deleted"}, "deleted"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			boundNames = map[string]bool{}
			for _, n := range c.bound {
				boundNames[n] = true
			}
			got := ""
			if h := Holder(c.bots, bound); h != nil {
				got = h.Name
			}
			if got != c.want {
				t.Fatalf("Holder = %q, want %q", got, c.want)
			}
		})
	}
}

// TestDeduplicationKeyOfABot: a bot's own key, else its meeting's in a pool that deduplicates
// by meeting URL; none otherwise.
func TestDeduplicationKeyOfABot(t *testing.T) {
	byURL := bt.MakePool("ns", "p").Deduplication(v1.DeduplicationMeetingURL).Obj()
	plain := bt.MakePool("ns", "p").Obj()
	own := bt.MakeBot("ns", "a").MeetingURL("https://zoom.us/j/85812345678").DeduplicationKey("evt").Obj()
	url := bt.MakeBot("ns", "b").MeetingURL("https://us02web.zoom.us/j/85812345678?pwd=x").Obj()
	odd := bt.MakeBot("ns", "c").MeetingURL("https://zoom.us/join").Obj()
	for _, c := range []struct {
		bot  *v1.Bot
		pool *v1.BotPool
		want string
	}{
		{own, plain, "key:evt"}, {own, byURL, "key:evt"}, {url, plain, ""}, {url, byURL, "meeting:zoom.us/j/85812345678"}, {odd, byURL, ""},
	} {
		if got := DeduplicationKey(c.bot, c.pool); got != c.want {
			t.Errorf("DeduplicationKey(%s, %s) = %q, want %q", c.bot.Name, c.pool.Spec.Deduplication, got, c.want)
		}
	}
}
