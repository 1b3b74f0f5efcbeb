package slot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
)

// create makes sure the slot has a token and an application with its env, adopting an
// application of the same name left by a crash between create and record, then turns Idle.
func (r *Reconciler) create(ctx context.Context, s *slotScope) error {
	token, err := r.tokens().ensure(ctx, s.slot)
	if err != nil {
		return err
	}
	st := &s.slot.Status
	if srv := policy.SlotServer(s.slot, s.pool); st.ApplicationUUID == "" && policy.HealthOf(s.pool, srv) == v1.ServerNotFound {
		// Coolify would refuse the application (Server not found): say why the slot waits
		// instead of retrying a create that cannot succeed. The pool offers it no bot, and
		// a fixed server list (or Coolify seeing the server again) lets it go on.
		st.Message = "Waiting: server " + srv + " " + policy.OutBecause(v1.ServerNotFound)
		s.after(r.jittered(coolifyview.ServersRefresh))
		return nil
	}
	if st.ApplicationUUID == "" {
		tag := r.appTag(s)
		uuid, err := r.findOrCreateApp(ctx, s, tag)
		if err != nil {
			return err
		}
		st.ApplicationUUID, st.ApplicationTag, st.CoolifyInstance = uuid, tag, coolifyview.InstanceOf(s.api)
	}
	// Set here, and on a standby slot again with each fresh container's credential (see
	// rotateCredential): env changes apply only at the next deployment and may trigger a
	// rebuild, so they never change per bot.
	if err := r.setEnv(ctx, s, token); err != nil {
		return err
	}
	if standbyPool(s) {
		r.setStandby(s, v1.StandbyStarting) // the Idle step deploys its first container
	}
	r.describe(ctx, s, v1.SlotIdle, time.Time{})
	r.moveTo(s, v1.SlotIdle, "", "Application "+st.ApplicationUUID+" ready")
	return nil
}

// findOrCreateApp adopts the application a crash left between its create and its record, or
// creates one. Adoption is by name only after checking on our side that the application is
// this slot's (owner mark: cluster, namespace, pool, project, server; and the pool's image):
// Coolify's list carries no tags, an old server ignores the tag filter, and another cluster
// may run a pool of the same name in the same Coolify team.
func (r *Reconciler) findOrCreateApp(ctx context.Context, s *slotScope, tag string) (string, error) {
	r.Coolify.Invalidate(tag) // adopting needs the truth, not a cached list
	listed, err := s.api.ListApplications(ctx, tag)
	if err != nil {
		return "", fmt.Errorf("listing the pool's applications: %w", err)
	}
	for i := range listed {
		app := &listed[i]
		if app.Name != s.slot.Name || r.Coolify.Deleting(tag, app.UUID) {
			continue
		}
		if !coolifyview.Adoptable(app, tag, s.pool, policy.SlotServer(s.slot, s.pool)) {
			if coolifyview.CarriesTag(app, tag) {
				if err := r.replaceUnadoptable(ctx, s, tag, app); err != nil {
					return "", err
				}
			}
			continue
		}
		ctrl.LoggerFrom(ctx).Info("Adopting existing application", "appUUID", app.UUID)
		// Made by this slot in a pass that crashed before recording it: as good as created now
		// (its env may never have been set).
		s.createdFrom = app.DockerRegistryImageName + ":" + policy.TagOrLatest(app.DockerRegistryImageTag)
		s.slot.Status.Image = s.createdFrom
		return app.UUID, nil
	}
	p := s.pool.Spec
	server := policy.SlotServer(s.slot, s.pool)
	entry, _ := p.Coolify.Server(server) // unlisted (draining): no destination, the server's default
	image, imageTag := policy.CreateImage(s.pool, server)
	uuid, err := s.api.CreateDockerImageApplication(ctx, coolify.CreateApplicationRequest{
		ProjectUUID: p.Coolify.ProjectUUID, ServerUUID: server,
		EnvironmentName: p.Coolify.EnvironmentName, EnvironmentUUID: p.Coolify.EnvironmentUUID,
		DestinationUUID: entry.DestinationUUID,
		Image:           image, Tag: imageTag, PortsExposes: "3000", Name: s.slot.Name,
		Description: coolifyview.Marked(description(v1.SlotCreating, "", time.Time{}, ""), coolifyview.OwnerMark(tag, s.pool, server)),
		LimitsCPUs:  p.Resources.CPUs, LimitsMemory: p.Resources.Memory, Tags: []string{tag},
	})
	r.Coolify.Invalidate(tag)
	if err != nil {
		// A create that failed with a 5xx may have happened: the next pass adopts it by name.
		return "", fmt.Errorf("creating the application: %w", err)
	}
	s.createdFrom = image + ":" + policy.TagOrLatest(imageTag)
	s.slot.Status.Image = s.createdFrom
	return uuid, nil
}

