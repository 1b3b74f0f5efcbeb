package slot

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/store"
)

// Standby slots (a pool with spec.standby Running) take Coolify off the start path: a free
// slot keeps a container running that waits on the bot API (a long-poll on its config) for its
// binding, so a bot bound to it starts without a single Coolify request. The slot's phases are
// the usual ones; status.standby says where its container is:
//
//	Idle,      Starting  a fresh container is to be deployed (the gate admits it) …
//	Deploying, Starting  … is being deployed …
//	Idle,      Starting  … runs, and has not asked for work yet
//	Idle,      Ready     its current container asked for work within StandbyAskWindow:
//	                     the only standby slot the dispatcher binds (IsFree)
//	Idle,      Lost      it stopped asking: a fresh one is deployed
//	Idle → Busy          the bound bot's first report or beat
//	Busy → Releasing     the bot let go: the container is stopped and the slot credential
//	                     replaced (rotateCredential), then Idle, Starting again
//
// Readiness is observed, never assumed: the bot API records every config call of a slot's
// container in the store with the hash of the credential it sent (store.SlotAsk), and a slot
// is Ready only while an ask carries its current credential and came after the deploy request
// of its current container. A fresh container gets a fresh credential, so an ask from the
// container of an earlier bot (whatever a meeting left running in it) can never make the slot
// Ready or claim the next binding (invariant 12).

const (
	// StandbyAskWindow is how recent the last ask of a Ready slot's container must be. A
	// container long-polls with a wait of at most maxConfigWait (the bot API's bound, 60 s)
	// and asks again at once, so a live one asks well within it; one silent this long has
	// crashed, restarts or cannot reach the bot API. A bound slot whose container has not
	// taken its bot within the same window failed it (ReasonStandbyLost).
	StandbyAskWindow = 75 * time.Second
	// standbyStartCheck is how often a slot whose fresh container runs looks for its first
	// ask (a read of the store, no Coolify request).
	standbyStartCheck = time.Second
	// standbyReadyCheck is how often a Ready slot checks that its container still asks.
	standbyReadyCheck = 15 * time.Second
	// StandbyRejoinGrace is how long a Ready slot's container may take to ask again after it
	// hung up its wait (the bot API records the hang-up: store.SlotAsk.LeftAt). A container
	// that dies closes its connection, and is Lost this long after instead of after the ask
	// window; one whose client merely timed out (or whose proxy cut the connection) asks again
	// at once, and its ask clears the hang-up. "At once" is after the client's backoff: the Go
	// client's (botclient.WaitForBinding) doubles up to 5 s while failures follow each other,
	// as they do when a proxy cuts every wait, so the grace is longer than that.
	StandbyRejoinGrace = 10 * time.Second
	// HungUpMessage starts the message of a Ready slot whose container hung up its wait and
	// has not asked again yet.
	HungUpMessage = "Standby container hung up its wait for work"
)

// standbyCheck is when a standby slot looks again: after d, or sooner at the pool's
// deployment poll interval (the store reads it costs are cheap; a pool that polls faster
// wants its slots to notice sooner, and a timer runs on the workqueue's clock, not on the
// injected one).
func (r *Reconciler) standbyCheck(s *slotScope, d time.Duration) time.Duration {
	poll := s.pool.Spec.Timing.DeploymentPollInterval.OrDefault(v1.DefaultDeploymentPollInterval)
	return r.jittered(min(d, poll))
}

// standbyPool reports whether the slot's pool keeps standby containers.
func standbyPool(s *slotScope) bool { return s.pool != nil && s.pool.Spec.Standby.Running() }

// setStandby records the state of the slot's standby container.
func (r *Reconciler) setStandby(s *slotScope, state v1.StandbyState) {
	st := &s.slot.Status
	if st.Standby == state {
		return
	}
	now := metav1.NewTime(r.Clock.Now())
	switch {
	case state == "":
		st.StandbySince = nil
	case state == v1.StandbyReady && st.StandbySince != nil:
		// Ready keeps the deploy request's time: the container's asks count only from then
		// (lastAsk), and an ask made before the slot noticed it must keep counting.
	default:
		st.StandbySince = &now
	}
	st.Standby = state
}

