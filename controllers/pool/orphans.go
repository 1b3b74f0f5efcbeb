package pool

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
)

// deleteOrphanApps deletes the applications that carry the pool's tag and a slot's name but
// belong to no slot: left by a slot deleted while Coolify was unreachable, or by someone's
// hand. Only a successful list may delete anything (invariant 9), and every candidate is
// checked against a live list of slots, never the cache alone.
//
// The tag carries this cluster's identity, so another cluster's pool of the same namespace and
// name is never swept; and since Coolify's filter may be ignored (older servers list the whole
// team), each candidate must carry the pool's owner mark on our side too. Only a stopped
// application is deleted: a running one may serve a meeting (of a cluster whose identity
// changed, say), so it gets a Warning Event and is left alone.
func (r *Reconciler) deleteOrphanApps(ctx context.Context, s *poolScope) error {
	ctx = coolify.WithPriority(ctx, coolify.Housekeeping) // nobody waits for a sweep
	tag := r.tag(s.pool)
	apps, err := r.Coolify.Apps(ctx, s.api, tag, policy.OrDefault(r.OrphanCheck, pass.DefaultAppCheck))
	if err != nil {
		// A failed list never acts, and is no reconcile failure: no candidates this time.
		ctrl.LoggerFrom(ctx).V(1).Info("Listing the pool's applications failed; no orphan check this time", "error", err.Error())
		apps = nil
	}
	owned := map[string]bool{}
	for i := range s.slots {
		owned[s.slots[i].Name] = true
	}
	var candidates []coolify.Application
	prefix := slotPrefix(s.pool.Spec.Platform)
	for name, app := range apps {
		if _, isSlot := slotNumber(prefix, name); isSlot && !owned[name] && coolifyview.CarriesTag(&app, tag) {
			candidates = append(candidates, app)
		}
	}
	if len(candidates) == 0 {
		return nil
	}
	var live v1.BotPoolSlotList
	if err := r.APIReader.List(ctx, &live, client.InNamespace(s.pool.Namespace)); err != nil {
		return fmt.Errorf("listing slots: %w", err)
	}
	for i := range live.Items {
		// Pools of one platform share slot names: only this pool's slots own its tagged apps.
		if live.Items[i].Spec.Pool == s.pool.Name {
			owned[live.Items[i].Name] = true
		}
	}
	var errs []error
	for _, app := range candidates {
		if owned[app.Name] {
			continue
		}
		if app.State() != coolify.StateExited {
			r.Recorder.Eventf(s.pool, nil, corev1.EventTypeWarning, v1.ReasonOrphanRunning, "Cleanup",
				"Application %s (%s) carries the pool's tag but no slot owns it, and it is %s: not deleted; stop or delete it in Coolify if it is not in use",
				app.Name, app.UUID, app.Status)
			continue
		}
		ctrl.LoggerFrom(ctx).Info("Deleting an orphaned application", "appUUID", app.UUID, "name", app.Name)
		if err := s.api.Stop(ctx, app.UUID); err != nil && !errors.Is(err, coolify.ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		if err := s.api.DeleteApplication(ctx, app.UUID, coolify.AppLeftovers); err != nil && !errors.Is(err, coolify.ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		r.Coolify.Deleted(tag, app.UUID)
		r.Recorder.Eventf(s.pool, nil, corev1.EventTypeNormal, v1.ReasonOrphanDeleted, "Cleanup", "Deleted application %s (%s): no slot owns it", app.Name, app.UUID)
	}
	return errors.Join(errs...)
}
