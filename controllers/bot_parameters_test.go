package controllers

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/botapi/botclient"
	"botpool.dev/botpool/coolify/sim"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/internal/simbot"
)

// configLog keeps the configurations the suite's simulated containers received, by bot.
type configLog struct {
	mu    sync.Mutex
	byBot map[string][]botclient.Config
}

func (l *configLog) add(c botclient.Config) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byBot == nil {
		l.byBot = map[string][]botclient.Config{}
	}
	l.byBot[c.Bot] = append(l.byBot[c.Bot], c)
}

func (l *configLog) of(bot string) []botclient.Config {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]botclient.Config(nil), l.byBot[bot]...)
}

// jsonEqual reports whether two JSON documents hold the same value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

const (
	poolDefaults  = `{"language":"en","transcription":{"provider":"whisper","model":"large"}}`
	botParameters = `{"transcription":{"provider":"deepgram"},"upload":{"bucket":"s3://team-a-recordings"}}`
	// mergedParameters is botParameters over poolDefaults: top-level keys, the bot's win whole.
	mergedParameters = `{"language":"en","transcription":{"provider":"deepgram"},"upload":{"bucket":"s3://team-a-recordings"}}`
)

// TestBotParametersReachTheClaimingContainerAlone: in both standby modes a bot's parameters
// (over its pool's defaults) and its secret parameter reach the container that takes its
// binding, in its configuration; the secret value is nowhere else — not in any API object of
// the namespace, an Event, a log line of any level, a metric, a store row, a slot's env, or the
// answer to a later request with the slot's token.
func TestBotParametersReachTheClaimingContainerAlone(t *testing.T) {
	for _, mode := range []v1.StandbyMode{v1.StandbyStopped, v1.StandbyRunning} {
		t.Run(string(mode), func(t *testing.T) { parametersReachTheContainer(t, mode) })
	}
}

