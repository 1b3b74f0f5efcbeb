package v1alpha1

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestFail: the one way a bot is ended by a decision ends it whole (phase, reason, message,
// finishedAt, the queue fields cleared, the final conditions) and never overwrites an end.
func TestFail(t *testing.T) {
	now := time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)
	b := &Bot{Status: BotStatus{Phase: BotQueued, QueuePosition: 3, EstimatedWait: &metav1.Duration{Duration: time.Minute},
		Conditions: []metav1.Condition{{Type: ConditionAlive, Status: metav1.ConditionTrue, Reason: ReasonHeartbeatReceived}}}}
	if !b.Fail(ReasonQueueTimeout, "No slot", now) {
		t.Fatal("Fail did not end a queued bot")
	}
	st := b.Status
	if st.Phase != BotFatal || st.Reason != ReasonQueueTimeout || st.Message != "No slot" || st.FinishedAt == nil || !st.FinishedAt.Time.Equal(now) ||
		st.QueuePosition != 0 || st.EstimatedWait != nil {
		t.Fatalf("status after Fail: %+v", st)
	}
	if ready := meta.FindStatusCondition(st.Conditions, ConditionReady); ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != ReasonFinished {
		t.Errorf("Ready after Fail: %+v", ready)
	}
	if meta.FindStatusCondition(st.Conditions, ConditionAlive) != nil {
		t.Error("an ended bot keeps its Alive condition")
	}

	done := &Bot{Status: BotStatus{Phase: BotDone, Message: "left"}}
	if done.Fail(ReasonHeartbeatTimeout, "silent", now) || done.Status.Phase != BotDone || done.Status.Message != "left" || done.Status.Reason != "" {
		t.Fatalf("Fail overwrote a bot that ended Done: %+v", done.Status)
	}
}
