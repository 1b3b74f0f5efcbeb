// Package botclient is the Go client of the bot API: what a meeting-bot container uses to
// fetch its configuration, send heartbeats and report its phase and events to the botpool
// operator. It depends on the standard library only, so bot images stay small.
//
// A container learns three things from its environment (set by the operator when it creates
// the slot's Coolify application): POOL_SLOT_UUID (its application uuid), BOTPOOL_API_URL and
// BOTPOOL_SLOT_TOKEN. FromEnv builds a client from them. The slot token only fetches the
// configuration; the configuration carries a credential for its bot, which the Client keeps and
// sends with the bot's heartbeats, status reports and events (see Client). A container started
// with BOTPOOL_PREPULL=1 (PrePull) is a pool's image pre-pull, not a slot: it should exit at once.
package botclient

import (
	"encoding/json"
	"time"
)

// Config is what GET /v1/slots/{appUUID}/config answers: the bound bot and its meeting.
type Config struct {
	// Bot is the name of the Bot object; use it in every other call.
	Bot         string         `json:"bot"`
	Namespace   string         `json:"namespace"`
	MeetingURL  string         `json:"meetingUrl"`
	Platform    string         `json:"platform"`
	DisplayName string         `json:"displayName,omitempty"`
	Recording   bool           `json:"recording"`
	MaxDuration Duration       `json:"maxDuration"`
	Leave       AutomaticLeave `json:"automaticLeave"`
	// HeartbeatInterval is how often the operator expects a heartbeat.
	HeartbeatInterval Duration `json:"heartbeatInterval"`
	// Credential authorizes the heartbeats, status reports and events of this bot, and of no
	// other, while its binding lasts. It is handed out once: a later config call for the same
	// binding is refused (409). The Client keeps it and sends it with every bot call.
	Credential string `json:"credential,omitempty"`
	// Parameters is the bot's spec.parameters over its pool's parameterDefaults (top-level
	// keys, the bot's win), a JSON object exactly as written; nil when neither has any. Decode
	// it into the image's own type with DecodeParameters.
	Parameters json.RawMessage `json:"parameters,omitempty"`
	// SecretParameters are the values of the bot's spec.secretParameters by name, read from
	// its namespace's Secrets when the binding is handed out. They are in this answer only:
	// keep them in memory, never in a log line or a report.
	SecretParameters map[string]string `json:"secretParameters,omitempty"`
}

// DecodeParameters decodes the bot's parameters into v (a pointer to the image's own type);
// nil parameters leave v as it is.
func (c Config) DecodeParameters(v any) error {
	if len(c.Parameters) == 0 {
		return nil
	}
	return json.Unmarshal(c.Parameters, v)
}

// AutomaticLeave holds the timeouts after which a bot leaves on its own.
type AutomaticLeave struct {
	WaitingRoomTimeout  Duration `json:"waitingRoomTimeout,omitempty"`
	NoOneJoinedTimeout  Duration `json:"noOneJoinedTimeout,omitempty"`
	EveryoneLeftTimeout Duration `json:"everyoneLeftTimeout,omitempty"`
	InactivityTimeout   Duration `json:"inactivityTimeout,omitempty"`
}

// Action is the operator's answer to a heartbeat.
type Action string

const (
	// ActionContinue: carry on.
	ActionContinue Action = "continue"
	// ActionLeave: leave the meeting gracefully, report CallEnded and Done, then exit.
	ActionLeave Action = "leave"
	// ActionExit: stop now; this container no longer serves this bot.
	ActionExit Action = "exit"
)

// HeartbeatResponse is the answer to POST /v1/bots/{name}/heartbeat.
type HeartbeatResponse struct {
	Action   Action `json:"action"`
	LogLevel string `json:"logLevel"`
	// Buffered is true when the operator could not store this beat now (its database is down
	// or refuses writes): the beat waits in the operator's memory and, until it is written,
	// nobody is failed for missing heartbeats. Nothing to do but keep beating.
	Buffered bool `json:"buffered,omitempty"`
}

// Phases a bot reports about itself.
const (
	PhaseJoiningCall   = "JoiningCall"
	PhaseInWaitingRoom = "InWaitingRoom"
	PhaseInCall        = "InCall"
	PhaseLeaving       = "Leaving"
	PhaseCallEnded     = "CallEnded"
	PhaseDone          = "Done"
	PhaseFatal         = "Fatal"
)

// StatusReport is the body of POST /v1/bots/{name}/status.
type StatusReport struct {
	Phase string `json:"phase"`
	// Reason is a CamelCase word, mostly for Fatal (e.g. "WaitingRoomTimeout", "Kicked").
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// RecordingLocation is where the recording was stored, reported with Done.
	RecordingLocation string `json:"recordingLocation,omitempty"`
	// SpeakerTimeframes, reported with CallEnded or Done, are kept as a bot event.
	SpeakerTimeframes []SpeakerTimeframe `json:"speakerTimeframes,omitempty"`
}

// SpeakerTimeframe says who spoke when.
type SpeakerTimeframe struct {
	Speaker string    `json:"speaker"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
}

// StatusResponse is the answer to a status report: the phase the Bot has now.
type StatusResponse struct {
	Phase string `json:"phase"`
}

// Event is one thing a bot reports (participant joined, a log line…).
type Event struct {
	Type string          `json:"type"`
	At   time.Time       `json:"at,omitzero"`
	Data json.RawMessage `json:"data,omitempty"`
}

// EventsRequest is the body of POST /v1/bots/{name}/events.
type EventsRequest struct {
	Events []Event `json:"events"`
}

// EventsResponse says how many events were accepted.
type EventsResponse struct {
	Accepted int `json:"accepted"`
}

// ErrorResponse is the body of every 4xx and 5xx answer.
type ErrorResponse struct {
	Error string `json:"error"`
}

// Duration is a time.Duration written as a Go duration string ("30s") in JSON.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}
