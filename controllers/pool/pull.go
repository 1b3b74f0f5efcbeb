package pool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
)

// The pool's image pre-pull: the pool pulls its template image once on each of its Active
// servers, off the start path, so that no bot waits for a cold pull (issue 17). A pull is a
// deployment of the pool's puller application on that server (botpool-pull-<server uuid>, the
// pool's tag and owner mark), whose container holds no credential and is stopped as soon as
// the deployment finished: Coolify keeps the image in the server's cache. The outcome is
// status.servers[].cached (the images a slot may be given there) and .pull (the pull in
// flight, or the last one that failed). The pool writes both, and nobody else.

const (
	// PullerPrefix starts the name of a pool's puller application on a server. Slot names
	// (pool-<platform>-NNN) never start with it, so the orphan sweep, which takes slot names
	// only, never takes a puller.
	PullerPrefix = "botpool-pull-"
	// PrePullEnv is the one variable of a puller's container, set to "1": a bot image should
	// exit at once when it is set (docs/botapi.md). The puller holds no other: its container
	// runs the pool's image, which the operator does not trust with a credential.
	PrePullEnv = "BOTPOOL_PREPULL"
	// rePullAge is when a pre-pull is repeated whatever the server's cleanup schedule says:
	// Coolify's Docker cleanup also runs, unannounced, when the disk fills, and the schedule
	// may be unknown (server_cleanup.go). The image stays listed in cached meanwhile.
	rePullAge = 24 * time.Hour
	// minRePull is the least time between two pulls of an image on a server for its cleanup
	// schedule: a schedule of every minute must not keep the puller deploying.
	minRePull = coolifyview.CleanupRefresh
	// maxCached is how many images status.servers[].cached lists (the CRD's MaxItems).
	maxCached = 3
	// maxAppName is Coolify's limit on an application's name.
	maxAppName = 255
	// pullerDescription is the puller application's description, before the owner mark.
	pullerDescription = "botpool image puller: its deployments pull the pool's image onto this server; " +
		"its container is stopped at once"
)

// pullerName is the name of the pool's puller application on the server. A server uuid is at
// most 64 characters, so the cut never applies to a valid pool.
func pullerName(server string) string {
	name := PullerPrefix + server
	if len(name) > maxAppName {
		name = name[:maxAppName]
	}
	return name
}

// isPuller reports whether the application is this pool's puller, and on which server: its
// name and the exact owner mark of that server (the tag filter may be ignored by old servers,
// and another pool's puller on the same server has the same name).
func isPuller(app *coolify.Application, tag string, pool *v1.BotPool) (server string, ok bool) {
	server, ok = strings.CutPrefix(app.Name, PullerPrefix)
	if !ok || server == "" || !strings.HasSuffix(app.Description, coolifyview.OwnerMark(tag, pool, server)) {
		return "", false
	}
	return server, true
}

// prePull pulls the pool's template image on each Active server whose health is not out and
// that lacks it (or holds it from a pull that a scheduled Docker cleanup of the server, or
// rePullAge, has passed since), follows the pulls in flight
// (on every listed server: a pull on a server since cordoned is followed to its end), and
// deletes the pullers of servers the pool no longer lists. Servers are handled one by one; an
// error on one does not keep the others from their pulls.
func (r *Reconciler) prePull(ctx context.Context, s *poolScope) error {
	if s.api == nil {
		return nil
	}
	// Housekeeping: nobody waits on a pre-pull now. A slot is given an image only once its
	// server holds it, and takes the one it has until then, so a waiting bot's deploy (the
	// start path) must never queue behind a pull's requests when the user's budget is short.
	ctx = coolify.WithPriority(ctx, coolify.Housekeeping)
	errs := []error{r.dropUnlisted(ctx, s)}
	replacing := 0
	for _, im := range s.images {
		if im.Pull != nil && im.Pull.State == v1.ImagePulling && len(im.Cached) > 0 {
			replacing++
		}
	}
	listed := map[string]bool{}
	for _, srv := range s.pool.Spec.Coolify.ServerList() {
		listed[srv.UUID] = true
		if err := r.prePullOn(ctx, s, srv, &replacing); err != nil {
			errs = append(errs, fmt.Errorf("pre-pull on server %s: %w", srv.UUID, err))
		}
		r.notePull(s, srv.UUID, true)
	}
	for uuid := range s.images {
		if !listed[uuid] {
			r.notePull(s, uuid, false) // no longer followed: its puller goes (dropUnlisted)
		}
	}
	return errors.Join(errs...)
}

