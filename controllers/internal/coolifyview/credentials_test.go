package coolifyview_test

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
	c := fake.NewClientBuilder().WithScheme(bt.Scheme()).WithObjects(secret).Build()
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
