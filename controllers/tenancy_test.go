package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify/sim"
	bt "botpool.dev/botpool/internal/botpooltest"
	"botpool.dev/botpool/internal/kubetest"
)

// tenantLabel is the namespace label the shared pools of these tests select tenants by.
const tenantLabel = "tenancy.test.botpool.dev/tenant-of"

// labelNamespace sets (value != "") or removes the tenant label of namespace ns.
func labelNamespace(t *testing.T, ns, value string) {
	t.Helper()
	ctx := context.Background()
	var n corev1.Namespace
	if err := env.Client.Get(ctx, client.ObjectKey{Name: ns}, &n); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(n.DeepCopy())
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	if value == "" {
		delete(n.Labels, tenantLabel)
	} else {
		n.Labels[tenantLabel] = value
	}
	if err := env.Client.Patch(ctx, &n, patch); err != nil {
		t.Fatal(err)
	}
}

// createBot creates b as its namespace's user would.
func createBot(t *testing.T, b *v1.Bot) *v1.Bot {
	t.Helper()
	if err := env.Client.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	return b
}

// sharedSlotOf waits until a slot of the pool's namespace is bound to bot, and returns it.
func sharedSlotOf(t *testing.T, poolNS string, bot *v1.Bot) *v1.BotPoolSlot {
	t.Helper()
	var slot *v1.BotPoolSlot
	kubetest.Eventually(t, 15*time.Second, func() error {
		for _, s := range listSlots(t, poolNS) {
			if s.Spec.BotRef != nil && s.Spec.BotRef.UID == bot.UID {
				slot = &s
				return nil
			}
		}
		return fmt.Errorf("bot %s/%s is bound to no slot of namespace %s", bot.Namespace, bot.Name, poolNS)
	})
	return slot
}

// notAllowed reports whether the bot waits in Pending with PoolNotAllowed.
func notAllowed(b *v1.Bot) bool {
	c := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionReady)
	return b.Status.Phase == v1.BotPending && c != nil && c.Reason == string(v1.ReasonPoolNotAllowed)
}