// replaceUnadoptable deletes an application that carries this slot's name and the pool's
// tag but that the slot cannot adopt (another image, one its server no longer lists as
// pulled, or another placement), so that the slot's own create does not make a second one of
// its name (invariant 2). The tag names this cluster's pool and the API server keeps slot
// names unique, and a deleted slot keeps its name until Coolify has deleted its application:
// such an application is this slot's own create whose answer was lost, before the pool's
// template or placement changed (the model check found one made on the old tag of a
// rollout, seed 3457702266237806). It was never deployed by the slot, which never knew it; one
// that is not stopped serves someone, so it is left alone and the slot waits, with a Warning,
// for a person to stop or delete it.
func (r *Reconciler) replaceUnadoptable(ctx context.Context, s *slotScope, tag string, app *coolify.Application) error {
	if app.State() != coolify.StateExited {
		r.Recorder.Eventf(s.slot, nil, corev1.EventTypeWarning, v1.ReasonAdoptionRefused, "Create",
			"Application %s has this slot's name and the pool's tag but another image or placement, and it is %s: not adopted; stop or delete it in Coolify", app.UUID, app.Status)
		return pass.WaitFor(r.jittered(coolifyview.ServersRefresh), v1.ReasonAdoptionRefused,
			"Waiting: application "+app.UUID+" has this slot's name but another image or placement and is not stopped; stop or delete it in Coolify")
	}
	if err := s.api.DeleteApplication(ctx, app.UUID, coolify.AppLeftovers); err != nil && !errors.Is(err, coolify.ErrNotFound) {
		return fmt.Errorf("deleting application %s, made with this slot's name on another image or placement: %w", app.UUID, err)
	}
	r.Coolify.Deleted(tag, app.UUID)
	r.Recorder.Eventf(s.slot, nil, corev1.EventTypeNormal, v1.ReasonAdoptionRefused, "Create",
		"Application %s has this slot's name and the pool's tag but another image or placement: deleted, and a new one is created", app.UUID)
	ctrl.LoggerFrom(ctx).Info("Deleted an unadoptable application of the slot's name", "appUUID", app.UUID, "image", app.DockerRegistryImageName+":"+app.DockerRegistryImageTag)
	return nil
}

// idle starts a deployment for a newly bound bot, within the pool's deployment budget; a free
// slot only checks now and then that its application still exists.
func (r *Reconciler) idle(ctx context.Context, s *slotScope) error {
	st := &s.slot.Status
	if s.bot == nil {
		if st.DeployingSince != nil {
			// A deploy request for a bot that let go since failed, maybe after Coolify had
			// queued it: cancel and stop what it may have started.
			if err := s.cancelDeployment(ctx); err != nil {
				return err
			}
			r.moveTo(s, v1.SlotReleasing, "", "The bot let go before its deployment was confirmed")
			return nil // advance stops the container now, in this pass
		}
		switch {
		case standbyPool(s):
			return r.standbyIdle(ctx, s)
		case st.Standby != "": // the pool went back to Stopped
			if err := r.leaveStandby(ctx, s); err != nil || st.Standby != "" {
				return err
			}
		}
		// No container runs: the update takes nothing away from anyone.
		if done, err := r.updateInPlace(ctx, s); err != nil || done {
			return err
		}
		return r.checkApp(ctx, s, "")
	}
	if st.Standby == v1.StandbyReady {
		// Its container asks for work: it takes the bot from the bot API, no deployment.
		return r.standbyBound(ctx, s)
	}
	if !r.admit(ctx, s) {
		if !strings.HasPrefix(s.slot.Status.Message, "Coolify is busy") {
			s.slot.Status.Message = "Bot " + s.bot.Name + " bound; " + GateWaitMessage
		}
		s.after(r.jittered(r.gateRetry()))
		return nil
	}
	if stored, err := r.storedAsRead(ctx, s); err != nil || !stored {
		return err
	}
	now := r.Clock.Now()
	if done, err := r.joinUnanswered(ctx, s); err != nil || done {
		return err
	}
	if done, err := r.updateInPlace(ctx, s); err != nil || done { // one the free step has not updated yet
		return err
	}
	return r.deploy(ctx, s, now)
}