// standbyIdle is the step of a free Idle slot of a standby pool: deploy a fresh container,
// wait for its first ask, and watch that it keeps asking.
func (r *Reconciler) standbyIdle(ctx context.Context, s *slotScope) error {
	st := &s.slot.Status
	if st.Standby == v1.StandbyReady && admittedForUpdate(s.slot, s.pool) {
		if claimed, err := r.claimForUpdate(ctx, s); err != nil || !claimed {
			return err
		}
	}
	switch {
	case st.Standby == v1.StandbyReady, st.Standby == v1.StandbyStarting && st.DeploymentUUID != "":
		return r.watchStandby(ctx, s)
	}
	// No container yet (a new slot, one just released or recovered, a pool switched to
	// Running), or one that stopped asking: deploy a fresh one. Lost stays until the deploy
	// request is out (the slot says why it redeploys meanwhile).
	if st.Standby == "" {
		r.setStandby(s, v1.StandbyStarting)
	}
	if st.Standby == v1.StandbyLost {
		// The lost container may still run (hung, cut off): the fresh one gets a credential
		// it never had, like every fresh container (invariant 12). Once: Starting without a
		// deployment is the slot waiting for the gate with its new credential.
		if err := r.rotateCredential(ctx, s); err != nil {
			if st.ApplicationUUID == "" {
				r.recreate(s)
				return nil
			}
			return err
		}
		r.setStandby(s, v1.StandbyStarting)
	}
	if srv := policy.SlotServer(s.slot, s.pool); policy.HealthOf(s.pool, srv).Out() {
		// Coolify would fail the deployment (or the pool's starts there keep failing): the
		// container waits for the server to be back, instead of failing, recovering and
		// failing again until the slot is retired.
		st.Message = fmt.Sprintf("Standby container to start once server %s is back (%s)", srv, policy.HealthOf(s.pool, srv))
		s.after(r.jittered(coolifyview.ServersRetry))
		return nil
	}
	if done, err := r.updateInPlace(ctx, s); err != nil || done { // no container yet: it starts on the template
		return err
	}
	if srv := policy.SlotServer(s.slot, s.pool); st.Image != "" {
		if p := policy.FailedPull(s.pool, srv, st.Image); p != nil {
			// The pool's pre-pull of this very image failed on the server (a tag the registry
			// lacks, a pull longer than deploymentTimeout): the container's deployment would
			// fail the same way, the slot retire after maxRecoveryAttempts, and the pool
			// create it again, forever (found by the model check). The container waits for
			// the pool's next pull instead; the pool's Stalled condition says why.
			st.Message = fmt.Sprintf("Standby container to start once the pool pulls %s on server %s (its last pull failed)", st.Image, srv)
			s.after(r.jittered(min(max(p.Since.Add(policy.PullBackoff(p.Failures)).Sub(r.Clock.Now()), coolifyview.ServersRetry), policy.PullRetry)))
			return nil
		}
	}
	if st.TokenSHA256 != s.recordedToken {
		// A credential issued in this pass (a new slot, a release, a lost container): the bot
		// API knows a token only once the status records its hash and the cache shows it. A
		// container deployed now could ask first, be refused, and exit without ever asking
		// again (the soak found one on seed 540807215885127171). The next pass deploys it,
		// once the cache shows this pass's write.
		st.Message = "Standby container to start once its new credential is recorded"
		s.after(pass.CacheWait)
		return nil
	}
	if !r.admit(ctx, s) {
		if !isCoolifyBusyMessage(st.Message) {
			st.Message = "Standby container to start; " + GateWaitMessage
		}
		s.after(r.jittered(r.gateRetry()))
		return nil
	}
	return r.deploy(ctx, s, r.Clock.Now())
}

