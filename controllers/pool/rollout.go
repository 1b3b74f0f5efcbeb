package pool

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/controllers/internal/policy"
)

// A rollout: the pool's template (image, tag, limits, slotEnvFrom content, bot API URL,
// botpool.dev/restartedAt) changed, and its slots follow. The pool pre-pulls the image on each
// server (pool/pull.go); each slot takes the template itself once its server holds the image
// (slot/update.go). What the pool adds here:
//
//   - the bookkeeping: status.rollout while slots differ, status.updatedSlots, the conditions
//     SlotsUpdated, Reconciling and Stalled, and the Events RolloutStarted and RolloutComplete;
//   - in a pool with standby Running, the pace: a free slot's update replaces its ready
//     container, so the pool admits outdated ready slots (annotation botpool.dev/update) only
//     as spec.updateStrategy allows (RolloutBudget), and may create surge slots meanwhile,
//     removed when the rollout ends. A Stopped pool's free slots have no container to take
//     away, and update at once.

// rolloutView is what a pass observed of the pool's slots against its template.
type rolloutView struct {
	target string // the template hash rolled out
	// updated counts the slots on the target; outdated the others that have an application
	// (a slot being created takes the template, or its server's newest image, on its own).
	updated, outdated int
	// in counts, for RolloutBudget, a standby pool's free slots by where their containers are.
	in policy.RolloutInput
	// candidates are the outdated ready free slots an admission may take, in admission order.
	candidates []*v1.BotPoolSlot
	// replacing counts the free slots admitted for the target whose container is not Ready on
	// it yet: the rollout's own work in flight, which its end waits for.
	replacing int
	// settled are the slots whose admission is spent: Ready on the target, or admitted for
	// another template. The pool takes the annotation off them.
	settled []*v1.BotPoolSlot
	// needed is what the pool would hold without the rollout: its bound slots, plus the bots
	// waiting or minIdle, whichever is more.
	needed int
}

// observeRollout classifies the pool's slots against the template hash target.
func observeRollout(pool *v1.BotPool, slots []v1.BotPoolSlot, waiting, minIdle int, target string) rolloutView {
	v := rolloutView{target: target}
	bound := 0
	for i := range slots {
		sl := &slots[i]
		if sl.Status.TemplateHash == target {
			v.updated++ // of slots.total, which counts slots being deleted too
		}
		if !sl.DeletionTimestamp.IsZero() {
			continue
		}
		v.in.Total++
		if sl.Status.TemplateHash != target && sl.Status.ApplicationUUID != "" {
			v.outdated++
		}
		ann, hasAnn := sl.Annotations[v1.AnnotationUpdate]
		admitted := hasAnn && ann == target
		current := sl.Status.TemplateHash == target
		arrived := current && sl.Status.Standby == v1.StandbyReady // Ready on the target
		if hasAnn && (!admitted || arrived) {
			v.settled = append(v.settled, sl)
		}
		if sl.Spec.BotRef != nil {
			bound++
			continue
		}
		if admitted && !arrived {
			v.replacing++
		}
		ready := sl.Status.Standby == v1.StandbyReady && policy.Offered(sl, pool) // a standby slot a bot starts on at once
		switch {
		case ready && current:
			v.in.ReadyFree++
		case admitted && !current:
			v.in.InFlight++
		case ready:
			v.in.ReadyFree++
			if policy.Outdated(sl, pool) {
				v.in.Outdated++
				v.candidates = append(v.candidates, sl)
			}
		case policy.Available(sl) && (current || sl.Status.ApplicationUUID == "" && policy.CachedOn(pool, policy.SlotServer(sl, pool), pool.Status.TemplateImage, policy.RestartedAt(pool))):
			// On its way to Ready on the target: a slot being created counts too (a surge slot
			// just made), since its server holds the image and it is created with it. Missing
			// it, the pool saw no room and admitted a ready slot below the floor.
			v.in.Warming++
		}
	}
	v.needed = bound + max(waiting, minIdle)
	v.in.MinIdle, v.in.MaxSlots, v.in.Needed = minIdle, int(pool.Spec.MaxSlots), v.needed
	v.in.Strategy = pool.Spec.UpdateStrategy
	if pool.Status.Rollout != nil {
		v.in.BaseSlots = int(pool.Status.Rollout.BaseSlots)
	} else {
		v.in.BaseSlots = v.in.Total
	}
	// In name order, so that successive passes admit the same slots.
	sort.SliceStable(v.candidates, func(i, j int) bool { return v.candidates[i].Name < v.candidates[j].Name })
	return v
}

