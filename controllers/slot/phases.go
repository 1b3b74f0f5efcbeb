package slot

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/deploygate"
	"botpool.dev/botpool/controllers/internal/index"
	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/internal/slottoken"
)

// create makes sure the slot has a token and an application with its env, adopting an
// application of the same name left by a crash between create and record, then turns Idle.
func (r *Reconciler) create(ctx context.Context, s *slotScope) error {
	token, err := r.ensureToken(ctx, s.slot)
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

// ensureToken returns the slot's bot API token, issuing a new one when the slot has none it
// can trust: it records the hash of the token it issues in status.tokenSHA256, and the bot
// API accepts that token alone. The Secret only keeps the token for the next time the
// application's env is set; it is read past the cache (the manager caches no Secrets) and
// served only while it still holds the token whose hash the slot recorded, so a Secret someone
// else wrote or changed is replaced, never believed.
func (r *Reconciler) ensureToken(ctx context.Context, slot *v1.BotPoolSlot) (string, error) {
	return r.issueToken(ctx, slot, false)
}

// issueToken is ensureToken; fresh replaces even the token the slot issued (a standby slot's
// next container gets a credential no earlier container had).
func (r *Reconciler) issueToken(ctx context.Context, slot *v1.BotPoolSlot, fresh bool) (string, error) {
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: slot.Namespace, Name: slottoken.SecretName(slot.Name)}
	err := r.APIReader.Get(ctx, key, secret)
	switch {
	case err == nil && !fresh && issuedToken(slot, secret):
		return string(secret.Data[slottoken.Key]), nil
	case err == nil && !madeForSlot(slot.Name, secret):
		// Not one this controller made (for a slot of this name): a Secret of the namespace's
		// own that happens to have the name. It is not the operator's to delete.
		return "", fmt.Errorf("%w: Secret %s has the name of this slot's token Secret but lacks the operator's mark "+
			"(label %s=true, label %s=%s and a BotPoolSlot %s as its controller): rename or delete it",
			pass.ErrTokenSecretTaken, key.Name, v1.LabelSlotToken, v1.LabelSlot, slot.Name, slot.Name)
	case err == nil:
		// Left by an earlier slot of the same name (a retired slot the pool replaced), its
		// token changed by someone, or created by this controller before a crash kept it from
		// recording the hash: its token must not serve this slot. The next one is issued while
		// no container has the old one (the application's env is set after this).
		uid := secret.UID
		if err := r.Client.Delete(ctx, secret, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return "", fmt.Errorf("deleting a token Secret the slot did not record: %w", err)
		}
	case !apierrors.IsNotFound(err):
		return "", fmt.Errorf("slot token Secret: %w", err)
	}
	token, err := slottoken.New()
	if err != nil {
		return "", err
	}
	secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
		Labels: map[string]string{v1.LabelSlotToken: "true", v1.LabelSlot: slot.Name, v1.LabelPool: slot.Spec.Pool}},
		Data: map[string][]byte{slottoken.Key: []byte(token)}}
	if err := controllerutil.SetControllerReference(slot, secret, r.Client.Scheme()); err != nil {
		return "", err
	}
	if err := r.Client.Create(ctx, secret); err != nil {
		// AlreadyExists: the replaced one is still being deleted; the next pass tries again.
		return "", fmt.Errorf("creating slot token Secret %s: %w", key.Name, err)
	}
	slot.Status.TokenSHA256 = slottoken.Hash([]byte(token))
	return token, nil
}

// madeForSlot reports whether secret carries the mark of a token Secret this controller made
// for a slot named slot (the slot of that name now, or a retired one the pool replaced): the
// labels it sets and a BotPoolSlot of that name as its controller. Anyone who may write
// Secrets in the namespace can copy the mark, and so chooses to have the Secret replaced.
func madeForSlot(slot string, secret *corev1.Secret) bool {
	owner := metav1.GetControllerOf(secret)
	return secret.Labels[v1.LabelSlotToken] == "true" && secret.Labels[v1.LabelSlot] == slot &&
		owner != nil && owner.Kind == "BotPoolSlot" && owner.Name == slot &&
		strings.HasPrefix(owner.APIVersion, v1.GroupVersion.Group+"/")
}