// watchStandby turns a slot whose fresh container asked for work Ready, and a Ready one whose
// container stopped asking Lost (a fresh one follows). A store that cannot answer changes
// nothing: readiness unknown is no reason to redeploy, nor to offer a slot (invariant 10).
func (r *Reconciler) watchStandby(ctx context.Context, s *slotScope) error {
	st := &s.slot.Status
	now := r.Clock.Now()
	ask, asked, err := r.lastAsk(ctx, s)
	if err != nil {
		ctrl.LoggerFrom(ctx).V(1).Info("Reading the standby container's asks failed", "error", err.Error())
		s.after(r.standbyCheck(s, standbyStartCheck))
		return nil
	}
	switch st.Standby {
	case v1.StandbyStarting:
		if asked {
			r.setStandby(s, v1.StandbyReady)
			st.Message = "Standby container " + shortToken(st.TokenSHA256) + " asks for work"
			r.Recorder.Eventf(s.slot, nil, corev1.EventTypeNormal, v1.ReasonStandbyReady, "Standby",
				"The fresh container asked for work %s after its deploy request", max(0, ask.At.Sub(st.StandbySince.Time)).Round(time.Millisecond))
			r.describe(ctx, s, v1.SlotIdle, now)
			s.after(r.standbyCheck(s, standbyReadyCheck))
			return nil
		}
		// Counted from the end of its deployment (the move to Idle): a cold pull is no silence.
		limit := s.pool.Spec.Timing.DeployGracePeriod.OrDefault(v1.DefaultDeployGracePeriod)
		if waited := r.Clock.Since(st.PhaseSince.Time); waited > limit {
			// An image that never asks (a wrong bot API URL, a broken image) would redeploy
			// forever: this one counts as a failure, and maxRecoveryAttempts of them in a row
			// retire the slot with a Warning Event, as any failing slot.
			st.DeploymentUUID = ""
			r.setStandby(s, v1.StandbyLost)
			r.Metrics.StandbyLostOne()
			r.toError(ctx, s, string(v1.ReasonStandbyLost), fmt.Sprintf("The fresh standby container did not ask the bot API for work within %s of its deployment (its image must wait for its binding: docs/pools-and-slots.md)", limit))
			return nil
		}
		st.Message = "Standby container deployed; waiting for it to ask for work"
		s.after(r.standbyCheck(s, standbyStartCheck))
	case v1.StandbyReady:
		if !asked || now.Sub(ask.At) > StandbyAskWindow {
			r.standbyLost(s, "The standby container stopped asking for work "+lastAskText(ask, asked, now))
			return nil
		}
		if left := ask.LeftAt; !left.IsZero() && !left.Before(ask.At) {
			at := left.UTC().Format(time.RFC3339)
			if gone := now.Sub(left); gone > StandbyRejoinGrace {
				r.standbyLost(s, fmt.Sprintf("The standby container hung up its wait for work at %s and did not ask again within %s", at, StandbyRejoinGrace))
				return nil
			}
			// Still offered: a bot bound now is taken by the container's next ask, and one
			// that never comes fails the bot as a silent container would.
			st.Message = HungUpMessage + " at " + at + "; it has " + StandbyRejoinGrace.String() + " to ask again"
			s.after(r.standbyCheck(s, StandbyRejoinGrace-now.Sub(left)+100*time.Millisecond))
		} else if strings.HasPrefix(st.Message, HungUpMessage) {
			st.Message = "Standby container " + shortToken(st.TokenSHA256) + " asks for work again"
		}
		s.after(r.standbyCheck(s, min(standbyReadyCheck, StandbyAskWindow-now.Sub(ask.At)+time.Second)))
	}
	return r.checkApp(ctx, s, "")
}

// lastAsk returns the last ask of the slot's current container: one made with the slot's
// current credential since its deploy request. asked is false when there is none.
func (r *Reconciler) lastAsk(ctx context.Context, s *slotScope) (store.SlotAsk, bool, error) {
	st := &s.slot.Status
	asks, err := r.Store.LastSlotAsks(ctx, []types.UID{s.slot.UID})
	if err != nil {
		return store.SlotAsk{}, false, err
	}
	ask, ok := asks[s.slot.UID]
	since := st.StandbySince
	current := ok && st.TokenSHA256 != "" && ask.TokenSHA256 == st.TokenSHA256 &&
		since != nil && !ask.At.Before(since.Truncate(time.Second))
	return ask, current, nil
}

