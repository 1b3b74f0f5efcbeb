package slot

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/pass"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// TestSlotEnvSecretNeedsOptIn: a slotEnvFrom Secret without the opt-in label never reaches a
// container's env; the slot stalls with its own reason and the command that opts in.
func TestSlotEnvSecretNeedsOptIn(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "db-password"},
		Data: map[string][]byte{"PASSWORD": []byte("hunter2")}}
	c := fake.NewClientBuilder().WithScheme(bt.Scheme()).WithObjects(secret).Build()
	r := &Reconciler{Client: c, APIReader: c}
	s := &slotScope{
		slot: bt.MakeSlot("team", "pool-zoom-001", "pool").Obj(),
		pool: bt.MakePool("team", "pool").SlotEnvFrom("db-password").Obj(),
	}
	vars, _, err := r.tokens().env(context.Background(), s.pool, s.slot, "bpt_x")
	if err == nil {
		t.Fatalf("an unlabelled slotEnvFrom Secret reached the env: %v", vars)
	}
	if reason, ok := pass.NeedsPerson(err); !ok || reason != v1.ReasonSlotEnvNotAllowed {
		t.Errorf("reason %q (needs a person: %v), want %s", reason, ok, v1.ReasonSlotEnvNotAllowed)
	}
	if cmd := "kubectl label secret db-password -n team botpool.dev/allow-pool-use=true"; !strings.Contains(err.Error(), cmd) {
		t.Errorf("error %q does not say the command %q", err, cmd)
	}

	secret.Labels = map[string]string{v1.LabelAllowPoolUse: "true"}
	if err := c.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	vars, _, err = r.tokens().env(context.Background(), s.pool, s.slot, "bpt_x")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range vars {
		found = found || (e.Key == "PASSWORD" && e.Value == "hunter2")
	}
	if !found {
		t.Errorf("a labelled Secret's keys are not in the env: %v", vars)
	}
}
