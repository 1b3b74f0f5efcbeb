package slot

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/deploygate"
	"botpool.dev/botpool/controllers/internal/index"
	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
)

// deploy requests a deployment, admitted by the gate at now: of the bound bot's container, or
// (no bot) of a standby slot's fresh container. A request that did not start one leaves the
// slot Idle (with its bot bound), and the admission goes back (advance).
func (r *Reconciler) deploy(ctx context.Context, s *slotScope, now time.Time) error {
	st := &s.slot.Status
	what := "a standby container"
	if s.bot != nil {
		what = "bot " + s.bot.Name
		r.setStandby(s, "") // the container deployed now is the bot's
	}
	r.describe(ctx, s, v1.SlotDeploying, now)
	res, err := s.api.Deploy(ctx, st.ApplicationUUID)
	var apiErr *coolify.APIError
	switch {
	case errors.Is(err, coolify.ErrNotFound):
		r.recreate(s)
		return nil
	case errors.Is(err, coolify.ErrThrottled):
		// Not sent, or refused before it took effect: wait as told (capped), bot still bound.
		wait, _ := pass.CoolifyWait(err)
		st.Message = pass.ThrottledMessage(err) + "; deploying " + what + " then"
		s.after(wait)
		return nil
	case errors.As(err, &apiErr) && (errors.Is(err, coolify.ErrQueueFull) || errors.Is(err, coolify.ErrRateLimited)):
		// Honour Retry-After for the whole server, or the user's deployments to it (by the
		// injected clock), and keep asking the gate meanwhile: the bot stays bound and
		// waits, it does not fail.
		r.Gate.Pause(r.serverOf(s), errors.Is(err, coolify.ErrQueueFull), now.Add(max(apiErr.RetryAfter, r.gateRetry())))
		st.Message = "Coolify is busy (" + apiErr.Message + "); deploying " + what + " when it has room"
		s.after(r.jittered(r.gateRetry()))
		return nil
	case err != nil:
		if st.DeployingSince == nil && (transient(err) || errors.Is(err, context.Canceled)) {
			// A 5xx or a lost answer (a timeout, or the pass cut off while the request was out)
			// may come after the deployment was queued: the next attempt looks for it before
			// deploying again (see joinUnanswered). A refusal (4xx) did not.
			st.DeployingSince = &metav1.Time{Time: now}
		}
		return fmt.Errorf("deploying: %w", err)
	}
	st.DeploymentUUID = res.DeploymentUUID // empty when Coolify de-duplicated: found by the first poll
	st.DeployingSince = &metav1.Time{Time: now}
	st.SkippedRecoveries = 0
	if s.bot == nil {
		// Asks count from here: only the container this deployment starts can make it Ready.
		st.Standby, st.StandbySince = v1.StandbyStarting, &metav1.Time{Time: now}
	}
	r.moveTo(s, v1.SlotDeploying, "", "Deploying "+what)
	s.after(r.jittered(s.pool.Spec.Timing.DeploymentPollInterval.OrDefault(v1.DefaultDeploymentPollInterval)))
	return nil
}