// rollout keeps the pool's rollout going: it starts and ends the bookkeeping, and in a standby
// pool admits slots and asks supply for surge. It runs before supply.
func (r *Reconciler) rollout(ctx context.Context, s *poolScope) error {
	if s.template == nil {
		return nil // the template is unknown this pass: nothing moves on a guess
	}
	pool := s.pool
	target := s.template.Hash()
	r.warnFloatingTag(s)
	v := observeRollout(pool, s.slots, s.waiting, s.idleNeed(), target)
	s.rolloutView = &v
	now := r.Clock.Now()
	switch {
	case v.outdated > 0 && pool.Status.Rollout == nil:
		pool.Status.Rollout = &v1.RolloutStatus{StartedAt: metav1.NewTime(now), BaseSlots: int32(v.in.Total)}
		r.Recorder.Eventf(pool, nil, corev1.EventTypeNormal, v1.ReasonRolloutStarted, "Rollout",
			"Rolling %d slot(s) out to template %s (%s)", v.outdated, target, s.template.Ref())
	case v.outdated == 0 && pool.Status.Rollout != nil && (!pool.Spec.Standby.Running() || v.replacing == 0):
		// A standby pool's rollout ends once no slot it admitted is still replacing its
		// container (a deploying one cannot be removed, and the surge removed instead would be
		// a ready slot minIdle needs). Other slots warming are not waited for: under a steady
		// stream of bots some slot always recycles its container after a bot, and the rollout
		// (its surge slots with it) would never end. endRollout removes the slots not Ready
		// yet first, so the ready ones stay.
		if err := r.endRollout(ctx, s, &v); err != nil {
			return err
		}
		took := now.Sub(pool.Status.Rollout.StartedAt.Time).Round(time.Second)
		pool.Status.Rollout = nil
		r.Recorder.Eventf(pool, nil, corev1.EventTypeNormal, v1.ReasonRolloutComplete, "Rollout",
			"Every slot runs template %s (%s); the rollout took %s", target, s.template.Ref(), took)
		return nil
	}
	if err := r.settleAdmissions(ctx, &v); err != nil {
		return err
	}
	if v.outdated == 0 || !pool.Spec.Standby.Running() || pool.Status.TemplateHash != target {
		// A Stopped pool's free slots update on their own. A template the status does not
		// name yet is admitted on the next pass, once the slots can read it.
		return nil
	}
	// Surge only where a server takes a slot, as supply places them: counted against
	// maxSlots alone, a pool whose servers are full asked for surge every pass, got none, and
	// admitted nothing for ever. With no room, the budget goes one slot at a time.
	if free := v.in.MaxSlots - v.in.Total; free > 0 {
		v.in.MaxSlots = v.in.Total + room(pool, s.slots, s.health, free)
	}
	step := policy.RolloutBudget(v.in)
	s.surge = step.Surge
	for _, sl := range v.candidates[:min(step.Admit, len(v.candidates))] {
		before := sl.DeepCopy()
		if sl.Annotations == nil {
			sl.Annotations = map[string]string{}
		}
		sl.Annotations[v1.AnnotationUpdate] = target
		if err := r.Client.Patch(ctx, sl, client.MergeFrom(before)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("admitting slot %s for its update: %w", sl.Name, err)
		}
	}
	return nil
}

