package pool

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// warmState is what a pool's warmSchedule says at one moment.
type warmState struct {
	// minIdle is the minIdle in force: the largest of spec.minIdle and the open windows'.
	minIdle int
	// soon is the largest minIdle of the windows that open within scaleDownDelay: the scale-down
	// keeps that many, so a window's slots are not removed just before the next one opens.
	soon int
	// open names the open windows, as status.warmWindows shows them.
	open []string
	// next is the first time after now at which a window opens or closes; zero when none
	// ever will (no window, or none readable).
	next time.Time
	// invalid says, per window the pool cannot read, why (the CRD's pattern lets through
	// what only a parser refuses: "61 * * * *", a time zone that does not exist).
	invalid []string
}

// warmAt evaluates the pool's warmSchedule at now. A window is open from each time its schedule
// names (in its time zone) for its duration; a window whose next opening comes before its last
// one closed stays open through both. Windows that cannot be read are left out and named.
func warmAt(spec v1.BotPoolSpec, now time.Time, zones *zoneCache) warmState {
	w := warmState{minIdle: int(spec.MinIdle)}
	horizon := spec.ScaleDownDelay.OrDefault(v1.DefaultScaleDownDelay)
	for i, win := range spec.WarmSchedule {
		sched, err := parseWarmSchedule(win.Schedule, win.TimeZone, zones)
		if err != nil {
			w.invalid = append(w.invalid, fmt.Sprintf("warmSchedule[%d]: %v", i, err))
			continue
		}
		dur := win.Duration.Duration()
		if dur <= 0 {
			w.invalid = append(w.invalid, fmt.Sprintf("warmSchedule[%d]: duration %q is not a positive duration", i, win.Duration))
			continue
		}
		if closes, open := openUntil(sched, now, dur); open {
			w.minIdle = max(w.minIdle, int(win.MinIdle))
			// Named without times, so the status stays put while the window is open.
			w.open = append(w.open, fmt.Sprintf("%d: %q in %s", i, win.Schedule, zoneName(win.TimeZone)))
			w.next = earliestTime(w.next, closes)
			continue
		}
		opens := sched.Next(now)
		if opens.IsZero() {
			// "0 0 30 2 *": the CRD cannot tell; the library looks five years ahead for it.
			w.invalid = append(w.invalid, fmt.Sprintf("warmSchedule[%d]: schedule %q never comes", i, win.Schedule))
			continue
		}
		if !opens.After(now.Add(horizon)) {
			w.soon = max(w.soon, int(win.MinIdle))
		}
		w.next = earliestTime(w.next, opens)
	}
	w.soon = max(w.soon, w.minIdle)
	return w
}

// openUntil reports whether a window of the schedule is open at now, and until when at least:
// openings inside the window keep it open, and up to 64 of them are followed. Past those
// (a schedule every minute with a window of days) the time is early, which only brings the
// pool's next look forward; it keeps a tenant's schedule from costing the manager a loop of
// thousands per pass.
func openUntil(sched *cron.SpecSchedule, now time.Time, dur time.Duration) (time.Time, bool) {
	// Next is strictly after its argument: an opening exactly dur ago closed at now.
	first := sched.Next(now.Add(-dur))
	if first.IsZero() || first.After(now) {
		return time.Time{}, false
	}
	closes := first.Add(dur)
	for i, n := 0, sched.Next(first); i < 64 && !n.IsZero() && !n.After(closes); i, n = i+1, sched.Next(n) {
		closes = n.Add(dur)
	}
	return closes, true
}

// earliestTime is the earlier of a and b, a zero time counting as never.
func earliestTime(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

func zoneName(tz string) string {
	if tz == "" {
		return "UTC"
	}
	return tz
}

// warmParser reads what a CronJob's schedule takes: five fields or a descriptor.
var warmParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// zoneCache keeps what time.LoadLocation read (it reads the zone database on every call), per
// reconciler; the zero value is ready, and a nil one caches nothing.
type zoneCache struct{ m sync.Map } // name → *time.Location

// parseWarmSchedule reads a window's schedule in its time zone. The zone is spec.timeZone
// only: a TZ= or CRON_TZ= prefix and @every are refused, as a CronJob refuses them.
func parseWarmSchedule(schedule, tz string, zones *zoneCache) (*cron.SpecSchedule, error) {
	s := strings.TrimSpace(schedule)
	if strings.Contains(s, "=") || strings.HasPrefix(s, "@every") {
		return nil, fmt.Errorf("schedule %q: set the zone in timeZone, and name times (no @every)", schedule)
	}
	loc, err := zones.load(zoneName(tz))
	if err != nil {
		return nil, err
	}
	parsed, err := warmParser.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", schedule, err)
	}
	spec, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("schedule %q: not a cron schedule", schedule)
	}
	spec.Location = loc
	return spec, nil
}

func (z *zoneCache) load(name string) (*time.Location, error) {
	if z != nil {
		if loc, ok := z.m.Load(name); ok {
			return loc.(*time.Location), nil
		}
	}
	if name == "Local" {
		return nil, fmt.Errorf("timeZone %q would be the manager's own zone: name one", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("timeZone %q is not a time zone the manager knows: %w", name, err)
	}
	if z != nil {
		z.m.Store(name, loc) // only zones that exist: a tenant's made-up names are not kept
	}
	return loc, nil
}