// storedAsRead reports whether the API server still holds the version of the slot this pass
// read, asked past the cache. A deploy request is decided on it: on an older version the slot
// may not show the deploy request a pass sent since (phase Deploying, or deployingSince after
// an unanswered one), and deploying again would restart the bot's container mid-call once
// the first deployment runs. The cache-lag guard (Writes.Stale) does not catch every such
// version: it knows the version a pass read, not one another writer (a label, kubectl) left
// between that read and the pass's status write, which replaces it too. A slot the cache
// shows behind waits for it (CacheWait), admission returned.
func (r *Reconciler) storedAsRead(ctx context.Context, s *slotScope) (bool, error) {
	if r.APIReader == nil {
		return true, nil
	}
	live := &v1.BotPoolSlot{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.slot), live); err != nil {
		return false, client.IgnoreNotFound(err) // gone: nothing to deploy
	}
	if live.UID == s.slot.UID && live.ResourceVersion == s.slot.ResourceVersion {
		return true, nil
	}
	s.after(pass.CacheWait)
	return false, nil
}

// joinUnanswered looks for a deployment a deploy request may have started without its answer:
// the last one failed, maybe after Coolify queued it (a proxy timing out), or the process
// before this one bound the slot and may have deployed before it could record it. A
// deployment since then is this bot's, and the slot follows it: deploying again would restart
// its container once it runs, killing the bot mid-call. done says the pass is over.
func (r *Reconciler) joinUnanswered(ctx context.Context, s *slotScope) (done bool, err error) {
	st := &s.slot.Status
	maybe := st.DeployingSince
	if maybe == nil && st.PhaseSince != nil && st.PhaseSince.Before(&metav1.Time{Time: r.Started}) {
		maybe = st.PhaseSince
	}
	if maybe == nil {
		return false, nil
	}
	dep, err := s.deploymentSince(ctx, maybe.Time)
	switch {
	case errors.Is(err, coolify.ErrNotFound): // the application is gone: no deployment to find
		r.recreate(s)
		return true, nil
	case err != nil:
		return true, fmt.Errorf("looking for a deployment requested without an answer: %w", err)
	case dep == nil:
		return false, nil
	}
	st.DeploymentUUID, st.SkippedRecoveries = dep.DeploymentUUID, 0
	r.moveTo(s, v1.SlotDeploying, "", "Deploying bot "+s.bot.Name+" (deployment "+dep.DeploymentUUID+", requested before without an answer)")
	s.after(r.jittered(s.pool.Spec.Timing.DeploymentPollInterval.OrDefault(v1.DefaultDeploymentPollInterval)))
	return true, nil
}

// readNow as a maxAge makes the bulk reader ask Coolify, whatever it read before.
const readNow = -1 * time.Nanosecond

func (r *Reconciler) toBusy(ctx context.Context, s *slotScope, msg string) {
	s.slot.Status.RecoveryAttempts = 0
	r.setStandby(s, "") // the container is the bot's now
	if s.pool != nil {
		r.Coolify.StartEnded(s.pool.UID, policy.SlotServer(s.slot, s.pool), false, r.Clock.Now())
	}
	r.describe(ctx, s, v1.SlotBusy, r.Clock.Now())
	r.recordDeployDuration(s)
	if since := s.slot.Status.DeployingSince; since != nil { // a standby slot deployed before its bot
		r.Metrics.TimeToBusy(r.Clock.Since(since.Time))
	}
	r.moveTo(s, v1.SlotBusy, "", msg)
	s.after(r.appCheck())
}

// busy waits for the bot to let go, checking now and then that the application still exists.
func (r *Reconciler) busy(ctx context.Context, s *slotScope) error {
	if s.bot == nil {
		r.moveTo(s, v1.SlotReleasing, "", "The bot let go")
		return nil // advance stops the container now, in this pass
	}
	return r.checkApp(ctx, s, string(v1.ReasonApplicationLost))
}