// issuedToken reports whether secret holds the token whose hash the slot recorded.
func issuedToken(slot *v1.BotPoolSlot, secret *corev1.Secret) bool {
	tok := secret.Data[slottoken.Key]
	return slot.Status.TokenSHA256 != "" && len(tok) > 0 && metav1.IsControlledBy(secret, slot) &&
		slottoken.Hash(tok) == slot.Status.TokenSHA256
}

// backfillTokenHash records the hash of the token of a slot made before slots recorded one
// (an upgrade): its containers run with the token of its Secret, which cannot change under
// them, so the Secret is believed once — if it is the one this controller names, labels and
// controls through the slot. A slot that records a hash, or never got an application (so no
// container has a token yet; create issues one), needs nothing.
//
// A legacy slot whose Secret is missing or foreign gets no hash and its containers no access
// (as before, when the bot API looked the Secret up); a free one goes back through create,
// which issues a token and sets it in the application's env before any bot deploys.
func (r *Reconciler) backfillTokenHash(ctx context.Context, s *slotScope) error {
	slot := s.slot
	if slot.Status.TokenSHA256 != "" || slot.Status.ApplicationUUID == "" || !slot.DeletionTimestamp.IsZero() {
		return nil
	}
	secret := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: slot.Namespace, Name: slottoken.SecretName(slot.Name)}, secret)
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("reading the slot's token Secret: %w", err)
	}
	tok := secret.Data[slottoken.Key]
	if err == nil && len(tok) > 0 && metav1.IsControlledBy(secret, slot) &&
		secret.Labels[v1.LabelSlotToken] == "true" && secret.Labels[v1.LabelSlot] == slot.Name {
		slot.Status.TokenSHA256 = slottoken.Hash(tok)
		return nil
	}
	if slot.Status.Phase == v1.SlotIdle && slot.Spec.BotRef == nil {
		r.moveTo(s, v1.SlotCreating, "", "Issuing a new bot API token: the slot's token Secret is missing or not the operator's")
	}
	return nil
}

// The operator's own variables in every slot container (docs/botapi.md).
const (
	envSlotUUID  = "POOL_SLOT_UUID"
	envAPIURL    = "BOTPOOL_API_URL"
	envSlotToken = "BOTPOOL_SLOT_TOKEN"
)

// slotEnv is the environment of every container of the slot, and the digest of the pool's
// slotEnvFrom data in it (SecretDigest: part of the slot template).
func (r *Reconciler) slotEnv(ctx context.Context, s *slotScope, token string) ([]coolify.EnvVar, string, error) {
	env := map[string]string{}
	digest := ""
	if ref := s.pool.Spec.SlotEnvFrom; ref != nil {
		var secret corev1.Secret
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: s.pool.Namespace, Name: ref.Name}, &secret); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, "", fmt.Errorf("the pool's slotEnvFrom Secret %s: %w", ref.Name, pass.ErrSlotEnvNotFound)
			}
			return nil, "", fmt.Errorf("slotEnvFrom Secret %s: %w", ref.Name, err)
		}
		if err := policy.AllowedForPools(&secret); err != nil {
			return nil, "", fmt.Errorf("the pool's slotEnvFrom: %w", err)
		}
		digest = policy.SecretDigest(secret.Data)
		for k, v := range secret.Data {
			env[k] = string(v)
		}
	}
	// The operator's own variables win over the pool's.
	env[envSlotUUID] = s.slot.Status.ApplicationUUID
	env[envAPIURL] = r.BotAPIURL
	env[envSlotToken] = token
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	vars := make([]coolify.EnvVar, 0, len(keys))
	for _, k := range keys {
		vars = append(vars, coolify.EnvVar{Key: k, Value: env[k], IsLiteral: true})
	}
	return vars, digest, nil
}

