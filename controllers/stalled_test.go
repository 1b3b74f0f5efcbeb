package controllers

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// TestAFatalBotIsFailedForKstatus: a bot the Bot controller ends Fatal (here QueueTimeout)
// carries Stalled=True with its reason, and observedGeneration, so kstatus — what Flux and
// other GitOps health checks run — judges it Failed. Without Stalled it judged the bot
// InProgress forever (Ready False alone means "not yet").
func TestAFatalBotIsFailedForKstatus(t *testing.T) {
	queued := metav1.NewTime(time.Date(2026, 1, 15, 8, 0, 0, 0, time.UTC))
	bot := &v1.Bot{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bot", UID: "bot-uid", Generation: 3, Finalizers: []string{v1.FinalizerBot}},
		Spec:   v1.BotSpec{MeetingURL: "https://zoom.us/j/1", PoolRef: &v1.PoolReference{Name: "pool"}},
		Status: v1.BotStatus{Phase: v1.BotQueued, Pool: "pool", QueuedAt: &queued}}
	idle := boundSlot(v1.SlotIdle)
	idle.Spec.BotRef = nil
	w := newOwnershipWorld(t, idle, bot)
	w.reconcileBot()

	got := w.getBot()
	if got.Status.Phase != v1.BotFatal || got.Status.Reason != v1.ReasonQueueTimeout {
		t.Fatalf("bot after its queue time: %s/%s, want Fatal/bot.QueueTimeout", got.Status.Phase, got.Status.Reason)
	}
	c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionStalled)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != string(v1.ReasonQueueTimeout) || c.Message != got.Status.Message {
		t.Fatalf("Stalled = %+v, want True/bot.QueueTimeout with the bot's message %q", c, got.Status.Message)
	}
	if !c.LastTransitionTime.Time.Equal(got.Status.FinishedAt.Time) {
		t.Errorf("Stalled changed at %s, want the bot's end %s (the injected clock)", c.LastTransitionTime, got.Status.FinishedAt)
	}
	if got.Status.ObservedGeneration != got.Generation {
		t.Fatalf("observedGeneration %d, want %d", got.Status.ObservedGeneration, got.Generation)
	}
	if res := kstatusOf(t, got); res.Status != status.FailedStatus {
		t.Errorf("kstatus of a Fatal bot = %s (%s), want %s", res.Status, res.Message, status.FailedStatus)
	}

	// The same bot without Stalled is what kstatus saw before: in progress, forever.
	meta.RemoveStatusCondition(&got.Status.Conditions, v1.ConditionStalled)
	if res := kstatusOf(t, got); res.Status != status.InProgressStatus {
		t.Errorf("kstatus without Stalled = %s, want %s (the failure was invisible)", res.Status, status.InProgressStatus)
	}

	// A bot that ended Done is Current, and carries no Stalled.
	done := got.DeepCopy()
	done.Status.Phase, done.Status.Reason = v1.BotDone, ""
	done.SetFinishedConditions()
	if meta.FindStatusCondition(done.Status.Conditions, v1.ConditionStalled) != nil {
		t.Errorf("a Done bot says Stalled: %+v", done.Status.Conditions)
	}
	if res := kstatusOf(t, done); res.Status != status.CurrentStatus {
		t.Errorf("kstatus of a Done bot = %s (%s), want %s", res.Status, res.Message, status.CurrentStatus)
	}
}

func kstatusOf(t *testing.T, bot *v1.Bot) *status.Result {
	t.Helper()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(bot)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(v1.GroupVersion.String())
	u.SetKind("Bot")
	res, err := status.Compute(u)
	if err != nil {
		t.Fatal(err)
	}
	return res
}
