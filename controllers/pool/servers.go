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
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify"
)

// A pool spread over several Coolify servers (spec.coolify.servers) places each new slot on
// one of them and records it in the slot's spec.server, which every later step of the slot
// follows: where its application is created, which server's deploy gate and image cache it
// uses, whose description mark it carries. The pool:
//
//   - places a new slot on the Active, healthy server with the least slots for its weight
//     that still has room (its maxSlots), preferring, among equals, one whose image cache
//     holds the pool's image (a slot of the pool runs there);
//   - offers bots only the free slots of Active servers whose health is not out (a cordoned
//     server, one the pool no longer lists, or one Coolify reports unreachable or unusable
//     takes no new bot), and counts only those as free when it decides how many slots to
//     create; an unhealthy server's slots come back by themselves once Coolify reports it
//     healthy again;
//   - drains the others: their free slots are deleted (a slot bound meanwhile stays), and
//     busy ones as their bots end; so are slots above a server's maxSlots.
//
// A pool on one server (spec.coolify.serverUUID) is the same with a list of one.

// placement chooses servers for new slots from what the pool holds on each.
type placement struct {
	servers []v1.PoolServer
	slots   map[string]int  // server → the pool's slots there
	warm    map[string]bool // server → a slot of the pool runs the image there
	out     map[string]bool // server → its health is out
}

// newPlacement sees the pool's slots; health is this pass's read of the servers' health (nil:
// the pool's status says).
func newPlacement(pool *v1.BotPool, slots []v1.BotPoolSlot, health map[string]v1.ServerHealth) *placement {
	p := &placement{servers: pool.Spec.Coolify.ServerList(), slots: map[string]int{}, warm: map[string]bool{}, out: map[string]bool{}}
	for _, srv := range p.servers {
		h, ok := health[srv.UUID]
		if !ok {
			h = policy.HealthOf(pool, srv.UUID)
		}
		p.out[srv.UUID] = h.Out()
	}
	for i := range slots {
		sl := &slots[i]
		srv := policy.SlotServer(sl, pool)
		p.slots[srv]++
		if sl.Status.Phase == v1.SlotBusy || sl.Status.Standby == v1.StandbyReady {
			p.warm[srv] = true
		}
	}
	return p
}

// next returns the server for one more slot and counts it there; false when no Active server
// has room.
func (p *placement) next() (string, bool) {
	best := -1
	for i, srv := range p.servers {
		n := p.slots[srv.UUID]
		if srv.Cordoned || p.out[srv.UUID] || srv.MaxSlots != nil && n >= int(*srv.MaxSlots) {
			continue
		}
		if best < 0 || p.better(srv, p.servers[best]) {
			best = i
		}
	}
	if best < 0 {
		return "", false
	}
	uuid := p.servers[best].UUID
	p.slots[uuid]++
	return uuid, true
}

// room counts how many more slots the pool's servers take now, at most limit: what supply's
// placement would give (per-server maxSlots, cordons and servers out of health bound it).
func room(pool *v1.BotPool, slots []v1.BotPoolSlot, health map[string]v1.ServerHealth, limit int) int {
	place := newPlacement(pool, slots, health)
	n := 0
	for ; n < limit; n++ {
		if _, ok := place.next(); !ok {
			break
		}
	}
	return n
}

// better reports whether a should take the next slot before b: fewer slots for its weight
// ((n+1)/w compared across), then a warm image cache, then the list's order (b comes first).
func (p *placement) better(a, b v1.PoolServer) bool {
	wa, wb := max(a.Weight, 1), max(b.Weight, 1)
	la, lb := (p.slots[a.UUID]+1)*int(wb), (p.slots[b.UUID]+1)*int(wa)
	if la != lb {
		return la < lb
	}
	return p.warm[a.UUID] && !p.warm[b.UUID]
}