// checkApp confirms from the pool's shared list that the slot's application exists. A
// missing one is confirmed with a GET before acting: a list can be older than our own create.
func (r *Reconciler) checkApp(ctx context.Context, s *slotScope, lostReason string) error {
	next := r.jittered(r.appCheck())
	s.after(next)
	apps, err := r.Coolify.Apps(ctx, s.api, r.appTag(s), r.appCheck())
	if err != nil {
		// A failed list never acts (invariant 9), and is no reconcile failure: the next
		// check tries again.
		ctrl.LoggerFrom(ctx).V(1).Info("Listing the pool's applications failed", "error", err.Error())
		return pass.WaitFor(next, "", "")
	}
	if a, ok := apps[s.slot.Name]; ok && a.UUID == s.slot.Status.ApplicationUUID {
		if r.strayContainer(s, a.Status) {
			r.moveTo(s, v1.SlotReleasing, "", "Its container still runs after the slot stopped it ("+a.Status+
				"): Coolify lost the stop (it drops stops sent to a server it cannot reach); stopping it again")
		}
		return nil
	}
	if _, err := s.api.GetApplication(ctx, s.slot.Status.ApplicationUUID); !errors.Is(err, coolify.ErrNotFound) {
		return nil
	}
	if lostReason != "" {
		r.toError(ctx, s, lostReason, "The application "+s.slot.Status.ApplicationUUID+" was deleted behind the operator's back")
		return nil
	}
	r.recreate(s)
	return nil
}

// strayContainer reports whether a free slot of a Stopped pool (no standby container, no
// deploy request pending) has a container running well after it stopped it: a stop Coolify
// lost, which it does when the server is not reachable (the job gives up, and the container
// runs on when the server is back) — with whatever meeting it was in.
func (r *Reconciler) strayContainer(s *slotScope, status string) bool {
	st := &s.slot.Status
	if s.bot != nil || s.slot.Spec.BotRef != nil || st.Phase != v1.SlotIdle || st.Standby != "" || st.DeployingSince != nil || st.PhaseSince == nil {
		return false
	}
	running := strings.HasPrefix(status, "running") || strings.HasPrefix(status, "restarting") || strings.HasPrefix(status, "starting")
	return running && r.Clock.Since(st.PhaseSince.Time) > policy.StrayAfter
}

// releasing stops the container and returns the slot to the pool.
func (r *Reconciler) releasing(ctx context.Context, s *slotScope) error {
	st := &s.slot.Status
	stopped, err := r.stop(ctx, s, "Stopping the container")
	if err != nil {
		// Not a failure of the pass: the slot moves to Error, whose recovery retries.
		r.toError(ctx, s, string(v1.ReasonStopFailed), "Stopping the container failed: "+err.Error())
	}
	if !stopped { // a definitive failure is not stopped either
		return nil
	}
	if done, err := r.freshCredential(ctx, s); err != nil || done {
		return err
	}
	now := r.Clock.Now()
	st.LastUsedAt = &metav1.Time{Time: now}
	st.RecoveryAttempts, st.SkippedRecoveries = 0, 0
	st.DeploymentUUID, st.DeployingSince = "", nil
	r.describe(ctx, s, v1.SlotIdle, now)
	r.moveTo(s, v1.SlotIdle, "", "Released")
	return nil
}

// stop stops the slot's container. stopped=false with a nil error means the caller is done
// for this pass: the application is gone (the slot goes back to Creating), or Coolify did not
// answer (tried again soon; a busy Coolify never fails a slot). A definitive failure is err.
func (r *Reconciler) stop(ctx context.Context, s *slotScope, doing string) (stopped bool, err error) {
	err = s.api.Stop(ctx, s.slot.Status.ApplicationUUID)
	switch {
	case errors.Is(err, coolify.ErrNotFound):
		r.recreate(s)
		return false, nil
	case transient(err):
		s.slot.Status.Message = doing + ": Coolify did not answer; retrying"
		retry := r.jittered(transientRetry)
		if wait, ok := pass.CoolifyWait(err); ok {
			retry = wait
		}
		s.after(retry)
		return false, nil
	}
	return err == nil, err
}

// transient reports whether a Coolify error may pass by itself: worth retrying, never a
// reason to fail or delete anything.
func transient(err error) bool {
	return errors.Is(err, coolify.ErrServer) || errors.Is(err, coolify.ErrTransport) ||
		errors.Is(err, coolify.ErrRateLimited) || errors.Is(err, coolify.ErrQueueFull) || errors.Is(err, coolify.ErrThrottled) ||
		errors.Is(err, context.DeadlineExceeded)
}

// GateWaitMessage ends the message of a bound slot the deploy gate holds back.
const GateWaitMessage = "waiting for one of the pool's deployment slots"

// transientRetry is how soon a step Coolify did not answer is tried again.
const transientRetry = 10 * time.Second

