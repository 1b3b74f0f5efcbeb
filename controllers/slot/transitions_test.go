package slot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/deploygate"
	"botpool.dev/botpool/controllers/internal/fakeapi"
	"botpool.dev/botpool/coolify"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/store/memory"
)

// allSlotPhases is every phase a slot has, "" (a new slot) first.
var allSlotPhases = []v1.SlotPhase{"", v1.SlotCreating, v1.SlotIdle, v1.SlotDeploying, v1.SlotBusy, v1.SlotReleasing, v1.SlotError}

// TestSlotTransitionsAreDocumented: the table of moves in docs/pools-and-slots.md is the
// code's, row for row, with the same pass/next pass column.
func TestSlotTransitionsAreDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/pools-and-slots.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{} // "from → to" → "same pass" or "next pass"
	in := false
	for line := range strings.SplitSeq(string(doc), "\n") {
		switch {
		case strings.HasPrefix(line, "### Transitions"):
			in = true
			continue
		case in && strings.HasPrefix(line, "#"):
			in = false
		}
		if !in || !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 4 {
			t.Fatalf("a row of the transitions table without 4 cells: %q", line)
		}
		from, to, when := phaseCell(cells[0]), phaseCell(cells[1]), strings.TrimSpace(cells[3])
		if from == "from" || strings.HasPrefix(from, "---") {
			continue
		}
		key := from + " → " + to
		if _, dup := documented[key]; dup {
			t.Errorf("the docs list %s twice", key)
		}
		documented[key] = when
	}
	if len(documented) == 0 {
		t.Fatal("no transitions table under \"### Transitions\" in docs/pools-and-slots.md")
	}
	inCode := map[string]string{}
	for from, tos := range slotTransitions {
		for to, when := range tos {
			inCode[phaseName(from)+" → "+string(to)] = map[entry]string{samePass: "same pass", nextPass: "next pass"}[when]
		}
	}
	for key, when := range inCode {
		switch got, ok := documented[key]; {
		case !ok:
			t.Errorf("the code allows %s (%s); the docs do not list it", key, when)
		case got != when:
			t.Errorf("%s: the docs say %q, the code %q", key, got, when)
		}
	}
	for key := range documented {
		if _, ok := inCode[key]; !ok {
			t.Errorf("the docs list %s; the code does not allow it", key)
		}
	}
}

// phaseCell reads a phase from a cell of the docs' table: `Idle`, or (new) for "".
func phaseCell(cell string) string {
	return strings.Trim(strings.TrimSpace(cell), "`")
}

func phaseName(p v1.SlotPhase) string { return orNone(string(p)) }

// TestSlotTransitionsReachEveryHandler: every phase has a handler and its moves in the table;
// every move ends in a known phase; the samePass moves make no cycle, so advance's loop ends
// within maxSteps; and a slot can never go back to "".
func TestSlotTransitionsReachEveryHandler(t *testing.T) {
	r := &Reconciler{}
	for _, p := range allSlotPhases {
		if r.handler(p) == nil {
			t.Errorf("phase %s has no handler", phaseName(p))
		}
		if len(slotTransitions[p]) == 0 {
			t.Errorf("phase %s has no move out of it", phaseName(p))
		}
	}
	if len(slotTransitions) != len(allSlotPhases) {
		t.Errorf("the table has moves from %d phases, want %d", len(slotTransitions), len(allSlotPhases))
	}
	for from, tos := range slotTransitions {
		for to := range tos {
			if to == "" || !slices.Contains(allSlotPhases, to) {
				t.Errorf("%s → %q: not a phase a slot may enter", phaseName(from), to)
			}
			if to == from {
				t.Errorf("%s → %s: a move to the same phase is no move", from, to)
			}
		}
	}
	// The longest run of samePass moves, from each phase: more than maxSteps handlers, or a
	// cycle, would fail a pass.
	var longest func(p v1.SlotPhase, seen []v1.SlotPhase) int
	longest = func(p v1.SlotPhase, seen []v1.SlotPhase) int {
		if slices.Contains(seen, p) {
			t.Fatalf("the samePass moves make a cycle: %v → %s", seen, p)
		}
		n := 1
		for to, when := range slotTransitions[p] {
			if when == samePass {
				n = max(n, 1+longest(to, append(seen, p)))
			}
		}
		return n
	}
	for _, p := range allSlotPhases {
		if n := longest(p, nil); n > maxSteps {
			t.Errorf("a pass from %s runs %d handlers, more than maxSteps (%d)", phaseName(p), n, maxSteps)
		}
	}
}