// notePull tells the deploy gate whether the pool's pull on the server is in flight after
// this pass (one on a server it no longer lists is not followed, and counts no more): the gate
// counts it against the server's builds (AdmitPull).
func (r *Reconciler) notePull(s *poolScope, uuid string, listed bool) {
	if r.Gate == nil {
		return
	}
	im := s.images[uuid]
	inFlight := listed && im != nil && im.Pull != nil && im.Pull.State == v1.ImagePulling
	r.Gate.Pulling(client.ObjectKeyFromObject(s.pool), coolifyview.ServerFor(s.api, r.Coolify, uuid).Key, inFlight)
}

// prePullOn decides one server's pull in this pass: follow the one in flight, start one, or
// wait for the retry of one that failed.
//
// A pull that replaces an image the server holds (a rollout, a re-pull) waits while another
// such pull of the pool runs (replacing counts them): a pull holds one of its server's two
// builds and one of the Coolify instance's few deployment workers for minutes, and the bots
// starting meanwhile on the old image need both (BenchmarkRollout on three servers: starts
// took 2.5 times as long while three pulls ran at once). A server that holds no image of the
// pool yet pulls at once: a start there would pull cold anyway.
func (r *Reconciler) prePullOn(ctx context.Context, s *poolScope, srv v1.PoolServer, replacing *int) error {
	im := s.images[srv.UUID]
	if im == nil {
		im = &policy.ServerImages{}
		s.images[srv.UUID] = im
	}
	active := policy.ServerState(s.pool, srv.UUID) == v1.ServerActive && !poolHealth(s, srv.UUID).Out()
	var ref, restarted string
	if s.template != nil { // unreadable: pulls in flight are followed, none is started
		ref, restarted = s.template.Ref(), policy.RestartedAt(s.pool)
	}
	if p := im.Pull; p != nil && p.State == v1.ImagePulling {
		wasReplacing := len(im.Cached) > 0
		if active && ref != "" && !policy.PullOf(p, ref, restarted) {
			// The template changed under the pull: it is not wanted any more, and the next one
			// starts now instead of after it (the puller runs one deployment at a time).
			if err := r.cancelLive(ctx, s.api, p.ApplicationUUID, p.DeploymentUUID); err != nil {
				return err
			}
			ctrl.LoggerFrom(ctx).Info("Pre-pull superseded by a template change", "server", srv.UUID, "image", p.Image, "deploymentUUID", p.DeploymentUUID)
			r.pullPolls.forget(p.DeploymentUUID)
			im.Pull = nil
		} else if done, err := r.followPull(ctx, s, srv.UUID, im); err != nil || !done {
			return err
		}
		if wasReplacing && (im.Pull == nil || im.Pull.State != v1.ImagePulling) {
			*replacing-- // it ended in this pass (or was superseded): the next may start
		}
	}
	now := r.Clock.Now()
	if !active || ref == "" {
		return nil
	}
	var cleanup coolify.CleanupSchedule // read only when its answer matters
	if pulled, ok := pulledAt(im.Cached, ref, restarted); ok && r.Coolify != nil &&
		now.Sub(pulled) >= minRePull && now.Sub(pulled) < rePullAge {
		cleanup = r.Coolify.CleanupSchedule(ctx, s.api, srv.UUID)
	}
	if !needsPull(im.Cached, ref, restarted, now, cleanup) {
		return nil
	}
	if p := im.Pull; p != nil && p.State == v1.ImagePullFailed && policy.PullOf(p, ref, restarted) {
		wait := policy.PullBackoff(p.Failures)
		if s.pool.Spec.Standby.Running() && len(im.Cached) == 0 {
			// Its standby containers wait for this pull (FailedPull) with no other image to
			// run: the pull is the only probe of a fixed tag, and must not wait 30 minutes.
			wait = policy.PullRetry
		}
		if retry := p.Since.Add(wait); now.Before(retry) {
			s.after(retry.Sub(now))
			return nil
		}
	}
	if len(im.Cached) > 0 {
		if *replacing > 0 {
			// After the pull in flight; looked at again at its poll interval, so a server
			// before it in the list starts in time when it ends.
			s.after(s.pool.Spec.Timing.DeploymentPollInterval.OrDefault(v1.DefaultDeploymentPollInterval))
			return nil
		}
		*replacing++
	}
	if r.Gate != nil && !r.Gate.AdmitPull(client.ObjectKeyFromObject(s.pool), coolifyview.ServerFor(s.api, r.Coolify, srv.UUID)) {
		// The server's builds go to the deployments bots wait for first: the pull waits for
		// room there, looked at again at the poll interval.
		ctrl.LoggerFrom(ctx).V(1).Info("Pre-pull waits for room on the server", "server", srv.UUID, "image", ref)
		s.after(s.pool.Spec.Timing.DeploymentPollInterval.OrDefault(v1.DefaultDeploymentPollInterval))
		return nil
	}
	return r.startPull(ctx, s, srv, im, ref, restarted)
}

