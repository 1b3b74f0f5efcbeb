package controllers

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/controllers/internal/pass"
	"botpool.dev/botpool/coolify"
	bt "botpool.dev/botpool/internal/botpooltest"
)

// TestCredentialsSecretNeedsOptIn: a pool may use a credentials Secret only when the Secret
// carries the opt-in label; the refusal names the exact command that opts in.
func TestCredentialsSecretNeedsOptIn(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "coolify"},
		Data: map[string][]byte{"url": []byte("https://coolify.example.com"), "token": []byte("1|abc")}}
	c := fake.NewClientBuilder().WithScheme(env.Scheme).WithObjects(secret).Build()
	conn := &coolifyview.SecretConnector{Reader: c, Registry: coolify.NewRegistry(1000), Clock: clocktesting.NewFakeClock(time.Unix(1_000_000, 0)), RefreshAfter: time.Minute}
	pool := bt.MakePool("team", "pool").Credentials("coolify").Obj()

	_, err := conn.ForPool(context.Background(), pool)
	if !errors.Is(err, coolifyview.ErrCredentialsNotAllowed) {
		t.Fatalf("an unlabelled credentials Secret: %v, want errCredentialsNotAllowed", err)
	}
	const cmd = "kubectl label secret coolify -n team botpool.dev/allow-pool-use=true"
	if !strings.Contains(err.Error(), cmd) {
		t.Errorf("error %q does not say the command %q", err, cmd)
	}
	// The pool's Stalled message says it too: TestStalledMessageSaysHowToOptIn.
	if reason := pass.UnreachableReason(err); reason != v1.ReasonCredentialsNotAllowed {
		t.Errorf("the slot's reason: %s, want %s", reason, v1.ReasonCredentialsNotAllowed)
	}

	secret.Labels = map[string]string{v1.LabelAllowPoolUse: "true"}
	if err := c.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ForPool(context.Background(), pool); err != nil {
		t.Errorf("a labelled credentials Secret: %v", err)
	}
}

// TestSlotEnvSecretNeedsOptIn: a slotEnvFrom Secret without the opt-in label never reaches a
// container's env; the slot stalls with its own reason and the command that opts in.
func TestSlotEnvSecretNeedsOptIn(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "db-password"},
		Data: map[string][]byte{"PASSWORD": []byte("hunter2")}}
	c := fake.NewClientBuilder().WithScheme(env.Scheme).WithObjects(secret).Build()
	r := &BotPoolSlotReconciler{Client: c, APIReader: c}
	s := &slotScope{
		slot: bt.MakeSlot("team", "pool-zoom-001", "pool").Obj(),
		pool: bt.MakePool("team", "pool").SlotEnvFrom("db-password").Obj(),
	}
	vars, _, err := r.slotEnv(context.Background(), s, "bpt_x")
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
	vars, _, err = r.slotEnv(context.Background(), s, "bpt_x")
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
