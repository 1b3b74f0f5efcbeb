package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

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
	// server is the Coolify server of the slot the bot was bound to (the last one).
	server string
	// attempts is the length of status.startAttempts: the starts that failed for a reason not
	// the bot's own and were retried (read leniently: 0 on an API without the field).
	attempts int
}

func (b *botRecord) terminal() bool { return b.phase.Terminal() }

// slotRecord is what the demo saw of one slot.
type slotRecord struct {
	name    string
	phase   v1.SlotPhase
	bound   bool // spec.botRef is set
	botRef  string
	created time.Time
	server  string    // spec.server: the Coolify server the slot lives on
	uid     types.UID // tells a slot re-created under the same name from the one before
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

// poolRecord is what the demo saw of the pool's servers.
type poolRecord struct {
	servers []v1.ServerStatus // status.servers, as last seen
	// health lists every change of a server's health in status.servers, in order.
	health []healthChange
	// serverOut is the ServerOut condition's message while it is True.
	serverOut string
}

// healthChange is a server's health in the pool's status turning to health at at.
type healthChange struct {
	server string
	health v1.ServerHealth
	at     time.Time
}

// recorder follows bots, slots and the pool through informers and keeps their history.
type recorder struct {
	mu    sync.Mutex
	bots  map[string]*botRecord
	order []string
	slots map[string]*slotRecord
	pool  poolRecord
	// placed lists each slot the pool created, with its server, in the order seen.
	placed []slotPlacement
	now    func() time.Time
}

// slotPlacement is a slot the pool created on a server.
type slotPlacement struct {
	slot, server string
}

func newRecorder() *recorder {
	return &recorder{bots: map[string]*botRecord{}, slots: map[string]*slotRecord{}, now: time.Now}
}

// watch starts informers on the namespace's bots, slots and pools; they stop with ctx. Bots
// are read as unstructured objects, so fields this build does not know yet (startAttempts, on
// another branch) can be counted when the API server has them.
func (r *recorder) watch(ctx context.Context, cfg *rest.Config, scheme *k8sruntime.Scheme, ns string) error {
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		return err
	}
	bots := &unstructured.Unstructured{}
	bots.SetGroupVersionKind(v1.GroupVersion.WithKind("Bot"))
	for obj, h := range map[client.Object]func(any, bool){
		bots:              r.onBotObject,
		&v1.BotPoolSlot{}: r.onSlot,
		&v1.BotPool{}:     r.onPool,
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

// onBotObject reads an unstructured Bot into the typed one, plus the length of
// status.startAttempts whatever its items are.
func (r *recorder) onBotObject(o any, deleted bool) {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return
	}
	var bot v1.Bot
	if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &bot); err != nil {
		return
	}
	attempts, _, _ := unstructured.NestedSlice(u.Object, "status", "startAttempts")
	r.onBot(&bot, len(attempts))
}

func (r *recorder) onBot(bot *v1.Bot, attempts int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	b := r.bot(bot.Name)
	st := bot.Status
	b.phase, b.reason, b.message = st.Phase, st.Reason, st.Message
	b.attempts = max(b.attempts, attempts)
	waiting := st.Phase == "" || st.Phase == v1.BotPending || st.Phase == v1.BotScheduled
	if b.asked.IsZero() && !waiting {
		b.asked = now
	}
	if st.Phase == v1.BotQueued && b.queued.IsZero() {
		b.queued = now
	}
	if st.SlotName != "" {
		// The slot's binding is normally seen first and notes the server; in case it was not.
		if sl := r.slots[st.SlotName]; b.server == "" && sl != nil && sl.botRef == bot.Name {
			b.server = sl.server
		}
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
	if slot.UID != s.uid {
		// A new slot, or one re-created under the name of a slot deleted before (a retired
		// slot's replacement, maybe on another server): it starts afresh, and counts as one
		// more slot placed on its server.
		if s.uid != "" {
			s.created, s.phase, s.botRef, s.standby = now, "", "", ""
		}
		s.uid = slot.UID
		r.placed = append(r.placed, slotPlacement{slot: slot.Name, server: slot.Spec.Server})
	}
	s.deleted = deleted
	s.bound = slot.Spec.BotRef != nil
	if slot.Spec.Server != "" {
		s.server = slot.Spec.Server
	}
	if ref := slot.Spec.BotRef; ref != nil && ref.Name != s.botRef {
		// The binding's own update: the dispatcher binds a standby slot only while its
		// container is Ready, and the bot then starts on that container. Slot names are
		// reused, so the bot's server is noted now.
		if b := r.bots[ref.Name]; b != nil {
			b.standby = slot.Status.Standby == v1.StandbyReady
			b.server = slot.Spec.Server
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

func (r *recorder) onPool(o any, deleted bool) {
	pool, ok := o.(*v1.BotPool)
	if !ok || deleted {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pool.observe(pool.Status, r.now())
}

// observe notes the pool's status: its servers, the health changes, the ServerOut condition.
func (p *poolRecord) observe(st v1.BotPoolStatus, now time.Time) {
	for _, srv := range st.Servers {
		if srv.Health != "" && srv.Health != p.lastHealth(srv.UUID) {
			p.health = append(p.health, healthChange{server: srv.UUID, health: srv.Health, at: now})
		}
	}
	p.servers = slices.Clone(st.Servers)
	p.serverOut = ""
	if c := meta.FindStatusCondition(st.Conditions, v1.ConditionServerOut); c != nil && c.Status == metav1.ConditionTrue {
		p.serverOut = c.Message
	}
}

// lastHealth is the server's health as last seen ("" before any).
func (p *poolRecord) lastHealth(server string) v1.ServerHealth {
	for i := len(p.health) - 1; i >= 0; i-- {
		if p.health[i].server == server {
			return p.health[i].health
		}
	}
	return ""
}

// placements copies the slots placed so far.
func (r *recorder) placements() []slotPlacement {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.placed)
}

// snapshot copies the records, in creation order, for rendering without the lock.
func (r *recorder) snapshot() ([]botRecord, []slotRecord, poolRecord) {
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
	pool := poolRecord{servers: slices.Clone(r.pool.servers), health: slices.Clone(r.pool.health), serverOut: r.pool.serverOut}
	return bots, slots, pool
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
