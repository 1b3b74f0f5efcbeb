package v1alpha1

import (
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons of Bot conditions that both the operator and the bot API set.
const (
	// ReasonFinished: Ready and Bound of a bot that ended, Done or Fatal.
	ReasonFinished = "Finished"
	// ReasonHeartbeatReceived: Alive while the bot's heartbeats (or its reports) arrive.
	ReasonHeartbeatReceived = "HeartbeatReceived"
)

// SetFinishedConditions sets the conditions of a bot that ended: Ready (True after Done, False
// after Fatal) and Bound False, both Finished, and no Alive. Whoever writes the end of a bot
// writes them in the same patch, so ending a bot costs one status write.
func (b *Bot) SetFinishedConditions() {
	st := &b.Status
	ready := metav1.ConditionTrue
	if st.Phase == BotFatal {
		ready = metav1.ConditionFalse
	}
	b.setCondition(ConditionReady, ready, ReasonFinished, strings.TrimSpace("The bot ended "+string(st.Phase)+" "+string(st.Reason)))
	b.setCondition(ConditionBound, metav1.ConditionFalse, ReasonFinished, "Finished")
	meta.RemoveStatusCondition(&st.Conditions, ConditionAlive)
}

// MarkAlive records a sign of life seen at `at`: Alive True, and lastHeartbeat when Alive
// turns True (it is coarse: the store keeps every beat, the API server only the flips).
func (b *Bot) MarkAlive(at time.Time) {
	if c := meta.FindStatusCondition(b.Status.Conditions, ConditionAlive); c == nil || c.Status != metav1.ConditionTrue {
		b.Status.LastHeartbeat = &metav1.Time{Time: at}
	}
	b.setCondition(ConditionAlive, metav1.ConditionTrue, ReasonHeartbeatReceived, "Heartbeats arrive")
}

func (b *Bot) setCondition(typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&b.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason,
		Message: msg, ObservedGeneration: b.Generation})
}
