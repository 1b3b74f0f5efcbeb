package slot

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/deploygate"
	"botpool.dev/botpool/store"
)

// A slot's phase changes only through moveTo, which checks the move against slotTransitions,
// records it for the audit trail and does what the move entails, so no handler has to: leaving
// Deploying returns the deploy gate's admission. advance runs the handler of the slot's phase
// and, when the move says so, the handler of the phase just entered, from one loop: handlers
// never call each other.

// entry says when the handler of the phase a move entered runs.
type entry uint8

const (
	// nextPass: the pass ends with the move; its status write brings the slot back.
	nextPass entry = iota
	// samePass: at once, in the pass that moved. The slot has nothing to wait for in between,
	// and the work (stopping the container of a bot that let go, creating a new slot's
	// application) should not wait for a round trip through the status write.
	samePass
)

// slotTransitions is every move a slot's phase may make, from → to → when the handler of the
// phase entered runs; "" is a slot no pass has seen yet. docs/pools-and-slots.md shows the same
// table (a test checks that they agree, and that the samePass moves make no cycle).
var slotTransitions = map[v1.SlotPhase]map[v1.SlotPhase]entry{
	"":               {v1.SlotCreating: samePass},
	v1.SlotCreating:  {v1.SlotIdle: nextPass},
	v1.SlotIdle:      {v1.SlotDeploying: nextPass, v1.SlotReleasing: samePass, v1.SlotCreating: nextPass, v1.SlotBusy: nextPass, v1.SlotError: nextPass},
	v1.SlotDeploying: {v1.SlotBusy: nextPass, v1.SlotError: nextPass, v1.SlotReleasing: samePass, v1.SlotIdle: nextPass},
	v1.SlotBusy:      {v1.SlotReleasing: samePass, v1.SlotError: nextPass},
	v1.SlotReleasing: {v1.SlotIdle: nextPass, v1.SlotError: nextPass, v1.SlotCreating: nextPass},
	v1.SlotError:     {v1.SlotIdle: nextPass, v1.SlotCreating: nextPass},
}

// TransitionAllowed reports whether a slot's phase may move from one phase to another
// ("" being a new slot), for checks outside this package (the model check's audit).
func TransitionAllowed(from, to v1.SlotPhase) bool {
	_, ok := slotTransitions[from][to]
	return ok
}

// ErrIllegalTransition fails a pass that tried a move slotTransitions does not allow: a
// programming error, which the move refuses (the slot keeps its phase).
var ErrIllegalTransition = errors.New("illegal slot transition")

// maxSteps bounds the handlers one pass runs. The samePass moves make no cycle, so a pass runs
// at most one handler per phase; reaching the bound is a programming error.
var maxSteps = len(slotTransitions)

// advance runs the handler of the slot's phase, then the handler of each phase a samePass move
// entered. An admission of the deploy gate taken in this pass for a deployment that did not
// start goes back when the pass is done with the phases.
func (r *Reconciler) advance(ctx context.Context, s *slotScope) error {
	defer func() {
		if s.admitted && s.slot.Status.Phase != v1.SlotDeploying {
			r.returnAdmission(s, false)
		}
	}()
	for range maxSteps {
		handle := r.handler(s.slot.Status.Phase)
		if handle == nil { // a phase of a newer version: left alone
			return nil
		}
		s.handleNow = false
		if err := handle(ctx, s); err != nil || !s.handleNow {
			return err
		}
	}
	return fmt.Errorf("%w: more than %d moves in one pass, the last to %s", ErrIllegalTransition, maxSteps, s.slot.Status.Phase)
}

// handler is the step of a phase.
func (r *Reconciler) handler(phase v1.SlotPhase) func(context.Context, *slotScope) error {
	switch phase {
	case "":
		return r.start
	case v1.SlotCreating:
		return r.create
	case v1.SlotIdle:
		return r.idle
	case v1.SlotDeploying:
		return r.deploying
	case v1.SlotBusy:
		return r.busy
	case v1.SlotReleasing:
		return r.releasing
	case v1.SlotError:
		return r.recover
	}
	return nil
}

// start takes a new slot into its lifecycle.
func (r *Reconciler) start(_ context.Context, s *slotScope) error {
	r.moveTo(s, v1.SlotCreating, "", "Creating the Coolify application")
	return nil
}

// moveTo changes the slot's phase, with what the move entails; the status patch and the audit
// trail follow at the end of the pass. A move slotTransitions does not allow is refused, and
// fails the pass.
func (r *Reconciler) moveTo(s *slotScope, to v1.SlotPhase, reason, msg string) {
	st := &s.slot.Status
	from := st.Phase
	when, ok := slotTransitions[from][to]
	if !ok {
		s.refused = errors.Join(s.refused, fmt.Errorf("%w: %s → %s (%s)", ErrIllegalTransition, orNone(string(from)), to, msg))
		return
	}
	if from == v1.SlotDeploying {
		// The deployment is over, one way or the other; only one that ran (to Busy, or to Idle
		// with a standby container) leaves the image cached on the server.
		r.returnAdmission(s, to == v1.SlotBusy || to == v1.SlotIdle)
	}
	s.handleNow = when == samePass
	now := metav1.NewTime(r.Clock.Now())
	st.Phase, st.PhaseSince, st.Message = to, &now, msg
	if to == v1.SlotError {
		st.Reason = reason
	} else {
		st.Reason = ""
	}
	t := store.Transition{
		Namespace: s.slot.Namespace, Slot: s.slot.Name, Pool: s.slot.Spec.Pool,
		From: string(from), To: string(to), ApplicationUUID: st.ApplicationUUID,
		Reason: reason, CorrelationID: string(s.slot.UID) + "/" + st.DeploymentUUID, At: now.Time,
	}
	if ref := s.slot.Spec.BotRef; ref != nil {
		t.BotUID, t.BotName = ref.UID, ref.Name
	}
	s.transitions = append(s.transitions, t)
}

// admit asks the deploy gate whether the slot may start a deployment now. The admission goes
// back when the slot leaves Deploying (moveTo), when the pass that took it did not get there
// (advance), or when the slot goes away (dropFinalizer).
func (r *Reconciler) admit(ctx context.Context, s *slotScope) bool {
	deploying, here, warm := r.poolDeploys(ctx, s)
	s.admitted = r.Gate.Admit(s.pool, r.serverOf(s), deploygate.DeployAsk{
		Slot: s.slot.Name, Deploying: deploying, Here: here, Warm: warm,
		Start: s.bot != nil || queuedForRecycle(s),
	})
	return s.admitted
}

// returnAdmission gives the slot's admission back to the deploy gate, if it holds one;
// finished says a deployment of the pool's image completed. It is the one caller of Gate.Done.
func (r *Reconciler) returnAdmission(s *slotScope, finished bool) {
	s.admitted = false
	if s.pool != nil {
		r.Gate.Done(s.pool, s.slot.Name, finished)
	}
}
