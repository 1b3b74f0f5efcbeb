package botapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode/utf8"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/botapi/botclient"
	"botpool.dev/botpool/store"
)

// Size caps of request bodies: a bot has no reason to send more, and a cap keeps a broken or
// hostile container from exhausting the manager's memory.
const (
	maxHeartbeatBody = 1 << 10
	maxStatusBody    = 256 << 10
	maxEventsBody    = 512 << 10

	maxEventsPerRequest = 100
	maxEventData        = 16 << 10
	maxTimeframes       = 10000
)

var (
	reasonPattern    = regexp.MustCompile(`^[A-Z][A-Za-z0-9]{0,127}$`)
	eventTypePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$`)
)

// decodeStrict decodes exactly one JSON value with no unknown fields and nothing after it.
// An empty body decodes as the zero value when allowEmpty is set.
func decodeStrict(r io.Reader, v any, allowEmpty bool) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) && allowEmpty {
			return nil
		}
		if errors.Is(err, io.EOF) {
			return errors.New("empty body: a JSON object is required")
		}
		return fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("invalid JSON: unexpected data after the object")
	}
	return nil
}

// decodeStatusReport reads and validates the body of a status report.
func decodeStatusReport(r io.Reader) (botclient.StatusReport, error) {
	var rep botclient.StatusReport
	if err := decodeStrict(r, &rep, false); err != nil {
		return rep, err
	}
	if _, ok := reportable[v1.BotPhase(rep.Phase)]; !ok {
		return rep, fmt.Errorf("phase %q is not one a bot reports: JoiningCall, InWaitingRoom, InCall, Leaving, CallEnded, Done or Fatal", rep.Phase)
	}
	if rep.Reason != "" && !reasonPattern.MatchString(rep.Reason) {
		return rep, errors.New("reason must be a CamelCase word of at most 128 letters and digits")
	}
	if operatorReasons[v1.BotReason(rep.Reason)] {
		return rep, fmt.Errorf("reason %q is the operator's to give, not a bot's: report what the bot saw (e.g. Kicked, WaitingRoomTimeout)", rep.Reason)
	}
	if err := checkText("message", rep.Message, 1024); err != nil {
		return rep, err
	}
	if err := checkText("recordingLocation", rep.RecordingLocation, 2048); err != nil {
		return rep, err
	}
	if len(rep.SpeakerTimeframes) > maxTimeframes {
		return rep, fmt.Errorf("at most %d speakerTimeframes per report", maxTimeframes)
	}
	for i, tf := range rep.SpeakerTimeframes {
		if err := checkText("speaker", tf.Speaker, 256); err != nil {
			return rep, fmt.Errorf("speakerTimeframes[%d]: %w", i, err)
		}
		if tf.End.Before(tf.Start) {
			return rep, fmt.Errorf("speakerTimeframes[%d]: end is before start", i)
		}
	}
	return rep, nil
}

// decodeEvents reads and validates the body of an events request.
func decodeEvents(r io.Reader) ([]botclient.Event, error) {
	var req botclient.EventsRequest
	if err := decodeStrict(r, &req, false); err != nil {
		return nil, err
	}
	if len(req.Events) == 0 || len(req.Events) > maxEventsPerRequest {
		return nil, fmt.Errorf("send between 1 and %d events per request, got %d", maxEventsPerRequest, len(req.Events))
	}
	for i, e := range req.Events {
		if !eventTypePattern.MatchString(e.Type) {
			return nil, fmt.Errorf("events[%d].type must be 1 to 64 letters, digits or _.:- (starting with a letter or digit)", i)
		}
		if len(e.Data) > maxEventData {
			return nil, fmt.Errorf("events[%d].data is larger than %d bytes", i, maxEventData)
		}
		// Valid JSON the store's jsonb refuses (a NUL, a lone surrogate) is the bot's error to
		// fix: a 400, not a 503 the bot would retry forever.
		if err := store.CheckJSONB(e.Data); err != nil {
			return nil, fmt.Errorf("events[%d].data: %w", i, err)
		}
	}
	return req.Events, nil
}

func checkText(field, s string, maxLen int) error {
	if len(s) > maxLen {
		return fmt.Errorf("%s is longer than %d bytes", field, maxLen)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s is not valid UTF-8", field)
	}
	if strings.ContainsRune(s, 0) {
		// Speakers become event data, which the store's jsonb cannot hold with a NUL.
		return fmt.Errorf("%s contains a NUL character", field)
	}
	return nil
}

// operatorReasons are the reasons the operator gives when it ends a bot. A bot reporting one
// would pass its own failure off as the operator's (a HeartbeatTimeout, a SlotLost) in
// status, metrics and callbacks.
var operatorReasons = map[v1.BotReason]bool{
	v1.ReasonQueueTimeout:     true,
	v1.ReasonDeploymentFailed: true,
	v1.ReasonHeartbeatTimeout: true,
	v1.ReasonDeployingTimeout: true,
	v1.ReasonSlotLost:         true,
	v1.ReasonMaxDuration:      true,
	v1.ReasonPoolNotFound:     true,
}