// recordServers writes the pool's default server on its slots that name none (created before
// slots recorded their server), so that a later change of the pool's servers cannot move them.
func (r *Reconciler) recordServers(ctx context.Context, s *poolScope) error {
	server := s.pool.Spec.Coolify.DefaultServer()
	for i := range s.slots {
		sl := &s.slots[i]
		if sl.Spec.Server != "" || !sl.DeletionTimestamp.IsZero() || server == "" {
			continue
		}
		before := sl.DeepCopy()
		sl.Spec.Server = server
		if err := r.Client.Patch(ctx, sl, client.MergeFrom(before)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("recording the server of slot %s: %w", sl.Name, err)
		}
	}
	return nil
}

// drain deletes the free slots of servers that take no new bots (cordoned, or no longer
// listed) and those above a server's maxSlots (removeIdle: a slot bound meanwhile stays, and
// goes when its bot ends).
func (r *Reconciler) drain(ctx context.Context, s *poolScope) error {
	byServer := map[string][]*v1.BotPoolSlot{}
	for i := range s.slots {
		sl := &s.slots[i]
		if sl.DeletionTimestamp.IsZero() {
			byServer[policy.SlotServer(sl, s.pool)] = append(byServer[policy.SlotServer(sl, s.pool)], sl)
		}
	}
	servers := make([]string, 0, len(byServer))
	for srv := range byServer {
		servers = append(servers, srv)
	}
	sort.Strings(servers)
	for _, uuid := range servers {
		slots := byServer[uuid]
		excess := 0
		why := ""
		switch state := policy.ServerState(s.pool, uuid); {
		case state != v1.ServerActive:
			excess, why = len(slots), "server "+uuid+" is "+string(state)
		default:
			if srv, _ := s.pool.Spec.Coolify.Server(uuid); srv.MaxSlots != nil && len(slots) > int(*srv.MaxSlots) {
				excess, why = len(slots)-int(*srv.MaxSlots), fmt.Sprintf("above server %s's maxSlots %d", uuid, *srv.MaxSlots)
			}
		}
		if excess == 0 {
			continue
		}
		removed, err := r.removeIdle(ctx, s.pool, slots, excess)
		if err != nil {
			return err
		}
		if len(removed) > 0 {
			r.Recorder.Eventf(s.pool, nil, corev1.EventTypeNormal, v1.ReasonSlotsRemoved, "Drain", "Removed %d slot(s), %s: %s", len(removed), why, policy.Abbreviate(removed))
		}
	}
	return nil
}

// serverStatuses counts the pool's slots on each of its servers, listed ones first in the
// pool's order, then unlisted ones that still hold slots. health is this pass's read (nil:
// each server keeps the health the status had); images is what the pool knows of its images
// on each server (a server it no longer lists and holds no slot on is forgotten).
func serverStatuses(pool *v1.BotPool, slots []v1.BotPoolSlot, health map[string]v1.ServerHealth, images map[string]*policy.ServerImages) []v1.ServerStatus {
	var out []v1.ServerStatus
	index := map[string]int{}
	for _, srv := range pool.Spec.Coolify.ServerList() {
		h, ok := health[srv.UUID]
		if !ok {
			h = policy.HealthOf(pool, srv.UUID)
		}
		index[srv.UUID] = len(out)
		out = append(out, v1.ServerStatus{UUID: srv.UUID, State: policy.ServerState(pool, srv.UUID), Health: h, MaxSlots: srv.MaxSlots})
	}
	var unlisted []string
	for i := range slots {
		sl := &slots[i]
		uuid := policy.SlotServer(sl, pool)
		j, ok := index[uuid]
		if !ok {
			j = len(out)
			index[uuid] = j
			out = append(out, v1.ServerStatus{UUID: uuid, State: v1.ServerUnlisted})
			unlisted = append(unlisted, uuid)
		}
		st := &out[j]
		st.Slots++
		if sl.Status.Phase == v1.SlotBusy {
			st.Busy++
		}
		if st.State == v1.ServerActive && !st.Health.Out() && policy.IsFree(sl) {
			st.Free++
		}
		if d := sl.Status.LastDeployDuration; d != nil && (st.SlotStart == nil || d.Duration > st.SlotStart.Duration) {
			st.SlotStart = d.DeepCopy()
		}
	}
	if len(unlisted) > 1 {
		first := len(out) - len(unlisted)
		sort.Slice(out[first:], func(i, j int) bool { return out[first+i].UUID < out[first+j].UUID })
	}
	for i := range out {
		if out[i].SlotStart == nil { // no slot there now: what the last ones took
			out[i].SlotStart = lastSlotStart(pool, out[i].UUID)
		}
		if im := images[out[i].UUID]; im != nil {
			out[i].Cached, out[i].Pull, out[i].PullDuration = im.Cached, im.Pull, im.PullDuration
		}
	}
	return out
}

