package bot

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/internal/botparams"
)

// parametersRecheck: a bot whose parameters cannot be handed out looks again this soon, and
// less often the longer it waits, up to parametersRecheckMax: the manager watches no Secrets
// (it caches none), so a fix to one is seen here, not as an event, and a namespace of many
// bots waiting on a missing Secret must not spend the API server's budget, which every
// namespace shares, on reading it.
const (
	parametersRecheck    = 15 * time.Second
	parametersRecheckMax = 2 * time.Minute
)

// recheckAfter is when a bot whose parameters cannot be handed out looks again: a quarter of
// the time it has waited, from parametersRecheck to parametersRecheckMax. A change of the
// bot's spec brings it back at once.
func recheckAfter(bot *v1.Bot, now time.Time) time.Duration {
	waited := time.Duration(0)
	if c := meta.FindStatusCondition(bot.Status.Conditions, v1.ConditionParametersReady); c != nil && c.Status == metav1.ConditionFalse {
		waited = now.Sub(c.LastTransitionTime.Time)
	}
	return min(max(parametersRecheck, waited/4), parametersRecheckMax)
}

// checkParameters decides the bot's ParametersReady condition before it may be bound: False,
// with a Warning Event when its reason changes, while a Secret of spec.secretParameters cannot
// be read or the parameters are too large (the dispatcher binds no such bot); True once they
// can be handed out; absent on a bot that has none (nor its pool any defaults). The values
// read are let go: the bot API reads them again when it hands the binding out.
func (r *Reconciler) checkParameters(ctx context.Context, s *botScope, pool *v1.BotPool) error {
	bot := s.bot
	if bot.Spec.Parameters == nil && len(bot.Spec.SecretParameters) == 0 && pool.Spec.ParameterDefaults == nil {
		meta.RemoveStatusCondition(&bot.Status.Conditions, v1.ConditionParametersReady)
		return nil
	}
	if c := meta.FindStatusCondition(bot.Status.Conditions, v1.ConditionParametersReady); c != nil &&
		c.Status == metav1.ConditionTrue && c.ObservedGeneration == bot.Generation {
		// Checked for this spec already: each pass of a queued bot (every position write wakes
		// one) must not read its Secrets again. The bot API reads them when it hands the
		// binding out, and a Secret gone by then is a 503 that claims nothing.
		return nil
	}
	err := botparams.Check(ctx, r.Secrets, bot, pool)
	p := botparams.AsProblem(err)
	if err != nil && p == nil {
		return err // the API server's: the pass is retried
	}
	cond := metav1.Condition{Type: v1.ConditionParametersReady, Status: metav1.ConditionTrue,
		Reason: v1.ReasonParametersResolved, Message: "The bot's parameters can be handed to its container", ObservedGeneration: bot.Generation}
	if p != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, p.Reason, p.Message
		if was := meta.FindStatusCondition(bot.Status.Conditions, v1.ConditionParametersReady); was == nil || was.Reason != p.Reason {
			s.events = append(s.events, func() {
				r.Recorder.Eventf(bot, nil, corev1.EventTypeWarning, p.Reason, "Queue", "%s", p.Message)
			})
		}
		s.after(recheckAfter(bot, r.Clock.Now()))
	}
	v1.SetCondition(&bot.Status.Conditions, cond, r.Clock.Now())
	return nil
}