// recreate sends a slot whose application is gone back to Creating, which creates it again
// under the same name (a bound bot stays bound and deploys once it exists).
func (r *Reconciler) recreate(s *slotScope) {
	s.slot.Status.ApplicationUUID = ""
	r.moveTo(s, v1.SlotCreating, string(v1.ReasonApplicationLost), "The application is gone (deleted behind the operator's back?); creating it again")
}

// toError moves the slot to Error; recovery runs on the next pass.
func (r *Reconciler) toError(ctx context.Context, s *slotScope, reason, msg string) {
	switch v1.BotReason(reason) {
	case v1.ReasonDeploymentFailed, v1.ReasonDeploymentLost, v1.ReasonApplicationLost, v1.ReasonDeploymentTimeout:
		// What a server outage looks like from a slot: the pool reads the servers' health
		// again on its next pass instead of within the minute, and counts the failure
		// against the server for itself (server_failures.go).
		r.Coolify.ServersSuspect(s.api)
		if s.pool != nil {
			r.Coolify.StartEnded(s.pool.UID, policy.SlotServer(s.slot, s.pool), true, r.Clock.Now())
		}
	}
	s.slot.Status.RecoveryAttempts++
	r.describe(ctx, s, v1.SlotError, time.Time{}, msg)
	r.moveTo(s, v1.SlotError, reason, msg)
	r.Metrics.Recovery(reason) // the status update brings the slot back to recover
}

// recover stops the container of a failed slot and returns it to Idle. A bound bot is ended
// first, by the Bot controller, with the slot's reason and message (which stay as they are
// until then), or goes back to the queue when its start failed and it has another (see
// judgeStart); either brings the slot back, and releaseOrphan lets it go. A slot that failed
// maxRecoveryAttempts times in a row is deleted with its application; the pool creates a
// fresh one on demand.
func (r *Reconciler) recover(ctx context.Context, s *slotScope) error {
	st := &s.slot.Status
	if s.bot != nil {
		s.after(r.jittered(transientRetry)) // in case the bot's end is missed: it wakes the slot
		return nil
	}
	if limit := s.pool.Spec.Timing.MaxRecoveryAttempts; limit > 0 && st.RecoveryAttempts >= limit {
		ctrl.LoggerFrom(ctx).Info("Slot failed too often: deleting it", "recoveryAttempts", st.RecoveryAttempts)
		r.Recorder.Eventf(s.slot, nil, corev1.EventTypeWarning, v1.ReasonSlotRetired, "Delete",
			"Failed %d times in a row (last: %s): deleting the slot and its application", st.RecoveryAttempts, st.Reason)
		return client.IgnoreNotFound(r.Client.Delete(ctx, s.slot))
	}
	if st.ApplicationUUID == "" {
		r.moveTo(s, v1.SlotCreating, st.Reason, "Creating the application again")
		return nil
	}
	stopped, err := r.stop(ctx, s, "Recovering")
	if err != nil {
		// Counted and retried on our own schedule, not the error backoff.
		st.RecoveryAttempts++
		return pass.WaitFor(time.Duration(st.RecoveryAttempts)*transientRetry, "", "Recovery failed: "+err.Error())
	}
	if !stopped {
		return nil
	}
	if done, err := r.freshCredential(ctx, s); err != nil || done {
		return err
	}
	st.DeploymentUUID, st.DeployingSince, st.SkippedRecoveries = "", nil, 0
	r.describe(ctx, s, v1.SlotIdle, time.Time{})
	r.moveTo(s, v1.SlotIdle, v1.ReasonRecovered, "Recovered from "+st.Reason)
	return nil
}

// describe sets the application's description for a phase. It is informational: a failure is
// logged, never fatal to the transition.
func (r *Reconciler) describe(ctx context.Context, s *slotScope, phase v1.SlotPhase, at time.Time, msg ...string) {
	uuid := s.slot.Status.ApplicationUUID
	if uuid == "" {
		return
	}
	bot := ""
	if s.bot != nil {
		bot = s.bot.Name
	}
	if phase == v1.SlotIdle && at.IsZero() && s.slot.Status.LastUsedAt != nil {
		at = s.slot.Status.LastUsedAt.Time
	}
	var m string
	if len(msg) > 0 {
		m = msg[0]
	}
	if err := s.api.SetDescription(ctx, uuid, coolifyview.Marked(description(phase, bot, at, m), coolifyview.OwnerMark(r.appTag(s), s.pool, policy.SlotServer(s.slot, s.pool)))); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Setting the application's description failed")
	}
}

// deleteCheck is how often a deleted slot looks whether Coolify has deleted its application.
const deleteCheck = 5 * time.Second
