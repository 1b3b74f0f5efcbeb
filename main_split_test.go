package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/botapi/botclient"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/internal/pgtest"
	"botpool.dev/botpool/internal/slottoken"
	"botpool.dev/botpool/store/postgres"
)

// TestComponentsFlag: --components takes all, controllers or bot-api and nothing else; apart,
// both need Postgres (the in-memory store is per process); the controllers alone take no bot
// API certificate; and each selects what its process runs, a bot-api process never campaigning
// for the controllers' Lease.
func TestComponentsFlag(t *testing.T) {
	t.Setenv("BOTPOOL_DATABASE_URL", "")
	const db = "--database-url=postgres://botpool@db:5432/botpool"
	tlsPair := []string{"--bot-api-tls-cert-file=/tls/tls.crt", "--bot-api-tls-key-file=/tls/tls.key"}
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"default", nil, ""},
		{"all without Postgres", []string{"--components=all"}, ""},
		{"controllers", []string{"--components=controllers", db}, ""},
		{"bot API", []string{"--components=bot-api", db}, ""},
		{"bot API with TLS", append([]string{"--components=bot-api", db}, tlsPair...), ""},
		{"unknown", []string{"--components=api"}, `--components "api": want all (controllers and bot API), controllers (no bot API) or bot-api (the bot API alone)`},
		{"a list", []string{"--components=controllers,bot-api", db}, `--components "controllers,bot-api"`},
		{"empty", []string{"--components=", db}, `--components ""`},
		{"capitalised", []string{"--components=Bot-API", db}, `--components "Bot-API"`},
		{"controllers without Postgres", []string{"--components=controllers"}, "--components=controllers needs --database-url (Postgres)"},
		{"bot API without Postgres", []string{"--components=bot-api"}, "--components=bot-api needs --database-url (Postgres)"},
		{"controllers with TLS", append([]string{"--components=controllers", db}, tlsPair...), "--components=controllers serves no bot API"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseFlags(tt.args)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("%v: unexpected error: %v", tt.args, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("%v: error = %v, want one containing %q", tt.args, err, tt.wantErr)
			}
		})
	}

	t.Setenv("BOTPOOL_DATABASE_URL", "postgres://botpool@db:5432/botpool") // as the chart passes it
	for _, tc := range []struct {
		components                   string
		controllers, botAPI, elected bool
	}{
		{componentsAll, true, true, true},
		{componentsControllers, true, false, true},
		{componentsBotAPI, false, true, false},
	} {
		o, err := parseFlags([]string{"--components=" + tc.components, "--leader-elect=true"})
		if err != nil {
			t.Fatalf("--components=%s: %v", tc.components, err)
		}
		if o.runsControllers() != tc.controllers || o.servesBotAPI() != tc.botAPI {
			t.Errorf("--components=%s: controllers %v, bot API %v; want %v, %v",
				tc.components, o.runsControllers(), o.servesBotAPI(), tc.controllers, tc.botAPI)
		}
		if got := managerOptions(o).LeaderElection; got != tc.elected {
			t.Errorf("--components=%s --leader-elect=true: leader election %v, want %v", tc.components, got, tc.elected)
		}
	}
}

// botAPIRole is config/rbac/bot_api_role.yaml, the ClusterRole generated from the bot API's
// RBAC markers alone: what the chart grants the bot-api ServiceAccount.
func botAPIRole(t *testing.T) *rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("config", "rbac", "bot_api_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(data, &role); err != nil {
		t.Fatal(err)
	}
	return &role
}

// TestBotAPIRole: the bot API's generated role is exactly what its code uses: list and watch
// bots, slots and pools (its cache), get bots (past it), patch Bot status, record Events, and
// get a Secret (a bound bot's secretParameters, read as its binding is handed out). No list or
// watch of Secrets, no write to a slot (binding is the manager's alone, see the chart's
// admission policy).
func TestBotAPIRole(t *testing.T) {
	var got []string
	for _, r := range botAPIRole(t).Rules {
		if len(r.ResourceNames) != 0 || len(r.NonResourceURLs) != 0 {
			t.Errorf("rule %+v: want whole resources only", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					got = append(got, g+"/"+res+":"+v)
				}
			}
		}
	}
	want := []string{
		"botpool.dev/bots:get", "botpool.dev/bots:list", "botpool.dev/bots:watch",
		"botpool.dev/botpoolslots:list", "botpool.dev/botpoolslots:watch",
		"botpool.dev/botpools:get", "botpool.dev/botpools:list", "botpool.dev/botpools:watch",
		"/secrets:get",
		"botpool.dev/bots/status:patch",
		"events.k8s.io/events:create", "events.k8s.io/events:patch",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the bot API's role grants\n  %v\nwant\n  %v", got, want)
	}
}

