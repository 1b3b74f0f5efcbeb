package bot

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "botpool.dev/botpool/api/v1alpha1"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// TestJudgeStart: the retry rule, on the objects alone. Only a failure of the infrastructure
// retries, only for a bot that never ran and whose binding no container took, and only while
// it has starts left (the bot's own limit before its pool's).
func TestJudgeStart(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC))
	failed := func(reason v1.BotReason) func(*v1.BotPoolSlot) {
		return func(s *v1.BotPoolSlot) { s.Status.Phase, s.Status.Reason = v1.SlotError, string(reason) }
	}
	attempts := func(n int) func(*v1.Bot) {
		return func(b *v1.Bot) {
			for range n {
				b.Status.StartAttempts = append(b.Status.StartAttempts, v1.StartAttempt{SlotName: "pool-zoom-001", Reason: v1.ReasonDeploymentFailed, At: at})
			}
		}
	}
	tests := []struct {
		name string
		slot func(*v1.BotPoolSlot)
		bot  []func(*v1.Bot)
		pool func(*v1.BotPool)
		want startVerdict
	}{
		{name: "failed pull", slot: failed(v1.ReasonDeploymentFailed), want: startRetry},
		{name: "deployment timeout", slot: failed(v1.ReasonDeploymentTimeout), want: startRetry},
		{name: "deployment lost", slot: failed(v1.ReasonDeploymentLost), want: startRetry},
		{name: "stale deploying", slot: failed(v1.ReasonDeployingTimeout), want: startRetry},
		{name: "application lost", slot: failed(v1.ReasonApplicationLost), want: startRetry},
		{name: "standby container lost", slot: failed(v1.ReasonStandbyLost), want: startRetry},
		{name: "stop failed", slot: failed(v1.ReasonStopFailed), want: startRan},
		{name: "a reason of the bot", slot: failed(v1.ReasonHeartbeatTimeout), want: startRan},
		{name: "queue timeout", slot: failed(v1.ReasonQueueTimeout), want: startRan},
		{name: "unknown reason", slot: failed("SomethingElse"), want: startRan},
		{name: "bot started", slot: failed(v1.ReasonDeploymentFailed), bot: []func(*v1.Bot){func(b *v1.Bot) { b.Status.StartedAt = &at }}, want: startRan},
		{name: "bot was alive", slot: failed(v1.ReasonApplicationLost), bot: []func(*v1.Bot){func(b *v1.Bot) { b.MarkAlive(at.Time) }}, want: startRan},
		{name: "binding claimed", slot: failed(v1.ReasonStandbyLost), bot: []func(*v1.Bot){func(b *v1.Bot) {
			b.Status.Binding = &v1.BindingClaim{SlotName: "pool-zoom-001", SlotUID: "slot-uid", ClaimedAt: at}
		}}, want: startRan},
		{name: "second of three", slot: failed(v1.ReasonDeploymentFailed), bot: []func(*v1.Bot){attempts(1)}, want: startRetry},
		{name: "third of three", slot: failed(v1.ReasonDeploymentFailed), bot: []func(*v1.Bot){attempts(2)}, want: startLast},
		{name: "pool allows one", slot: failed(v1.ReasonDeploymentFailed), pool: func(p *v1.BotPool) { p.Spec.MaxStartAttempts = 1 }, want: startLast},
		{name: "bot's limit over the pool's", slot: failed(v1.ReasonDeploymentFailed), bot: []func(*v1.Bot){attempts(2), func(b *v1.Bot) { b.Spec.MaxStartAttempts = 5 }},
			pool: func(p *v1.BotPool) { p.Spec.MaxStartAttempts = 2 }, want: startRetry},
		{name: "bot's limit under the pool's", slot: failed(v1.ReasonDeploymentFailed), bot: []func(*v1.Bot){attempts(1), func(b *v1.Bot) { b.Spec.MaxStartAttempts = 2 }},
			pool: func(p *v1.BotPool) { p.Spec.MaxStartAttempts = 5 }, want: startLast},
		{name: "pool being deleted", slot: failed(v1.ReasonDeploymentFailed), pool: func(p *v1.BotPool) { p.DeletionTimestamp = &at }, want: startLast},
		{name: "pool gone", slot: failed(v1.ReasonDeploymentFailed), pool: func(p *v1.BotPool) { *p = v1.BotPool{} }, want: startLast},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bot := bt.MakeBot("ns", "bot").UID("bot-uid").Phase(v1.BotDeploying).Obj()
			for _, f := range tt.bot {
				f(bot)
			}
			slot := bt.MakeSlot("ns", "pool-zoom-001", "pool").BoundTo("bot", "bot-uid").Obj()
			tt.slot(slot)
			pool := bt.MakePool("ns", "pool").Obj()
			if tt.pool != nil {
				tt.pool(pool)
			}
			if got := judgeStart(bot, slot, pool); got != tt.want {
				t.Errorf("judgeStart = %d, want %d", got, tt.want)
			}
		})
	}
}
