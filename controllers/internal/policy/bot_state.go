package policy

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// FailedSince reports whether the bot's last failed start is at or after at: a binding made at
// that moment has ended, and the bot is back in the queue (or Fatal). The attempt's time is
// stored to the second, so one that failed within the second of its binding reads earlier
// and says nothing; the reverse, a binding taken for ended, never happens.
func FailedSince(bot *v1.Bot, at time.Time) bool {
	a := bot.Status.StartAttempts
	return len(a) > 0 && !a[len(a)-1].At.Before(&metav1.Time{Time: at})
}

// BotStarted reports whether a bot's container reported or beat: the bot API records the
// first report as startedAt, the bot controller a beat as Alive.
func BotStarted(bot *v1.Bot) bool {
	c := meta.FindStatusCondition(bot.Status.Conditions, v1.ConditionAlive)
	return bot.Status.StartedAt != nil || c != nil && c.Status == metav1.ConditionTrue
}

// BoundSince is when the bot controller recorded the bot's binding (its Bound condition, on
// the operator's clock); nil until it has.
func BoundSince(bot *v1.Bot) *metav1.Time {
	c := meta.FindStatusCondition(bot.Status.Conditions, v1.ConditionBound)
	if c == nil || c.Status != metav1.ConditionTrue {
		return nil
	}
	return &c.LastTransitionTime
}
