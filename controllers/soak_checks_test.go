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

// TestSoakServerChecksFail: each of the soak's checks of several servers, their outages and
// retried starts (soak_servers_test.go) fails on the history that breaks it, and stays quiet
// on the one that keeps it.
func TestSoakServerChecksFail(t *testing.T) {
	one := int32(1)
	pool := newPool("ns", "servers", func(p *v1.BotPool) {
		p.Spec.MaxSlots = 5
		p.Spec.Coolify.ServerUUID = ""
		p.Spec.Coolify.Servers = []v1.PoolServer{{UUID: "srv-a", MaxSlots: &one, Weight: 1}, {UUID: "srv-b", Weight: 1}, {UUID: "srv-c", Weight: 1, Cordoned: true}}
	})
	at := func(minutes int) metav1.Time {
		return metav1.NewTime(time.Date(2026, 1, 1, 12, minutes, 0, 0, time.UTC))
	}
	slotOn := func(name, server string, bot *v1.BotReference, deleting bool) v1.BotPoolSlot {
		sl := v1.BotPoolSlot{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.BotPoolSlotSpec{Server: server, BotRef: bot},
			Status: v1.BotPoolSlotStatus{Phase: v1.SlotIdle}}
		if deleting {
			now := metav1.Now()
			sl.DeletionTimestamp = &now
		}
		return sl
	}
	bot := func(phase v1.BotPhase, attempts int, mutate ...func(*v1.Bot)) v1.Bot {
		b := v1.Bot{ObjectMeta: metav1.ObjectMeta{Name: "bot-a", UID: "uid-a"}, Status: v1.BotStatus{Phase: phase, SlotName: "pool-zoom-001"}}
		for i := range attempts {
			b.Status.StartAttempts = append(b.Status.StartAttempts, v1.StartAttempt{SlotName: "pool-zoom-001", Server: "srv-a",
				Reason: v1.ReasonDeploymentFailed, At: at(10 + i)})
		}
		for _, f := range mutate {
			f(&b)
		}
		return b
	}
	started := func(minutes int) func(*v1.Bot) {
		return func(b *v1.Bot) { t := at(minutes); b.Status.StartedAt = &t }
	}
	fatal := func(reason v1.BotReason) func(*v1.Bot) {
		return func(b *v1.Bot) { b.Status.Reason, b.Status.FinishedAt = reason, ptrTo(at(30)) }
	}
	ref := &v1.BotReference{Name: "bot-a", UID: "uid-a"}
	for _, tc := range []struct {
		name, want string
		play       func(o *soakObserver)
	}{
		{"slots within each server's maxSlots", "", func(o *soakObserver) {
			o.checkServers(&soakSnapshot{slots: []v1.BotPoolSlot{slotOn("s1", "srv-a", ref, false), slotOn("s2", "srv-a", nil, true), slotOn("s3", "srv-b", nil, false)}})
		}},
		{"a server above its maxSlots", "invariant 13: server srv-a holds 2 of the pool's slots, maxSlots 1", func(o *soakObserver) {
			o.checkServers(&soakSnapshot{slots: []v1.BotPoolSlot{slotOn("s1", "srv-a", nil, false), slotOn("s2", "srv-a", nil, false)}})
		}},
		{"a bot bound on a cordoned server", "invariant 14: bot bot-a is bound to slot s1 on server srv-c, which is Cordoned", func(o *soakObserver) {
			o.checkServers(&soakSnapshot{slots: []v1.BotPoolSlot{slotOn("s1", "srv-c", ref, false)}})
		}},
		{"a bot bound on an unlisted server", "invariant 14: bot bot-a is bound to slot s1 on server srv-gone, which is Unlisted", func(o *soakObserver) {
			o.checkServers(&soakSnapshot{slots: []v1.BotPoolSlot{slotOn("s1", "srv-gone", ref, false)}})
		}},
		{"a bot back in the queue with its failed start", "", func(o *soakObserver) {
			o.checkStarts(&soakSnapshot{bots: []v1.Bot{bot(v1.BotDeploying, 0)}})
			o.checkStarts(&soakSnapshot{bots: []v1.Bot{bot(v1.BotQueued, 1)}})
			o.checkStarts(&soakSnapshot{bots: []v1.Bot{bot(v1.BotInCall, 1, started(20))}})
		}},
		{"a bot back in the queue without its failed start", "bot bot-a was sent back to the queue from slot pool-zoom-001 without its failed start recorded", func(o *soakObserver) {
			o.checkStarts(&soakSnapshot{bots: []v1.Bot{bot(v1.BotDeploying, 1)}})
			o.checkStarts(&soakSnapshot{bots: []v1.Bot{bot(v1.BotQueued, 1)}})
		}},
		{"a bot that ran back in the queue", "bot bot-a reported running at 12:20:00, yet it is back in the queue", func(o *soakObserver) {
			o.checkStarts(&soakSnapshot{bots: []v1.Bot{bot(v1.BotQueued, 1, started(20))}})
		}},
		{"a failed start recorded after the bot ran", "yet a failed start was recorded at 12:11:00", func(o *soakObserver) {
			o.checkStarts(&soakSnapshot{bots: []v1.Bot{bot(v1.BotFatal, 2, started(5))}})
		}},
		{"a failed start at the last attempt", "", func(o *soakObserver) {
			for _, b := range []v1.Bot{bot(v1.BotFatal, 3, fatal(v1.ReasonDeploymentFailed)),
				bot(v1.BotFatal, 0, fatal(v1.ReasonDeploymentLost), started(5)),
				bot(v1.BotFatal, 0, fatal(v1.ReasonStandbyLost), func(b *v1.Bot) { b.Status.Binding = &v1.BindingClaim{SlotName: "pool-zoom-001"} }),
				bot(v1.BotFatal, 0, fatal(v1.ReasonHeartbeatTimeout))} {
				o.checkFailedStart(&b)
			}
		}},
		{"a failed start with attempts left", "bot bot-a failed DeploymentLost () after 1 of its 3 start attempts", func(o *soakObserver) {
			b := bot(v1.BotFatal, 1, fatal(v1.ReasonDeploymentLost))
			o.checkFailedStart(&b)
		}},
		{"a failed start with the bot's own limit left", "after 3 of its 4 start attempts", func(o *soakObserver) {
			b := bot(v1.BotFatal, 3, fatal(v1.ReasonDeploymentFailed), func(b *v1.Bot) { b.Spec.MaxStartAttempts = 4 })
			o.checkFailedStart(&b)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			findings := &soakFindings{t: t, errorf: t.Logf}
			o := newSoakObserver(t, "ns", pool, nil, nil, findings, time.Second, time.Minute)
			tc.play(o)
			got := strings.Join(findings.list, "; ")
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Fatalf("violations %q, want %q", got, tc.want)
			}
		})
	}

	t.Run("servers reported out once every one is back", func(t *testing.T) {
		p := pool.DeepCopy()
		p.Status.Servers = []v1.ServerStatus{{UUID: "srv-a", Health: v1.ServerHealthy}, {UUID: "srv-b", Health: v1.ServerHealthUnknown}}
		if err := serversBack(p); err != nil {
			t.Fatalf("no server out, yet: %v", err)
		}
		p.Status.Servers[1].Health = v1.ServerUnreachable
		if err := serversBack(p); err == nil || !strings.Contains(err.Error(), "invariant 15: the pool still reports servers out, every one is back: srv-b Unreachable") {
			t.Fatalf("got %v, want invariant 15 naming srv-b", err)
		}
	})

	outage := &soakOutage{n: 1, server: "srv-a", kind: outageUnreachable, from: at(10).Time, to: at(14).Time}
	t.Run("an outage explains what a start met on its server, in its time", func(t *testing.T) {
		o := newSoakObserver(t, "ns", pool, nil, nil, &soakFindings{t: t}, time.Second, time.Minute)
		for _, tc := range []struct {
			name         string
			server       string
			queued, ends int
			want         bool
		}{
			{"on the server, during it", "srv-a", 11, 12, true},
			{"on the server, ended after it", "srv-a", 5, 40, true},
			{"on another server", "srv-b", 11, 12, false},
			{"on the server, before it", "srv-a", 1, 9, false},
			{"on the server, long after it", "srv-a", 30, 40, false},
		} {
			b := bot(v1.BotFatal, 1, fatal(v1.ReasonDeploymentLost), func(b *v1.Bot) {
				b.Status.StartAttempts[0].Server = tc.server
				b.Status.QueuedAt, b.Status.FinishedAt = ptrTo(at(tc.queued)), ptrTo(at(tc.ends))
			})
			if got := o.outageExplains(&b, []*soakOutage{outage}); got != tc.want {
				t.Errorf("%s: explained %v, want %v", tc.name, got, tc.want)
			}
		}
	})

	t.Run("outages that caught no start", func(t *testing.T) {
		for _, tc := range []struct {
			name, want string
			server     string
		}{
			{"caught one", "", "srv-a"},
			{"caught none", "the server outages (#1 srv-a unreachable 12:10:00–12:14:00: 0 bots) caught no start: they tested nothing", "srv-b"},
		} {
			findings := &soakFindings{t: t, errorf: t.Logf}
			s := &soak{t: t, findings: findings, outages: []*soakOutage{outage}}
			s.retriesCaught([]v1.Bot{bot(v1.BotDone, 1, func(b *v1.Bot) { b.Status.StartAttempts[0].Server = tc.server })})
			if got := strings.Join(findings.list, "; "); tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("%s: violations %q, want %q", tc.name, got, tc.want)
			}
		}
	})
}
