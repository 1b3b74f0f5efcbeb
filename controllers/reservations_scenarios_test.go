package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/internal/kubetest"
)

// TestReservationsAreGrantedAndRefused: on a pool of one slot, a bot scheduled 30 minutes
// ahead is reserved, one whose meeting would overlap it is refused (PoolFull), one scheduled 5
// minutes ahead is not reserved (TooLate), each said at once. (TestReservedBotWaitsForItsStart
// holds a reserved bot in Scheduled until its start, in single passes.)
func TestReservationsAreGrantedAndRefused(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	if err := env.Client.Create(ctx, newPool(ns, "one", func(p *v1.BotPool) { p.Spec.MaxSlots = 1 })); err != nil {
		t.Fatal(err)
	}
	now := clk.Now()
	at := func(d time.Duration) func(*v1.Bot) {
		return func(b *v1.Bot) { b.Spec.StartTime = &metav1.Time{Time: now.Add(d)} }
	}
	first := newBot(t, ns, "first", "one", at(30*time.Minute))
	waitReserved(t, first, metav1.ConditionTrue, v1.ReasonCapacityReserved)
	second := newBot(t, ns, "second", "one", at(40*time.Minute))
	waitReserved(t, second, metav1.ConditionFalse, v1.ReasonPoolFull)
	late := newBot(t, ns, "late", "one", at(5*time.Minute))
	waitReserved(t, late, metav1.ConditionFalse, v1.ReasonTooLate)
}

func waitReserved(t *testing.T, bot *v1.Bot, status metav1.ConditionStatus, reason string) {
	t.Helper()
	kubetest.Eventually(t, 15*time.Second, func() error {
		var b v1.Bot
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(bot), &b); err != nil {
			return err
		}
		c := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionReserved)
		if c == nil || c.Status != status || c.Reason != reason {
			return fmt.Errorf("bot %s: Reserved %+v, want %s/%s", bot.Name, c, status, reason)
		}
		return nil
	})
}
