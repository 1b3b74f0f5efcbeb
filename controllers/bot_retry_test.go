package controllers

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/bot"
	"botpool.dev/botpool/controllers/dispatch"
	"botpool.dev/botpool/controllers/internal/metrics"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/store/memory"
)

// TestARequeuedBotIsLetGoByItsFailedSlot: single passes on a fake API server. The slot fails a
// bot's start (its binding never claimed): the bot controller records the attempt (status,
// Warning Event, audit row) and puts the bot back in the queue instead of failing it; the slot
// lets go of it; a second bot pass, before or after the release, counts nothing again. The
// slot then recovers as after a finished bot.
func TestARequeuedBotIsLetGoByItsFailedSlot(t *testing.T) {
	slot := boundSlot(v1.SlotError)
	slot.Spec.Server = "server-a"
	slot.Status.Reason, slot.Status.Message = string(v1.ReasonDeploymentFailed), "Deployment d-1 ended failed"
	queued := time.Date(2026, 1, 15, 8, 49, 0, 0, time.UTC)
	theBot := bt.MakeBot("ns", "bot").UID("bot-uid").Finalizers(v1.FinalizerBot).MeetingURL("https://zoom.us/j/1").PoolRef("pool").
		Phase(v1.BotDeploying).InPool("pool").OnSlot("pool-zoom-001", "app-uuid").Obj()
	theBot.Status.QueuedAt = &metav1.Time{Time: queued}
	w := newOwnershipWorld(t, slot, theBot)
	events := &bt.Events{}
	w.bots.Recorder = events
	audit := memory.New(memory.WithClock(w.clk))
	w.bots.Store = audit

	w.reconcileBot()
	b := w.getBot()
	if b.Status.Phase != v1.BotQueued || b.Status.SlotName != "" || b.Status.ApplicationUUID != "" || b.Status.FinishedAt != nil {
		t.Fatalf("bot %s (slot %q, app %q, finished %v), want Queued again, its binding's traces cleared",
			b.Status.Phase, b.Status.SlotName, b.Status.ApplicationUUID, b.Status.FinishedAt)
	}
	if !b.Status.QueuedAt.Equal(&metav1.Time{Time: queued}) {
		t.Errorf("queuedAt %v, want the original %s (its place in the queue)", b.Status.QueuedAt, queued)
	}
	if got := b.Status.StartAttempts; len(got) != 1 || got[0].SlotName != "pool-zoom-001" || got[0].Server != "server-a" ||
		got[0].Reason != v1.ReasonDeploymentFailed || got[0].Message != "Deployment d-1 ended failed" || !got[0].At.Time.Equal(w.clk.Now()) {
		t.Fatalf("startAttempts %+v, want the one failed start", got)
	}
	if c := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionBound); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Bound %+v, want False", c)
	}
	if !events.Has("Warning/" + v1.ReasonStartRetried) {
		t.Errorf("events %v, want a Warning %s", events.Reasons(), v1.ReasonStartRetried)
	}
	rows, err := audit.BotEvents(context.Background(), "bot-uid")
	if err != nil || len(rows) != 1 || rows[0].Type != bot.AuditStartRetried {
		t.Fatalf("audit rows %+v (%v), want one %s", rows, err, bot.AuditStartRetried)
	}
	var data map[string]any
	if err := json.Unmarshal(rows[0].Data, &data); err != nil || data["attempt"] != float64(1) || data["server"] != "server-a" {
		t.Errorf("audit data %s, want attempt 1 on server-a", rows[0].Data)
	}

	w.reconcileBot() // the slot still names it: waiting, not a second failure
	if b := w.getBot(); len(b.Status.StartAttempts) != 1 || b.Status.Phase != v1.BotQueued {
		t.Fatalf("a second pass before the release: %s with %d attempts, want Queued with 1", b.Status.Phase, len(b.Status.StartAttempts))
	}
	if !b.LeftSlot(w.getSlot()) {
		t.Fatal("LeftSlot is false for the failed slot the theBot went back from")
	}

	w.reconcileSlot() // lets go of the requeued theBot
	if s := w.getSlot(); s.Spec.BotRef != nil {
		t.Fatalf("the failed slot kept the requeued theBot: %s, botRef %v", s.Status.Phase, s.Spec.BotRef)
	}
	w.reconcileBot()
	if b := w.getBot(); len(b.Status.StartAttempts) != 1 || b.Status.Phase != v1.BotQueued {
		t.Fatalf("after the release: %s with %d attempts, want Queued with 1", b.Status.Phase, len(b.Status.StartAttempts))
	}
	w.reconcileSlot() // recovers: stops the container, Idle
	if s := w.getSlot(); s.Status.Phase != v1.SlotIdle {
		t.Fatalf("the slot is %s after letting go, want recovered to Idle", s.Status.Phase)
	}
	w.checkOwners()
}

