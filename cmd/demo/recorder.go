package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// botRecord is what the demo saw of one bot, with its own timestamps: the API's are whole
// seconds, too coarse for a time-scaled run.
type botRecord struct {
	name      string
	priority  int32
	scheduled bool
	// asked is when the bot started wanting a slot: its creation, or for a scheduled bot the
	// moment it left Scheduled.
	asked    time.Time
	queued   time.Time // first seen Queued
	bound    time.Time // first seen with a slot
	running  time.Time // first seen running: the bot reporting from its container, or startedAt
	finished time.Time
	slot     string
	app      string
	// standby: the bot was bound to a slot whose standby container was Ready, so it started
	// with no deployment of its own.
	standby bool
	phase   v1.BotPhase
	reason  v1.BotReason
	message string
}

func (b *botRecord) terminal() bool { return b.phase.Terminal() }

// slotRecord is what the demo saw of one slot.
type slotRecord struct {
	name    string
	phase   v1.SlotPhase
	bound   bool // spec.botRef is set
	botRef  string
	created time.Time
	// standby is the state of the slot's standby container (pools with standby Running);
	// readyAt lists each time it turned Ready.
	standby v1.StandbyState
	readyAt []time.Time
	// errors are the reasons the slot entered Error; recovered counts Error → Idle.
	errors    []string
	recovered int
	errorAt   time.Time
	recovery  []time.Duration
	deleted   bool
}

// recorder follows bots and slots through informers and keeps their history.
type recorder struct {
	mu    sync.Mutex
	bots  map[string]*botRecord
	order []string
	slots map[string]*slotRecord
	now   func() time.Time
}

func newRecorder() *recorder {
	return &recorder{bots: map[string]*botRecord{}, slots: map[string]*slotRecord{}, now: time.Now}
}

// watch starts informers on the namespace's bots and slots; they stop with ctx.
func (r *recorder) watch(ctx context.Context, cfg *rest.Config, scheme *k8sruntime.Scheme, ns string) error {
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		return err
	}
	for obj, h := range map[client.Object]func(any, bool){
		&v1.Bot{}:         r.onBot,
		&v1.BotPoolSlot{}: r.onSlot,
	} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { h(o, false) },
			UpdateFunc: func(_, o any) { h(o, false) },
			DeleteFunc: func(o any) {
				if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
					o = d.Obj
				}
				h(o, true)
			},
		}); err != nil {
			return err
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return fmt.Errorf("the demo's watch on bots and slots did not sync")
	}
	return nil
}

// created notes a bot the demo is about to create, so its clock starts before the operator's.
func (r *recorder) created(name string, priority int32, scheduled bool, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.bot(name)
	b.priority, b.scheduled = priority, scheduled
	if !scheduled {
		b.asked = at
	}
}

func (r *recorder) bot(name string) *botRecord {
	b := r.bots[name]
	if b == nil {
		b = &botRecord{name: name}
		r.bots[name] = b
		r.order = append(r.order, name)
	}
	return b
}

func (r *recorder) onBot(o any, _ bool) {
	bot, ok := o.(*v1.Bot)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	b := r.bot(bot.Name)
	st := bot.Status
	b.phase, b.reason, b.message = st.Phase, st.Reason, st.Message
	waiting := st.Phase == "" || st.Phase == v1.BotPending || st.Phase == v1.BotScheduled
	if b.asked.IsZero() && !waiting {
		b.asked = now
	}
	if st.Phase == v1.BotQueued && b.queued.IsZero() {
		b.queued = now
	}
	if st.SlotName != "" {
		b.slot = st.SlotName
		if b.bound.IsZero() {
			b.bound = now
		}
	}
	if st.ApplicationUUID != "" {
		b.app = st.ApplicationUUID
	}
	if b.running.IsZero() && (st.StartedAt != nil || selfReported(st.Phase)) {
		b.running = now
	}
	if st.Phase.Terminal() && b.finished.IsZero() {
		b.finished = now
	}
}

// selfReported phases are reported by the bot from its container: it runs.
func selfReported(p v1.BotPhase) bool {
	switch p {
	case v1.BotJoiningCall, v1.BotInWaitingRoom, v1.BotInCall, v1.BotLeaving, v1.BotCallEnded, v1.BotDone:
		return true
	}
	return false
}

func (r *recorder) onSlot(o any, deleted bool) {
	slot, ok := o.(*v1.BotPoolSlot)
	if !ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	s := r.slots[slot.Name]
	if s == nil {
		s = &slotRecord{name: slot.Name, created: now}
		r.slots[slot.Name] = s
	}
	s.deleted = deleted
	s.bound = slot.Spec.BotRef != nil
	if ref := slot.Spec.BotRef; ref != nil && ref.Name != s.botRef {
		// The binding's own update: the dispatcher binds a standby slot only while its
		// container is Ready, and the bot then starts on that container.
		if b := r.bots[ref.Name]; b != nil {
			b.standby = slot.Status.Standby == v1.StandbyReady
		}
	}
	s.botRef = ""
	if slot.Spec.BotRef != nil {
		s.botRef = slot.Spec.BotRef.Name
	}
	if st := slot.Status.Standby; st != s.standby {
		if st == v1.StandbyReady {
			s.readyAt = append(s.readyAt, now)
		}
		s.standby = st
	}
	next := slot.Status.Phase
	if next == s.phase {
		return
	}
	switch {
	case next == v1.SlotError:
		s.errors = append(s.errors, slot.Status.Reason)
		s.errorAt = now
	case s.phase == v1.SlotError && next == v1.SlotIdle:
		s.recovered++
		s.recovery = append(s.recovery, now.Sub(s.errorAt))
	}
	s.phase = next
}

// snapshot copies the records, in creation order, for rendering without the lock.
func (r *recorder) snapshot() ([]botRecord, []slotRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	bots := make([]botRecord, 0, len(r.order))
	for _, n := range r.order {
		bots = append(bots, *r.bots[n])
	}
	slots := make([]slotRecord, 0, len(r.slots))
	for _, s := range r.slots {
		c := *s
		c.errors = append([]string(nil), s.errors...)
		c.recovery = append([]time.Duration(nil), s.recovery...)
		c.readyAt = append([]time.Time(nil), s.readyAt...)
		slots = append(slots, c)
	}
	return bots, slots
}

// botOfApp returns the bot an application served at a moment: the last one bound to it
// before then and not finished yet. It names the bot of a crashed container.
func botOfApp(bots []botRecord, app string, at time.Time) string {
	best := ""
	var bound time.Time
	for _, b := range bots {
		// A bot that had finished before was not in the container (a standby container that
		// crashed while it waited for the next bot).
		over := !b.finished.IsZero() && b.finished.Before(at)
		if b.app == app && !b.bound.IsZero() && !over && b.bound.Before(at) && b.bound.After(bound) {
			best, bound = b.name, b.bound
		}
	}
	return best
}
