package policy

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "botpool.dev/botpool/api/v1alpha1"
	bt "botpool.dev/botpool/internal/botpooltest"
)

func TestAdmits(t *testing.T) {
	selector := func(sel *metav1.LabelSelector) *v1.BotPool {
		p := bt.MakePool("platform", "pool").Obj()
		p.Spec.AllowedNamespaces = &v1.AllowedNamespaces{From: v1.NamespacesSelector, Selector: sel}
		return p
	}
	tenant := map[string]string{"tenant": "yes"}
	tests := []struct {
		name    string
		pool    *v1.BotPool
		ns      string
		labels  map[string]string
		want    bool
		wantErr string
	}{
		{name: "own namespace, not shared", pool: bt.MakePool("platform", "pool").Obj(), ns: "platform", want: true},
		{name: "another namespace, not shared", pool: bt.MakePool("platform", "pool").Obj(), ns: "team-a", labels: tenant},
		{name: "from Same said", pool: func() *v1.BotPool {
			p := bt.MakePool("platform", "pool").Obj()
			p.Spec.AllowedNamespaces = &v1.AllowedNamespaces{From: v1.NamespacesSame}
			return p
		}(), ns: "team-a"},
		{name: "All", pool: bt.MakePool("platform", "pool").SharedWith(nil).Obj(), ns: "team-a", want: true},
		{name: "matching labels", pool: bt.MakePool("platform", "pool").SharedWith(tenant).Obj(), ns: "team-a", labels: tenant, want: true},
		{name: "other labels", pool: bt.MakePool("platform", "pool").SharedWith(tenant).Obj(), ns: "team-a", labels: map[string]string{"tenant": "no"}},
		{name: "no labels", pool: bt.MakePool("platform", "pool").SharedWith(tenant).Obj(), ns: "team-a"},
		{name: "own namespace, selector not matching it", pool: bt.MakePool("platform", "pool").SharedWith(tenant).Obj(), ns: "platform", want: true},
		{name: "by name", pool: selector(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{"team-a", "team-b"}}}}),
			ns: "team-b", labels: map[string]string{"kubernetes.io/metadata.name": "team-b"}, want: true},
		{name: "a selector that does not parse", pool: selector(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: "tenant", Operator: metav1.LabelSelectorOpIn}}}), ns: "team-a", labels: tenant, wantErr: "allowedNamespaces.selector"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Admits(tt.pool, tt.ns, tt.labels)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || got {
					t.Fatalf("Admits = %v, %v; want false and an error with %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Admits = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// TestSlotMessage: a bot of the slot's namespace repeats its message; one of another namespace
// only its reason.
func TestSlotMessage(t *testing.T) {
	slot := bt.MakeSlot("platform", "pool-zoom-001", "pool").Obj()
	slot.Status.Reason, slot.Status.Message = "DeploymentFailed", "pull of registry.internal.example/bot:7 failed on server pw4k"
	own := bt.MakeBot("platform", "own").Obj()
	if got := SlotMessage(own, slot); got != slot.Status.Message {
		t.Errorf("own namespace: %q; want the slot's message", got)
	}
	tenant := bt.MakeBot("team-a", "standup").Obj()
	got := SlotMessage(tenant, slot)
	if strings.Contains(got, "registry.internal") || strings.Contains(got, "pw4k") || !strings.Contains(got, "DeploymentFailed") {
		t.Errorf("another namespace: %q; want the reason and nothing of the message", got)
	}
}