// settleAdmissions takes the botpool.dev/update annotation off the slots whose admission is
// spent, so that a slot's later recycles (after a bot) are never taken for the rollout's work.
func (r *Reconciler) settleAdmissions(ctx context.Context, v *rolloutView) error {
	for _, sl := range v.settled {
		before := sl.DeepCopy()
		delete(sl.Annotations, v1.AnnotationUpdate)
		if err := r.Client.Patch(ctx, sl, client.MergeFrom(before)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("taking the spent admission off slot %s: %w", sl.Name, err)
		}
	}
	return nil
}

// endRollout removes the free slots a standby pool's rollout added above what it needs now
// (its size when the rollout began, or its bound slots and waiting bots or minIdle, if more).
// Slots whose standby container is not Ready yet go first, highest numbers first among them:
// which slots still wait for their deployment when the rollout ends has nothing to do with
// their numbers (late admissions and surge alike), and removing Ready ones instead leaves the
// pool short of minIdle ready slots until the others have deployed (BenchmarkRollout, one
// server: 99 ready free slots fell to 74 for minutes).
func (r *Reconciler) endRollout(ctx context.Context, s *poolScope, v *rolloutView) error {
	if !s.pool.Spec.Standby.Running() || s.pool.Status.Rollout == nil {
		return nil
	}
	excess := v.in.Total - max(int(s.pool.Status.Rollout.BaseSlots), v.needed)
	if excess <= 0 {
		return nil
	}
	slots := make([]*v1.BotPoolSlot, len(s.slots))
	for i := range s.slots {
		slots[i] = &s.slots[i]
	}
	removed, err := r.removeNotReadyFirst(ctx, s.pool, slots, excess)
	if len(removed) > 0 {
		r.Recorder.Eventf(s.pool, nil, corev1.EventTypeNormal, v1.ReasonSlotsRemoved, "Rollout", "Removed %d surge slot(s) the rollout added: %s", len(removed), policy.Abbreviate(removed))
	}
	return err
}

// warnFloatingTag sends the MutableTag Warning once per generation of a pool on a floating tag.
func (r *Reconciler) warnFloatingTag(s *poolScope) {
	p := s.pool
	if !policy.FloatingTag(p.Spec.ImageTag) {
		return
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionMutableTag); c != nil && c.ObservedGeneration == p.Generation {
		return
	}
	r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, v1.ReasonFloatingTag, "Rollout", "%s", mutableTagMessage(p))
}

func mutableTagMessage(p *v1.BotPool) string {
	return fmt.Sprintf("imageTag %q is a tag registries move: any deployment, a bot's start included, may pull a new push of it cold. "+
		"Pin a version to keep starts warm; to roll a new push of the same tag out, set the annotation %s to a new value",
		policy.TagOrLatest(p.Spec.ImageTag), v1.AnnotationRestartedAt)
}

// imageProgress says, of the pool's Active servers Coolify does not report out, on which the
// template's image is not pulled yet (pulling) and on which its pre-pull failed (failed, with
// the pull's message); how many there are (usable), and whether any of them holds an image of
// the pool at all (warm).
func imageProgress(p *v1.BotPool, t *policy.SlotTemplate, health map[string]v1.ServerHealth, images map[string]*policy.ServerImages) (pulling, failed []string, usable int, warm bool) {
	ref, restarted := t.Ref(), policy.RestartedAt(p)
	for _, srv := range p.Spec.Coolify.ServerList() {
		h, ok := health[srv.UUID]
		if !ok {
			h = policy.HealthOf(p, srv.UUID)
		}
		if srv.Cordoned || h.Out() {
			continue
		}
		usable++
		im := images[srv.UUID]
		if im == nil {
			im = &policy.ServerImages{}
		}
		if len(im.Cached) > 0 {
			warm = true
		}
		switch {
		case policy.HasCached(im.Cached, ref, restarted):
		case im.Pull != nil && im.Pull.State == v1.ImagePullFailed && policy.PullOf(im.Pull, ref, restarted):
			msg := im.Pull.Message
			if msg == "" {
				msg = "pulling " + ref + " on server " + srv.UUID + " failed"
			}
			failed = append(failed, msg)
		default:
			pulling = append(pulling, srv.UUID)
		}
	}
	return pulling, failed, usable, warm
}

