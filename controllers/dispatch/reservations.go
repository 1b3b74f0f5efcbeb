package dispatch

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/index"
	"botpool.dev/botpool/controllers/internal/policy"
)

// unreserved counts how many bots at the head of the queue may be bound now, and is called
// under the pool's reservation lock. A bot with a reservation takes the slot held for it. Any
// other takes a slot only if the free slots the pool warms for reservations due soon stay
// free (status.reservations.warming) unless its meeting ends well before the next of them is
// bound, and if, as long as its meeting may last, every reservation not yet bound keeps its
// slot (KeepsReservations), counting the bots bound before it in the wave: a meeting is never
// cut short, so this is how a granted reservation finds its slot at its start. The first bot
// that does not fit ends the wave, so the queue's order holds.
//
// A reservation whose bot a slot's botRef already names is bound, whatever the bot's status
// still says: it holds its slot as any bound bot does, and promises nothing more (the model
// check found a queue held for a reserved bot bound a moment before, seed 3457702266237806).
func (d *Dispatcher) unreserved(ctx context.Context, pool *v1.BotPool, head []*v1.Bot, free int) (int, error) {
	var list v1.BotList
	if err := d.Client.List(ctx, &list, index.BotsOf(pool), client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	now := d.Clock.Now()
	bots := d.Reservations.WithPending(ctx, d.Client, list.Items, pool, now)
	waiting := func(b *v1.Bot) bool {
		return policy.Reserved(b) && policy.WaitsForSlot(b.Status.Phase) && !b.Status.Phase.Terminal()
	}
	promised := false
	for i := range bots {
		promised = promised || waiting(&bots[i])
	}
	if !promised {
		return len(head), nil // nothing promised: the queue takes what is free, as always
	}
	bound, err := d.Reservations.BoundIn(ctx, d.Client, pool, list.Items, now)
	if err != nil {
		return 0, err
	}
	leave := pool.Spec.Timing.LeaveGracePeriod.OrDefault(v1.DefaultLeaveGracePeriod)
	pending := map[types.UID]policy.Hold{} // the reservations not yet bound
	var promises []string                  // their bots, for the log
	ahead := 0                             // those of them not yet at their binding time
	var next time.Time                     // the earliest of those
	for i := range bots {
		b := &bots[i]
		if !waiting(b) || bound[b.UID] {
			continue
		}
		w := b.Status.Reservation
		pending[b.UID] = policy.Hold{From: w.From.Time, Until: w.Until.Add(leave)}
		promises = append(promises, b.Name)
		if b.Status.Phase != v1.BotQueued {
			ahead++
			if next.IsZero() || w.From.Time.Before(next) {
				next = w.From.Time
			}
		}
	}
	if len(pending) == 0 {
		return len(head), nil
	}
	spare := free
	if st := pool.Status.Reservations; st != nil {
		// The pool's count may predate a reservation's bot joining the queue (it then takes
		// its slot as a reserved bot): never more than are still ahead.
		spare -= min(int(st.Warming), ahead)
	}
	holds := policy.HoldsOf(bots, bound, "", now, leave)
	for i, b := range head {
		if policy.Reserved(b) {
			// It takes a free slot in this wave; its hold is among holds already, and it
			// promises nothing more to the bots behind it (seed 3457702266237803).
			spare--
			delete(pending, b.UID)
			continue
		}
		until := now.Add(b.Spec.MaxDuration.OrDefault(v1.DefaultMaxDuration) + leave)
		// A warmed slot may serve a meeting that ends, with the margin to make the slot ready
		// again, before the next reservation is bound.
		warmedFor := !next.IsZero() && until.Add(policy.ReservationMargin).After(next)
		if warmedFor && spare <= 0 || !policy.KeepsReservations(holds, pending, now, until, int(pool.Spec.MaxSlots)) {
			ctrl.LoggerFrom(ctx).V(1).Info("Queue held for reservations", "bot", b.Name, "until", until, "spare", spare,
				"atOnce", policy.PeakHolds(holds, now, until), "maxSlots", pool.Spec.MaxSlots, "holds", len(holds), "pending", policy.Abbreviate(promises))
			return i, nil
		}
		spare--
		holds = append(holds, policy.Hold{From: now, Until: until})
	}
	return len(head), nil
}