// TestSharedPoolAdmitsNamespacesByLabel (issue 33, part 1): a pool that admits the namespaces
// labelled for it serves their Bots, named by spec.poolRef with a namespace or found with none;
// refuses the Bots of a namespace it does not admit (Pending, PoolNotAllowed, never bound)
// until the namespace is labelled; and when a namespace loses its label, its running bot keeps
// its slot while its next bot is refused. Nothing of the pool's namespace shows in the
// tenants' namespaces: no application UUID, server, Coolify URL or Secret name in their
// Bots or Events, and no Event there names a slot.
func TestSharedPoolAdmitsNamespacesByLabel(t *testing.T) {
	sc := newScenario(t, "shared", sim.Config{}, func(p *v1.BotPool) {
		p.Spec.MaxSlots, p.Spec.MinIdle = 4, 4
		p.Spec.AllowedNamespaces = &v1.AllowedNamespaces{From: v1.NamespacesSelector,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{tenantLabel: "shared"}}}
	})
	tenant, stranger := env.Namespace(t), env.Namespace(t)
	labelNamespace(t, tenant, "shared")
	events := recordEvents(t, tenant)
	sc.warm()
	waitPhases(t, sc.ns, map[v1.SlotPhase]int{v1.SlotIdle: 4})

	// Named with its namespace by a tenant: bound to a slot of the pool's namespace.
	named := createBot(t, bt.MakeBot(tenant, "named").PoolIn(sc.ns, sc.pool.Name).Obj())
	slot := sharedSlotOf(t, sc.ns, named)
	if ref := slot.Spec.BotRef; ref.Namespace != tenant || ref.Name != named.Name {
		t.Errorf("slot %s's botRef is %+v; want bot %s of namespace %s", slot.Name, ref, named.Name, tenant)
	}
	got := waitBot(t, named, "Deploying in the shared pool", func(b *v1.Bot) bool {
		return b.Status.Phase == v1.BotDeploying && b.Status.SlotName == slot.Name
	})
	if got.Status.Pool != sc.pool.Name || got.Status.PoolNamespace != sc.ns {
		t.Errorf("status.pool %q, poolNamespace %q; want %s/%s", got.Status.Pool, got.Status.PoolNamespace, sc.ns, sc.pool.Name)
	}
	if got.Status.ApplicationUUID != "" {
		t.Errorf("a tenant's bot shows the pool's Coolify application %q", got.Status.ApplicationUUID)
	}

	// Named by no poolRef: the tenant has no zoom pool of its own, so the shared one serves it.
	found := createBot(t, bt.MakeBot(tenant, "found").Obj())
	sharedSlotOf(t, sc.ns, found)
	waitBot(t, found, "routed to the shared pool", func(b *v1.Bot) bool {
		return b.Status.Pool == sc.pool.Name && b.Status.PoolNamespace == sc.ns
	})

	// A namespace the pool does not admit: refused, with a message that says so, never bound.
	refused := createBot(t, bt.MakeBot(stranger, "refused").PoolIn(sc.ns, sc.pool.Name).Obj())
	got = waitBot(t, refused, "Pending, PoolNotAllowed", notAllowed)
	if c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady); !strings.Contains(c.Message, "zoom Bots of namespace "+stranger) {
		t.Errorf("the refusal says %q; want it to name the namespace", c.Message)
	}
	unrouted := createBot(t, bt.MakeBot(stranger, "unrouted").Obj())
	waitBot(t, unrouted, "Pending, PoolNotFound", func(b *v1.Bot) bool {
		c := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionReady)
		return b.Status.Phase == v1.BotPending && c != nil && c.Reason == string(v1.ReasonPoolNotFound)
	})
	if got := sc.botIn(stranger, refused.Name); got.Status.SlotName != "" || got.Status.Pool != "" {
		t.Errorf("the refused bot has pool %q, slot %q", got.Status.Pool, got.Status.SlotName)
	}

	// Labelled: admitted at once (the namespace's label change wakes its bots), the bot that
	// named the pool and the one that named none.
	labelNamespace(t, stranger, "shared")
	sharedSlotOf(t, sc.ns, refused)
	sharedSlotOf(t, sc.ns, unrouted)

	// The tenant loses its label: its bound bots keep their slots, its next bot is refused.
	labelNamespace(t, tenant, "")
	late := createBot(t, bt.MakeBot(tenant, "late").PoolIn(sc.ns, sc.pool.Name).Obj())
	waitBot(t, late, "Pending, PoolNotAllowed", notAllowed)
	for _, b := range []*v1.Bot{named, found} {
		got := sc.botIn(tenant, b.Name)
		if got.Status.Phase.Terminal() || got.Status.SlotName == "" {
			t.Errorf("bot %s of the dropped namespace is %s on slot %q; want it to keep its slot", b.Name, got.Status.Phase, got.Status.SlotName)
		}
	}
	sharedSlotOf(t, sc.ns, named) // still bound

	// Nothing of the pool's namespace in the tenants' Bots and Events.
	secrets := []string{sc.sim.URL, sc.pool.Spec.Coolify.CredentialsSecretRef.Name, sc.pool.Spec.Coolify.ServerUUID, sc.pool.Spec.Coolify.ProjectUUID}
	for _, s := range listSlots(t, sc.ns) {
		secrets = append(secrets, s.Status.ApplicationUUID)
	}
	kubetest.Eventually(t, 15*time.Second, func() error {
		bound := false
		for _, e := range events.All() {
			bound = bound || e.Reason == v1.ReasonBound
			if e.Related != nil {
				o, _ := e.Related.(client.Object)
				return fmt.Errorf("Event %s of the tenant's namespace names %s/%s", e.Reason, o.GetNamespace(), o.GetName())
			}
			if leak := leaked(e.Note, secrets); leak != "" {
				return fmt.Errorf("Event %s of the tenant's namespace says %q, which names %q of the pool's namespace", e.Reason, e.Note, leak)
			}
		}
		if !bound {
			return fmt.Errorf("no Bound Event in the tenant's namespace yet")
		}
		return nil
	})
	var bots v1.BotList
	if err := env.Client.List(context.Background(), &bots, client.InNamespace(tenant)); err != nil {
		t.Fatal(err)
	}
	for _, b := range bots.Items {
		raw, _ := json.Marshal(b.Status)
		if leak := leaked(string(raw), secrets); leak != "" {
			t.Errorf("bot %s's status names %q of the pool's namespace: %s", b.Name, leak, raw)
		}
	}
}

