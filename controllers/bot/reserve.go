package bot

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/index"
	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/controllers/internal/policy"
)

// reservationRetry is how soon a decision that found its pool's lock taken tries again: the
// bot controller's workers are shared by every namespace, and none waits on one pool.
const reservationRetry = 50 * time.Millisecond

// reserve decides a scheduled bot's reservation: its Reserved condition, True with the window
// held (status.reservation) or False with why not. It is decided at the bot's first pass, and
// again when a spec change moved the window outside the one granted.
func (r *Reconciler) reserve(ctx context.Context, bot *v1.Bot, pool *v1.BotPool, now time.Time) error {
	if m := r.Reservations.PoolLock(types.NamespacedName{Namespace: pool.Namespace, Name: pool.Name}); m != nil {
		if !m.TryLock() {
			return pass.WaitFor(reservationRetry, "", "")
		}
		defer m.Unlock()
	}
	var bots v1.BotList
	if err := r.Client.List(ctx, &bots, index.BotsOf(pool), client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing the pool's bots for a reservation: %w", err)
	}
	bound, err := r.Reservations.BoundIn(ctx, r.Client, pool, bots.Items, now)
	if err != nil {
		return err
	}
	others := r.Reservations.WithPending(ctx, r.Client, bots.Items, pool, now)
	v := policy.DecideReservation(bot, pool, others, bound, now, pool.Spec.Reservations.Lead(), r.ScheduleLead)
	if st := pool.Status.Reservations; v.Granted && st != nil && st.Lead.Duration > v.Window.From.Sub(now) {
		v.Message += fmt.Sprintf("; the pool's lead is %s, more than the %s left: its slot may be late", st.Lead.Round(time.Second),
			v.Window.From.Sub(now).Round(time.Second))
	}
	status := metav1.ConditionFalse
	bot.Status.Reservation = nil
	if v.Granted {
		status = metav1.ConditionTrue
		bot.Status.Reservation = &v.Window
	}
	v1.SetCondition(&bot.Status.Conditions, metav1.Condition{Type: v1.ConditionReserved, Status: status, Reason: v.Reason,
		Message: v.Message, ObservedGeneration: bot.Generation}, now)
	if v.Granted {
		r.Reservations.Remember(bot, now)
	}
	return nil
}

// reservationMoved reports whether a granted reservation must be decided again: the bot's
// spec now asks for a window outside the one granted (a shrunk one is kept, and recorded).
func (r *Reconciler) reservationMoved(bot *v1.Bot, pool *v1.BotPool) bool {
	if !meta.IsStatusConditionTrue(bot.Status.Conditions, v1.ConditionReserved) || bot.Spec.StartTime == nil {
		return false
	}
	w := policy.ReservationWindow(bot, pool, r.ScheduleLead)
	if g := bot.Status.Reservation; g != nil && policy.Within(w, *g) {
		bot.Status.Reservation = &w
		return false
	}
	return true
}