// TestSlotMovesReturnTheGateAdmission: leaving Deploying, by any move the table allows, gives
// the slot's admission back, and only a move that ran a container (to Busy, or to Idle with a
// standby container) marks the image as cached; no other
// move touches the gate; a move the table lacks is refused and fails the pass.
func TestSlotMovesReturnTheGateAdmission(t *testing.T) {
	fclk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
	pool := &v1.BotPool{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pool", UID: "pool-uid"},
		Spec: v1.BotPoolSpec{Image: "bot", ImageTag: "1", MaxConcurrentDeployments: 2}}
	for _, from := range allSlotPhases {
		for _, to := range allSlotPhases[1:] {
			t.Run(phaseName(from)+"→"+string(to), func(t *testing.T) {
				gate := &deploygate.Gate{Clock: fclk}
				if !gate.Admit(pool, coolifyview.CoolifyServer{}, deploygate.DeployAsk{Slot: "slot", Warm: false}) {
					t.Fatal("the gate refused an empty pool")
				}
				r := &Reconciler{Clock: fclk, Gate: gate}
				slot := &v1.BotPoolSlot{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "slot"},
					Spec: v1.BotPoolSlotSpec{Pool: "pool"}, Status: v1.BotPoolSlotStatus{Phase: from}}
				s := &slotScope{slot: slot, pool: pool}
				r.moveTo(s, to, "", "moved")

				_, allowed := slotTransitions[from][to]
				admitted, warm, _ := gate.Size()
				switch {
				case !allowed:
					if !errors.Is(s.refused, ErrIllegalTransition) || slot.Status.Phase != from || len(s.transitions) != 0 {
						t.Errorf("a move the table lacks: refused %v, phase %s, %d transitions recorded; want it refused, the phase kept, none recorded",
							s.refused, phaseName(slot.Status.Phase), len(s.transitions))
					}
					if admitted != 1 {
						t.Errorf("a refused move returned the admission")
					}
				case s.refused != nil || slot.Status.Phase != to || len(s.transitions) != 1:
					t.Errorf("an allowed move: refused %v, phase %s, %d transitions recorded", s.refused, phaseName(slot.Status.Phase), len(s.transitions))
				case from == v1.SlotDeploying && admitted != 0:
					t.Errorf("leaving Deploying kept the admission")
				case from != v1.SlotDeploying && admitted != 1:
					t.Errorf("a move from %s returned the admission", phaseName(from))
				case (warm == 1) != (from == v1.SlotDeploying && (to == v1.SlotBusy || to == v1.SlotIdle)):
					t.Errorf("the image is known cached: %v; want it only after Deploying → Busy or Idle", warm == 1)
				}
			})
		}
	}
}

// transitionAPI is a Coolify for single passes of the slot controller: Deploy answers deployErr
// (or queues dep-1), dep-1 reads as finished, and the calls are counted.
type transitionAPI struct {
	coolify.API // a call the test does not expect panics on the nil interface

	mu        sync.Mutex
	deployErr error
	deploys   int
	cancels   int
	stops     int
}

func (a *transitionAPI) SetDescription(context.Context, string, string) error { return nil }

// UpsertEnvs takes the fresh credential a slot sets once its container is stopped.
func (a *transitionAPI) UpsertEnvs(_ context.Context, _ string, env []coolify.EnvVar) ([]coolify.EnvVar, error) {
	return env, nil
}

func (a *transitionAPI) Deploy(context.Context, string) (coolify.DeployResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.deploys++
	if a.deployErr != nil {
		return coolify.DeployResult{}, a.deployErr
	}
	return coolify.DeployResult{DeploymentUUID: "dep-1"}, nil
}

func (a *transitionAPI) ListActiveDeployments(context.Context) ([]coolify.Deployment, error) {
	return nil, nil
}

func (a *transitionAPI) GetDeployment(_ context.Context, uuid string) (*coolify.Deployment, error) {
	return &coolify.Deployment{DeploymentUUID: uuid, Status: coolify.DeploymentFinished}, nil
}

func (a *transitionAPI) CancelDeployment(context.Context, string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cancels++
	return nil
}

func (a *transitionAPI) Stop(context.Context, string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stops++
	return nil
}

// slotPass is one slot, its pool and maybe a bot on a fake client, and a slot controller with
// the fake clock, for single passes.
type slotPass struct {
	t     *testing.T
	clk   *clocktesting.FakeClock
	c     client.Client
	api   *transitionAPI
	store *memory.Store
	gate  *deploygate.Gate
	r     *Reconciler
	key   client.ObjectKey
}

func newSlotPass(t *testing.T, phase v1.SlotPhase, bound bool, api *transitionAPI) *slotPass {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
	since := clk.Now().Add(-time.Minute)
	pool := bt.MakePool("ns", "pool").UID("pool-uid").MaxSlots(1).Image("bot", "1").Obj()
	bot := bt.MakeBot("ns", "bot").UID("bot-uid").MeetingURL("https://zoom.us/j/1").PoolRef("pool").Phase(v1.BotDeploying).Obj()
	sw := bt.MakeSlot("ns", "pool-zoom-001", "pool").UID("slot-uid").Finalizers(v1.FinalizerSlot).
		Phase(phase).Since(since).App("app-uuid").
		Token("0000000000000000000000000000000000000000000000000000000000000000")
	if bound {
		sw = sw.BoundTo(bot.Name, bot.UID)
	}
	if phase == v1.SlotDeploying {
		sw = sw.Deployment("dep-1", since)
	}
	slot := sw.Obj()
	c := fakeapi.New(t, interceptor.Funcs{}, pool, bot, slot)
	p := &slotPass{t: t, clk: clk, c: c, api: api, key: client.ObjectKeyFromObject(slot)}
	// onePassSlots: this process bound the slot, so no restart rule applies.
	p.r = onePassSlots(c, c, clk, api, memory.New(memory.WithClock(clk)))
	p.store, p.gate = p.r.Store.(*memory.Store), p.r.Gate
	return p
}

