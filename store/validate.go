package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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

// Validate checks a slot's ask: it names its slot and carries a hex SHA-256.
func (a SlotAsk) Validate() error {
	if a.SlotUID == "" || a.Namespace == "" || a.Name == "" {
		return invalid("slot ask without a slot uid, namespace and name")
	}
	if !isSHA256(a.TokenSHA256) {
		return invalid("slot ask of %s/%s: the token hash must be 64 lowercase hex digits", a.Namespace, a.Name)
	}
	return nil
}

// Validate checks a slot's hang-up, its times set: it names its slot, carries a hex SHA-256,
// and its wait began before it ended.
func (l SlotLeft) Validate() error {
	if l.SlotUID == "" {
		return invalid("slot left without a slot uid")
	}
	if !isSHA256(l.TokenSHA256) {
		return invalid("slot left of %s: the token hash must be 64 lowercase hex digits", l.SlotUID)
	}
	if l.Since.After(l.At) {
		return invalid("slot left of %s: its wait began (%s) after it ended (%s)", l.SlotUID, l.Since, l.At)
	}
	return nil
}

func isSHA256(hash string) bool {
	return len(hash) == 64 && strings.Trim(hash, "0123456789abcdef") == ""
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
	if err := CheckJSONB(e.Data); err != nil {
		return invalid("bot event %q: %v", e.Type, err)
	}
	return nil
}

// CheckJSONB refuses valid JSON that Postgres's jsonb does not take: a NUL character
// (\u0000) or a lone UTF-16 surrogate (\ud800) escaped in a string or a key. Both are valid
// JSON, so without this check the database refused them after the bot API had accepted them:
// the bot was answered 503 and sent them again forever, and a replay after an outage lost the
// rows around them. Both stores refuse them, so they agree. data must be valid JSON.
func CheckJSONB(data []byte) error {
	inString := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			i++
			if i >= len(data) || data[i] != 'u' {
				continue // a one-letter escape: \n, \", \\ …
			}
			r, ok := hex4(data, i+1)
			i += 4
			switch {
			case !ok:
				return errors.New("malformed \\u escape")
			case r == 0:
				return errors.New("data contains a NUL character (\\u0000), which the store cannot keep")
			case r >= 0xdc00 && r <= 0xdfff:
				return errors.New("data contains a lone UTF-16 low surrogate escape, which the store cannot keep")
			case r >= 0xd800 && r <= 0xdbff:
				// A high surrogate must be followed by a low one: \ud83d\ude00.
				if i+6 >= len(data) || data[i+1] != '\\' || data[i+2] != 'u' {
					return errors.New("data contains a lone UTF-16 high surrogate escape, which the store cannot keep")
				}
				lo, ok := hex4(data, i+3)
				if !ok || lo < 0xdc00 || lo > 0xdfff {
					return errors.New("data contains a lone UTF-16 high surrogate escape, which the store cannot keep")
				}
				i += 6
			}
		}
	}
	return nil
}

// hex4 reads the four hex digits of a \u escape at data[at:].
func hex4(data []byte, at int) (rune, bool) {
	if at+4 > len(data) {
		return 0, false
	}
	var r rune
	for _, c := range data[at : at+4] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}

// Timestamp is how both implementations store a time: a zero time becomes now, and precision
// stops at the microsecond, as in a Postgres timestamptz.
func Timestamp(t, now time.Time) time.Time {
	if t.IsZero() {
		t = now
	}
	return t.Truncate(time.Microsecond)
}