// idle starts a deployment for a newly bound bot, within the pool's deployment budget; a free
// slot only checks now and then that its application still exists.
func (r *Reconciler) idle(ctx context.Context, s *slotScope) error {
	st := &s.slot.Status
	if s.bot == nil {
		if st.DeployingSince != nil {
			// A deploy request for a bot that let go since failed, maybe after Coolify had
			// queued it: cancel and stop what it may have started.
			if err := r.cancelDeployment(ctx, s); err != nil {
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
	dep, err := r.deploymentSince(ctx, s, maybe.Time)
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
		if err := r.cancelDeployment(ctx, s); err != nil {
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
		return r.pollLater(ctx, s, err, poll)
	}
	switch verdict.phase {
	case v1.SlotBusy:
		r.toBusy(ctx, s, verdict.message)
		return nil
	case v1.SlotError:
		if err := r.cancelDeployment(ctx, s); err != nil {
			return err
		}
		r.toError(ctx, s, verdict.reason, verdict.message)
		return nil
	}

	switch stale {
	case staleRecover:
		if err := r.cancelDeployment(ctx, s); err != nil {
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

// readNow as a maxAge makes the bulk reader ask Coolify, whatever it read before.
const readNow = -1 * time.Nanosecond

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
func (r *Reconciler) pollLater(ctx context.Context, s *slotScope, err error, poll time.Duration) error {
	ctrl.LoggerFrom(ctx).Info("Reading the deployment failed; polling again", "error", err.Error())
	s.slot.Status.Message = "Deploying bot " + s.bot.Name + "; Coolify did not answer the last poll"
	if wait, ok := pass.CoolifyWait(err); ok {
		poll = max(poll, wait) // asking sooner would only be refused again
	}
	s.after(poll)
	return nil
}

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
func (r *Reconciler) deploymentSince(ctx context.Context, s *slotScope, since time.Time) (*coolify.Deployment, error) {
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
func (r *Reconciler) cancelDeployment(ctx context.Context, s *slotScope) error {
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

// reconcileDelete cleans Coolify before the slot goes: it lets a running bot leave first (see
// drain), then cancels, stops and deletes the application.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *slotScope) error {
	if controllerutil.ContainsFinalizer(s.slot, v1.FinalizerSlot) {
		if done, err := r.drain(ctx, s); err != nil || !done {
			return err
		}
		if s.slot.Status.ApplicationUUID == "" {
			if err := r.claimUnrecorded(ctx, s); err != nil {
				return err
			}
		}
		if uuid := s.slot.Status.ApplicationUUID; uuid != "" {
			tag := r.appTag(s)
			if !r.Coolify.Deleting(tag, uuid) {
				if out := r.serverOut(ctx, s); out != "" {
					// Coolify deletes the application of a server it cannot reach but loses the
					// container's removal: it would run on, unlisted, in whatever meeting.
					s.slot.Status.Message = fmt.Sprintf("Coolify reports server %s %s: deleting application %s now would leave its container running there; "+
						"waiting for the server (annotate the slot %s=true to let it go anyway)", policy.SlotServer(s.slot, s.pool), out, uuid, v1.AnnotationOrphanApplication)
					s.after(coolifyview.ServersRetry)
					return nil
				}
				if s.slot.Status.Phase == v1.SlotDeploying {
					if err := r.cancelDeployment(ctx, s); err != nil {
						return err
					}
				}
				// Stop and delete answer 404 once the application is gone: that is success here.
				if err := s.api.Stop(ctx, uuid); err != nil && !errors.Is(err, coolify.ErrNotFound) {
					return fmt.Errorf("stopping the application before deleting it: %w", err)
				}
				if err := s.api.DeleteApplication(ctx, uuid, coolify.AppLeftovers); err != nil && !errors.Is(err, coolify.ErrNotFound) {
					return fmt.Errorf("deleting the application: %w", err)
				}
				r.Coolify.Deleted(tag, uuid)
			}
			// Coolify deletes in the background and lists the application until it has. The
			// slot keeps its name, by keeping its finalizer, until then: a replacement of the
			// same name adopts an application by name, and must never adopt one on its way
			// out, even after a restart forgot what this process deleted.
			if _, err := s.api.GetApplication(ctx, uuid); !errors.Is(err, coolify.ErrNotFound) {
				if err != nil {
					return fmt.Errorf("checking that the application is deleted: %w", err)
				}
				s.slot.Status.Message = "Waiting for Coolify to delete application " + uuid
				s.after(deleteCheck)
				return nil
			}
		}
	}
	return r.dropFinalizer(ctx, s)
}

// claimUnrecorded records, to delete it like any other, an application the deleted slot
// created but never recorded: Coolify made it and the answer was lost (a 5xx or a timeout after
// the fact), and no pass adopted it before the slot was deleted. Left behind, it would outlive
// the slot under the slot's name, and a replacement of that name (on another server, or
// created on another image) could not adopt it and would make a second one (invariant 2); the
// orphan sweep would find it only later. It is the slot's when it has the slot's name and
// owner mark (this cluster's tag and the slot's placement); without the pool, the tag alone.
// A list that fails keeps the slot, and its name, for the retry.
func (r *Reconciler) claimUnrecorded(ctx context.Context, s *slotScope) error {
	tag := r.appTag(s)
	r.Coolify.Invalidate(tag) // a cached list may predate the create
	listed, err := s.api.ListApplications(ctx, tag)
	if err != nil {
		return fmt.Errorf("listing the pool's applications for one the slot created without recording it: %w", err)
	}
	for i := range listed {
		app := &listed[i]
		if app.Name != s.slot.Name {
			continue
		}
		if s.pool != nil && !strings.HasSuffix(app.Description, coolifyview.OwnerMark(tag, s.pool, policy.SlotServer(s.slot, s.pool))) ||
			s.pool == nil && !coolifyview.CarriesTag(app, tag) {
			continue
		}
		ctrl.LoggerFrom(ctx).Info("Deleting an application the slot created without recording it", "appUUID", app.UUID)
		st := &s.slot.Status
		st.ApplicationUUID, st.ApplicationTag, st.CoolifyInstance = app.UUID, tag, coolifyview.InstanceOf(s.api)
		return nil
	}
	return nil
}

// drain lets the bot of a deleted slot leave its meeting before the application goes: a
// deleted pool, a GitOps prune or a namespace deletion must not cut live calls. While the
// slot is deleted, the bot API answers the bot's heartbeats with "leave"; the application is
// deleted once the bot ended (or let go), or leaveGracePeriod after the drain began — twice
// that for a bot that reports Leaving or CallEnded, being on its way out. A bot not yet in
// its call has nothing to leave and fails with SlotLost at once. done says the caller may
// delete the application now.
func (r *Reconciler) drain(ctx context.Context, s *slotScope) (done bool, err error) {
	ref := s.slot.Spec.BotRef
	if ref == nil {
		return true, nil
	}
	bot := &v1.Bot{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.slot.Namespace, Name: ref.Name}, bot); err != nil {
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}
	if bot.UID != ref.UID || bot.Status.Phase.Terminal() {
		return true, nil
	}
	st := &s.slot.Status
	if st.Phase == v1.SlotBusy && st.DrainingSince == nil {
		st.DrainingSince = &metav1.Time{Time: r.Clock.Now()}
		r.Recorder.Eventf(s.slot, bot, corev1.EventTypeNormal, v1.ReasonDraining, "Delete",
			"Slot deleted: asking bot %s to leave before deleting application %s", bot.Name, st.ApplicationUUID)
	}
	// The bot leaves, or the Bot controller ends it when the drain is over (DrainDeadline);
	// either brings the slot back, and releaseOrphan lets the ended bot go.
	s.bot = bot
	poll := v1.DefaultDeploymentPollInterval
	if s.pool != nil {
		poll = s.pool.Spec.Timing.DeploymentPollInterval.OrDefault(poll)
	}
	if at, known := policy.DrainDeadline(s.slot, bot, s.pool); known && r.Clock.Now().Before(at) {
		left := at.Sub(r.Clock.Now())
		st.Message = "Deleted: waiting up to " + left.Round(time.Second).String() + " for bot " + bot.Name + " to leave its meeting"
		// Look again at the poll cadence (a Get from the cache): a bot reporting Leaving
		// earns more time, and the deadline is kept by the injected clock.
		s.after(min(left, r.jittered(poll)))
	} else {
		st.Message = "Deleted: waiting for bot " + bot.Name + " to end"
		s.after(r.jittered(poll))
	}
	return false, nil
}

// deleteCheck is how often a deleted slot looks whether Coolify has deleted its application.
const deleteCheck = 5 * time.Second

func (r *Reconciler) dropFinalizer(ctx context.Context, s *slotScope) error {
	r.returnAdmission(s, false) // whatever the phase: one deleted while Deploying holds one
	if removed, err := pass.RemoveFinalizer(ctx, r.Client, s.slot, v1.FinalizerSlot); !removed || err != nil {
		return err
	}
	r.unproject(ctx, s.slot.Namespace, s.slot.Name)
	return nil
}
