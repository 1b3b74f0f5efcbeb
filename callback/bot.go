package callback

import (
	botpoolv1alpha1 "botpool.dev/botpool/api/v1alpha1"
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
	return Callback{URL: bot.Spec.CallbackURL, Key: p.UID + "/" + p.Phase, Body: p}, true
}