// pass reconciles the slot once and returns its error and the slot as stored after it.
func (p *slotPass) pass() (*v1.BotPoolSlot, error) {
	_, err := p.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: p.key})
	got := &v1.BotPoolSlot{}
	if gerr := p.c.Get(context.Background(), p.key, got); gerr != nil {
		p.t.Fatal(gerr)
	}
	return got, err
}

// audited lists the slot's audited transitions, "from→to".
func (p *slotPass) audited() []string {
	ts, err := p.store.Transitions(context.Background(), p.key.Namespace, p.key.Name)
	if err != nil {
		p.t.Fatal(err)
	}
	var out []string
	for _, tr := range ts {
		out = append(out, fmt.Sprintf("%s→%s", phaseName(v1.SlotPhase(tr.From)), tr.To))
	}
	return out
}

// TestSlotDeployNotStartedReturnsItsAdmission: a pass that took the gate's admission for a bound
// slot and did not start the deployment gives it back by the pass's end, whatever kept the
// deployment from starting; one that started it keeps it until the slot leaves Deploying, and
// a deployment that ran to Busy leaves the image known as cached.
func TestSlotDeployNotStartedReturnsItsAdmission(t *testing.T) {
	for _, tc := range []struct {
		name      string
		deployErr error
		phase     v1.SlotPhase
		failed    bool
	}{
		{name: "refused for now", deployErr: &coolify.WaitError{Op: "deploy", Reason: coolify.WaitLimiter, Wait: 3 * time.Second}, phase: v1.SlotIdle},
		{name: "a server error", deployErr: fmt.Errorf("deploy: %w", coolify.ErrServer), phase: v1.SlotIdle, failed: true},
		{name: "the application gone", deployErr: fmt.Errorf("deploy: %w", coolify.ErrNotFound), phase: v1.SlotCreating},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newSlotPass(t, v1.SlotIdle, true, &transitionAPI{deployErr: tc.deployErr})
			got, err := p.pass()
			if (err != nil) != tc.failed || got.Status.Phase != tc.phase || p.api.deploys != 1 {
				t.Fatalf("after the pass: error %v, phase %s, %d deploy requests; want failed=%v, %s, 1 request",
					err, got.Status.Phase, p.api.deploys, tc.failed, tc.phase)
			}
			if admitted, _, _ := p.gate.Size(); admitted != 0 {
				t.Errorf("the gate still holds the admission of a deployment that did not start")
			}
		})
	}

	t.Run("started, then finished", func(t *testing.T) {
		p := newSlotPass(t, v1.SlotIdle, true, &transitionAPI{})
		got, err := p.pass()
		if err != nil || got.Status.Phase != v1.SlotDeploying {
			t.Fatalf("the deploy pass: error %v, phase %s; want Deploying", err, got.Status.Phase)
		}
		if admitted, warm, _ := p.gate.Size(); admitted != 1 || warm != 0 {
			t.Fatalf("a started deployment: the gate holds %d admissions and knows %d warm images; want 1 and 0", admitted, warm)
		}
		p.clk.Step(time.Minute) // past the first poll
		got, err = p.pass()
		if err != nil || got.Status.Phase != v1.SlotBusy {
			t.Fatalf("the poll pass: error %v, phase %s (%q); want Busy", err, got.Status.Phase, got.Status.Message)
		}
		if admitted, warm, _ := p.gate.Size(); admitted != 0 || warm != 1 {
			t.Errorf("after Deploying → Busy the gate holds %d admissions and knows %d warm images; want 0 and 1", admitted, warm)
		}
	})
}

// TestSlotReleasingRunsInThePassThatEnteredIt: a slot whose bot let go moves to Releasing and
// stops its container in the same pass (the loop of advance runs the handler of the phase
// entered), then waits for the next pass as Idle.
func TestSlotReleasingRunsInThePassThatEnteredIt(t *testing.T) {
	for _, from := range []v1.SlotPhase{v1.SlotBusy, v1.SlotDeploying} {
		t.Run(string(from), func(t *testing.T) {
			p := newSlotPass(t, from, false, &transitionAPI{})
			got, err := p.pass()
			if err != nil {
				t.Fatal(err)
			}
			want := []string{string(from) + "→Releasing", "Releasing→Idle"}
			if audited := p.audited(); got.Status.Phase != v1.SlotIdle || p.api.stops != 1 || !slices.Equal(audited, want) {
				t.Errorf("one pass: phase %s, %d stops, audited %v; want Idle, 1 stop, %v", got.Status.Phase, p.api.stops, audited, want)
			}
			if wantCancels := map[v1.SlotPhase]int{v1.SlotDeploying: 1}[from]; p.api.cancels != wantCancels {
				t.Errorf("%d deployments cancelled, want %d", p.api.cancels, wantCancels)
			}
		})
	}
}