// lastSlotStart is the slotStart the pool's status last showed for the server.
func lastSlotStart(pool *v1.BotPool, uuid string) *metav1.Duration {
	for i := range pool.Status.Servers {
		if st := &pool.Status.Servers[i]; st.UUID == uuid {
			return st.SlotStart
		}
	}
	return nil
}

// setServerOutCondition says, in ServerOut, which of the pool's Active servers Coolify
// reports unreachable or unusable (status.servers, just computed); absent when none is.
func setServerOutCondition(p *v1.BotPool, now time.Time) {
	var out []string
	for _, st := range p.Status.Servers {
		if st.State == v1.ServerActive && st.Health.Out() {
			out = append(out, "server "+st.UUID+" "+policy.OutBecause(st.Health))
		}
	}
	if len(out) == 0 {
		meta.RemoveStatusCondition(&p.Status.Conditions, v1.ConditionServerOut)
		return
	}
	v1.SetCondition(&p.Status.Conditions, metav1.Condition{
		Type: v1.ConditionServerOut, Status: metav1.ConditionTrue, Reason: v1.ReasonServerNotFunctional, ObservedGeneration: p.Generation,
		Message: strings.Join(out, "; ") + ": its free slots are not offered and new slots go to the other servers until it is back",
	}, now)
}

// whyNoRoom names, for ServersFull and NoUsableServer, why each listed server takes no new slot.
func whyNoRoom(p *v1.BotPool) string {
	var why []string
	for _, srv := range p.Spec.Coolify.ServerList() {
		switch h := policy.HealthOf(p, srv.UUID); {
		case srv.Cordoned:
			why = append(why, srv.UUID+" is cordoned")
		case h.Out():
			why = append(why, srv.UUID+" is "+string(h))
		case srv.MaxSlots != nil:
			why = append(why, fmt.Sprintf("%s is at its maxSlots %d", srv.UUID, *srv.MaxSlots))
		}
	}
	return strings.Join(why, ", ")
}

// readServerLimits refreshes the servers of the pool's Coolify user (housekeeping, at most
// every ServersRefresh) and notes what the pool's servers run, for its status, and their
// health.
func (r *Reconciler) readServerLimits(ctx context.Context, s *poolScope) {
	if s.api == nil || r.Coolify == nil {
		return
	}
	r.Coolify.RefreshServers(ctx, s.api)
	s.health = map[string]v1.ServerHealth{}
	for _, srv := range s.pool.Spec.Coolify.ServerList() {
		st, read, ok := r.Coolify.ServerSeen(coolifyview.CoolifyUser(s.api), srv.UUID)
		if read && !ok && !r.Coolify.ServerMissing(ctx, s.api, srv.UUID) {
			st, read, ok = r.Coolify.ServerSeen(coolifyview.CoolifyUser(s.api), srv.UUID) // listed on a second look
		}
		s.health[srv.UUID] = coolifyview.ServerHealth(st, read, ok)
		if ok && !srv.Cordoned {
			if s.servers == nil {
				s.servers = map[string]coolify.ServerSettings{}
			}
			s.servers[srv.UUID] = st
		}
	}
	r.Coolify.MarkFailing(s.pool, s.health, r.Clock.Now())
}
