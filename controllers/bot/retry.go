package bot

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/store"
)

// Audit rows (store.BotEvent types) of failed starts.
const (
	// AuditStartRetried: a start failed under the bot and it went back to the queue.
	AuditStartRetried = "startRetried"
	// AuditStartFailed: the bot's last start failed; it ended Fatal.
	AuditStartFailed = "startFailed"
)

// RetryableReasons are the slot reasons that say the infrastructure failed a start, not the
// bot: the deployment failed, hung or was lost, the application was deleted, the standby
// container went away. A bot's own Fatal, a queue timeout, a heartbeat timeout, a stop that
// failed after the bot, or a slot deleted under it are none of them.
var RetryableReasons = map[v1.BotReason]bool{
	v1.ReasonDeploymentFailed:  true,
	v1.ReasonDeploymentTimeout: true,
	v1.ReasonDeploymentLost:    true,
	v1.ReasonDeployingTimeout:  true,
	v1.ReasonApplicationLost:   true,
	v1.ReasonStandbyLost:       true,
}

// startVerdict is what a slot's failure means for the bot bound to it.
type startVerdict int

const (
	// startRan: the bot ran, or may have (its binding was handed out to a container, which
	// then had the meeting URL), or the failure is not the infrastructure's: it ends Fatal as
	// it always did, and is never started again (it could join the meeting twice).
	startRan startVerdict = iota
	// startRetry: a failed start, and not its last: the bot goes back to the queue.
	startRetry
	// startLast: a failed start, its last: the bot ends Fatal, saying which attempt it was.
	startLast
)

// judgeStart applies the retry rule to the bot of a slot in Error. It reads only the objects:
// the slot's reason, the bot's status (never started: no startedAt, never Alive; its binding
// never claimed) and the number of its failed starts against its limit.
func judgeStart(bot *v1.Bot, slot *v1.BotPoolSlot, pool *v1.BotPool) startVerdict {
	if !RetryableReasons[v1.BotReason(slot.Status.Reason)] || policy.BotStarted(bot) || bot.Status.Binding != nil {
		return startRan
	}
	// A pool deleted or gone serves no queue to go back to.
	if len(bot.Status.StartAttempts)+1 < MaxStartAttempts(bot, pool) && pool.Name != "" && pool.DeletionTimestamp.IsZero() {
		return startRetry
	}
	return startLast
}

// MaxStartAttempts is how many starts the bot gets in all: its own MaxStartAttempts, else its
// pool's, else the default; at most v1.MaxStartAttempts (status.startAttempts holds no more).
func MaxStartAttempts(bot *v1.Bot, pool *v1.BotPool) int {
	n := bot.Spec.MaxStartAttempts
	if n <= 0 && pool != nil {
		n = pool.Spec.MaxStartAttempts
	}
	if n <= 0 {
		n = v1.DefaultMaxStartAttempts
	}
	return int(min(n, v1.MaxStartAttempts))
}

// failedStart handles a bot whose slot failed under it: it records a failed start and, when
// the bot gets another, puts it back in its queue and reports true. The bot keeps its
// queuedAt, so it goes first among the bots of its priority; its queue timeout counts afresh
// from the attempt (QueueDeadline). The slot still names it until it sees the bot Queued
// with this attempt (Bot.LeftSlot) and lets go; meanwhile the dispatcher does not offer it
// (a bot some slot holds is not in the queue it serves).
func (r *Reconciler) failedStart(s *botScope, slot *v1.BotPoolSlot, pool *v1.BotPool, now time.Time) bool {
	bot, st := s.bot, &s.bot.Status
	verdict := judgeStart(bot, slot, pool)
	if verdict == startRan {
		return false
	}
	attempt := v1.StartAttempt{SlotName: slot.Name, Server: policy.AttemptServer(bot, slot, pool), Reason: v1.BotReason(slot.Status.Reason),
		Message: v1.Truncate(policy.SlotMessage(bot, slot), v1.MaxMessageLength), At: metav1.NewTime(now)}
	st.StartAttempts = append(st.StartAttempts, attempt)
	if n := len(st.StartAttempts); n > v1.MaxStartAttempts { // a status edited by hand
		st.StartAttempts = st.StartAttempts[n-v1.MaxStartAttempts:]
	}
	s.attempt = &attempt
	if verdict == startLast {
		return false
	}
	s.retried = true
	st.Phase, st.SlotName, st.ApplicationUUID = v1.BotQueued, "", ""
	st.QueuePosition, st.EstimatedWait = 0, nil
	return true
}