// poolHealth is the server's health by this pass's read, else as the status last recorded it.
func poolHealth(s *poolScope, server string) v1.ServerHealth {
	if h, ok := s.health[server]; ok {
		return h
	}
	return policy.HealthOf(s.pool, server)
}

// needsPull reports whether the server must pull ref (under restarted): cached lacks it, a
// scheduled run of the server's Docker cleanup may have removed it since its pull
// (CleanedSince; cleanup is the zero schedule when unknown), or its pull is rePullAge old.
func needsPull(cached []v1.CachedImage, ref, restarted string, now time.Time, cleanup coolify.CleanupSchedule) bool {
	pulled, ok := pulledAt(cached, ref, restarted)
	return !ok || now.Sub(pulled) >= rePullAge || CleanedSince(cleanup, pulled, now)
}

// pulledAt is when the server's last pull of ref (under restarted) finished; false when cached
// lacks it.
func pulledAt(cached []v1.CachedImage, ref, restarted string) (time.Time, bool) {
	i := slices.IndexFunc(cached, func(c v1.CachedImage) bool { return c.Image == ref && c.RestartedAt == restarted })
	if i < 0 {
		return time.Time{}, false
	}
	return cached[i].PulledAt.Time, true
}

// CleanedSince reports whether a scheduled run of the cleanup may have removed an image pulled
// at pulled: a run was due after it (or up to CleanupSettle before it, still running as the
// pull ended) and has had CleanupSettle to end by now. Never within minRePull of the pull, and
// never while the schedule is unknown (the zero schedule).
func CleanedSince(cleanup coolify.CleanupSchedule, pulled, now time.Time) bool {
	run := cleanup.Next(pulled.Add(-coolifyview.CleanupSettle))
	return !run.IsZero() && !now.Before(run.Add(coolifyview.CleanupSettle)) && now.Sub(pulled) >= minRePull
}

// withCached puts a finished pull first in cached, replacing an older entry of the same image,
// and keeps at most maxCached.
func withCached(cached []v1.CachedImage, c v1.CachedImage) []v1.CachedImage {
	out := []v1.CachedImage{c}
	for _, old := range cached {
		if old.Image != c.Image && len(out) < maxCached {
			out = append(out, old)
		}
	}
	return out
}

