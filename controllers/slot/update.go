package slot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
)

// The slot's side of a rollout: its application is given the pool's current template (image,
// tag and limits by PATCH, env by upsert) only while no container of it runs for anyone, and
// only once its server pre-pulled the template's image (TemplateReady), so that the next
// deployment starts warm. Where that happens:
//
//   - every time the slot's env is set (setEnv): when its application is created, and before
//     each fresh container (after a bot, a recovery, a lost standby container);
//   - a free slot of a Stopped pool, at once (it has no container: nothing to take away);
//   - a bound slot of a Stopped pool, before its bot's deployment (one the free step missed);
//   - a standby slot with no container yet, before its deployment;
//   - a Ready standby slot only once the pool admitted it (annotation botpool.dev/update with
//     the pool's template hash, within spec.updateStrategy): it first takes itself off offer
//     under its resourceVersion, so a bot bound meanwhile keeps the container, and the slot
//     updates after that bot instead;
//   - a busy slot after its bot let go (the release stops its container and sets a fresh
//     credential, which is the first item).
//
// status.templateHash and status.image are the slot controller's: the template and image the
// application was last given in full.

// syncTemplate gives the slot's application the pool's current template t, whose env setEnv
// just wrote, and records it. A template the server has not pulled yet leaves the image and
// limits as they are: the slot stays on its template, outdated, until the pull finishes.
func (r *Reconciler) syncTemplate(ctx context.Context, s *slotScope, t policy.SlotTemplate) error {
	st := &s.slot.Status
	hash := t.Hash()
	switch {
	case st.TemplateHash == hash || st.ApplicationUUID == "":
		return nil
	case s.createdFrom == t.Ref():
		// Created just now with the template's image and limits, and given its env: it is
		// the template, pulled or not (nothing better was on the server).
		st.TemplateHash, st.Image = hash, t.Ref()
		return nil
	case !policy.TemplateReady(s.pool, policy.SlotServer(s.slot, s.pool), t):
		return nil
	}
	u := coolify.AppUpdate{Image: t.Image, Tag: t.EffectiveTag(), CPUs: limitOrNone(t.CPUs), Memory: limitOrNone(t.Memory)}
	if err := s.api.UpdateApplication(ctx, st.ApplicationUUID, u); err != nil {
		if errors.Is(err, coolify.ErrNotFound) {
			st.ApplicationUUID = "" // deleted behind our back: create it again
		}
		return fmt.Errorf("giving the application the pool's template: %w", err)
	}
	from := orNone(st.Image)
	st.TemplateHash, st.Image = hash, t.Ref()
	r.Recorder.Eventf(s.slot, nil, corev1.EventTypeNormal, v1.ReasonSlotUpdated, "Update",
		"Application %s given template %s (image %s, was %s); its next container runs it", st.ApplicationUUID, hash, t.Ref(), from)
	ctrl.LoggerFrom(ctx).Info("Slot given the pool's template", "template", hash, "image", t.Ref(), "was", from)
	return nil
}

// limitOrNone is a limit for PATCH: an unset one removes a limit set before.
func limitOrNone(v string) string {
	if v == "" {
		return coolify.NoLimit
	}
	return v
}

// updateInPlace gives an outdated slot without a running container the pool's template: its
// env (with its current token, so the credential does not change) and then its image and
// limits (setEnv). The next deployment, a bot's or a standby container's, runs it. done says
// the pass is over: the application is gone and the slot goes back to Creating (forgotten
// and left Idle, every later pass tried the update again on no application).
//
// A slot whose image its server does not hold, while the pool pulled another there
// (strandedImage), is then given that one, as a slot created now would be (CreateImage).
func (r *Reconciler) updateInPlace(ctx context.Context, s *slotScope) (done bool, err error) {
	if policy.Outdated(s.slot, s.pool) {
		token, err := r.tokens().ensure(ctx, s.slot)
		if err != nil {
			return false, err
		}
		err = r.setEnv(ctx, s, token)
		if err == nil {
			err = r.leaveStrandedImage(ctx, s)
		}
		if err != nil && s.slot.Status.ApplicationUUID == "" {
			r.recreate(s)
			return true, nil
		}
		return false, err
	}
	if err := r.leaveStrandedImage(ctx, s); err != nil {
		if s.slot.Status.ApplicationUUID == "" {
			r.recreate(s)
			return true, nil
		}
		return false, err
	}
	return false, nil
}

