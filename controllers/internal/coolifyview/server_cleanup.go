package coolifyview

import (
	"context"
	"errors"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"botpool.dev/botpool/coolify"
)

// Coolify runs a Docker cleanup on each server on a schedule of its own (docker_cleanup_frequency,
// daily at midnight by default), and it removes an image the pool pre-pulled there and no slot
// has run yet: its puller deployed it, its slots did not. The pool reads each server's schedule
// (GET /servers/{uuid}/docker-cleanup) and pulls its image there again once a run may have
// removed it (pool.CleanedSince, controllers/pool/pull.go). The cleanup also runs, unannounced, when the disk
// passes its threshold, and on older releases after stops and deletes whatever the operator
// asks: rePullAge bounds those.
const (
	// CleanupRefresh is how long a server's schedule is believed: it changes by hand, rarely,
	// and a wrong one costs a pull too many or one too few, which rePullAge bounds.
	CleanupRefresh = 10 * time.Minute
	// CleanupSettle is how long a scheduled run is taken to last: Coolify queues the run at its
	// time, and it lists the images to remove when a worker takes it, so a pull that ended
	// within minutes around that time may have been listed and removed. Such a pull is done
	// again CleanupSettle after the time.
	CleanupSettle = 5 * time.Minute
)

// cleanupRead is what the last reads of one server's cleanup schedule said.
type cleanupRead struct {
	// schedule is the last one read; zero while unknown (never read, a Coolify without the
	// endpoint, a frequency this operator cannot read).
	schedule coolify.CleanupSchedule
	tried    time.Time
	// failing: the last read failed, and said so in the log (once per run of failures).
	failing bool
}

// CleanupSchedule is when the scheduled Docker cleanup of server runs, as api's user reads it,
// read at most every CleanupRefresh for every pool of that user; the zero schedule (Next is
// always zero) while it is unknown. It never fails: a read that fails keeps what the last one
// said, and one that says the schedule is unknown (404, an unreadable frequency) forgets it,
// each logged once (V(1)) until a read succeeds again.
func (b *BulkReader) CleanupSchedule(ctx context.Context, api CoolifyAPI, server string) coolify.CleanupSchedule {
	key := coolifyInstance(api) + "|" + CoolifyUser(api) + "|" + server
	now := b.Clock.Now()
	b.mu.Lock()
	for k, e := range b.cleanups {
		if now.Sub(e.tried) > serversForget {
			delete(b.cleanups, k) // no pool asked for an hour
		}
	}
	e := b.cleanups[key]
	if e == nil {
		if b.cleanups == nil {
			b.cleanups = map[string]*cleanupRead{}
		}
		e = &cleanupRead{}
		b.cleanups[key] = e
	} else if now.Sub(e.tried) < CleanupRefresh && !now.Before(e.tried) {
		sched := e.schedule
		b.mu.Unlock()
		return sched
	}
	e.tried = now
	b.mu.Unlock()

	sched, err := readCleanupSchedule(ctx, api, server)
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case err == nil:
		e.schedule, e.failing = sched, false
		return sched
	case errors.Is(err, coolify.ErrNotFound) || errors.Is(err, errUnreadableSchedule):
		e.schedule = coolify.CleanupSchedule{} // Coolify says there is none this operator can read
	}
	if !e.failing { // a transient failure keeps the last schedule read
		e.failing = true
		ctrl.LoggerFrom(ctx).V(1).Info("Cannot read the server's Docker cleanup schedule; the pool's image is pulled there again at least every 24 hours",
			"server", server, "error", err.Error())
	}
	return e.schedule
}

// errUnreadableSchedule: the server's docker_cleanup_frequency is not one this operator reads.
var errUnreadableSchedule = errors.New("unreadable docker cleanup frequency")

func readCleanupSchedule(ctx context.Context, api CoolifyAPI, server string) (coolify.CleanupSchedule, error) {
	c, err := api.GetServerDockerCleanup(ctx, server)
	if err != nil {
		return coolify.CleanupSchedule{}, err
	}
	sched, err := coolify.ParseCleanupFrequency(c.Frequency)
	if err != nil {
		return coolify.CleanupSchedule{}, fmt.Errorf("%w: %w", errUnreadableSchedule, err)
	}
	return sched, nil
}
