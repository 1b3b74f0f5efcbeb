package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ErrInvalid means a record lacks what identifies it (a uid, a name) or carries malformed data:
// a bug in the caller, returned at once and never buffered.
var ErrInvalid = errors.New("invalid store record")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Validate checks what both implementations need before accepting a heartbeat, so they reject
// the same records.
func (h Heartbeat) Validate() error {
	if h.BotUID == "" {
		return invalid("heartbeat without a bot uid")
	}
	return nil
}

// Validate checks a bot projection.
func (b BotRecord) Validate() error {
	if b.UID == "" {
		return invalid("bot record without a uid")
	}
	return nil
}

// Validate checks a slot projection.
func (s SlotRecord) Validate() error {
	if s.Namespace == "" || s.Name == "" {
		return invalid("slot record without a namespace and name")
	}
	return nil
}

// Validate checks a transition.
func (t Transition) Validate() error {
	if t.Namespace == "" || t.Slot == "" {
		return invalid("transition without a namespace and slot")
	}
	return nil
}

// Validate checks a bot event; its data, when present, must be JSON (Postgres keeps it as jsonb).
func (e BotEvent) Validate() error {
	if e.BotUID == "" {
		return invalid("bot event without a bot uid")
	}
	if e.Type == "" {
		return invalid("bot event without a type")
	}
	if len(e.Data) > 0 && !json.Valid(e.Data) {
		return invalid("bot event %q: data is not JSON", e.Type)
	}
	return nil
}

// Timestamp is how both implementations store a time: a zero time becomes now, and precision
// stops at the microsecond, as in a Postgres timestamptz.
func Timestamp(t, now time.Time) time.Time {
	if t.IsZero() {
		t = now
	}
	return t.Truncate(time.Microsecond)
}