// strandedImage is the image a slot's application should leave its own for, or "": its
// server holds no finished pull of the slot's image (status.image) that the pool recorded
// (FreshCached), and the pool pulled another there. Such a slot was created with its pool's
// image while nothing was pulled on its server, and that pull failed; or its image was
// pushed again (restartedAt) since its pull. Its next deployment would pull cold while the
// server holds a warm image of the pool (invariant 16; the model check found a slot created
// on a tag whose pulls failed deploying it cold after the pool had moved on, seed
// 881256409367165).
func strandedImage(slot *v1.BotPoolSlot, pool *v1.BotPool) string {
	image := slot.Status.Image
	if image == "" || slot.Status.ApplicationUUID == "" {
		return ""
	}
	server := policy.SlotServer(slot, pool)
	for i := range pool.Status.Servers {
		if st := &pool.Status.Servers[i]; st.UUID == server {
			fresh := policy.FreshCached(pool, st.Cached)
			if len(fresh) == 0 || slices.ContainsFunc(fresh, func(c v1.CachedImage) bool { return c.Image == image }) {
				return ""
			}
			return fresh[0].Image
		}
	}
	return ""
}

// strandedTemplate is status.templateHash of a slot whose application left an image its
// server did not hold (leaveStrandedImage): no template's hash, and not empty, which would
// read as an application without a template's env (setEnv's fresh). The slot keeps its env
// until it takes the pool's template, which then drops the keys the template lacks.
const strandedTemplate = "stranded"

// leaveStrandedImage gives a stranded slot's application (strandedImage) the newest image
// the pool pulled on its server, and nothing else: its env and limits stay those of its
// template, which it is no longer on in full (strandedTemplate); the pool's template follows,
// env and all, once its server pulled it (syncTemplate).
func (r *Reconciler) leaveStrandedImage(ctx context.Context, s *slotScope) error {
	st := &s.slot.Status
	warm := strandedImage(s.slot, s.pool)
	if warm == "" {
		return nil
	}
	image, tag := policy.SplitRef(warm)
	u := coolify.AppUpdate{Image: image, Tag: tag}
	if err := s.api.UpdateApplication(ctx, st.ApplicationUUID, u); err != nil {
		if errors.Is(err, coolify.ErrNotFound) {
			st.ApplicationUUID = "" // deleted behind our back: create it again
		}
		return fmt.Errorf("giving the application an image its server holds: %w", err)
	}
	from := st.Image
	st.TemplateHash, st.Image = strandedTemplate, warm
	r.Recorder.Eventf(s.slot, nil, corev1.EventTypeNormal, v1.ReasonSlotUpdated, "Update",
		"Application %s given image %s, which server %s holds, instead of %s, which it does not; the pool's template follows once pulled there",
		st.ApplicationUUID, warm, policy.SlotServer(s.slot, s.pool), from)
	ctrl.LoggerFrom(ctx).Info("Slot left an image its server does not hold", "image", warm, "was", from)
	return nil
}

// admittedForUpdate reports whether the pool admitted the slot to replace its ready standby
// container with one of its current template.
func admittedForUpdate(slot *v1.BotPoolSlot, pool *v1.BotPool) bool {
	return slot.Annotations[v1.AnnotationUpdate] == pool.Status.TemplateHash && policy.Outdated(slot, pool)
}

// claimForUpdate takes a Ready standby slot the pool admitted off offer before anything else
// happens to it: Starting without a deployment, written now under the resourceVersion this
// pass read. The dispatcher binds under the same lock, so either the bot is bound first (the
// claim fails, and the slot updates after that bot) or the slot is claimed first (the binding
// fails, and the dispatcher picks another slot). The container it replaces never held a
// binding, so it keeps the slot's credential; the next deployment replaces it.
func (r *Reconciler) claimForUpdate(ctx context.Context, s *slotScope) (bool, error) {
	before := s.slot.DeepCopy()
	st := &s.slot.Status
	r.setStandby(s, v1.StandbyStarting)
	st.DeploymentUUID = ""
	st.StandbySince = &metav1.Time{Time: r.Clock.Now()}
	st.Message = "Replacing the standby container with one of template " + s.pool.Status.TemplateHash + " (" + s.pool.Status.TemplateImage + ")"
	if err := r.Client.Status().Patch(ctx, s.slot, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		*s.slot = *before
		if client.IgnoreNotFound(err) == nil {
			return false, nil
		}
		if apierrors.IsConflict(err) {
			s.after(pass.CacheWait) // a bot was bound, or another write came first: look again
			return false, nil
		}
		return false, fmt.Errorf("taking the slot off offer for its update: %w", err)
	}
	return true, nil
}

// recordDeployDuration records, as a Deploying slot's container is found started, how long its
// deployment took from the request (phaseSince) to now: seconds on a warm image, minutes on a
// cold pull: what a user reads to tell a warm start from one that pulled (the operator does
// not act on it).
func (r *Reconciler) recordDeployDuration(s *slotScope) {
	st := &s.slot.Status
	if st.Phase != v1.SlotDeploying || st.PhaseSince == nil {
		return
	}
	st.LastDeployDuration = &metav1.Duration{Duration: r.Clock.Since(st.PhaseSince.Time).Round(time.Millisecond)}
}