// standbyLost marks a free slot whose container stopped asking: it is not offered any more,
// and the next pass deploys a fresh container.
func (r *Reconciler) standbyLost(s *slotScope, msg string) {
	r.setStandby(s, v1.StandbyLost)
	s.slot.Status.DeploymentUUID = ""
	s.slot.Status.Message = msg + "; deploying a fresh one"
	r.Recorder.Eventf(s.slot, nil, corev1.EventTypeWarning, string(v1.ReasonStandbyLost), "Standby", "%s", s.slot.Status.Message)
	r.Metrics.StandbyLostOne()
}

// standbyBound is the step of a standby slot a bot was bound to: no Coolify request, the
// container learns the binding from its long-poll; the slot turns Busy on the bot's first
// report or beat. A container that does not take the bot within StandbyAskWindow is gone:
// the slot fails (the bot ends with ReasonStandbyLost) and gets a fresh container.
func (r *Reconciler) standbyBound(ctx context.Context, s *slotScope) error {
	if policy.BotStarted(s.bot) {
		r.toBusy(ctx, s, "Bot "+s.bot.Name+" runs on the standby container")
		return nil
	}
	bound := policy.BoundSince(s.bot)
	if bound == nil {
		// The bot controller has not mirrored the binding yet: its write brings us back.
		s.after(r.standbyCheck(s, standbyStartCheck))
		s.slot.Status.Message = "Bot " + s.bot.Name + " bound; its standby container takes it from the bot API"
		return nil
	}
	claimed := s.bot.Status.Binding != nil && s.bot.Status.Binding.SlotUID == s.slot.UID
	if !claimed {
		// A container that hung up its wait (it died, say) between its last ask and the
		// binding, and did not ask again within the grace, will not take the bot: fail now,
		// not at the end of the ask window. A store that cannot answer changes nothing.
		if ask, asked, err := r.lastAsk(ctx, s); err == nil && asked && !ask.LeftAt.IsZero() && !ask.LeftAt.Before(ask.At) {
			silent := r.Clock.Since(ask.LeftAt)
			if silent > StandbyRejoinGrace {
				s.slot.Status.DeploymentUUID = ""
				r.setStandby(s, v1.StandbyLost)
				r.toError(ctx, s, string(v1.ReasonStandbyLost), fmt.Sprintf("The standby container hung up its wait for work at %s and did not ask again within %s: it will not take bot %s",
					ask.LeftAt.UTC().Format(time.RFC3339), StandbyRejoinGrace, s.bot.Name))
				return nil
			}
			s.after(r.standbyCheck(s, StandbyRejoinGrace-silent+100*time.Millisecond))
		}
	}
	if waited := r.Clock.Since(bound.Time); waited > StandbyAskWindow {
		if claimed {
			// Its container took the binding (the bot API recorded the claim) but has not
			// reported yet: it is the bot's, and the heartbeat rules judge it from here,
			// however long it takes to join. (Not sooner: the claim alone does not wake the
			// slot, and a Busy slot's description is a Coolify request the start path spares.)
			r.toBusy(ctx, s, "Bot "+s.bot.Name+" was taken by the standby container, which has not reported yet")
			return nil
		}
		s.slot.Status.DeploymentUUID = ""
		r.setStandby(s, v1.StandbyLost)
		r.toError(ctx, s, string(v1.ReasonStandbyLost),
			fmt.Sprintf("The standby container did not take bot %s within %s of its binding", s.bot.Name, StandbyAskWindow))
		return nil
	}
	s.slot.Status.Message = "Bot " + s.bot.Name + " bound; its standby container takes it from the bot API"
	s.after(r.standbyCheck(s, StandbyAskWindow-r.Clock.Since(bound.Time)+time.Second))
	return nil
}