// TestABotWhoseBindingWasClaimedIsNeverStartedAgain: the same failure, but a container took
// the bot's binding (it had the meeting URL): the bot ends Fatal with the slot's reason as it
// always did, and no start is recorded.
func TestABotWhoseBindingWasClaimedIsNeverStartedAgain(t *testing.T) {
	slot := boundSlot(v1.SlotError)
	slot.Status.Reason, slot.Status.Message = string(v1.ReasonStandbyLost), "The standby container did not take the bot"
	bot := bt.MakeBot("ns", "bot").UID("bot-uid").Finalizers(v1.FinalizerBot).MeetingURL("https://zoom.us/j/1").PoolRef("pool").
		Phase(v1.BotDeploying).InPool("pool").OnSlot("pool-zoom-001", "app-uuid").Obj()
	bot.Status.Binding = &v1.BindingClaim{SlotName: slot.Name, SlotUID: slot.UID, ClaimedAt: metav1.NewTime(time.Date(2026, 1, 15, 8, 55, 0, 0, time.UTC)),
		CredentialSHA256: strings.Repeat("0", 64)}
	w := newOwnershipWorld(t, slot, bot)
	w.reconcileBot()
	b := w.getBot()
	if b.Status.Phase != v1.BotFatal || b.Status.Reason != v1.ReasonStandbyLost || b.Status.Message != slot.Status.Message || len(b.Status.StartAttempts) != 0 {
		t.Fatalf("bot %s/%s %q with %d attempts, want Fatal/StandbyLost with the slot's message and none recorded",
			b.Status.Phase, b.Status.Reason, b.Status.Message, len(b.Status.StartAttempts))
	}
	if b.LeftSlot(w.getSlot()) {
		t.Fatal("a bot that ended counts as having gone back to the queue")
	}
}

// TestAClaimAfterTheRequeueEndsTheBot: a container of the slot the bot left took its binding
// after the requeue (a config answer that raced it): the bot is never bound again; once the
// claim is older than ClaimSettle it ends Fatal with its last start's reason, and the
// dispatcher does not offer it meanwhile.
func TestAClaimAfterTheRequeueEndsTheBot(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 1, 15, 8, 59, 0, 0, time.UTC))
	slot := bt.MakeSlot("ns", "pool-zoom-001", "pool").UID("slot-uid").Finalizers(v1.FinalizerSlot).Phase(v1.SlotIdle).App("app-uuid").Obj()
	claimedBot := bt.MakeBot("ns", "bot").UID("bot-uid").Finalizers(v1.FinalizerBot).MeetingURL("https://zoom.us/j/1").PoolRef("pool").
		Phase(v1.BotQueued).InPool("pool").Obj()
	claimedBot.Status.QueuedAt = &at
	claimedBot.Status.StartAttempts = []v1.StartAttempt{{SlotName: "pool-zoom-001", Reason: v1.ReasonDeploymentLost, Message: "lost", At: at}}
	// Claimed as the world's clock starts: for ClaimSettle it may be a fresh binding of the
	// same slot that the cache does not show yet.
	claimed := metav1.NewTime(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
	claimedBot.Status.Binding = &v1.BindingClaim{SlotName: "pool-zoom-001", SlotUID: "slot-uid", ClaimedAt: claimed, CredentialSHA256: strings.Repeat("0", 64)}
	w := newOwnershipWorld(t, slot, claimedBot)
	d := &dispatch.Dispatcher{Client: w.base, Clock: w.clk, Metrics: metrics.New(nil)}
	pool := &v1.BotPool{}
	if err := w.base.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "pool"}, pool); err != nil {
		t.Fatal(err)
	}
	if q, _, err := d.Queue(context.Background(), pool); err != nil || len(q) != 0 {
		t.Fatalf("queue %d bots (%v), want the claimed claimedBot left out", len(q), err)
	}
	w.reconcileBot()
	if b := w.getBot(); b.Status.Phase != v1.BotQueued {
		t.Fatalf("bot %s/%s right after the claim, want still Queued for claimSettle", b.Status.Phase, b.Status.Reason)
	}
	w.clk.Step(bot.ClaimSettle)
	w.reconcileBot()
	b := w.getBot()
	if b.Status.Phase != v1.BotFatal || b.Status.Reason != v1.ReasonDeploymentLost || !strings.Contains(b.Status.Message, "not started again") {
		t.Fatalf("bot %s/%s %q, want Fatal/DeploymentLost, not started again", b.Status.Phase, b.Status.Reason, b.Status.Message)
	}
}
