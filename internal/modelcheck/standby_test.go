package modelcheck

import (
	"math/rand/v2"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/internal/slottoken"
)

// Standby slots in the model: some pools of a run keep standby containers (spec.standby
// Running), and the checker holds every container to invariant 12 — no container serves two
// bots, a fresh container never gets the credential of an earlier one that served a bot, and a
// bot is bound to a standby slot only once the slot's current container asked for work.

// standbyRecord is what the checker remembers of the containers, beyond the running ones.
type standbyRecord struct {
	// servedBy is the container (by its sequence number) that received each bot's binding.
	servedBy map[string]uint64
	// spent holds, per application, the slot tokens of its containers that received a bot:
	// none may reach a later container.
	spent map[string]map[string]string
	// latest is the last container started for each application, running or not: a binding
	// needs its ask (a crash after the ask is found by the ask window, not before).
	latest map[string]*container
}

// standbyPools turns some of the run's pools to standby Running. The choice comes from a
// random stream of its own, so the runs of earlier seeds keep the rest of their world.
func (w *world) standbyPools() {
	rng := rand.New(rand.NewPCG(w.seed, 0x7374616e6462))
	for _, p := range w.pools {
		if rng.IntN(3) != 0 {
			continue
		}
		live := w.api.get(w.api.keyOf(p)).(*v1.BotPool)
		live.Spec.Standby = v1.StandbyRunning
		must(w.api.Update(w.ctx, live))
		p.Spec.Standby = v1.StandbyRunning
		w.counts["pools with standby Running"]++
	}
}

func (r *standbyRecord) init() {
	if r.servedBy == nil {
		r.servedBy, r.spent, r.latest = map[string]uint64{}, map[string]map[string]string{}, map[string]*container{}
	}
}

// containerStartedForStandby checks a fresh container's credential. Callers hold w.cmu.
func (w *world) containerStartedForStandby(c *container) {
	w.standby.init()
	w.standby.latest[c.app] = c
	if bot, ok := w.standby.spent[c.app][c.token]; ok {
		w.violate("invariant 12: container %d of %s started with the slot token of an earlier container, which served bot %s", c.seq, c.slot, bot)
	}
}

// containerServes checks a config answer: the container's first bot, and the bot's first
// container.
func (w *world) containerServes(c *container, bot string) {
	w.cmu.Lock()
	defer w.cmu.Unlock()
	w.standby.init()
	if c.bot != "" && c.bot != bot {
		w.violate("invariant 12: container %d of %s served bot %s, then got bot %s", c.seq, c.slot, c.bot, bot)
	}
	if seq, ok := w.standby.servedBy[bot]; ok && seq != c.seq {
		w.violate("invariant 12: bot %s was handed to container %d of %s after container %d", bot, c.seq, c.slot, seq)
	}
	w.standby.servedBy[bot] = c.seq
	if w.standby.spent[c.app] == nil {
		w.standby.spent[c.app] = map[string]string{}
	}
	w.standby.spent[c.app][c.token] = bot
	w.counts["config answered with a bot"]++
}

// checkStandbyBinding: a bot bound to a slot whose standby container is Ready was bound to the
// container that asked for work with the slot's current token.
func (w *world) checkStandbyBinding(s *v1.BotPoolSlot) {
	if s.Status.Standby != v1.StandbyReady {
		return
	}
	w.cmu.Lock()
	defer w.cmu.Unlock()
	w.standby.init()
	w.counts["bindings to standby slots"]++
	c := w.standby.latest[s.Status.ApplicationUUID]
	switch {
	case c == nil:
		w.violate("invariant 12: bot %s was bound to standby slot %s, whose application never ran a container", s.Spec.BotRef.Name, s.Name)
	case slottoken.Hash([]byte(c.token)) != s.Status.TokenSHA256:
		w.violate("invariant 12: bot %s was bound to standby slot %s, whose current container %d holds another token than the slot's", s.Spec.BotRef.Name, s.Name, c.seq)
	case !c.asked:
		w.violate("invariant 12: bot %s was bound to standby slot %s before its current container %d asked for work", s.Spec.BotRef.Name, s.Name, c.seq)
	}
}