// startPull deploys the server's puller with the template's image and records the pull.
func (r *Reconciler) startPull(ctx context.Context, s *poolScope, srv v1.PoolServer, im *policy.ServerImages, ref, restarted string) error {
	known := ""
	if im.Pull != nil {
		known = im.Pull.ApplicationUUID
	}
	app, err := r.findOrCreatePuller(ctx, s, srv, known)
	if err != nil {
		return err
	}
	// Set on every pull, so an application adopted after a crash between its create and its
	// env has it too; never anything else (no slotEnvFrom, no token).
	if _, err := s.api.UpsertEnvs(ctx, app.UUID, []coolify.EnvVar{{Key: PrePullEnv, Value: "1", IsLiteral: true}}); err != nil {
		return fmt.Errorf("setting the puller's env: %w", err)
	}
	if u := pullerUpdate(app, s.template); u != (coolify.AppUpdate{}) {
		if err := s.api.UpdateApplication(ctx, app.UUID, u); err != nil {
			return fmt.Errorf("giving the puller image %s: %w", ref, err)
		}
	}
	res, err := s.api.Deploy(ctx, app.UUID)
	var apiErr *coolify.APIError
	switch {
	case errors.As(err, &apiErr) && (errors.Is(err, coolify.ErrQueueFull) || errors.Is(err, coolify.ErrRateLimited)):
		// No room on the server now: nothing is wrong, the pull waits as Coolify asks.
		ctrl.LoggerFrom(ctx).Info("Coolify has no room for the pre-pull now; trying again later", "server", srv.UUID, "reason", apiErr.Message)
		s.after(max(apiErr.RetryAfter, time.Second))
		return nil
	case err != nil:
		return fmt.Errorf("deploying the puller: %w", err)
	}
	dep := res.DeploymentUUID
	if dep == "" {
		// Coolify de-duplicated: a deployment of the puller that this pass did not start is
		// live (a pass that deployed and crashed before its status write, or whose deploy
		// Coolify carried out but answered with an error). It is this pull only while still
		// queued: a worker reads the puller's image, and the registry, when it takes it. One in
		// progress may have pulled before this pass, another image or the tag before the push
		// a restartedAt announced, and a slot given the template on its word would pull cold:
		// it is cancelled, and the next pass deploys again. Nothing is recorded until then.
		_, deps, err := s.api.ListApplicationDeployments(ctx, app.UUID, 0, 1)
		if err != nil {
			return fmt.Errorf("looking for the puller's live deployment: %w", err)
		}
		if len(deps) == 0 || deps[0].Status != coolify.DeploymentQueued {
			if len(deps) > 0 && !deps[0].Status.Terminal() {
				// Unless it is this very pull, which an earlier pass started and recorded in a
				// status the cache does not show yet: cancelling it would fail the pull that
				// status names (seen under load: the pool said ImagePullFailed of an image its
				// slots ran).
				mine, err := r.recordedPull(ctx, s.pool, srv.UUID, deps[0].DeploymentUUID, ref, restarted)
				if err != nil {
					return err
				}
				if mine != nil {
					im.Pull = mine
					s.after(s.pool.Spec.Timing.DeploymentPollInterval.OrDefault(v1.DefaultDeploymentPollInterval))
					return nil
				}
				if err := r.cancelLive(ctx, s.api, app.UUID, deps[0].DeploymentUUID); err != nil {
					return err
				}
				ctrl.LoggerFrom(ctx).Info("The puller's deployment in flight may pull an earlier image; cancelled, pulling again",
					"server", srv.UUID, "image", ref, "deploymentUUID", deps[0].DeploymentUUID)
			}
			s.after(s.pool.Spec.Timing.DeploymentPollInterval.OrDefault(v1.DefaultDeploymentPollInterval))
			return nil
		}
		dep = deps[0].DeploymentUUID
	}
	now := r.Clock.Now()
	var failures int32 // carried from the failed pulls of the same image before it
	if p := im.Pull; p != nil && p.State == v1.ImagePullFailed && policy.PullOf(p, ref, restarted) {
		failures = p.Failures
	}
	im.Pull = &v1.ImagePull{Image: ref, State: v1.ImagePulling, ApplicationUUID: app.UUID, DeploymentUUID: dep,
		RestartedAt: restarted, Since: metav1.NewTime(now), Failures: failures}
	r.pullPolls.mark(dep, now)
	r.Recorder.Eventf(s.pool, nil, corev1.EventTypeNormal, v1.ReasonImagePullStarted, "PrePull",
		"Pulling %s on server %s (puller application %s, deployment %s)", ref, srv.UUID, app.UUID, dep)
	s.after(s.pool.Spec.Timing.DeploymentPollInterval.OrDefault(v1.DefaultDeploymentPollInterval))
	return nil
}

// recordedPull reads the pool past the cache and returns the pull its status records on the
// server when that is deployment dep of ref (restarted), or nil.
func (r *Reconciler) recordedPull(ctx context.Context, pool *v1.BotPool, server, dep, ref, restarted string) (*v1.ImagePull, error) {
	live := &v1.BotPool{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(pool), live); err != nil {
		return nil, fmt.Errorf("reading the pool's recorded pulls: %w", err)
	}
	for _, st := range live.Status.Servers {
		if p := st.Pull; st.UUID == server && p != nil && p.State == v1.ImagePulling && p.DeploymentUUID == dep &&
			p.Image == ref && p.RestartedAt == restarted {
			return p.DeepCopy(), nil
		}
	}
	return nil, nil
}

