package callback

import (
	"encoding/json"
	"fmt"
	"time"

	botpoolv1alpha1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/store"
)

// ForBot builds the callback for a bot that ended in Done or Fatal; ok is false when the bot has
// no callbackURL or has not finished. Building it here keeps the key (UID/phase) the same on
// every reconcile, which is what makes the reconciler's repeated Enqueue a no-op.
func ForBot(bot *botpoolv1alpha1.Bot) (c Callback, ok bool) {
	if bot.Spec.CallbackURL == "" || !bot.Status.Phase.Terminal() {
		return Callback{}, false
	}
	p := Payload{
		Bot:       bot.Name,
		Namespace: bot.Namespace,
		UID:       string(bot.UID),
		Phase:     string(bot.Status.Phase),
		Reason:    string(bot.Status.Reason),
		Message:   bot.Status.Message,
	}
	if bot.Status.FinishedAt != nil {
		p.FinishedAt = bot.Status.FinishedAt.UTC()
	}
	return Callback{URL: bot.Spec.CallbackURL, Namespace: bot.Namespace, Key: p.UID + "/" + p.Phase, Body: p}, true
}

// PhaseEvent is the JSON body of a webhook message: one phase a bot reached.
type PhaseEvent struct {
	// Type is "bot.phase" for every message today; receivers should ignore other types.
	Type string `json:"type"`
	// Sequence numbers the bot's messages from 1, in the order they were made.
	Sequence  int64     `json:"sequence"`
	Bot       string    `json:"bot"`
	Namespace string    `json:"namespace"`
	UID       string    `json:"uid"`
	Phase     string    `json:"phase"`
	Reason    string    `json:"reason,omitempty"`
	Message   string    `json:"message,omitempty"`
	Timestamp time.Time `json:"timestamp"`
}

// PhaseMessage builds the outbox message of the phase in bot's status (as stored: the bot
// controller passes the bot as its pass read it), numbered seq, made at now.
// Its id (uid, seq and phase) is the webhook-id: the same on every pass that makes it again
// after a lost status write, so adding it twice is a no-op.
func PhaseMessage(bot *botpoolv1alpha1.Bot, w *botpoolv1alpha1.Webhook, seq int64, now time.Time) store.OutboxMessage {
	ev := PhaseEvent{
		Type: "bot.phase", Sequence: seq, Bot: bot.Name, Namespace: bot.Namespace, UID: string(bot.UID),
		Phase: string(bot.Status.Phase), Reason: string(bot.Status.Reason), Message: bot.Status.Message, Timestamp: now.UTC(),
	}
	body, _ := json.Marshal(ev) // strings and a time: cannot fail
	m := store.OutboxMessage{
		ID:     fmt.Sprintf("msg_%s_%d_%s", bot.UID, seq, bot.Status.Phase),
		BotUID: bot.UID, Seq: seq, Namespace: bot.Namespace, Name: bot.Name, Phase: ev.Phase,
		URL: w.URL, Payload: body, CreatedAt: now,
	}
	if w.SecretRef != nil {
		m.SecretName, m.SecretKey = w.SecretRef.Name, w.SecretRef.Key
	}
	return m
}