// asUserWithRole binds a copy of role, named user, to the user for the rest of the test and
// returns a config that impersonates the user.
func asUserWithRole(t *testing.T, role *rbacv1.ClusterRole, user string) *rest.Config {
	t.Helper()
	role = role.DeepCopy()
	role.ObjectMeta = metav1.ObjectMeta{Name: user}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	for _, obj := range []client.Object{role, binding} {
		if err := env.Client.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return cfg
}

// waitReady waits until the manager whose probes listen at addr answers /readyz with 200.
func waitReady(t *testing.T, addr string) {
	t.Helper()
	kubetest.Eventually(t, time.Minute, func() error {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s/readyz answered %d", addr, resp.StatusCode)
		}
		return nil
	})
}

// TestBotAPIRunsApartFromTheControllers runs the manager split in two, as the chart does with
// botApi.separate: --components=controllers, and --components=bot-api as a user bound to
// exactly the generated bot API role, both on one Postgres. A slot's container fetches its
// bot's configuration (the claim, a Bot status write), beats and reports through the bot-api
// process; the controllers process, which serves no bot API, reads the beat from the shared
// store (the bot turns Alive) and acts on the report (it releases the slot of the finished
// bot). The bot-api identity reads bots, and may not read a Secret or change a binding.
func TestBotAPIRunsApartFromTheControllers(t *testing.T) {
	ctx := t.Context()
	ns := env.Namespace(t)
	dsn := pgtest.StartT(t).NewDatabase(t)
	user := "botpool-bot-api-" + ns
	botAPIConfig := asUserWithRole(t, botAPIRole(t), user)

	// A bot bound to a slot whose token the slot controller would have issued. Its pool does
	// not exist, so the controllers leave the slot Busy (Stalled: nothing to deploy with) and
	// leave its container's token alone.
	token, err := slottoken.New()
	if err != nil {
		t.Fatal(err)
	}
	bot := bt.MakeBot(ns, "standup").Obj()
	if err := env.Client.Create(ctx, bot); err != nil {
		t.Fatal(err)
	}
	slot := bt.MakeSlot(ns, "absent-zoom-001", "absent").BoundTo(bot.Name, bot.UID).Obj()
	if err := env.Client.Create(ctx, slot); err != nil {
		t.Fatal(err)
	}
	app := "app-" + ns
	slot.Status = v1.BotPoolSlotStatus{Phase: v1.SlotBusy, ApplicationUUID: app, TokenSHA256: slottoken.Hash([]byte(token))}
	if err := env.Client.Status().Update(ctx, slot); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coolify-credentials"},
		StringData: map[string]string{"url": "https://coolify.example.com", "token": "not-for-the-bot-api"}}
	if err := env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}

	ctrlProbes, ctrlBotAPI := kubetest.FreeLocalAddr(t), kubetest.FreeLocalAddr(t)
	ctrlOpts, err := parseFlags([]string{"--components=controllers", "--database-url=" + dsn,
		"--leader-elect=true", "--leader-election-namespace=" + ns, "--watch-namespaces=" + ns,
		"--health-probe-bind-address=" + ctrlProbes, "--metrics-bind-address=0", "--bot-api-bind-address=" + ctrlBotAPI})
	if err != nil {
		t.Fatal(err)
	}
	startManager(t, env.Config, ctrlOpts)

	// --leader-elect keeps its default (true) and no Lease namespace is given: outside a
	// cluster a manager electing a leader could not even be built. The bot API needs none.
	apiProbes, apiAddr := kubetest.FreeLocalAddr(t), kubetest.FreeLocalAddr(t)
	apiOpts, err := parseFlags([]string{"--components=bot-api", "--database-url=" + dsn,
		"--health-probe-bind-address=" + apiProbes, "--metrics-bind-address=0", "--bot-api-bind-address=" + apiAddr})
	if err != nil {
		t.Fatal(err)
	}
	apiOpts.registry = prometheus.NewRegistry() // in a process of its own, as in the chart
	startManager(t, botAPIConfig, apiOpts)
	waitReady(t, ctrlProbes)
	waitReady(t, apiProbes)

	// The claim: the bot-api process patches the Bot's status.binding under its own role.
	container := botclient.New("http://"+apiAddr, app, token, nil)
	var cfg botclient.Config
	kubetest.Eventually(t, 30*time.Second, func() error {
		cfg, err = container.Config(ctx)
		return err
	})
	if cfg.Bot != bot.Name || cfg.Namespace != ns || cfg.MeetingURL != bot.Spec.MeetingURL || cfg.Credential == "" {
		t.Fatalf("config %+v: want bot %s/%s's, with a binding credential", cfg, ns, bot.Name)
	}

	// A beat, before any report: the bot API writes it to Postgres only, so the bot can turn
	// Alive only by the controllers process reading it from there.
	beat, err := container.Heartbeat(ctx, bot.Name)
	if err != nil || beat.Action != botclient.ActionContinue || beat.Buffered {
		t.Fatalf("heartbeat: %+v, %v; want continue, stored", beat, err)
	}
	kubetest.Eventually(t, 30*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(bot), bot); err != nil {
			return err
		}
		c := meta.FindStatusCondition(bot.Status.Conditions, v1.ConditionAlive)
		if c == nil || c.Status != metav1.ConditionTrue || bot.Status.LastHeartbeat == nil {
			return fmt.Errorf("bot %s: phase %s, Alive %+v: the controllers have not read the beat from the store", bot.Name, bot.Status.Phase, c)
		}
		return nil
	})
	pg, err := postgres.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Close() })
	if beats, err := pg.LastHeartbeats(ctx, []types.UID{bot.UID}); err != nil || beats[bot.UID].IsZero() {
		t.Fatalf("the shared store's beats of the bot: %v, %v", beats, err)
	}

	// A second claim of the binding: 409, and the Warning Event the bot API's role allows.
	if _, err := container.Config(ctx); !errors.Is(err, botclient.ErrConflict) {
		t.Errorf("a second config call: %v, want 409", err)
	}
	kubetest.Eventually(t, 30*time.Second, func() error {
		var events eventsv1.EventList
		if err := env.Client.List(ctx, &events, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == v1.ReasonBindingClaimedTwice && e.Regarding.UID == bot.UID && e.Type == corev1.EventTypeWarning {
				return nil
			}
		}
		return fmt.Errorf("no %s Event among %d", v1.ReasonBindingClaimedTwice, len(events.Items))
	})

	// Reports: the bot API writes the phases; the controllers release the finished bot's slot.
	for _, phase := range []string{botclient.PhaseInCall, botclient.PhaseDone} {
		if resp, err := container.ReportStatus(ctx, bot.Name, botclient.StatusReport{Phase: phase}); err != nil || resp.Phase != phase {
			t.Fatalf("report %s: %+v, %v", phase, resp, err)
		}
	}
	kubetest.Eventually(t, 30*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(slot), slot); err != nil {
			return err
		}
		if slot.Spec.BotRef != nil {
			return fmt.Errorf("slot %s is still bound to %s", slot.Name, slot.Spec.BotRef.Name)
		}
		return nil
	})
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(bot), bot); err != nil || bot.Status.Phase != v1.BotDone {
		t.Errorf("bot %s: phase %s, %v; want Done", bot.Name, bot.Status.Phase, err)
	}

	// The bot-api identity: what it reads works, the rest is refused.
	asBotAPI, err := client.New(botAPIConfig, client.Options{Scheme: newScheme()})
	if err != nil {
		t.Fatal(err)
	}
	if err := asBotAPI.Get(ctx, client.ObjectKeyFromObject(bot), &v1.Bot{}); err != nil {
		t.Fatalf("the bot-api identity cannot read a bot (so the refusals below prove nothing): %v", err)
	}
	// It may get a Secret by name (a bound bot's secret parameters), never list or watch them.
	if err := asBotAPI.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)); !apierrors.IsForbidden(err) {
		t.Errorf("the bot-api identity listing Secrets: %v, want Forbidden", err)
	}
	stolen := slot.DeepCopy()
	stolen.Spec.BotRef = &v1.BotReference{Name: bot.Name, UID: bot.UID}
	if err := asBotAPI.Patch(ctx, stolen, client.MergeFrom(slot)); !apierrors.IsForbidden(err) {
		t.Errorf("the bot-api identity binding a slot: %v, want Forbidden", err)
	}

	// The controllers process served none of it: nothing listens at its bot API address.
	if conn, err := net.DialTimeout("tcp", ctrlBotAPI, time.Second); err == nil {
		_ = conn.Close()
		t.Errorf("--components=controllers listens at its --bot-api-bind-address %s", ctrlBotAPI)
	}
}
