package coolify

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// ErrLogsHidden means the answer carried no deployment logs: Coolify sends them only to a
// token with the read:sensitive ability.
var ErrLogsHidden = errors.New("coolify: deployment logs hidden (the token lacks the read:sensitive ability)")

// DeploymentLogs is a deployment's logs field. Coolify stores a deployment's log as one JSON
// string holding the list of entries, and leaves the field out of its answers to a token
// without read:sensitive.
type DeploymentLogs struct {
	// Text is the field's value, a JSON array of entries; "" when it was null (nothing
	// logged yet).
	Text string
	// Sent is false when the answer lacked the field.
	Sent bool
}

// UnmarshalJSON is called only for a field present in the answer, null included.
func (l *DeploymentLogs) UnmarshalJSON(b []byte) error {
	*l = DeploymentLogs{Sent: true}
	if string(b) == "null" {
		return nil
	}
	return json.Unmarshal(b, &l.Text)
}

// MarshalJSON writes the field as Coolify sends it (the struct tag's omitzero drops a field
// that was not sent).
func (l DeploymentLogs) MarshalJSON() ([]byte, error) {
	if l.Text == "" {
		return []byte("null"), nil
	}
	return json.Marshal(l.Text)
}

// LogEntry is one entry of a deployment's log.
type LogEntry struct {
	Output string `json:"output"`
	// Type is "stdout" or "stderr".
	Type      string `json:"type"`
	Timestamp string `json:"timestamp,omitempty"`
	// Hidden entries are Coolify's debug output (commands it ran), shown only on request.
	Hidden bool `json:"hidden,omitempty"`
	Order  int  `json:"order,omitempty"`
}

// LogEntries decodes the deployment's log; ErrLogsHidden when the answer carried none.
func (d *Deployment) LogEntries() ([]LogEntry, error) {
	if !d.Logs.Sent {
		return nil, ErrLogsHidden
	}
	if d.Logs.Text == "" {
		return nil, nil
	}
	var out []LogEntry
	if err := json.Unmarshal([]byte(d.Logs.Text), &out); err != nil {
		return nil, fmt.Errorf("coolify: logs of deployment %s: %w", d.DeploymentUUID, err)
	}
	return out, nil
}

// MaxErrorLine bounds LastErrorLine's answer: it ends up in conditions and events, and a
// registry's or a container's error text has no length limit of its own.
const MaxErrorLine = 300

// oopsMarker starts what Coolify's deployment job logs when a command fails: the next stderr
// entry is the command's error. Cleanup commands run after it and may log stderr of their own
// (a container that is not there to remove), so the last stderr entry is not always the cause.
const oopsMarker = "Oops something is not okay"

var exitStatus = regexp.MustCompile(`^exit status \d+$`)

// LastErrorLine is why a failed deployment failed, in one line: the error Coolify logged after
// its failure marker, or else the last stderr entry; of that entry's output, the last line
// that says more than "exit status N". Hidden entries are skipped. "" when the log has no
// error; ErrLogsHidden when the answer carried no logs. The line is cut to MaxErrorLine
// characters.
func (d *Deployment) LastErrorLine() (string, error) {
	entries, err := d.LogEntries()
	if err != nil {
		return "", err
	}
	from := 0
	for i := len(entries) - 1; i >= 0; i-- {
		if strings.Contains(entries[i].Output, oopsMarker) {
			from = i + 1
			break
		}
	}
	if from > 0 {
		for _, e := range entries[from:] {
			if line := errorLine(e); line != "" {
				return line, nil
			}
		}
	}
	for i := len(entries) - 1; i >= 0; i-- {
		if line := errorLine(entries[i]); line != "" && !strings.Contains(line, oopsMarker) {
			return line, nil
		}
	}
	return "", nil
}

// errorLine is the last telling line of a visible stderr entry, cut to MaxErrorLine.
func errorLine(e LogEntry) string {
	if e.Type != "stderr" || e.Hidden {
		return ""
	}
	lines := strings.Split(e.Output, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		line := strings.TrimSpace(lines[i])
		if line == "" || exitStatus.MatchString(line) {
			continue
		}
		if utf8.RuneCountInString(line) > MaxErrorLine {
			line = string([]rune(line)[:MaxErrorLine-1]) + "…"
		}
		return line
	}
	return ""
}
