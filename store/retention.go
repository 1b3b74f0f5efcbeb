package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

// MinRetention is the shortest retention accepted: anything shorter is more likely a typo than
// a wish, and would delete rows dashboards are still looking at.
const MinRetention = time.Hour

// Retention says how long the store keeps history; a zero duration keeps it forever. Without
// it nothing is ever deleted, and a database that fills up stops every tenant's heartbeats.
type Retention struct {
	// Events: bot events, by their time.
	Events time.Duration
	// Transitions: the audit log of slot transitions, by their time.
	Transitions time.Duration
	// FinishedBots: the projection (and liveness) of bots, by when they finished.
	FinishedBots time.Duration
}

// Validate checks every duration is 0 (keep forever) or at least MinRetention.
func (r Retention) Validate() error {
	var errs []error
	for name, d := range map[string]time.Duration{"events": r.Events, "transitions": r.Transitions, "finished bots": r.FinishedBots} {
		if d != 0 && d < MinRetention {
			errs = append(errs, fmt.Errorf("retention of %s must be 0 (keep forever) or at least %s, got %s", name, MinRetention, d))
		}
	}
	return errors.Join(errs...)
}

// Enabled reports whether anything is ever deleted.
func (r Retention) Enabled() bool { return r.Events > 0 || r.Transitions > 0 || r.FinishedBots > 0 }

// Cutoffs are the times before which rows go; a zero time keeps that table whole.
type Cutoffs struct {
	Events, Transitions, FinishedBots time.Time
}

// CutoffsAt are the cutoffs of r at now.
func (r Retention) CutoffsAt(now time.Time) Cutoffs {
	at := func(d time.Duration) time.Time {
		if d == 0 {
			return time.Time{}
		}
		return now.Add(-d)
	}
	return Cutoffs{Events: at(r.Events), Transitions: at(r.Transitions), FinishedBots: at(r.FinishedBots)}
}

// Pruned counts the rows one pruning deleted.
type Pruned struct {
	Events, Transitions, Bots int
	// Webhooks: webhook messages delivered or given up before the events' cutoff (Postgres;
	// the in-memory outbox keeps a bounded history instead).
	Webhooks int
}

// Pruner deletes history older than its cutoffs, in small batches so it never holds long
// locks: both stores implement it. During an outage it returns ErrUnavailable and deletes
// nothing; the next run catches up.
type Pruner interface {
	Prune(ctx context.Context, c Cutoffs) (Pruned, error)
}

// RetentionJob prunes the store periodically. It is a manager.Runnable that runs on the leader
// only: one replica deleting is enough.
type RetentionJob struct {
	Store     Pruner
	Retention Retention
	// Interval between runs; the first runs at start.
	Interval time.Duration
	Clock    clock.WithTicker
	Log      logr.Logger
}

// Start runs the job until ctx ends.
func (j *RetentionJob) Start(ctx context.Context) error {
	if !j.Retention.Enabled() {
		return nil
	}
	t := j.Clock.NewTicker(j.Interval)
	defer t.Stop()
	for {
		// RunOnce logs its own failures through j.Log; a failed run is retried at the next tick.
		_, _ = j.RunOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// NeedLeaderElection is true: the leader prunes for every replica.
func (j *RetentionJob) NeedLeaderElection() bool { return true }

// RunOnce prunes once, logging the outcome.
func (j *RetentionJob) RunOnce(ctx context.Context) (Pruned, error) {
	p, err := j.Store.Prune(ctx, j.Retention.CutoffsAt(j.Clock.Now()))
	switch {
	case errors.Is(err, ErrUnavailable):
		j.Log.V(1).Info("Retention skipped: the store is unavailable", "error", err.Error())
	case err != nil && ctx.Err() == nil:
		j.Log.Error(err, "Pruning the store failed", "pruned", p)
	case p != (Pruned{}):
		j.Log.Info("Pruned the store", "events", p.Events, "transitions", p.Transitions, "bots", p.Bots, "webhooks", p.Webhooks)
	}
	return p, err
}