// findOrCreatePuller adopts the server's puller (by name and owner mark, preferring the one the
// status recorded), or creates it. The list is read past the shared cache, as a slot's create
// does: a puller a crash left between its create and its record must be found, not doubled.
func (r *Reconciler) findOrCreatePuller(ctx context.Context, s *poolScope, srv v1.PoolServer, known string) (*coolify.Application, error) {
	tag := r.tag(s.pool)
	listed, err := s.api.ListApplications(ctx, tag)
	if err != nil {
		return nil, fmt.Errorf("listing the pool's applications: %w", err)
	}
	var found *coolify.Application
	for i := range listed {
		app := &listed[i]
		if server, ok := isPuller(app, tag, s.pool); !ok || server != srv.UUID || r.Coolify.Deleting(tag, app.UUID) {
			continue
		}
		if found == nil || app.UUID == known {
			found = app
		}
	}
	if found != nil {
		if found.UUID != known {
			ctrl.LoggerFrom(ctx).Info("Adopting the server's puller application", "server", srv.UUID, "appUUID", found.UUID)
		}
		return found, nil
	}
	t, p := s.template, s.pool.Spec.Coolify
	uuid, err := s.api.CreateDockerImageApplication(ctx, coolify.CreateApplicationRequest{
		ProjectUUID: p.ProjectUUID, ServerUUID: srv.UUID,
		EnvironmentName: p.EnvironmentName, EnvironmentUUID: p.EnvironmentUUID,
		DestinationUUID: srv.DestinationUUID,
		Image:           t.Image, Tag: t.EffectiveTag(), PortsExposes: "3000", Name: pullerName(srv.UUID),
		Description: coolifyview.Marked(pullerDescription, coolifyview.OwnerMark(tag, s.pool, srv.UUID)),
		LimitsCPUs:  t.CPUs, LimitsMemory: t.Memory, Tags: []string{tag},
	})
	r.Coolify.Invalidate(tag)
	if err != nil {
		// A create that failed with a 5xx may have happened: the next pull adopts it by name.
		return nil, fmt.Errorf("creating the puller application: %w", err)
	}
	return &coolify.Application{UUID: uuid, Name: pullerName(srv.UUID), DockerRegistryImageName: t.Image,
		DockerRegistryImageTag: t.EffectiveTag(), LimitsCPUs: t.CPUs, LimitsMemory: t.Memory}, nil
}

// pullerUpdate is what the puller needs changed to pull the template: its image and tag, and
// its limits (the pool's, which bound the container until it is stopped). Zero when nothing.
func pullerUpdate(app *coolify.Application, t *policy.SlotTemplate) coolify.AppUpdate {
	var u coolify.AppUpdate
	tag := app.DockerRegistryImageTag
	if tag == "" {
		tag = v1.DefaultImageTag
	}
	if app.DockerRegistryImageName != t.Image || tag != t.EffectiveTag() {
		u.Image, u.Tag = t.Image, t.EffectiveTag()
	}
	limit := func(want string) string {
		if want == "" {
			return coolify.NoLimit
		}
		return want
	}
	cpus, memory := app.Limits()
	if cpus != t.CPUs {
		u.CPUs = limit(t.CPUs)
	}
	if memory != t.Memory {
		u.Memory = limit(t.Memory)
	}
	return u
}

// followPull looks at the server's pull in flight, at most once per deploymentPollInterval:
// done says it is no longer in flight (cached, failed, or lost, then im.Pull is nil).
func (r *Reconciler) followPull(ctx context.Context, s *poolScope, server string, im *policy.ServerImages) (done bool, err error) {
	p := im.Pull
	timing := s.pool.Spec.Timing
	poll := timing.DeploymentPollInterval.OrDefault(v1.DefaultDeploymentPollInterval)
	timeout := timing.DeploymentTimeout.OrDefault(v1.DefaultDeploymentTimeout)
	now := r.Clock.Now()
	late := now.Sub(p.Since.Time) >= timeout
	if p.DeploymentUUID == "" {
		// Recorded without one (by a version that recorded a de-duplicated deploy whose
		// look-up failed): the newest.
		_, deps, err := s.api.ListApplicationDeployments(ctx, p.ApplicationUUID, 0, 1)
		switch {
		case err != nil && !errors.Is(err, coolify.ErrNotFound):
			return false, fmt.Errorf("looking for the puller's deployment: %w", err)
		case len(deps) == 0:
			r.lostPull(ctx, server, im)
			return true, nil
		}
		p.DeploymentUUID = deps[0].DeploymentUUID
	}
	if wait := r.pullPolls.wait(p.DeploymentUUID, now, poll); wait > 0 && !late {
		s.after(wait)
		return false, nil
	}
	dep, err := s.api.GetDeployment(ctx, p.DeploymentUUID)
	switch {
	case errors.Is(err, coolify.ErrNotFound):
		r.lostPull(ctx, server, im)
		return true, nil
	case err != nil:
		return false, fmt.Errorf("following the puller's deployment %s: %w", p.DeploymentUUID, err)
	}
	switch dep.Status {
	case coolify.DeploymentFinished:
		// The image is in the server's cache; the container is not wanted. A stop that fails
		// keeps the pull in flight: the next pass finds it finished again and stops again.
		if err := s.api.Stop(ctx, p.ApplicationUUID); err != nil && !errors.Is(err, coolify.ErrNotFound) {
			return false, fmt.Errorf("stopping the puller after its pull: %w", err)
		}
		r.pullPolls.forget(p.DeploymentUUID)
		took := &metav1.Duration{Duration: now.Sub(p.Since.Time)}
		im.PullDuration, im.Pull = took, nil
		if p.RestartedAt != policy.RestartedAt(s.pool) {
			// The annotation changed while it ran (a pull followed to its end on a server
			// cordoned or out, which is not cancelled): it announced a new push of the tag the
			// pool had then, perhaps this very one, which the pull started before. Recorded,
			// it was not filtered as stale once the pool had moved to another tag (FreshCached
			// knows only the pool's own image), and a slot created on it pulled cold (the
			// model check, seed 2574853505207255). Not recorded: the next pass pulls again.
			ctrl.LoggerFrom(ctx).Info("Pre-pull finished under an earlier restartedAt; not recorded", "server", server, "image", p.Image, "restartedAt", p.RestartedAt)
			return true, nil
		}
		im.Cached = withCached(im.Cached, v1.CachedImage{Image: p.Image, PulledAt: metav1.NewTime(now), RestartedAt: p.RestartedAt,
			PullDuration: took})
		r.Recorder.Eventf(s.pool, nil, corev1.EventTypeNormal, v1.ReasonImagePulled, "PrePull",
			"Pulled %s on server %s in %s", p.Image, server, now.Sub(p.Since.Time).Round(time.Second))
		return true, nil
	case coolify.DeploymentFailed, coolify.DeploymentCancelled:
		r.failPull(s, p, pullFailure(p, server, dep))
		return true, nil
	}
	if late {
		// Cancelled, not left running: it holds one of the server's build slots.
		if err := r.cancelLive(ctx, s.api, p.ApplicationUUID, p.DeploymentUUID); err != nil {
			return false, err
		}
		r.failPull(s, p, fmt.Sprintf("Pulling %s on server %s failed: it did not finish within the pool's deploymentTimeout %s (deployment %s cancelled)",
			p.Image, server, timeout, p.DeploymentUUID))
		return true, nil
	}
	r.pullPolls.mark(p.DeploymentUUID, now)
	s.after(min(poll, p.Since.Add(timeout).Sub(now)))
	return false, nil
}