func parametersReachTheContainer(t *testing.T, mode v1.StandbyMode) {
	secret := "dg_" + rand.Text() // a value no run has seen before
	logs := kubetest.WatchLogs(t, secret)
	events := watchEvents(t, secret)
	var got configLog
	cs := newContainers(t, simbot.Behaviour{MeetingLength: 2 * time.Second, HeartbeatEvery: 10 * time.Millisecond,
		PollEvery: 20 * time.Millisecond, OnConfig: got.add})
	sc := newScenario(t, "params-"+strings.ToLower(string(mode)), sim.Config{Hooks: cs.hooks()}, func(p *v1.BotPool) {
		p.Spec.Standby = mode
		p.Spec.ParameterDefaults = bt.MakePool("", "").ParameterDefaults(poolDefaults).Spec.ParameterDefaults
	})
	sc.warm()
	if mode == v1.StandbyRunning {
		sc.standbyReady()
	}
	ctx := context.Background()
	if err := env.Client.Create(ctx, bt.ParameterSecret(sc.ns, "deepgram", true, map[string]string{"apiKey": secret})); err != nil {
		t.Fatal(err)
	}
	bot := newBot(t, sc.ns, "standup", sc.pool.Name, func(b *v1.Bot) {
		*b = *bt.MakeBot(b.Namespace, b.Name).PoolRef(sc.pool.Name).Parameters(botParameters).
			SecretParameter("transcriptionKey", "deepgram", "apiKey").Obj()
	})
	kubetest.Eventually(t, 30*time.Second, func() error {
		cs.check()
		if len(got.of(bot.Name)) == 0 {
			sc.advance()
			b := sc.bot(bot.Name)
			return fmt.Errorf("no container has bot %s's configuration yet (%s: %s)", bot.Name, b.Status.Phase, b.Status.Message)
		}
		return nil
	})
	cfgs := got.of(bot.Name)
	if len(cfgs) != 1 {
		t.Fatalf("%d containers got bot %s's configuration, want 1", len(cfgs), bot.Name)
	}
	cfg := cfgs[0]
	if !jsonEqual(t, cfg.Parameters, []byte(mergedParameters)) {
		t.Errorf("parameters %s, want %s (the bot's over the pool's defaults)", cfg.Parameters, mergedParameters)
	}
	if !reflect.DeepEqual(cfg.SecretParameters, map[string]string{"transcriptionKey": secret}) {
		t.Errorf("secret parameters %d values, want the one transcriptionKey (values not shown)", len(cfg.SecretParameters))
	}

	// A later request with the slot's token: refused, and without the value.
	for _, ct := range cs.list() {
		if ct.res.Bot != "" && ct.res.Bot != bot.Name {
			continue
		}
		again := botclient.New(ct.Env["BOTPOOL_API_URL"], ct.Env["POOL_SLOT_UUID"], ct.Env["BOTPOOL_SLOT_TOKEN"], nil)
		later, err := again.Config(ctx)
		if err == nil {
			t.Fatalf("a second config request with the slot's token was answered: bot %q", later.Bot)
		}
		if !errors.Is(err, botclient.ErrConflict) && !errors.Is(err, botclient.ErrGone) && !errors.Is(err, botclient.ErrUnauthorized) {
			t.Fatalf("a second config request with the slot's token: %v, want 409 (handed out), 410 or 401", err)
		}
		if strings.Contains(err.Error(), secret) {
			t.Fatal("the refusal of a second config request carries the secret value")
		}
	}

	b := sc.waitBot(bot.Name, "Done", func(b *v1.Bot) bool { cs.check(); return b.Status.Phase.Terminal() })
	if b.Status.Phase != v1.BotDone {
		t.Fatalf("bot ended %s/%s: %s", b.Status.Phase, b.Status.Reason, b.Status.Message)
	}
	if c := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionParametersReady); c == nil || c.Status != "True" || c.Reason != v1.ReasonParametersResolved {
		t.Errorf("ParametersReady %+v, want True, %s", c, v1.ReasonParametersResolved)
	}

	// Nowhere else: every API object of the namespace but the Secret itself, ...
	var lists = []client.ObjectList{&v1.BotList{}, &v1.BotPoolSlotList{}, &v1.BotPoolList{}}
	for _, l := range lists {
		if err := env.Client.List(ctx, l, client.InNamespace(sc.ns)); err != nil {
			t.Fatal(err)
		}
		if raw, _ := json.Marshal(l); bytes.Contains(raw, []byte(secret)) {
			t.Errorf("a %T of the namespace holds the secret value", l)
		}
	}
	// ... every container's env (the slot's env in Coolify), ...
	for _, ct := range cs.list() {
		for k, v := range ct.Env {
			if strings.Contains(v, secret) {
				t.Errorf("container %d's env %s holds the secret value", ct.Seq, k)
			}
		}
	}
	// ... the store's rows of the bot and the slots, ...
	var rows []any
	rec, _, err := liveStore.Bot(ctx, b.UID)
	must(t, err)
	evs, err := liveStore.BotEvents(ctx, b.UID)
	must(t, err)
	rows = append(rows, rec, evs)
	for _, s := range listSlots(t, sc.ns) {
		tr, err := liveStore.Transitions(ctx, sc.ns, s.Name)
		must(t, err)
		sl, _, err := liveStore.Slot(ctx, sc.ns, s.Name)
		must(t, err)
		rows = append(rows, tr, sl)
	}
	if raw, _ := json.Marshal(rows); bytes.Contains(raw, []byte(secret)) {
		t.Error("a store row holds the secret value")
	}
	// ... the metrics, ...
	families, err := suiteRegistry.Gather()
	must(t, err)
	var text bytes.Buffer
	for _, f := range families {
		_, _ = expfmt.MetricFamilyToText(&text, f)
	}
	if text.Len() == 0 || bytes.Contains(text.Bytes(), []byte(secret)) {
		t.Errorf("the metrics (%d bytes) hold the secret value, or there are none to look at", text.Len())
	}
	// ... the Events and the logs, at every level.
	if events.Found() || events.Seen() == 0 {
		t.Errorf("Events: the secret value in one of %d", events.Seen())
	}
	if logs.Found() || logs.Seen() == 0 {
		t.Errorf("logs: the secret value in one of %d lines", logs.Seen())
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestRetriedStartGetsTheSameParameters: the first start of a bot with parameters fails at the
// pull (no container ever asked); the bot goes back to the queue, takes the other slot, and the
// container there gets the same parameters and secret value in its configuration.
func TestRetriedStartGetsTheSameParameters(t *testing.T) {
	var got configLog
	cs := newContainers(t, simbot.Behaviour{MeetingLength: 50 * time.Millisecond, HeartbeatEvery: 10 * time.Millisecond,
		PollEvery: 20 * time.Millisecond, OnConfig: got.add})
	sc := newScenario(t, "params-retried", sim.Config{Hooks: cs.hooks()}, func(p *v1.BotPool) {
		p.Spec.MaxSlots, p.Spec.MinIdle = 2, 2
		p.Spec.ParameterDefaults = bt.MakePool("", "").ParameterDefaults(poolDefaults).Spec.ParameterDefaults
	})
	sc.warm()
	waitPhases(t, sc.ns, map[v1.SlotPhase]int{v1.SlotIdle: 2})
	sc.sim.FailPulls(sc.pool.Spec.Image, 1)
	secret := "dg_" + rand.Text()
	must(t, env.Client.Create(context.Background(), bt.ParameterSecret(sc.ns, "deepgram", true, map[string]string{"apiKey": secret})))
	bot := newBot(t, sc.ns, "retried", sc.pool.Name, func(b *v1.Bot) {
		*b = *bt.MakeBot(b.Namespace, b.Name).PoolRef(sc.pool.Name).Parameters(botParameters).
			SecretParameter("transcriptionKey", "deepgram", "apiKey").Obj()
	})
	b := sc.waitBot(bot.Name, "Done after a failed start", func(b *v1.Bot) bool { cs.check(); return b.Status.Phase.Terminal() })
	if b.Status.Phase != v1.BotDone || len(b.Status.StartAttempts) != 1 {
		t.Fatalf("bot ended %s/%s after %d failed starts, want Done after 1: %s", b.Status.Phase, b.Status.Reason, len(b.Status.StartAttempts), b.Status.Message)
	}
	if failed := b.Status.StartAttempts[0].SlotName; failed == b.Status.SlotName {
		t.Errorf("the retried start ran on slot %s, where the first one failed; want the other slot", failed)
	}
	cfgs := got.of(bot.Name)
	if len(cfgs) != 1 {
		t.Fatalf("%d containers got bot %s's configuration, want 1 (the retried start's)", len(cfgs), bot.Name)
	}
	if !jsonEqual(t, cfgs[0].Parameters, []byte(mergedParameters)) || cfgs[0].SecretParameters["transcriptionKey"] != secret {
		t.Fatalf("the retried start's parameters %s and %d secret values, want %s and the key", cfgs[0].Parameters, len(cfgs[0].SecretParameters), mergedParameters)
	}
}
