package bot

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/callback"
)

// Callback timing and bounds.
const (
	// callbackRecheck: a finished bot whose callback is queued looks for its outcome this
	// often, in case the notifier's wake-up (CallbackDone) was lost to a full channel.
	callbackRecheck = time.Minute
	// callbackQueueRetry and callbackQueueRetryCap space the tries of a callback the notifier
	// refused because its queue (or its receiver's) was full: 10 s, 20 s, … up to 5 min.
	callbackQueueRetry    = 10 * time.Second
	callbackQueueRetryCap = 5 * time.Minute
	// maxCallbackQueueTries bounds those tries (about 25 minutes); then the callback is
	// recorded Failed with an Event, not tried again.
	maxCallbackQueueTries = 10
	// maxCallbackError bounds status.callback.lastError (the CRD's MaxLength).
	maxCallbackError = 512
)

// queueRefusals counts, per bot, how often the notifier refused its callback for a full queue.
type queueRefusals struct {
	uid types.UID
	n   int
}

// notify hands a finished bot's callback to the notifier and records its outcome in
// status.callback. The bot controller is the only writer of that field: the notifier keeps
// outcomes in memory (Result) and wakes the bot (CallbackDone); this pass copies the outcome
// into the status it patches. A callback recorded for the bot's phase is never handed over
// again, which is what keeps a restart, a leader change or the end of the notifier's memory
// from sending it twice. It returns how soon the bot should be looked at again (0: no need)
// and the Event to emit once the status write succeeded (nil: none).
func (r *Reconciler) notify(bot *v1.Bot, now time.Time) (time.Duration, func()) {
	cb, ok := callback.ForBot(bot)
	if !ok || r.Callbacks == nil {
		return 0, nil
	}
	if rec := bot.Status.Callback; rec != nil && rec.Phase == bot.Status.Phase {
		return 0, nil
	}
	name := types.NamespacedName{Namespace: bot.Namespace, Name: bot.Name}
	if res, ok := r.Callbacks.Result(cb.Key); ok {
		r.callbackRefusals.Delete(name)
		return 0, r.recordCallback(bot, res.Attempts, res.Err, res.At)
	}
	if r.Callbacks.Enqueue(cb) {
		r.callbackRefusals.Delete(name)
		return callbackRecheck, nil
	}
	// Refused: the notifier's queue, this namespace's share of it or this receiver's queue is
	// full. Try again later rather than lose the callback; give up, visibly, after a bounded
	// number of tries.
	tries := 1
	if v, ok := r.callbackRefusals.Load(name); ok && v.(queueRefusals).uid == bot.UID {
		tries = v.(queueRefusals).n + 1
	}
	if tries >= maxCallbackQueueTries {
		r.callbackRefusals.Delete(name)
		return 0, r.recordCallback(bot, 0, fmt.Errorf("the callback queue stayed full for %d tries; not sending", tries), now)
	}
	r.callbackRefusals.Store(name, queueRefusals{uid: bot.UID, n: tries})
	return min(callbackQueueRetry<<(tries-1), callbackQueueRetryCap), nil
}

// recordCallback writes an outcome into status.callback and returns its Event.
func (r *Reconciler) recordCallback(bot *v1.Bot, attempts int, err error, at time.Time) func() {
	rec := &v1.CallbackStatus{Phase: bot.Status.Phase, State: v1.CallbackDelivered, Attempts: int32(min(attempts, 1<<30)), Time: metav1.NewTime(at)}
	if err != nil {
		rec.State = v1.CallbackFailed
		rec.LastError = v1.Truncate(err.Error(), maxCallbackError)
	}
	bot.Status.Callback = rec
	if err != nil {
		return func() {
			r.Recorder.Eventf(bot, nil, corev1.EventTypeWarning, v1.ReasonCallbackFailed, "Callback",
				"Callback for phase %s failed after %d attempts: %s", rec.Phase, rec.Attempts, rec.LastError)
		}
	}
	return func() {
		r.Recorder.Eventf(bot, nil, corev1.EventTypeNormal, v1.ReasonCallbackDelivered, "Callback",
			"Callback for phase %s delivered after %d attempts", rec.Phase, rec.Attempts)
	}
}