// lostPull forgets a pull whose deployment Coolify does not know (a phantom or a purged one):
// the server pulls again in this pass if it still needs to.
func (r *Reconciler) lostPull(ctx context.Context, server string, im *policy.ServerImages) {
	ctrl.LoggerFrom(ctx).Info("Pre-pull lost: Coolify does not know its deployment; pulling again", "server", server,
		"image", im.Pull.Image, "deploymentUUID", im.Pull.DeploymentUUID)
	r.pullPolls.forget(im.Pull.DeploymentUUID)
	im.Pull = nil
}

// failPull records a failed pull, one more in a row; it is retried PullBackoff from now.
func (r *Reconciler) failPull(s *poolScope, p *v1.ImagePull, msg string) {
	r.pullPolls.forget(p.DeploymentUUID)
	p.State, p.Since, p.Message = v1.ImagePullFailed, metav1.NewTime(r.Clock.Now()), v1.Truncate(msg, v1.MaxMessageLength)
	p.Failures++
	r.Recorder.Eventf(s.pool, nil, corev1.EventTypeWarning, v1.ReasonImagePullFailed, "PrePull", "%s", p.Message)
	s.after(policy.PullBackoff(p.Failures))
}

// pullFailure says why a pull's deployment failed, with Coolify's error line when the token
// may read the log.
func pullFailure(p *v1.ImagePull, server string, dep *coolify.Deployment) string {
	what := "Pulling " + p.Image + " on server " + server + " failed: "
	line, err := dep.LastErrorLine()
	switch {
	case errors.Is(err, coolify.ErrLogsHidden):
		return what + "deployment " + dep.DeploymentUUID + " is " + string(dep.Status) +
			"; its log is hidden, since the pool's Coolify token lacks the read:sensitive ability"
	case line != "":
		return what + line
	case dep.Status == coolify.DeploymentCancelled:
		return what + "deployment " + dep.DeploymentUUID + " was cancelled"
	}
	return what + "deployment " + dep.DeploymentUUID + " failed without an error in its log"
}

