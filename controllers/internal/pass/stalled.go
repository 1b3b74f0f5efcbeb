package pass

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/internal/egress"
)

// stalledError says a pass cannot go on until a person changes something (the token's
// abilities, Coolify's settings, a Secret): retrying with the error backoff would only fill
// the log, so the skeleton sets Stalled=True with the reason and looks again slowly.
type stalledError struct {
	Reason string
	// Msg is the Stalled condition's message: what to fix, in words that stay the same from
	// one pass to the next.
	Msg string
	err error
	// Announce: the skeleton says it in a Warning Event as well (the recorder folds repeats).
	// A stall whose maker says what it must, or that another object reports, has none.
	Announce bool
}

func (e *stalledError) Error() string {
	if e.err == nil {
		return e.Reason + ": " + e.Msg
	}
	return e.Reason + ": " + e.err.Error()
}

func (e *stalledError) Unwrap() error { return e.err }

// Stall ends the pass as stalled with reason and msg; err is the cause, for the log.
func Stall(reason, msg string, err error) error {
	return &stalledError{Reason: reason, Msg: msg, err: err}
}

// asStalled reports whether err stalls the object: a stall, or, with classify, an error
// NeedsPerson recognises (its message is the error's, which names what to fix).
func asStalled(err error, classify bool) (*stalledError, bool) {
	var st *stalledError
	if errors.As(err, &st) {
		return st, true
	}
	if !classify {
		return nil, false
	}
	if reason, ok := NeedsPerson(err); ok {
		return &stalledError{Reason: reason, Msg: err.Error(), err: err, Announce: true}, true
	}
	return nil, false
}

// NeedsPerson is the one mapping from an error to the reason a person must act on, for
// pools and slots alike: an error that will fail the same way until someone changes
// something, and the reason to show. Anything else may pass by itself.
func NeedsPerson(err error) (reason string, ok bool) {
	switch {
	case errors.Is(err, coolifyview.ErrCredentialsNotFound):
		return v1.ReasonCredentialsNotFound, true
	case errors.Is(err, coolifyview.ErrCredentialsInvalid):
		return v1.ReasonCredentialsInvalid, true
	case errors.Is(err, coolifyview.ErrCredentialsNotAllowed):
		return v1.ReasonCredentialsNotAllowed, true
	case errors.Is(err, coolify.ErrUnauthorized):
		return v1.ReasonCredentialsRejected, true
	case errors.Is(err, coolify.ErrAPIDisabled):
		return v1.ReasonAPIDisabled, true
	case errors.Is(err, coolify.ErrForbidden):
		return v1.ReasonPermissionDenied, true
	case errors.Is(err, coolify.ErrValidation), errors.Is(err, coolify.ErrBadRequest):
		return v1.ReasonRequestRefused, true
	case errors.Is(err, ErrTokenSecretTaken):
		return v1.ReasonTokenSecretTaken, true
	case errors.Is(err, ErrSlotEnvNotFound):
		return v1.ReasonSlotEnvNotFound, true
	case errors.Is(err, policy.ErrSecretNotAllowed): // the only Secret besides the credentials a slot reads
		return v1.ReasonSlotEnvNotAllowed, true
	case errors.Is(err, egress.ErrRefused):
		return v1.ReasonDestinationRefused, true
	}
	return "", false
}

// UnreachableReason says why a slot has no Coolify client: a reason a person must act on, a
// missing pool, or else Coolify not answering.
func UnreachableReason(err error) string {
	if reason, ok := NeedsPerson(err); ok {
		return reason
	}
	if apierrors.IsNotFound(err) {
		return string(v1.ReasonPoolNotFound)
	}
	return v1.ReasonCoolifyUnreachable
}

// ErrSlotEnvNotFound: the pool names a slotEnvFrom Secret that does not exist.
var ErrSlotEnvNotFound = errors.New("not found")

// ErrTokenSecretTaken: a Secret the operator did not make holds the slot's token Secret name.
var ErrTokenSecretTaken = errors.New("the slot's token Secret name is taken")