// setRolloutStatus computes status.updatedSlots and the rollout's conditions (SlotsUpdated,
// MutableTag) from this pass, and returns what Ready, Reconciling and Stalled need of it.
func setRolloutStatus(s *poolScope, now time.Time) (r rolloutConditions) {
	p := s.pool
	set := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		v1.SetCondition(&p.Status.Conditions, metav1.Condition{
			Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: p.Generation,
		}, now)
	}
	if policy.FloatingTag(p.Spec.ImageTag) {
		set(v1.ConditionMutableTag, metav1.ConditionTrue, v1.ReasonFloatingTag, mutableTagMessage(p))
	} else {
		meta.RemoveStatusCondition(&p.Status.Conditions, v1.ConditionMutableTag)
	}
	if s.template == nil {
		// The status keeps what it said of the template it names; a Secret a person must fix
		// (gone, or without its opt-in label) stalls the rollout, so GitOps tools do not take
		// a spec whose slots cannot follow it for one applied.
		if reason, ok := pass.NeedsPerson(s.templateErr); ok {
			r.reason, r.stalled = reason, true
			r.message = "The slots' template cannot be read (" + s.templateErr.Error() + "); no slot follows the spec until it can, and the slots keep serving on what they run"
			set(v1.ConditionSlotsUpdated, metav1.ConditionFalse, r.reason, r.message)
		}
		return r
	}
	target := s.template.Hash()
	v := s.rolloutView
	if v == nil {
		o := observeRollout(p, s.slots, s.waiting, s.idleNeed(), target)
		v = &o
	}
	p.Status.UpdatedSlots = int32(v.updated)
	pulling, failed, usable, warm := imageProgress(p, s.template, s.health, s.images)
	ref := s.template.Ref()
	switch {
	case len(failed) > 0:
		r.reason, r.stalled = v1.ReasonImagePullFailed, true
		r.message = strings.Join(failed, "; ") + ". No slot is given " + ref + " until it is pulled (retried after " + policy.PullRetry.String() +
			", then less and less often, at least every " + policy.MaxPullRetry.String() + "); the slots keep serving on what they run. Fix the image, tag or registry login, or revert the change"
	case len(pulling) > 0:
		r.reason = v1.ReasonPullingImage
		r.message = fmt.Sprintf("Pulling %s on server(s) %s before any slot there is given it", ref, strings.Join(pulling, ", "))
	case usable == 0:
		// With no server to pull on, "every slot runs the template" would hold of no slot and
		// say nothing of the image: a tag the registry lacks would look up to date.
		r.reason = v1.ReasonNoUsableServer
		r.message = fmt.Sprintf("No server of the pool may take a slot (%s): %s is pulled, and slots follow it, once one may", whyNoRoom(p), ref)
	case v.outdated > 0:
		r.reason = v1.ReasonRollingOut
		r.message = fmt.Sprintf("%d of %d slot(s) on template %s (%s); busy slots follow when their bots end", v.updated, v.in.Total, target, ref)
	}
	r.cold = usable > 0 && !warm
	if r.reason == "" {
		set(v1.ConditionSlotsUpdated, metav1.ConditionTrue, v1.ReasonUpToDate, fmt.Sprintf("Every slot runs template %s (%s)", target, ref))
	} else {
		set(v1.ConditionSlotsUpdated, metav1.ConditionFalse, r.reason, r.message)
	}
	return r
}

// rolloutConditions is what the rollout says to the pool's kstatus conditions.
type rolloutConditions struct {
	// reason and message: PullingImage, RollingOut or ImagePullFailed while slots differ from
	// the template (Reconciling True; Stalled True for a failed pull).
	reason, message string
	stalled         bool
	// cold: no server the pool may use holds any image of it yet, so a bot would wait for a
	// cold pull (Ready False, PullingImage).
	cold bool
}
