package pool

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
)

// setPoolStatus computes the pool's status from what this pass observed. handled says the
// pass finished without error, so the generation counts as observed.
func setPoolStatus(s *poolScope, now time.Time, handled bool) {
	p := s.pool
	counts := countSlots(s.slots)
	p.Status.Slots = &counts
	p.Status.Queued = int32(s.queued)
	p.Status.Tenants, p.Status.TenantCount = s.tenants, s.tenantCount
	p.Status.MinIdle, p.Status.WarmWindows = int32(s.warm.minIdle), s.warm.open
	p.Status.Selector = v1.LabelPool + "=" + p.Name
	p.Status.Reservations = reservationStatus(s)
	if s.template != nil {
		p.Status.TemplateHash, p.Status.TemplateImage = s.template.Hash(), s.template.Ref()
	}
	p.Status.Servers = serverStatuses(p, s.slots, s.health, s.images)
	gen := p.Generation
	set := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		v1.SetCondition(&p.Status.Conditions, metav1.Condition{
			Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen,
		}, now)
	}

	ro := setRolloutStatus(s, now)
	switch {
	case s.stalled != "":
		set(v1.ConditionStalled, metav1.ConditionTrue, s.stalled, stalledMessage(s))
		set(v1.ConditionReady, metav1.ConditionFalse, s.stalled, stalledMessage(s))
	case s.throttled != "":
		meta.RemoveStatusCondition(&p.Status.Conditions, v1.ConditionStalled)
		set(v1.ConditionReady, metav1.ConditionFalse, v1.ReasonCoolifyThrottled, s.throttled)
	case s.connErr != nil:
		meta.RemoveStatusCondition(&p.Status.Conditions, v1.ConditionStalled)
		set(v1.ConditionReady, metav1.ConditionFalse, v1.ReasonCoolifyUnreachable,
			"Coolify did not answer; retrying with backoff (see the manager's log for the error)")
	default:
		// A failed pre-pull stalls the rollout, not the pool: the slots keep serving.
		switch {
		case ro.stalled:
			set(v1.ConditionStalled, metav1.ConditionTrue, ro.reason, ro.message)
		case len(s.warm.invalid) > 0:
			// The other windows and spec.minIdle still apply: the pool serves, but the spec is
			// not what it does until a person mends the window.
			set(v1.ConditionStalled, metav1.ConditionTrue, v1.ReasonInvalidWarmSchedule,
				strings.Join(s.warm.invalid, "; ")+". That window is ignored; spec.minIdle and the other windows apply")
		default:
			meta.RemoveStatusCondition(&p.Status.Conditions, v1.ConditionStalled)
		}
		if ro.cold {
			set(v1.ConditionReady, metav1.ConditionFalse, v1.ReasonPullingImage,
				"No server of the pool holds its image yet: a bot started now would wait for a cold pull; "+ro.message)
		} else {
			set(v1.ConditionReady, metav1.ConditionTrue, v1.ReasonAvailable, "The pool reaches Coolify and serves bots")
		}
	}

	setServerCondition(p, s.servers, now)
	setServerOutCondition(p, now)

	switch {
	case s.serversFull > 0:
		set(v1.ConditionReconciling, metav1.ConditionTrue, v1.ReasonServersFull,
			fmt.Sprintf("%d more slot(s) wanted, but no server takes one: %s", s.serversFull, whyNoRoom(p)))
	case len(s.created) > 0 || counts.Creating > 0:
		set(v1.ConditionReconciling, metav1.ConditionTrue, v1.ReasonScalingUp,
			"Creating slots for waiting bots or to keep minIdle slots warm")
	case p.Spec.Standby.Running() && int(counts.Ready) < s.warm.minIdle:
		set(v1.ConditionReconciling, metav1.ConditionTrue, v1.ReasonWarmingStandby,
			fmt.Sprintf("%d of minIdle %d standby slots ready (%d starting)", counts.Ready, s.warm.minIdle, counts.Starting))
	case ro.reason != "" && !ro.stalled:
		set(v1.ConditionReconciling, metav1.ConditionTrue, ro.reason, ro.message)
	default:
		meta.RemoveStatusCondition(&p.Status.Conditions, v1.ConditionReconciling)
	}

	if handled {
		p.Status.ObservedGeneration = gen
	}
}

