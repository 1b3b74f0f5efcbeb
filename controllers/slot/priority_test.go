package slot

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// TestSlotPriority: a slot's Coolify requests are on the start path while a bot waits for
// them — its own bound bot, or, in a standby pool with bots queued, the next Ready slot that
// the recycle makes — and housekeeping otherwise (a recycle nobody waits for, a running bot's
// slot, a deletion).
func TestSlotPriority(t *testing.T) {
	stopped := bt.MakePool("ns", "cold").Obj()
	standby := bt.MakePool("ns", "warm").Standby(v1.StandbyRunning).Obj()
	queued := bt.MakePool("ns", "warm").Standby(v1.StandbyRunning).Obj()
	queued.Status.Queued = 3
	bot := bt.MakeBot("ns", "bot").Obj()
	gone := bt.MakeBot("ns", "gone").Obj()
	gone.DeletionTimestamp = &metav1.Time{Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	slot := func(p v1.SlotPhase) *v1.BotPoolSlot { return bt.MakeSlot("ns", "s", "p").Phase(p).Obj() }

	for _, c := range []struct {
		name string
		s    slotScope
		want coolify.Priority
	}{
		{"a bound bot's deployment", slotScope{slot: slot(v1.SlotIdle), pool: stopped, bot: bot}, coolify.StartPath},
		{"a bound bot's deployment poll", slotScope{slot: slot(v1.SlotDeploying), pool: stopped, bot: bot}, coolify.StartPath},
		{"a deleted bot's slot", slotScope{slot: slot(v1.SlotIdle), pool: stopped, bot: gone}, coolify.Housekeeping},
		{"a running bot's slot", slotScope{slot: slot(v1.SlotBusy), pool: stopped, bot: bot}, coolify.Housekeeping},
		{"a free slot of a Stopped pool", slotScope{slot: slot(v1.SlotIdle), pool: stopped}, coolify.Housekeeping},
		{"a recycle nobody waits for", slotScope{slot: slot(v1.SlotIdle), pool: standby}, coolify.Housekeeping},
		{"a release nobody waits for", slotScope{slot: slot(v1.SlotReleasing), pool: standby}, coolify.Housekeeping},
		{"a recycle queued bots wait for", slotScope{slot: slot(v1.SlotIdle), pool: queued}, coolify.StartPath},
		{"its deployment poll", slotScope{slot: slot(v1.SlotDeploying), pool: queued}, coolify.StartPath},
		{"its stop and new credential", slotScope{slot: slot(v1.SlotReleasing), pool: queued}, coolify.StartPath},
		{"a Stopped pool's release with bots queued", slotScope{slot: slot(v1.SlotReleasing), pool: func() *v1.BotPool { p := stopped.DeepCopy(); p.Status.Queued = 3; return p }()}, coolify.Housekeeping},
		{"a deleted slot", slotScope{slot: bt.MakeSlot("ns", "s", "p").Phase(v1.SlotIdle).Deleting(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)).Obj(), pool: queued}, coolify.Housekeeping},
	} {
		if got := slotPriority(&c.s); got != c.want {
			t.Errorf("%s: priority %v, want %v", c.name, got, c.want)
		}
	}
}
