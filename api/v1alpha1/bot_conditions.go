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
// after Fatal) and Bound False, both Finished, and no Alive. A Fatal bot is Stalled too, with
// its reason: it will not get better by itself, and kstatus (GitOps health checks) reports it
// Failed instead of in progress forever. They changed when the bot ended (finishedAt). Whoever
// writes the end of a bot writes them in the same patch, so ending a bot costs one status write.
func (b *Bot) SetFinishedConditions() {
	st := &b.Status
	var at time.Time
	if st.FinishedAt != nil {
		at = st.FinishedAt.Time
	}
	ready := metav1.ConditionTrue
	if st.Phase == BotFatal {
		ready = metav1.ConditionFalse
		reason := string(st.Reason)
		if reason == "" {
			reason = string(BotFatal)
		}
		b.setCondition(ConditionStalled, metav1.ConditionTrue, reason, st.Message, at)
	} else {
		meta.RemoveStatusCondition(&st.Conditions, ConditionStalled)
	}
	b.setCondition(ConditionReady, ready, ReasonFinished, strings.TrimSpace("The bot ended "+string(st.Phase)+" "+string(st.Reason)), at)
	b.setCondition(ConditionBound, metav1.ConditionFalse, ReasonFinished, "Finished", at)
	meta.RemoveStatusCondition(&st.Conditions, ConditionAlive)
}

// Fail ends the bot in Fatal with reason and msg at now, unless it has already ended (a Done
// reported first stands): it reports whether it did. It is the one way a bot is ended by
// anything but its own report, so every failure leaves the same status: the queue position and
// wait cleared, finishedAt set, and the finished conditions, all in the caller's one write.
func (b *Bot) Fail(reason BotReason, msg string, now time.Time) bool {
	st := &b.Status
	if st.Phase.Terminal() {
		return false
	}
	t := metav1.NewTime(now)
	st.Phase, st.Reason, st.Message, st.FinishedAt = BotFatal, reason, msg, &t
	st.QueuePosition, st.EstimatedWait = 0, nil
	b.SetFinishedConditions()
	return true
}

// MarkAlive records a sign of life seen at `at`: Alive True, and lastHeartbeat when Alive
// turns True (it is coarse: the store keeps every beat, the API server only the flips).
func (b *Bot) MarkAlive(at time.Time) {
	if c := meta.FindStatusCondition(b.Status.Conditions, ConditionAlive); c == nil || c.Status != metav1.ConditionTrue {
		b.Status.LastHeartbeat = &metav1.Time{Time: at}
	}
	b.setCondition(ConditionAlive, metav1.ConditionTrue, ReasonHeartbeatReceived, "Heartbeats arrive", at)
}

func (b *Bot) setCondition(typ string, status metav1.ConditionStatus, reason, msg string, at time.Time) {
	SetCondition(&b.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason,
		Message: msg, ObservedGeneration: b.Generation}, at)
}

// ParametersHeld reports whether the bot waits for its parameters (ParametersReady False): the
// dispatcher binds no such bot, as its container could not be given what it needs.
func (b *Bot) ParametersHeld() bool {
	c := meta.FindStatusCondition(b.Status.Conditions, ConditionParametersReady)
	return c != nil && c.Status == metav1.ConditionFalse
}
