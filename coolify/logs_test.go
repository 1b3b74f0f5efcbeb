package coolify_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"botpool.dev/botpool/coolify"
)

// logsOf is a logs field holding entries given as type, output pairs ("h:stderr" is hidden).
func logsOf(t *testing.T, pairs ...string) coolify.DeploymentLogs {
	t.Helper()
	var entries []map[string]any
	for i := 0; i+1 < len(pairs); i += 2 {
		typ, hidden := strings.CutPrefix(pairs[i], "h:")
		entries = append(entries, map[string]any{"command": nil, "output": pairs[i+1], "type": typ,
			"timestamp": "2026-11-23T12:00:00.000000Z", "hidden": hidden, "batch": 1, "order": i/2 + 1})
	}
	b, err := json.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}
	return coolify.DeploymentLogs{Text: string(b), Sent: true}
}

func TestLastErrorLine(t *testing.T) {
	const oops = "Oops something is not okay, are you okay? 😢"
	long := strings.Repeat("é", coolify.MaxErrorLine+50)
	for _, tc := range []struct {
		name string
		logs coolify.DeploymentLogs
		want string
		err  error
	}{
		{"not sent", coolify.DeploymentLogs{}, "", coolify.ErrLogsHidden},
		{"null", coolify.DeploymentLogs{Sent: true}, "", nil},
		{"no error", logsOf(t, "stdout", "Pulling image", "stdout", "New container started."), "", nil},
		{"the error after Coolify's marker, not the cleanup's", logsOf(t,
			"stdout", "Starting deployment of bot:v9 to localhost.",
			"stderr", oops,
			"stderr", " bot Pulling \nError response from daemon: manifest for bot:v9 not found: manifest unknown: manifest unknown\nexit status 1\n",
			"stdout", "Deployment failed. Removing the new version of your application.",
			"h:stdout", "[CMD]: docker rm -f abc",
			"stderr", "Error response from daemon: No such container: abc"),
			"Error response from daemon: manifest for bot:v9 not found: manifest unknown: manifest unknown", nil},
		{"hidden stderr is skipped", logsOf(t, "stderr", oops, "h:stderr", "debug noise", "stderr", "denied: requested access to the resource is denied"),
			"denied: requested access to the resource is denied", nil},
		{"without the marker: the last stderr", logsOf(t, "stderr", "first", "stdout", "x", "stderr", "Server is not functional.\n"),
			"Server is not functional.", nil},
		{"only the marker", logsOf(t, "stderr", oops), "", nil},
		{"cut", logsOf(t, "stderr", long), string([]rune(long)[:coolify.MaxErrorLine-1]) + "…", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &coolify.Deployment{DeploymentUUID: "d", Logs: tc.logs}
			got, err := d.LastErrorLine()
			if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
				t.Fatalf("LastErrorLine() = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
	if _, err := (&coolify.Deployment{Logs: coolify.DeploymentLogs{Text: "[{", Sent: true}}).LastErrorLine(); err == nil {
		t.Error("malformed logs gave no error")
	}
}

// The logs field tells "not sent" (no read:sensitive) from null (nothing logged yet), and
// writes back the way it came.
func TestDeploymentLogsJSON(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want coolify.DeploymentLogs
		out  string
	}{
		{`{"deployment_uuid":"d","status":"failed"}`, coolify.DeploymentLogs{}, `{"deployment_uuid":"d","status":"failed"}`},
		{`{"deployment_uuid":"d","status":"failed","logs":null}`, coolify.DeploymentLogs{Sent: true}, `{"deployment_uuid":"d","status":"failed","logs":null}`},
		{`{"deployment_uuid":"d","status":"failed","logs":"[]"}`, coolify.DeploymentLogs{Text: "[]", Sent: true}, `{"deployment_uuid":"d","status":"failed","logs":"[]"}`},
	} {
		var d coolify.Deployment
		if err := json.Unmarshal([]byte(tc.in), &d); err != nil || d.Logs != tc.want {
			t.Errorf("%s: logs %+v (%v), want %+v", tc.in, d.Logs, err, tc.want)
		}
		if b, err := json.Marshal(d); err != nil || string(b) != tc.out {
			t.Errorf("%s: marshalled %s (%v), want %s", tc.in, b, err, tc.out)
		}
	}
}
