package slot

import (
	"context"
	"errors"
	"fmt"
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
	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
)

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
					if err := s.cancelDeployment(ctx); err != nil {
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
	if err := r.Client.Get(ctx, s.slot.BotKey(), bot); err != nil {
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

func (r *Reconciler) dropFinalizer(ctx context.Context, s *slotScope) error {
	r.returnAdmission(s, false) // whatever the phase: one deleted while Deploying holds one
	if removed, err := pass.RemoveFinalizer(ctx, r.Client, s.slot, v1.FinalizerSlot); !removed || err != nil {
		return err
	}
	r.projection().remove(ctx, s.slot.Namespace, s.slot.Name)
	return nil
}