// cancelLive cancels the application's deployment dep, or its newest when dep is "", unless
// it is over. An error means Coolify did not confirm it.
func (r *Reconciler) cancelLive(ctx context.Context, api coolifyview.CoolifyAPI, app, dep string) error {
	if dep == "" && app != "" {
		_, deps, err := api.ListApplicationDeployments(ctx, app, 0, 1)
		switch {
		case errors.Is(err, coolify.ErrNotFound):
			return nil
		case err != nil:
			return fmt.Errorf("looking for the puller's deployment to cancel: %w", err)
		case len(deps) > 0 && !deps[0].Status.Terminal():
			dep = deps[0].DeploymentUUID
		}
	}
	if dep == "" {
		return nil
	}
	// A deployment already over answers 400, one Coolify forgot 404: nothing to do then.
	if err := api.CancelDeployment(ctx, dep); err != nil && !errors.Is(err, coolify.ErrBadRequest) && !errors.Is(err, coolify.ErrNotFound) {
		return fmt.Errorf("cancelling the puller's deployment %s: %w", dep, err)
	}
	r.pullPolls.forget(dep)
	return nil
}

// dropUnlisted deletes the pullers of servers the pool no longer lists, and forgets its images
// there. The status names a puller only while a pull is in flight or failed, so the pool's
// application list (the one the orphan sweep reads, shared and cached) finds the others; a
// failed list deletes nothing this time. The same list shows a listed server's puller whose
// container still runs after its pull: it is stopped again.
func (r *Reconciler) dropUnlisted(ctx context.Context, s *poolScope) error {
	var errs []error
	for _, server := range slices.Sorted(maps.Keys(s.images)) {
		if _, listed := s.pool.Spec.Coolify.Server(server); listed {
			continue
		}
		if p := s.images[server].Pull; p != nil && p.ApplicationUUID != "" {
			errs = append(errs, r.deletePuller(ctx, s.api, s.pool, p.ApplicationUUID, p))
		}
		delete(s.images, server)
	}
	tag := r.tag(s.pool)
	apps, err := r.Coolify.Apps(ctx, s.api, tag, policy.OrDefault(r.OrphanCheck, pass.DefaultAppCheck))
	if err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("Listing the pool's applications failed; no puller cleanup this time", "error", err.Error())
		return errors.Join(errs...)
	}
	for _, name := range slices.Sorted(maps.Keys(apps)) {
		app := apps[name]
		server, ok := isPuller(&app, tag, s.pool)
		if !ok {
			continue
		}
		if _, listed := s.pool.Spec.Coolify.Server(server); !listed {
			errs = append(errs, r.deletePuller(ctx, s.api, s.pool, app.UUID, nil))
			continue
		}
		if r.strayPuller(s, server, &app) {
			// Coolify drops a stop sent while it cannot reach the server: the container would
			// run on, for nothing. Stopped again, at most once per StrayAfter.
			ctrl.LoggerFrom(ctx).Info("The puller's container still runs after its pull; stopping it again", "server", server, "appUUID", app.UUID, "status", app.Status)
			r.pullPolls.mark("stop/"+app.UUID, r.Clock.Now())
			if err := s.api.Stop(ctx, app.UUID); err != nil && !errors.Is(err, coolify.ErrNotFound) {
				errs = append(errs, fmt.Errorf("stopping the puller on server %s again: %w", server, err))
			}
		}
	}
	return errors.Join(errs...)
}

// strayPuller reports whether the listed puller's container runs though no pull is in flight
// on its server, StrayAfter after the server's last pull ended (its stop had time to show in a
// list), and it was not stopped again within StrayAfter.
func (r *Reconciler) strayPuller(s *poolScope, server string, app *coolify.Application) bool {
	status := app.Status
	if !strings.HasPrefix(status, "running") && !strings.HasPrefix(status, "restarting") && !strings.HasPrefix(status, "starting") {
		return false
	}
	now := r.Clock.Now()
	if im := s.images[server]; im != nil {
		if im.Pull != nil && im.Pull.State == v1.ImagePulling {
			return false
		}
		last := time.Time{}
		if im.Pull != nil {
			last = im.Pull.Since.Time
		}
		if len(im.Cached) > 0 && im.Cached[0].PulledAt.After(last) {
			last = im.Cached[0].PulledAt.Time
		}
		if now.Sub(last) < policy.StrayAfter {
			return false
		}
	}
	return r.pullPolls.wait("stop/"+app.UUID, now, policy.StrayAfter) == 0
}

