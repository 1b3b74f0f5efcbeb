package pool

import (
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/policy"
)

// A granted reservation (reservations.go) is bound at its bot's start from a free slot, and
// the pool makes sure there is one: it keeps a free slot for every pending reservation whose
// start is within the time its slots take to build, by what it observed of its servers. That
// lead covers the reservations all together: n slots wait for the image's pull where a server
// lacks it, then start a few at a time (what the servers and the pool's deploy bound run at
// once), each as long as the slowest start the pool has seen there.
const (
	// unobservedPull is a server's cold pull until the pool has pulled there: the multi-GB
	// images of meeting bots pull for minutes.
	unobservedPull = 10 * time.Minute
	// unobservedStart is a standby container's start until the pool has started one.
	unobservedStart = time.Minute
	// unobservedRuns is what a server runs at once until its settings are read (Coolify's
	// default concurrent_builds).
	unobservedRuns = 2
)

// leadModel is what the pool observed of how long its slots take to build.
type leadModel struct {
	pull     time.Duration // the longest pull still ahead on a usable server without the image
	start    time.Duration // the longest container start on a usable server (none when Stopped)
	parallel int           // how many of the pool's starts run at once
}

// lead is how long before they are needed n new free slots must be begun.
func (m leadModel) lead(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	parallel := max(m.parallel, 1)
	batches := (n + parallel - 1) / parallel
	return m.pull + time.Duration(batches)*m.start + policy.ReservationMargin
}

// observedLead reads the model from the pass: the pulls recorded per server
// (status.servers[].cached[].pullDuration, the one in flight), the slots' starts
// (status.servers[].slotStart) and the servers' settings. Only servers that take new slots
// count; with none, the unobserved values stand.
func observedLead(s *poolScope, servers []v1.ServerStatus, now time.Time) leadModel {
	m := leadModel{}
	ref, restarted := "", policy.RestartedAt(s.pool)
	if s.template != nil {
		ref = s.template.Ref()
	}
	limit, unknown, usable := int(s.pool.Spec.MaxConcurrentDeployments), false, 0
	for i := range servers {
		st := &servers[i]
		if st.State != v1.ServerActive || st.Health.Out() {
			continue
		}
		usable++
		if ref == "" || !policy.HasCached(policy.FreshCached(s.pool, st.Cached), ref, restarted) {
			// The last pull observed here: status.servers[].pullDuration, which outlives its
			// cached entry (a restartedAt drops it while the tag is pulled again, and the
			// lead fell back to unobservedPull one pass into the pull), or, in a status
			// written before that field, the newest cached entry's.
			pull := unobservedPull
			if st.PullDuration != nil {
				pull = st.PullDuration.Duration
			} else {
				for _, c := range st.Cached {
					if c.PullDuration != nil {
						pull = c.PullDuration.Duration
						break
					}
				}
			}
			if st.Pull != nil && st.Pull.State == v1.ImagePulling {
				// since is stored to the second: now is cut the same way, or a pull requested
				// at 12:00:00.7 would count 0.7 s gone at once, and the lead, rounded up to the
				// minute, could drop a minute while the clock had not moved.
				pull = max(pull-now.Truncate(time.Second).Sub(st.Pull.Since.Time), 0)
			}
			m.pull = max(m.pull, pull)
		}
		if s.pool.Spec.Standby.Running() {
			start := unobservedStart
			if st.SlotStart != nil {
				start = st.SlotStart.Duration
			}
			m.start = max(m.start, start)
		}
		runs := 0
		if set, ok := s.servers[st.UUID]; ok {
			runs = coolifyview.ServerRuns(set)
		}
		if runs == 0 {
			runs, unknown = unobservedRuns, true
		}
		m.parallel += runs
	}
	if usable == 0 { // nothing to go by (the first pass, or every server out): assume the worst
		m.pull, m.parallel = unobservedPull, unobservedRuns
		if s.pool.Spec.Standby.Running() {
			m.start = unobservedStart
		}
	}
	if limit < 1 && unknown {
		limit = v1.DefaultMaxConcurrentDeployments // the deploy gate's bound while settings are unknown
	}
	if limit > 0 && m.parallel > limit {
		m.parallel = limit
	}
	return m
}

// warming is how many of the pending reservations (their starts, earliest first) need their
// slot now: the k-th is warmed once its start is within the lead of k slots, and so are all
// before it. next is when the next one is (zero when all are).
func warming(starts []time.Time, now time.Time, m leadModel) (n int, next time.Time) {
	for k, start := range starts {
		if !start.After(now.Add(m.lead(k + 1))) {
			n = k + 1
		}
	}
	for k := n; k < len(starts); k++ {
		if at := starts[k].Add(-m.lead(k + 1)); next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return n, next
}

// pendingStarts is when the granted reservations of bots not bound yet are bound (the start of
// their windows), earliest first: bots Reserved and still waiting for it (once queued, they
// count as waiting).
func pendingStarts(bots []v1.Bot) []time.Time {
	var out []time.Time
	for i := range bots {
		b := &bots[i]
		if policy.Reserved(b) && b.DeletionTimestamp.IsZero() && (b.Status.Phase == v1.BotPending || b.Status.Phase == v1.BotScheduled) {
			out = append(out, b.Status.Reservation.From.Time)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// planReservations decides, for the pass, how many free slots the pending reservations need
// now (s.warming, added to supply's need and kept from the scale-down), and when to look again.
// It runs before supply, on the status's view of the servers (what the last pass recorded).
func (r *Reconciler) planReservations(s *poolScope, now time.Time) {
	if len(s.reservedStarts) == 0 {
		return
	}
	s.lead = observedLead(s, s.pool.Status.Servers, now)
	n, next := warming(s.reservedStarts, now, s.lead)
	s.warming = n
	if !next.IsZero() {
		s.after(max(next.Sub(now), time.Millisecond))
	}
}

// reservationStatus is status.reservations: nil while none is pending.
func reservationStatus(s *poolScope) *v1.ReservationStatus {
	if len(s.reservedStarts) == 0 {
		return nil
	}
	st := &v1.ReservationStatus{
		Pending:   int32(len(s.reservedStarts)),
		Warming:   int32(s.warming),
		NextStart: &metav1.Time{Time: s.reservedStarts[0]},
	}
	switch last := s.pool.Status.Reservations; {
	case s.lead.parallel > 0:
		// Rounded up to the minute: less a pull in flight, the lead falls with every second of
		// the pull, and a status that changes at every pass is written at every pass (the
		// model check's settle found a pool writing every 5 s, seed 3457702266237806).
		st.Lead.Duration = CeilMinute(s.lead.lead(len(s.reservedStarts)))
	case last != nil: // the pass did not get as far as planning: what the last one said
		st.Lead, st.Warming = last.Lead, last.Warming
	}
	return st
}

// CeilMinute rounds d up to a whole minute.
func CeilMinute(d time.Duration) time.Duration {
	if r := d % time.Minute; r != 0 {
		return d - r + time.Minute
	}
	return d
}