// poolDeploys reads, from the cache, what the deploy gate needs of the slot's pool: its other
// slots in Deploying (all, and those on the slot's server), and whether the pool's image is
// known to be cached on the slot's server: a slot of the pool there runs it now (the gate
// also remembers every deployment that finished). A slot's lastUsedAt proves nothing: a bot
// may have let go during a cold pull that never completed.
func (r *Reconciler) poolDeploys(ctx context.Context, s *slotScope) (deploying, here []string, warm bool) {
	var slots v1.BotPoolSlotList // read only: no copy of each slot
	if err := r.Client.List(ctx, &slots, client.InNamespace(s.slot.Namespace), client.MatchingFields{index.SlotPool: s.pool.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, false
	}
	server := policy.SlotServer(s.slot, s.pool)
	// The pool's pre-pull there is a deployment on the server too: it holds one of the builds
	// the server runs at once for minutes. It counts for the server, not the pool's own bound
	// (it starts no bot); and the image the slot's application runs is warm there once a
	// pre-pull of it finished, so a rollout's pull never makes a start on the old image wait.
	if im := policy.ImagesOf(s.pool)[server]; im != nil {
		if im.Pull != nil && im.Pull.State == v1.ImagePulling {
			here = append(here, deploygate.PrePullFlight+server)
		}
		for _, c := range im.Cached {
			warm = warm || c.Image == s.slot.Status.Image
		}
	}
	for i := range slots.Items {
		sl := &slots.Items[i]
		same := policy.SlotServer(sl, s.pool) == server
		if sl.Status.Phase == v1.SlotDeploying && sl.Name != s.slot.Name {
			deploying = append(deploying, sl.Name)
			if same {
				here = append(here, sl.Name)
			}
		}
		if same && (sl.Status.Phase == v1.SlotBusy || sl.Status.Standby == v1.StandbyReady) {
			warm = true
		}
	}
	return deploying, here, warm
}

// deploying follows the deployment until the container runs (Busy) or it fails (Error), and
// applies the heartbeat-aware stale-deploying rules.
func (r *Reconciler) deploying(ctx context.Context, s *slotScope) error {
	st := &s.slot.Status
	timing := s.pool.Spec.Timing
	poll := r.jittered(timing.DeploymentPollInterval.OrDefault(v1.DefaultDeploymentPollInterval))
	if st.PhaseSince == nil { // a status written by hand or by an older version: start the clocks now
		st.PhaseSince = &metav1.Time{Time: r.Clock.Now()}
	}
	if st.DeployingSince == nil {
		st.DeployingSince = st.PhaseSince.DeepCopy()
	}
	if s.bot == nil && st.Standby != "" && s.slot.Spec.BotRef == nil {
		// A standby container's deployment (whatever the pool's mode is now: a slot of a
		// pool switched to Stopped stops the container once it is deployed).
		return r.deployingStandby(ctx, s, poll)
	}
	if since := r.Clock.Since(st.PhaseSince.Time); s.bot != nil && since < poll/2 {
		// Just deployed (the status write brought us back at once): nothing to read yet, and
		// polling now would cost a request per slot during a burst.
		s.after(poll - since)
		return nil
	}
	if s.bot == nil { // released mid-deploy: stop it
		if err := s.cancelDeployment(ctx); err != nil {
			return err
		}
		r.moveTo(s, v1.SlotReleasing, "", "The bot let go during the deployment")
		return nil // advance stops the container now, in this pass
	}
	now := r.Clock.Now()
	freshness := timing.HeartbeatFreshness.OrDefault(v1.DefaultHeartbeatFreshness)
	live := pass.LivenessReader{Store: r.Store, Clock: r.Clock, Started: r.Started}.Read(ctx, s.bot.UID, freshness)
	// A store that cannot answer counts as a fresh beat: no deployment is failed for lack of
	// liveness data (invariant 10), only delayed until the store answers again.
	fresh := !live.Known || live.BeatWithin(now, freshness)
	stale := decideStale(now, st.DeployingSince.Time, timing, live, st.SkippedRecoveries)
	verdict, listed, err := r.judge(ctx, s, poll, fresh)
	if err == nil && listed && (verdict.phase == v1.SlotError || verdict.phase == "" && stale == staleRecover) {
		// Failing the slot ends its bot: decide it on what Coolify says now, not on lists
		// up to a poll old. An outage that began since delays it (invariant 9), and a
		// deployment that finished meanwhile makes the slot Busy instead.
		verdict, _, err = r.judge(ctx, s, readNow, fresh)
	}
	if err != nil {
		return s.pollLater(ctx, err, poll)
	}
	switch verdict.phase {
	case v1.SlotBusy:
		r.toBusy(ctx, s, verdict.message)
		return nil
	case v1.SlotError:
		if err := s.cancelDeployment(ctx); err != nil {
			return err
		}
		r.toError(ctx, s, verdict.reason, verdict.message)
		return nil
	}

	switch stale {
	case staleRecover:
		if err := s.cancelDeployment(ctx); err != nil {
			return err
		}
		r.toError(ctx, s, string(v1.ReasonDeployingTimeout), "Deploying for longer than deployingTimeout without a recent heartbeat")
		return nil
	case staleSkip:
		st.SkippedRecoveries++
		st.DeployingSince = &metav1.Time{Time: now}
		st.Message = fmt.Sprintf("Still deploying, but bot %s beats: recovery skipped (%d of %d)", s.bot.Name, st.SkippedRecoveries, timing.SkipLimit())
		r.Recorder.Eventf(s.slot, s.related(), corev1.EventTypeNormal, v1.ReasonRecoverySkipped, "Recover", "%s", st.Message)
	case staleBusy:
		r.toBusy(ctx, s, "The bot has beaten through every skipped recovery: it runs")
		return nil
	}
	deadline := st.DeployingSince.Add(timing.DeployingTimeout.OrDefault(v1.DefaultDeployingTimeout)).Sub(now)
	s.after(poll)
	s.after(deadline + time.Second)
	return nil
}

// judge reads the slot's deployment (or, when none can be found, its application) and judges
// it. listed says the answer came from one of the pool's lists, which may be up to maxAge old;
// otherwise Coolify was asked about this deployment now.
func (r *Reconciler) judge(ctx context.Context, s *slotScope, maxAge time.Duration, fresh bool) (v deployVerdict, listed bool, err error) {
	st := &s.slot.Status
	dep, listed, err := r.findDeployment(ctx, s, maxAge)
	if err != nil {
		return deployVerdict{}, false, err
	}
	var app *coolify.Application
	if dep == nil {
		apps, err := r.Coolify.Apps(ctx, s.api, r.appTag(s), maxAge)
		if err != nil {
			return deployVerdict{}, false, err
		}
		if a, ok := apps[s.slot.Name]; ok && a.UUID == st.ApplicationUUID {
			app = &a
		}
		listed = true
	}
	return judgeDeployment(dep, app, r.Clock.Since(st.PhaseSince.Time), s.pool.Spec.Timing, fresh), listed, nil
}

// pollLater handles a failed Coolify read while deploying: it acts on nothing (invariant 9)
// and polls again at the usual cadence, not at the error backoff, which would grow to minutes
// during an outage and leave a finished deployment unnoticed long after Coolify returned.
func (s *slotScope) pollLater(ctx context.Context, err error, poll time.Duration) error {
	ctrl.LoggerFrom(ctx).Info("Reading the deployment failed; polling again", "error", err.Error())
	s.slot.Status.Message = "Deploying bot " + s.bot.Name + "; Coolify did not answer the last poll"
	if wait, ok := pass.CoolifyWait(err); ok {
		poll = max(poll, wait) // asking sooner would only be refused again
	}
	s.after(poll)
	return nil
}

// findDeployment returns the slot's deployment, reading in bulk: while it is active it is in
// the pool's shared list of active deployments; once it left that list, one GET reads how it
// ended. Without a uuid (Coolify de-duplicated the request), or with a phantom one (a full
// queue), the application's newest deployment is the one. nil when there is none; listed
// says the answer came from the shared list.
func (r *Reconciler) findDeployment(ctx context.Context, s *slotScope, maxAge time.Duration) (dep *coolify.Deployment, listed bool, err error) {
	st := &s.slot.Status
	if st.DeploymentUUID != "" {
		active, err := r.Coolify.ActiveDeployments(ctx, s.api, r.appTag(s), maxAge)
		if err != nil {
			return nil, false, err
		}
		if d, ok := active[st.DeploymentUUID]; ok {
			return &d, true, nil
		}
		d, err := s.api.GetDeployment(ctx, st.DeploymentUUID)
		if err == nil {
			return d, false, nil
		}
		if !errors.Is(err, coolify.ErrNotFound) {
			return nil, false, err
		}
	}
	_, deps, err := s.api.ListApplicationDeployments(ctx, st.ApplicationUUID, 0, 1)
	if err != nil || len(deps) == 0 {
		return nil, false, err
	}
	// A deployment still queued or running is the one our deploy joined (Coolify de-duplicates);
	// a finished one counts only if it began since this phase did (Coolify's clock may differ
	// from ours by a little).
	if deps[0].Status.Terminal() {
		if created, perr := time.Parse(time.RFC3339, deps[0].CreatedAt); perr == nil && created.Before(st.PhaseSince.Add(-time.Minute)) {
			return nil, false, nil
		}
	}
	st.DeploymentUUID = deps[0].DeploymentUUID
	return &deps[0], false, nil
}

// deploymentSince returns the application's newest deployment if it was created at or after
// since (to the second: Coolify's timestamps may be coarser than ours), else nil. A cancelled
// one is never the answer: only a bot that let go has its deployment cancelled.
func (s *slotScope) deploymentSince(ctx context.Context, since time.Time) (*coolify.Deployment, error) {
	_, deps, err := s.api.ListApplicationDeployments(ctx, s.slot.Status.ApplicationUUID, 0, 1)
	if err != nil || len(deps) == 0 || deps[0].Status == coolify.DeploymentCancelled {
		return nil, err
	}
	// Without a usable timestamp none is found, as before the lookup existed.
	if created, perr := time.Parse(time.RFC3339, deps[0].CreatedAt); perr == nil && !created.Before(since.Truncate(time.Second)) {
		return &deps[0], nil
	}
	return nil, nil
}

// cancelDeployment cancels the slot's deployment if it may still run. An error means Coolify
// did not confirm it: the caller must not move on (the pass fails and is retried). A
// deployment left queued would run after the slot was stopped and bound to its next bot, start
// a container with that bot's credential, and be replaced by that bot's own deployment in the
// middle of its meeting.
func (s *slotScope) cancelDeployment(ctx context.Context) error {
	uuid := s.slot.Status.DeploymentUUID
	if uuid == "" && s.slot.Status.ApplicationUUID != "" {
		// De-duplicated deploys carry no uuid: cancel the application's newest if it still runs,
		// or it would bring the container back after the stop.
		_, deps, err := s.api.ListApplicationDeployments(ctx, s.slot.Status.ApplicationUUID, 0, 1)
		switch {
		case errors.Is(err, coolify.ErrNotFound):
			return nil // the application is gone, and its deployments with it
		case err != nil:
			return fmt.Errorf("looking for the deployment to cancel: %w", err)
		case len(deps) > 0 && !deps[0].Status.Terminal():
			uuid = deps[0].DeploymentUUID
		}
	}
	if uuid == "" {
		return nil
	}
	// Cancel before stop: a stop does not cancel a deployment in flight, which could bring
	// the container back. A deployment already over answers 400; nothing to do then.
	if err := s.api.CancelDeployment(ctx, uuid); err != nil && !errors.Is(err, coolify.ErrBadRequest) && !errors.Is(err, coolify.ErrNotFound) {
		return fmt.Errorf("cancelling deployment %s: %w", uuid, err)
	}
	return nil
}