// deployingStandby follows the deployment of a fresh standby container: finished → Idle (the
// container is Starting until it asks for work), failed → Error (recovered like any slot).
// Only the deployment's own record counts: the application's status lags and may still show
// the container of the bot before as running. There is no bot, so no heartbeat can speak for
// it: deploymentTimeout applies as it is, and a deployment that cannot be found is lost after
// deployGracePeriod.
func (r *Reconciler) deployingStandby(ctx context.Context, s *slotScope, poll time.Duration) error {
	st := &s.slot.Status
	inPhase := r.Clock.Since(st.PhaseSince.Time)
	if inPhase < poll/2 {
		s.after(poll - inPhase)
		return nil
	}
	dep, _, err := r.findDeployment(ctx, s, poll)
	if err == nil && (dep == nil || dep.Status.Terminal() && dep.Status != coolify.DeploymentFinished) {
		dep, _, err = r.findDeployment(ctx, s, readNow) // fail on what Coolify says now
	}
	if err != nil {
		st.Message = "Starting a standby container; Coolify did not answer the last poll"
		if wait, ok := pass.CoolifyWait(err); ok {
			poll = max(poll, wait)
		}
		s.after(poll)
		return nil
	}
	timing := s.pool.Spec.Timing
	var failed deployVerdict
	switch {
	case dep != nil && dep.Status == coolify.DeploymentFinished:
		// The deployment is over: no request is pending that a later pass must look for.
		st.DeployingSince = nil
		r.Coolify.StartEnded(s.pool.UID, policy.SlotServer(s.slot, s.pool), false, r.Clock.Now())
		r.recordDeployDuration(s)
		r.moveTo(s, v1.SlotIdle, "", "Standby container deployed (deployment "+dep.DeploymentUUID+"); waiting for it to ask for work")
		return nil
	case dep != nil:
		if failed = judgeDeployment(dep, nil, inPhase, timing, false); failed.phase != v1.SlotError {
			st.Message = "Starting a standby container (deployment " + dep.DeploymentUUID + " " + string(dep.Status) + ")"
			s.after(poll)
			return nil
		}
	case inPhase <= timing.DeployGracePeriod.OrDefault(v1.DefaultDeployGracePeriod):
		st.Message = "Starting a standby container"
		s.after(poll)
		return nil
	default:
		failed = deployVerdict{reason: string(v1.ReasonDeploymentLost), message: "No deployment of the standby container can be found"}
	}
	if err := s.cancelDeployment(ctx); err != nil {
		return err
	}
	st.DeploymentUUID, st.DeployingSince = "", nil
	r.toError(ctx, s, failed.reason, "Starting a standby container: "+failed.message)
	return nil
}

// leaveStandby stops the container of a free slot whose pool went back to standby Stopped.
func (r *Reconciler) leaveStandby(ctx context.Context, s *slotScope) error {
	if s.slot.Status.Standby != v1.StandbyStarting || s.slot.Status.DeploymentUUID != "" {
		if stopped, err := r.stop(ctx, s, "Stopping the standby container (the pool's standby is Stopped)"); err != nil || !stopped {
			return err
		}
	}
	if err := r.rotateCredential(ctx, s); err != nil { // the next container is a bot's
		if s.slot.Status.ApplicationUUID == "" {
			r.recreate(s)
			return nil
		}
		return err
	}
	r.setStandby(s, "")
	s.slot.Status.DeploymentUUID = ""
	s.slot.Status.Message = "Free; the pool's standby is Stopped"
	return nil
}

func lastAskText(ask store.SlotAsk, asked bool, now time.Time) string {
	if !asked {
		return "(no ask with its current credential)"
	}
	return "(last ask " + now.Sub(ask.At).Round(time.Second).String() + " ago)"
}

// shortToken abbreviates a credential hash for messages: enough to tell containers apart.
func shortToken(hash string) string {
	if len(hash) > 8 {
		return hash[:8]
	}
	return hash
}

func isCoolifyBusyMessage(msg string) bool {
	return len(msg) >= len("Coolify is busy") && msg[:len("Coolify is busy")] == "Coolify is busy"
}
