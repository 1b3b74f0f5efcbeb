package coolify_test

import (
	"testing"
	"time"

	"botpool.dev/botpool/coolify"
)

// TestParseCleanupFrequency: docker_cleanup_frequency is read as Coolify's scheduler reads it
// (cron expressions, its names and descriptors), the next run is reckoned in UTC and strictly
// after the time given, and what Coolify would not run is an error.
func TestParseCleanupFrequency(t *testing.T) {
	at := time.Date(2026, 11, 23, 12, 34, 56, 0, time.UTC) // a Monday
	for _, tc := range []struct {
		freq string
		from time.Time
		next time.Time // zero: an error
	}{
		{"0 0 * * *", at, time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)},
		{" 0 0 * * * ", at, time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)},
		{"daily", at, time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)},
		{"@daily", at, time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)},
		{"@midnight", at, time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)},
		{"hourly", at, time.Date(2026, 11, 23, 13, 0, 0, 0, time.UTC)},
		{"@hourly", at, time.Date(2026, 11, 23, 13, 0, 0, 0, time.UTC)},
		{"every_minute", at, time.Date(2026, 11, 23, 12, 35, 0, 0, time.UTC)},
		{"*/10 * * * *", at, time.Date(2026, 11, 23, 12, 40, 0, 0, time.UTC)},
		{"weekly", at, time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)},
		{"monthly", at, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		{"yearly", at, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"@annually", at, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"30 3 * * 1-5", at, time.Date(2026, 11, 24, 3, 30, 0, 0, time.UTC)},
		// Strictly after: a run at the very time given is the next one's.
		{"0 0 * * *", time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)},
		// In UTC, whatever the zone of the time given.
		{"0 0 * * *", at.In(time.FixedZone("UTC+14", 14*3600)), time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)},
		{"", at, time.Time{}},
		{"not a schedule", at, time.Time{}},
		{"0 0 * *", at, time.Time{}},
		{"0 0 0 * * *", at, time.Time{}}, // six fields: seconds are not Coolify's
		{"@every 1h", at, time.Time{}},
		{"TZ=Europe/Berlin 0 0 * * *", at, time.Time{}},
		{"0 0 L * *", at, time.Time{}},
	} {
		s, err := coolify.ParseCleanupFrequency(tc.freq)
		if tc.next.IsZero() {
			if err == nil {
				t.Errorf("%q: parsed, want an error", tc.freq)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.freq, err)
			continue
		}
		if got := s.Next(tc.from); !got.Equal(tc.next) {
			t.Errorf("%q after %s: next run %s, want %s", tc.freq, tc.from, got, tc.next)
		}
	}
	if never, err := coolify.ParseCleanupFrequency("0 0 30 2 *"); err != nil || !never.Next(at).IsZero() {
		t.Errorf("the 30th of February: %v, next %s; want no run", err, never.Next(at))
	}
	if !(coolify.CleanupSchedule{}).Next(at).IsZero() {
		t.Error("the zero schedule runs")
	}
}
