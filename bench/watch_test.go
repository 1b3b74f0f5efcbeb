package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// slotEventKind is what happened to a slot, as the benchmark's watch saw it.
type slotEventKind string

const (
	evBound    slotEventKind = "bound"    // spec.botRef names a (new) bot
	evReleased slotEventKind = "released" // spec.botRef cleared: the design's release
	evIdle     slotEventKind = "idle"     // status.phase turned Idle
)

type slotEvent struct {
	kind slotEventKind
	bot  string // the bot bound or released
	at   time.Time
}

// watcher timestamps, from a watch of the benchmark's own, what the operator did: bindings
// (a slot's spec.botRef, the single source of truth of docs/bots.md), releases, phases. A
// watch sees a change a few milliseconds after it is stored, the same delay for every event,
// without the cost and coarseness of polling.
type watcher struct {
	cancel context.CancelFunc

	mu      sync.Mutex
	boundAt map[string]time.Time // bot → first binding seen
	slotOf  map[string]string    // bot → slot it was bound to
	slots   map[string]*v1.BotPoolSlot
	history map[string][]slotEvent // slot → events in order
	bots    map[string]v1.BotPhase
	phaseAt map[string]map[v1.BotPhase]time.Time // bot → phase → first seen
}

func startWatcher(cfg *rest.Config, scheme *runtime.Scheme, ns string) (*watcher, error) {
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{cancel: cancel, boundAt: map[string]time.Time{}, slotOf: map[string]string{},
		slots: map[string]*v1.BotPoolSlot{}, history: map[string][]slotEvent{},
		bots: map[string]v1.BotPhase{}, phaseAt: map[string]map[v1.BotPhase]time.Time{}}
	slots, err := c.GetInformer(ctx, &v1.BotPoolSlot{})
	if err != nil {
		cancel()
		return nil, err
	}
	if _, err := slots.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.slot(nil, o.(*v1.BotPoolSlot)) },
		UpdateFunc: func(o, n any) { w.slot(o.(*v1.BotPoolSlot), n.(*v1.BotPoolSlot)) },
		DeleteFunc: w.slotDeleted,
	}); err != nil {
		cancel()
		return nil, err
	}
	bots, err := c.GetInformer(ctx, &v1.Bot{})
	if err != nil {
		cancel()
		return nil, err
	}
	if _, err := bots.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.bot(o.(*v1.Bot)) },
		UpdateFunc: func(_, n any) { w.bot(n.(*v1.Bot)) },
	}); err != nil {
		cancel()
		return nil, err
	}
	go func() { _ = c.Start(ctx) }()
	syncCtx, syncCancel := context.WithTimeout(ctx, time.Minute)
	defer syncCancel()
	if !c.WaitForCacheSync(syncCtx) {
		cancel()
		return nil, fmt.Errorf("the benchmark's watch did not sync")
	}
	return w, nil
}

func (w *watcher) stop() { w.cancel() }

func (w *watcher) slot(old, cur *v1.BotPoolSlot) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.slots[cur.Name] = cur
	var oldRef *v1.BotReference
	var oldPhase v1.SlotPhase
	if old != nil {
		oldRef, oldPhase = old.Spec.BotRef, old.Status.Phase
	}
	ref := cur.Spec.BotRef
	if oldRef != nil && (ref == nil || ref.UID != oldRef.UID) {
		w.history[cur.Name] = append(w.history[cur.Name], slotEvent{kind: evReleased, bot: oldRef.Name, at: now})
	}
	if ref != nil && (oldRef == nil || ref.UID != oldRef.UID) {
		if _, seen := w.boundAt[ref.Name]; !seen {
			w.boundAt[ref.Name] = now
			w.slotOf[ref.Name] = cur.Name
		}
		w.history[cur.Name] = append(w.history[cur.Name], slotEvent{kind: evBound, bot: ref.Name, at: now})
	}
	if cur.Status.Phase != oldPhase && cur.Status.Phase == v1.SlotIdle {
		w.history[cur.Name] = append(w.history[cur.Name], slotEvent{kind: evIdle, at: now})
	}
}

func (w *watcher) slotDeleted(o any) {
	if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	if s, ok := o.(*v1.BotPoolSlot); ok {
		w.mu.Lock()
		delete(w.slots, s.Name)
		w.mu.Unlock()
	}
}

func (w *watcher) bot(b *v1.Bot) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.bots[b.Name] = b.Status.Phase
	at := w.phaseAt[b.Name]
	if at == nil {
		at = map[v1.BotPhase]time.Time{}
		w.phaseAt[b.Name] = at
	}
	if _, seen := at[b.Status.Phase]; !seen {
		at[b.Status.Phase] = now
	}
}

// bound returns when each of names was first seen bound; missing names were not.
func (w *watcher) bound(names []string) map[string]time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]time.Time, len(names))
	for _, n := range names {
		if t, ok := w.boundAt[n]; ok {
			out[n] = t
		}
	}
	return out
}

// slotPhases counts the slots by phase, and those bound to a bot under "bound".
func (w *watcher) slotPhases() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for _, s := range w.slots {
		out[string(s.Status.Phase)]++
		if s.Spec.BotRef != nil {
			out["bound"]++
		}
	}
	return out
}

// freeIdle counts the Idle slots no bot is bound to.
func (w *watcher) freeIdle() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range w.slots {
		if s.Status.Phase == v1.SlotIdle && s.Spec.BotRef == nil {
			n++
		}
	}
	return n
}

// botPhases counts the bots by phase.
func (w *watcher) botPhases() map[v1.BotPhase]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[v1.BotPhase]int{}
	for _, p := range w.bots {
		out[p]++
	}
	return out
}

// phaseSeen returns when bot was first seen in phase.
func (w *watcher) phaseSeen(bot string, phase v1.BotPhase) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.phaseAt[bot][phase]
	return t, ok
}

// histories returns a copy of every slot's events.
func (w *watcher) histories() map[string][]slotEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string][]slotEvent, len(w.history))
	for k, v := range w.history {
		out[k] = append([]slotEvent(nil), v...)
	}
	return out
}
