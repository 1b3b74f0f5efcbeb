package pass

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// A reconcile body returns an error, and the skeleton of each controller decides what it
// means (settle): a *waiting ("nothing is wrong: look again then"), a *stalledError ("a
// person must act"; see stalled.go), or a failure the error backoff retries. A body never
// returns nil to stand for "retry on my schedule": that is a wait.

// Waiting says a pass ended early without anything being wrong, and when to look again.
type Waiting struct {
	after time.Duration
	// Reason is a CamelCase reason for conditions, or "" for a plain timer.
	Reason string
	// Msg is what status.message says meanwhile; "" leaves the message as it is.
	Msg string
}

func (w *Waiting) Error() string {
	if w.Msg == "" {
		return "waiting " + w.after.String()
	}
	return "waiting " + w.after.String() + ": " + w.Msg
}

// WaitFor ends the pass: the object is looked at again after d, at the latest.
func WaitFor(d time.Duration, reason, msg string) error {
	return &Waiting{after: d, Reason: reason, Msg: msg}
}

// asWait reports whether err asks for a wait: a WaitFor, or Coolify (or the client guarding
// it) asking to be called later, which is a wait too: the throttled call did not happen.
func asWait(err error) (*Waiting, bool) {
	var w *Waiting
	if errors.As(err, &w) {
		return w, true
	}
	if d, ok := CoolifyWait(err); ok {
		return &Waiting{after: d, Reason: v1.ReasonCoolifyThrottled, Msg: ThrottledMessage(err)}, true
	}
	return nil, false
}

// Outcome is how a pass ended, read from the error its body returned.
type Outcome struct {
	Wait    *Waiting      // look again later; nothing is wrong
	Stalled *stalledError // a person must act; looked at again slowly
	Err     error         // a failure: the error backoff retries
}

// Settle reads what a body returned. classify says whether an error NeedsPerson recognises
// stalls the object (slots) or fails the pass (pools and bots stall only when told to).
func Settle(err error, classify bool) Outcome {
	if err == nil {
		return Outcome{}
	}
	if w, ok := asWait(err); ok {
		return Outcome{Wait: w}
	}
	if st, ok := asStalled(err, classify); ok {
		return Outcome{Stalled: st}
	}
	return Outcome{Err: err}
}

// Handled reports whether the pass dealt with the generation it read: it ran to its end, to a
// wait, or to a problem only a person can fix. Only then is status.observedGeneration set.
func (o Outcome) Handled() bool { return o.Err == nil }

// Result is the reconcile's answer: on a failure, none but the error (the backoff decides when
// to retry); else the earliest of the pass's timers, the wait and, for a stall, stalledAfter.
func (o Outcome) Result(requeue, stalledAfter time.Duration) (ctrl.Result, error) {
	if o.Err != nil {
		return ctrl.Result{}, o.Err
	}
	if o.Wait != nil {
		requeue = Earliest(requeue, o.Wait.after)
	}
	if o.Stalled != nil {
		requeue = Earliest(requeue, stalledAfter)
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// Earliest is the sooner of two timers, 0 meaning none.
func Earliest(a, b time.Duration) time.Duration {
	switch {
	case b <= 0:
		return a
	case a <= 0 || b < a:
		return b
	}
	return a
}

// AddFinalizer is the one way the controllers add their finalizer: on a live object, stored
// at once, and the pass goes on with the version the update answered. The client records
// the version the update replaced (cachelag.NewClient).
func AddFinalizer(ctx context.Context, c client.Client, obj client.Object, name string) error {
	if !obj.GetDeletionTimestamp().IsZero() || !controllerutil.AddFinalizer(obj, name) {
		return nil
	}
	return c.Update(ctx, obj)
}

// RemoveFinalizer is the one way the controllers remove their finalizer, once what it held
// for is done. It stores the object without it and reports whether the finalizer is gone now
// (an object already gone counts: nothing holds it any more). The update is sent from a copy, so the pass keeps the status it
// computed for its one status write (an update answers with the stored status) and moves on
// to the version the update answered.
func RemoveFinalizer(ctx context.Context, c client.Client, obj client.Object, name string) (bool, error) {
	if !controllerutil.RemoveFinalizer(obj, name) {
		return false, nil
	}
	sent := obj.DeepCopyObject().(client.Object)
	if err := c.Update(ctx, sent); err != nil {
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}
	obj.SetResourceVersion(sent.GetResourceVersion())
	return true, nil
}

const (
	// DefaultGateRetry: a slot waiting for a deployment slot of its pool looks again this often.
	DefaultGateRetry = 2 * time.Second
)

const (
	// DefaultAppCheck: Idle and Busy slots confirm their application still exists this often
	// (from the pool's shared list: one request per pool, not per slot).
	DefaultAppCheck = time.Minute
)

const (
	// StalledRetry: a slot that cannot reach Coolify (no pool, bad credentials) retries.
	StalledRetry = time.Minute
)

const (
	// CacheWait: how long a pass that read a version older than our own write waits.
	CacheWait = 50 * time.Millisecond
)
