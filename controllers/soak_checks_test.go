package controllers

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/slottoken"
)

// TestSoakStandbyChecksFail: each of the soak's invariant-12 checks fails on the history that
// breaks it, and stays quiet on the one that keeps it. The soak itself can only show that a
// correct operator passes them; this shows they can fail (the operator broken on purpose made
// the soak fail too: see the report of the change that added them).
func TestSoakStandbyChecksFail(t *testing.T) {
	const app = "app-1"
	start := func(b *soakBots, seq uint64, token string) *botRun {
		b.start(sim.Container{AppUUID: app, AppName: "pool-zoom-001", Seq: seq, Reason: "deployed", At: clk.Now(),
			Env: map[string]string{"BOTPOOL_SLOT_TOKEN": token, "BOTPOOL_API_URL": "http://127.0.0.1:1", "POOL_SLOT_UUID": app}})
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.latest[app]
	}
	breaches := func(t *testing.T, b *soakBots) string {
		t.Helper()
		return strings.Join(b.takeBreaches(), "; ")
	}
	newBots := func(*testing.T) *soakBots {
		b := newSoakBots(func() (time.Duration, time.Duration) { return time.Hour, 0 })
		// Stopped before the first container: start records it (what it was given) without
		// running a simulated bot in it; the tests play its requests.
		b.cancel()
		return b
	}

	t.Run("kept", func(t *testing.T) {
		b := newBots(t)
		first := start(b, 1, "token-1")
		b.given(first, "bot-a", "cred-a")
		b.given(first, "bot-a", "cred-a") // the same answer seen twice is one bot
		b.named(first, "bot-a")
		second := start(b, 2, "token-2")
		b.given(second, "bot-b", "cred-b")
		if got := breaches(t, b); got != "" {
			t.Fatalf("a history that keeps invariant 12 was flagged: %s", got)
		}
	})
	for _, tc := range []struct {
		name, want string
		play       func(b *soakBots)
	}{
		{"a container serves two bots", "received bot bot-a, then bot bot-b", func(b *soakBots) {
			run := start(b, 1, "token-1")
			b.given(run, "bot-a", "cred-a")
			b.given(run, "bot-b", "cred-b")
		}},
		{"a container reports for another bot", "reports for bot bot-b", func(b *soakBots) {
			run := start(b, 1, "token-1")
			b.given(run, "bot-a", "cred-a")
			b.named(run, "bot-b")
		}},
		{"a fresh container receives an earlier bot", "bot bot-a was handed to container 2", func(b *soakBots) {
			b.given(start(b, 1, "token-1"), "bot-a", "cred-a")
			b.given(start(b, 2, "token-2"), "bot-a", "cred-a2")
		}},
		{"a fresh container receives an earlier credential", "with the credential handed out before for bot bot-a", func(b *soakBots) {
			b.given(start(b, 1, "token-1"), "bot-a", "cred-a")
			b.given(start(b, 2, "token-2"), "bot-b", "cred-a")
		}},
		{"a fresh container starts with an earlier slot credential", "started with the slot credential of an earlier container, which received bot bot-a", func(b *soakBots) {
			b.given(start(b, 1, "token-1"), "bot-a", "cred-a")
			start(b, 2, "token-1")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBots(t)
			tc.play(b)
			if got := breaches(t, b); !strings.Contains(got, tc.want) {
				t.Fatalf("breaches %q, want one saying %q", got, tc.want)
			}
		})
	}

	// The binding side: a bot bound to a standby slot that is not Ready, whose container holds
	// another credential, or whose container has not asked.
	pool := newPool("ns", "standby", func(p *v1.BotPool) { p.Spec.Standby, p.Spec.MaxSlots = v1.StandbyRunning, 3 })
	slot := func(state v1.StandbyState, token string) *v1.BotPoolSlot {
		return &v1.BotPoolSlot{ObjectMeta: metav1.ObjectMeta{Name: "pool-zoom-001"},
			Spec: v1.BotPoolSlotSpec{BotRef: &v1.BotReference{Name: "bot-a", UID: types.UID("uid-a")}},
			Status: v1.BotPoolSlotStatus{Phase: v1.SlotIdle, Standby: state, ApplicationUUID: app,
				TokenSHA256: slottoken.Hash([]byte(token))}}
	}
	for _, tc := range []struct {
		name, want string
		play       func(b *soakBots, o *soakObserver)
	}{
		{"bound Ready after the container asked", "", func(b *soakBots, o *soakObserver) {
			b.asking(start(b, 1, "token-1"))
			o.checkBinding(slot(v1.StandbyReady, "token-1"), time.Now())
		}},
		{"bound while Starting", `while its container was "Starting"`, func(b *soakBots, o *soakObserver) {
			b.asking(start(b, 1, "token-1"))
			o.checkBinding(slot(v1.StandbyStarting, "token-1"), time.Now())
		}},
		{"bound before the container asked", "before its current container 1 asked for work", func(b *soakBots, o *soakObserver) {
			start(b, 1, "token-1")
			o.checkBinding(slot(v1.StandbyReady, "token-1"), time.Now())
		}},
		{"bound with an earlier container's ask", "holds another credential than the slot's", func(b *soakBots, o *soakObserver) {
			b.asking(start(b, 1, "token-1"))
			o.checkBinding(slot(v1.StandbyReady, "token-2"), time.Now())
		}},
		{"bound with no container", "never ran a container", func(_ *soakBots, o *soakObserver) {
			o.checkBinding(slot(v1.StandbyReady, "token-1"), time.Now())
		}},
		{"a bot bound to two slots as written", "invariant 1: bot bot-a is bound to pool-zoom-002 and pool-zoom-001", func(_ *soakBots, o *soakObserver) {
			o.oneTwoAsWritten(slot(v1.StandbyReady, "token-1"), watch.Modified, map[string]types.UID{"pool-zoom-001": "uid-a", "pool-zoom-002": "uid-a"}, 2)
		}},
		{"more slots than maxSlots as written", "invariant 2: the pool holds 4 slots, maxSlots 3", func(_ *soakBots, o *soakObserver) {
			o.oneTwoAsWritten(slot(v1.StandbyReady, "token-1"), watch.Added, map[string]types.UID{}, 4)
		}},
		{"a claim with another credential", "claim records another credential", func(b *soakBots, o *soakObserver) {
			b.given(start(b, 1, "token-1"), "bot-a", "cred-a")
			o.checkClaims(&soakSnapshot{bots: []v1.Bot{{ObjectMeta: metav1.ObjectMeta{Name: "bot-a"},
				Status: v1.BotStatus{Binding: &v1.BindingClaim{SlotName: "pool-zoom-001", CredentialSHA256: slottoken.Hash([]byte("cred-other"))}}}}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBots(t)
			findings := &soakFindings{t: t, errorf: t.Logf}
			o := newSoakObserver(t, "ns", pool, nil, b, findings, time.Second, time.Minute)
			tc.play(b, o)
			got := strings.Join(findings.list, "; ")
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("violations %q, want %q", got, tc.want)
			}
		})
	}
}
