package botapi

import (
	"strings"
	"testing"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

func TestDecodeStatusReport(t *testing.T) {
	tests := []struct {
		body    string
		wantErr string
	}{
		{`{"phase":"InCall"}`, ""},
		{`{"phase":"Done","recordingLocation":"s3://rec/1.mp4","speakerTimeframes":[{"speaker":"Ann","start":"2026-01-01T10:00:00Z","end":"2026-01-01T10:01:00Z"}]}`, ""},
		{`{"phase":"Fatal","reason":"WaitingRoomTimeout","message":"nobody let us in"}`, ""},
		{``, "empty body"},
		{`{"phase":"InCall"} {"phase":"Done"}`, "unexpected data after the object"},
		{`{"phase":"InCall","extra":1}`, `unknown field "extra"`},
		{`{"phase":"Queued"}`, "is not one a bot reports"},
		{`{"phase":"Fatal","reason":"not camel"}`, "CamelCase"},
		{`{"phase":"InCall","message":"` + strings.Repeat("x", 1025) + `"}`, "message is longer than 1024"},
		{`{"phase":"Done","speakerTimeframes":[{"speaker":"A","start":"2026-01-01T10:01:00Z","end":"2026-01-01T10:00:00Z"}]}`, "end is before start"},
		{`[1,2]`, "invalid JSON"},
		// A bot may not pass its failure off as the operator's.
		{`{"phase":"Fatal","reason":"HeartbeatTimeout"}`, `reason "HeartbeatTimeout" is the operator's`},
		{`{"phase":"Fatal","reason":"SlotLost"}`, `reason "SlotLost" is the operator's`},
		{`{"phase":"Fatal","reason":"QueueTimeout"}`, `reason "QueueTimeout" is the operator's`},
		{`{"phase":"Fatal","reason":"Kicked"}`, ""},
		// Speakers are stored as event data, which cannot hold a NUL.
		{`{"phase":"Done","speakerTimeframes":[{"speaker":"A\u0000","start":"2026-01-01T10:00:00Z","end":"2026-01-01T10:00:01Z"}]}`, "speaker contains a NUL"},
	}
	for _, tt := range tests {
		_, err := decodeStatusReport(strings.NewReader(tt.body))
		if tt.wantErr == "" && err != nil {
			t.Errorf("%s: unexpected error %v", tt.body, err)
		}
		if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%.60s: error %v, want one containing %q", tt.body, err, tt.wantErr)
		}
	}
}

func TestDecodeEvents(t *testing.T) {
	tests := []struct {
		body    string
		wantErr string
	}{
		{`{"events":[{"type":"participant.joined","data":{"name":"Ann"}}]}`, ""},
		{`{"events":[]}`, "between 1 and 100"},
		{`{"events":[{"type":""}]}`, "events[0].type"},
		{`{"events":[{"type":"a b"}]}`, "events[0].type"},
		{`{"events":[{"type":"log","data":"` + strings.Repeat("x", maxEventData) + `"}]}`, "larger than"},
		{`{"events":[{"type":"log","level":"info"}]}`, `unknown field "level"`},
		// Valid JSON that Postgres's jsonb refuses: a 400 with a clear message, not a 503 loop.
		{`{"events":[{"type":"log","data":{"line":"a\u0000b"}}]}`, "events[0].data: data contains a NUL character"},
		{`{"events":[{"type":"log"},{"type":"log","data":"\ud800"}]}`, "events[1].data: data contains a lone UTF-16 high surrogate"},
		{`{"events":[{"type":"log","data":"\\u0000"}]}`, ""}, // the text \u0000, escaped: fine
	}
	for _, tt := range tests {
		_, err := decodeEvents(strings.NewReader(tt.body))
		if tt.wantErr == "" && err != nil {
			t.Errorf("%s: unexpected error %v", tt.body, err)
		}
		if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%.60s: error %v, want one containing %q", tt.body, err, tt.wantErr)
		}
	}
}

// The fuzz targets check that no input panics a decoder and that whatever a decoder accepts
// satisfies the rules the handlers rely on.

func FuzzDecodeStatusReport(f *testing.F) {
	f.Add(`{"phase":"InCall"}`)
	f.Add(`{"phase":"Fatal","reason":"Kicked","message":"bye"}`)
	f.Add(`{"phase":"Done","speakerTimeframes":[{"speaker":"A","start":"2026-01-01T10:00:00Z","end":"2026-01-01T10:00:01Z"}]}`)
	f.Add(`{"phase":`)
	f.Fuzz(func(t *testing.T, body string) {
		rep, err := decodeStatusReport(strings.NewReader(body))
		if err != nil {
			return
		}
		if _, ok := reportable[v1.BotPhase(rep.Phase)]; !ok {
			t.Fatalf("accepted unknown phase %q", rep.Phase)
		}
		if len(rep.Message) > 1024 || len(rep.RecordingLocation) > 2048 || len(rep.SpeakerTimeframes) > maxTimeframes {
			t.Fatalf("accepted an oversized report")
		}
		if rep.Reason != "" && !reasonPattern.MatchString(rep.Reason) {
			t.Fatalf("accepted reason %q", rep.Reason)
		}
	})
}

func FuzzDecodeEvents(f *testing.F) {
	f.Add(`{"events":[{"type":"log","data":{"line":"hi"}}]}`)
	f.Add(`{"events":[{"type":"participant.left","at":"2026-01-01T10:00:00Z"}]}`)
	f.Add(`{"events":null}`)
	f.Fuzz(func(t *testing.T, body string) {
		events, err := decodeEvents(strings.NewReader(body))
		if err != nil {
			return
		}
		if len(events) == 0 || len(events) > maxEventsPerRequest {
			t.Fatalf("accepted %d events", len(events))
		}
		for _, e := range events {
			if !eventTypePattern.MatchString(e.Type) || len(e.Data) > maxEventData {
				t.Fatalf("accepted event %q with %d bytes of data", e.Type, len(e.Data))
			}
		}
	})
}