// startMessage is the Fatal message of a bot whose last start failed: the slot's, saying which
// attempt it was when the bot had more than one (with one, the message is the slot's, as for
// any failure of a pool that never retries).
func startMessage(bot *v1.Bot, pool *v1.BotPool, slotMsg string) string {
	n, limit := len(bot.Status.StartAttempts), MaxStartAttempts(bot, pool)
	switch {
	case limit <= 1:
		return slotMsg
	case n < limit: // its pool is deleted or gone
		return fmt.Sprintf("%s (start attempt %d of %d; its pool is going away)", slotMsg, n, limit)
	}
	return fmt.Sprintf("%s (start attempt %d of %d)", slotMsg, n, n)
}

// recordAttempt reports a failed start once the status write that recorded it is stored: a
// Warning Event and an audit row for a retry (the last failure's Event is the bot's Fatal one),
// an audit row for the last. A store that cannot take the row logs it; the status keeps it.
func (r *Reconciler) recordAttempt(ctx context.Context, s *botScope) {
	a, bot := s.attempt, s.bot
	n := len(bot.Status.StartAttempts)
	typ := AuditStartFailed
	if s.retried {
		typ = AuditStartRetried
		r.Recorder.Eventf(bot, nil, corev1.EventTypeWarning, v1.ReasonStartRetried, "Retry",
			"Start attempt %d failed in slot %s (%s: %s); the bot went back to the head of the queue", n, a.SlotName, a.Reason, a.Message)
	}
	if r.Store == nil {
		return
	}
	data, _ := json.Marshal(map[string]any{"attempt": n, "slot": a.SlotName, "server": a.Server,
		"reason": string(a.Reason), "message": a.Message, "retried": s.retried})
	err := r.Store.AppendBotEvents(ctx, []store.BotEvent{{BotUID: bot.UID, Namespace: bot.Namespace, Name: bot.Name,
		Type: typ, Data: data, At: a.At.Time}})
	if !store.Accepted(err) {
		ctrl.LoggerFrom(ctx).Error(err, "Recording a failed start failed", "attempt", n)
	}
}

// ClaimSettle is how long a claim may be older than the cache's view of the slot that holds
// it: a bot bound again to the slot its start failed in, and claimed there at once (a standby
// container), may show its claim here before the binding.
const ClaimSettle = 10 * time.Second

// claimedWhileQueued ends a bot that is back in the queue but whose binding a container of
// the slot it left took after all (a config answer that raced the bot's requeue): that
// container has the meeting URL, so the bot is never started again. It reports whether it
// ended the bot. A claim of another slot is a fresh binding the cache shows before the slot
// that holds it, and so is, for ClaimSettle, a claim of the same slot: it waits for it (the
// dispatcher does not offer a claimed bot meanwhile).
func (r *Reconciler) claimedWhileQueued(s *botScope, now time.Time) bool {
	bot, st := s.bot, &s.bot.Status
	n := len(st.StartAttempts)
	if n == 0 || st.Binding.SlotName != st.StartAttempts[n-1].SlotName {
		return false
	}
	if wait := st.Binding.ClaimedAt.Add(ClaimSettle).Sub(now); wait > 0 {
		s.after(wait)
		return false
	}
	last := st.StartAttempts[n-1]
	r.fail(bot, last.Reason, fmt.Sprintf("%s (start attempt %d); a container of slot %s took the bot's binding after it went back to the queue, so it is not started again",
		last.Message, n, last.SlotName))
	return true
}