// leaked is the first of secrets that text contains, or "".
func leaked(text string, secrets []string) string {
	for _, s := range secrets {
		if s != "" && strings.Contains(text, s) {
			return s
		}
	}
	return ""
}

// botIn reads the bot of namespace ns.
func (sc *scenario) botIn(ns, name string) *v1.Bot {
	sc.t.Helper()
	b := &v1.Bot{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, b); err != nil {
		sc.t.Fatal(err)
	}
	return b
}

// TestTenantLimitByLabel (issue 33, part 2): a pool whose tenants are a label's values on its
// own namespace's bots holds each tenant to its limit. A tenant at its limit waits Queued with
// reason TenantLimit and its place among its own waiting bots, while another tenant's later bot
// takes a free slot; the pool's status counts each tenant's bound and waiting bots (and the
// tenant gauges say the same); when the tenant's bound bot ends, its next bot is bound.
func TestTenantLimitByLabel(t *testing.T) {
	const label = "example.com/customer"
	sc := newScenario(t, "tenants", sim.Config{}, func(p *v1.BotPool) {
		p.Spec.MaxSlots, p.Spec.MinIdle = 3, 3
		p.Spec.Tenancy = &v1.Tenancy{Key: v1.TenantByLabel, Label: label, Tenants: []v1.TenantPolicy{
			{Name: "acme", TenantShare: v1.TenantShare{Limit: ptrTo[int32](1)}}}}
	})
	sc.warm()
	waitPhases(t, sc.ns, map[v1.SlotPhase]int{v1.SlotIdle: 3})
	customer := func(name string) func(*v1.Bot) {
		return func(b *v1.Bot) { b.Labels = map[string]string{label: name} }
	}
	first := newBot(t, sc.ns, "acme-1", sc.pool.Name, customer("acme"))
	slotOf(t, first)
	second := newBot(t, sc.ns, "acme-2", sc.pool.Name, customer("acme"))
	third := newBot(t, sc.ns, "acme-3", sc.pool.Name, customer("acme"))
	other := newBot(t, sc.ns, "globex-1", sc.pool.Name, customer("globex"))
	slotOf(t, other) // a later bot of another tenant takes a free slot

	limited := func(pos int32) func(*v1.Bot) bool {
		return func(b *v1.Bot) bool {
			c := meta.FindStatusCondition(b.Status.Conditions, v1.ConditionReady)
			return b.Status.Phase == v1.BotQueued && c != nil && c.Reason == v1.ReasonTenantLimit && b.Status.QueuePosition == pos &&
				b.Status.EstimatedWait == nil && b.Status.Tenant == "acme"
		}
	}
	waitBot(t, second, "Queued, TenantLimit, first of its tenant", limited(1))
	waitBot(t, third, "Queued, TenantLimit, second of its tenant", limited(2))

	pool := sc.waitPool("status.tenants counts acme and globex", 0, 1, func(p *v1.BotPool) bool {
		t := p.Status.Tenants
		return p.Status.TenantCount == 2 && len(t) == 2 &&
			t[0].Name == "acme" && t[0].Bound == 1 && t[0].Waiting == 2 && t[0].Limit != nil && *t[0].Limit == 1 &&
			t[1].Name == "globex" && t[1].Bound == 1 && t[1].Waiting == 0 && t[1].Limit == nil
	})
	kubetest.Eventually(t, 15*time.Second, func() error {
		labels := map[string]string{"namespace": pool.Namespace, "pool": pool.Name, "tenant": "acme", "state": "waiting"}
		if n, ok := gaugeValue(t, "botpool_tenant_bots", labels); !ok || n != 2 {
			return fmt.Errorf("botpool_tenant_bots%v = %v (found: %v), want 2", labels, n, ok)
		}
		return nil
	})

	// acme's bot ends: its next one is bound, the last waits first of its tenant.
	if err := env.Client.Delete(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	slotOf(t, second)
	waitBot(t, third, "Queued, TenantLimit, first of its tenant", limited(1))
}

// gaugeValue is the value of the suite's gauge name with exactly these labels.
func gaugeValue(t *testing.T, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	families, err := suiteRegistry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}
