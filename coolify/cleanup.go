package coolify

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// DockerCleanup is what GET /servers/{uuid}/docker-cleanup says of a server's Docker cleanup.
// Coolify's scheduler looks at it at every time of Frequency and prunes then when Force is set,
// or when the server's disk is at least Threshold percent full. A prune removes, server-wide,
// the stopped containers Coolify manages, the build cache, and every image no container runs
// that some application of its repository does not keep (each keeps the images of its latest
// deployments, two by default): an image pulled ahead of a rollout, which the slots have not
// deployed yet, is one it removes. Stops and deletes run it too unless told not to.
type DockerCleanup struct {
	// Frequency is docker_cleanup_frequency: a cron expression (DefaultCleanupFrequency) or
	// one of the names Coolify accepts for one (ParseCleanupFrequency).
	Frequency string `json:"docker_cleanup_frequency"`
	// Threshold is docker_cleanup_threshold, a disk usage in percent (80 by default).
	Threshold int `json:"docker_cleanup_threshold"`
	// Force is force_docker_cleanup: every scheduled run prunes, whatever the disk usage.
	Force bool `json:"force_docker_cleanup"`
}

// DefaultCleanupFrequency is the docker_cleanup_frequency of a new server: daily at midnight.
const DefaultCleanupFrequency = "0 0 * * *"

// GetServerDockerCleanup is GET /servers/{uuid}/docker-cleanup (read). ErrNotFound for a server
// the token does not see, and from a Coolify without the endpoint (it answers an unknown path
// with 404 too).
func (c *Client) GetServerDockerCleanup(ctx context.Context, serverUUID string) (*DockerCleanup, error) {
	var out DockerCleanup
	err := c.do(ctx, call{op: "get-server-docker-cleanup", method: http.MethodGet,
		path: "/servers/" + esc(serverUUID) + "/docker-cleanup", idempotent: true, out: &out})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// cleanupNames are the names Coolify's scheduler takes for a frequency besides cron
// expressions and their @ descriptors (its VALID_CRON_STRINGS).
var cleanupNames = map[string]string{
	"every_minute": "* * * * *",
	"hourly":       "0 * * * *",
	"daily":        "0 0 * * *",
	"weekly":       "0 0 * * 0",
	"monthly":      "0 0 1 * *",
	"yearly":       "0 0 1 1 *",
}

var cleanupParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// CleanupSchedule is when a server's scheduled Docker cleanup runs.
type CleanupSchedule struct{ spec cron.Schedule }

// ParseCleanupFrequency reads a docker_cleanup_frequency as Coolify's scheduler does: a
// standard five-field cron expression, one of Coolify's names (every_minute, hourly, daily,
// weekly, monthly, yearly) or a descriptor (@hourly, @daily, @midnight, @weekly, @monthly,
// @yearly, @annually). An expression Coolify would refuse (a TZ= prefix, @every) is an error,
// and so are the extensions Coolify's cron library has and this one lacks (L, W, #).
func ParseCleanupFrequency(freq string) (CleanupSchedule, error) {
	f := strings.TrimSpace(freq)
	if expr, ok := cleanupNames[f]; ok {
		f = expr
	}
	if strings.Contains(f, "=") || strings.HasPrefix(f, "@every") {
		return CleanupSchedule{}, fmt.Errorf("docker cleanup frequency %q: not a schedule Coolify runs", freq)
	}
	spec, err := cleanupParser.Parse(f)
	if err != nil {
		return CleanupSchedule{}, fmt.Errorf("docker cleanup frequency %q: %w", freq, err)
	}
	return CleanupSchedule{spec: spec}, nil
}

// Next is the first run strictly after t, reckoned in UTC (Coolify runs the schedule in the
// server's timezone, UTC unless set otherwise, which the API does not say); zero when none
// comes within five years (say, the 30th of February) or the schedule is the zero value.
func (c CleanupSchedule) Next(t time.Time) time.Time {
	if c.spec == nil {
		return time.Time{}
	}
	return c.spec.Next(t.UTC())
}