// stalledMessage tells a person what to fix.
func stalledMessage(s *poolScope) string {
	secret := s.pool.Spec.Coolify.CredentialsSecretRef.Name
	switch s.stalled {
	case v1.ReasonCredentialsNotFound:
		return "Secret " + secret + " with the keys url and token does not exist in this namespace"
	case v1.ReasonCredentialsNotAllowed:
		return "Secret " + secret + " lacks the label " + v1.LabelAllowPoolUse + "=true, which lets BotPools send its data to Coolify; if that is what it is for, run: " +
			policy.AllowCommand(s.pool.Namespace, secret)
	case v1.ReasonCredentialsInvalid:
		return "Secret " + secret + " must hold a Coolify base URL under url and an API token under token"
	case v1.ReasonCredentialsRejected:
		return "Coolify refused the token in Secret " + secret + " (401): create a new API token"
	case v1.ReasonAPIDisabled:
		return "The Coolify API is disabled: enable it under Settings → Advanced → API Access"
	case v1.ReasonPermissionDenied:
		return "The token in Secret " + secret + " lacks an ability: botpool needs read, write and deploy"
	case v1.ReasonCoolifyInstanceChanged:
		return fmt.Sprintf("Secret %s now names another Coolify instance than the one holding %d of this pool's applications: "+
			"restore its url; to move the pool, delete it (or its slots) with the old url in place, then switch. "+
			"Annotate the pool with %s=true to let the old applications go", secret, s.moved, v1.AnnotationOrphanApplication)
	case v1.ReasonRequestRefused:
		return "Coolify refused the operator's request as invalid (400/422); see the manager's log for the error"
	case v1.ReasonDestinationRefused:
		return "The Coolify URL in Secret " + secret + " resolves to an address the operator may not reach " +
			"(loopback, link-local, or a private range the manager's --coolify-allow-private-networks or --egress-allowed-cidrs does not allow)"
	}
	return ""
}

// setDrainingStatus reports a deleted pool's progress: Ready False and Reconciling True with
// reason Draining while running bots are still leaving, Deleting once only the applications'
// cleanup remains.
func setDrainingStatus(s *poolScope, now time.Time) {
	p := s.pool
	counts := countSlots(s.slots)
	p.Status.Slots = &counts
	p.Status.Queued = int32(s.queued)
	set := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		v1.SetCondition(&p.Status.Conditions, metav1.Condition{
			Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: p.Generation,
		}, now)
	}
	reason, msg := v1.ReasonDeleting, fmt.Sprintf("Deleting %d slot(s) and their Coolify applications", len(s.slots))
	if s.draining > 0 {
		reason = v1.ReasonDraining
		msg = fmt.Sprintf("Deleting: %d bot(s) still leaving their meetings (up to leaveGracePeriod) before their applications are deleted", s.draining)
	}
	set(v1.ConditionReady, metav1.ConditionFalse, reason, msg)
	set(v1.ConditionReconciling, metav1.ConditionTrue, reason, msg)
}

// setServerCondition says, in DeploymentsCapped, when the pool's maxConcurrentDeployments asks
// for more than its Active servers run together: advice, not a fault, so Ready does not
// change. It is absent when the pool asks for no more, or while a server's settings are
// unknown. known holds the settings read of the pool's Active servers.
func setServerCondition(p *v1.BotPool, known map[string]coolify.ServerSettings, now time.Time) {
	want := int(p.Spec.MaxConcurrentDeployments) // unset follows the servers: no advice to give
	runs, detail := 0, ""
	var uuids []string
	for _, srv := range p.Spec.Coolify.ServerList() {
		if srv.Cordoned {
			continue
		}
		st, ok := known[srv.UUID]
		if !ok {
			runs = 0 // one unknown: the sum is unknown
			break
		}
		runs += coolifyview.ServerRuns(st)
		uuids = append(uuids, srv.UUID)
		detail = fmt.Sprintf("concurrent_builds %d, deployment_queue_limit %d", st.ConcurrentBuilds, st.DeploymentQueueLimit)
	}
	if runs == 0 || want <= runs {
		meta.RemoveStatusCondition(&p.Status.Conditions, v1.ConditionDeploymentsCapped)
		return
	}
	where := fmt.Sprintf("Coolify server %s runs %d deployment(s) at once (%s)", uuids[0], runs, detail)
	if len(uuids) > 1 {
		where = fmt.Sprintf("Coolify servers %s run %d deployment(s) at once in all", strings.Join(uuids, ", "), runs)
	}
	v1.SetCondition(&p.Status.Conditions, metav1.Condition{
		Type: v1.ConditionDeploymentsCapped, Status: metav1.ConditionTrue, Reason: v1.ReasonServerRunsFewer, ObservedGeneration: p.Generation,
		Message: fmt.Sprintf("maxConcurrentDeployments is %d, but %s, "+
			"shared by every pool there: at most %d of this pool's deployments run at once. Lower maxConcurrentDeployments, or raise concurrent_builds in Coolify",
			want, where, runs),
	}, now)
}