// deletePuller cancels the puller's deployment in flight (a deleted application's deployment
// runs on, and holds a build slot), stops it and deletes it. A puller already gone is deleted.
func (r *Reconciler) deletePuller(ctx context.Context, api coolifyview.CoolifyAPI, pool *v1.BotPool, app string, p *v1.ImagePull) error {
	dep := ""
	if p != nil && p.State == v1.ImagePulling {
		dep = p.DeploymentUUID
	}
	if p == nil || p.State == v1.ImagePulling {
		if err := r.cancelLive(ctx, api, app, dep); err != nil {
			return err
		}
	}
	if err := api.Stop(ctx, app); err != nil && !errors.Is(err, coolify.ErrNotFound) {
		return fmt.Errorf("stopping puller application %s: %w", app, err)
	}
	if err := api.DeleteApplication(ctx, app, coolify.AppLeftovers); err != nil && !errors.Is(err, coolify.ErrNotFound) {
		return fmt.Errorf("deleting puller application %s: %w", app, err)
	}
	r.Coolify.Deleted(r.tag(pool), app)
	ctrl.LoggerFrom(ctx).Info("Deleted a puller application", "appUUID", app)
	return nil
}

// deletePullers deletes every puller of a deleted pool before its finalizer goes: those the
// status names and those a fresh list of the pool's tag finds. Without a Coolify client (the
// credentials went first, and this process never served the pool), a pool whose status shows
// no pre-pull goes, and one that does waits like its slots do, until Coolify is reachable or
// the pool is annotated to let its applications go.
func (r *Reconciler) deletePullers(ctx context.Context, s *poolScope) error {
	ctx = coolify.WithPriority(ctx, coolify.Housekeeping) // nobody waits for a cleanup
	api, err := r.Connector.ForPool(ctx, s.pool)
	if err != nil {
		api = r.Connector.LastKnown(types.NamespacedName{Namespace: s.pool.Namespace, Name: s.pool.Name})
	}
	if api == nil {
		if !pulledAny(s.images) || s.pool.Annotations[v1.AnnotationOrphanApplication] == "true" {
			return nil
		}
		r.Recorder.Eventf(s.pool, nil, corev1.EventTypeWarning, v1.ReasonCleanupBlocked, "Delete",
			"Cannot reach Coolify to delete the pool's puller applications (%v); annotate the pool with %s=true to let them go",
			err, v1.AnnotationOrphanApplication)
		return pass.WaitFor(pass.StalledRetry, "", "")
	}
	tag := r.tag(s.pool)
	todo := map[string]*v1.ImagePull{}
	for _, im := range s.images {
		if p := im.Pull; p != nil && p.ApplicationUUID != "" {
			todo[p.ApplicationUUID] = p
		}
	}
	listed, err := api.ListApplications(ctx, tag)
	if err != nil {
		return fmt.Errorf("listing the pool's applications: %w", err)
	}
	for i := range listed {
		if _, ok := isPuller(&listed[i], tag, s.pool); ok {
			if _, known := todo[listed[i].UUID]; !known {
				todo[listed[i].UUID] = nil
			}
		}
	}
	var errs []error
	for _, app := range slices.Sorted(maps.Keys(todo)) {
		errs = append(errs, r.deletePuller(ctx, api, s.pool, app, todo[app]))
	}
	return errors.Join(errs...)
}

// pulledAny reports whether the status records a pre-pull on any server.
func pulledAny(images map[string]*policy.ServerImages) bool {
	for _, im := range images {
		if len(im.Cached) > 0 || im.Pull != nil {
			return true
		}
	}
	return false
}

// pullPolls remembers when each pull's deployment was last looked at, so that a pool's passes
// (one per change of any of its slots) ask Coolify about it at most once per
// deploymentPollInterval, and when a stray puller was last stopped again ("stop/<appUUID>").
// It is a rate bound, not state: a restart polls at once. So a mark older than pollMemory,
// longer than any interval it bounds in practice, is forgotten: the stop marks are keyed by
// applications a Coolify lists, which a tenant's own Coolify may make up without end.
type pullPolls struct {
	mu    sync.Mutex
	at    map[string]time.Time
	swept time.Time
}

// pollMemory is how long pullPolls keeps a mark. A pool polling less often than this (its
// deploymentPollInterval) polls a little early, nothing worse.
const pollMemory = time.Hour

// wait is how long until the deployment may be polled again (0: now).
func (p *pullPolls) wait(dep string, now time.Time, every time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	last, ok := p.at[dep]
	if !ok || now.Before(last) {
		return 0
	}
	return max(0, last.Add(every).Sub(now))
}

func (p *pullPolls) mark(dep string, now time.Time) {
	if dep == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.at == nil {
		p.at = map[string]time.Time{}
	}
	p.at[dep] = now
	if now.Sub(p.swept) >= pollMemory/4 {
		p.swept = now
		for k, at := range p.at {
			if now.Sub(at) > pollMemory {
				delete(p.at, k)
			}
		}
	}
}

func (p *pullPolls) forget(dep string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.at, dep)
}
