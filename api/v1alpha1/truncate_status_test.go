package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// TestTruncatedStatusIsAccepted: status texts over the CRDs' limits (an upstream error in a
// message, say) are refused by the API server, at every retry; cut by TruncateTexts they are
// accepted. The limits in truncate.go are the CRDs' own.
func TestTruncatedStatusIsAccepted(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	long := strings.Repeat("Coolify answered something long. ", 200)
	cond := []metav1.Condition{{Type: v1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "Stalled",
		Message: strings.Repeat("x", 40000), LastTransitionTime: metav1.Now()}}

	b := bot()
	b.Namespace = ns
	if err := env.Client.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	b.Status.Message, b.Status.Reason, b.Status.Conditions = long, v1.BotReason(strings.Repeat("R", 300)), cond
	if err := env.Client.Status().Update(ctx, b.DeepCopy()); err == nil {
		t.Fatal("the API server took a bot status over its limits: the test proves nothing")
	}
	b.Status.TruncateTexts()
	if err := env.Client.Status().Update(ctx, b); err != nil {
		t.Errorf("truncated bot status refused: %v", err)
	}

	s := slot()
	s.Namespace = ns
	if err := env.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	s.Status.Message, s.Status.Reason, s.Status.Conditions = long, strings.Repeat("R", 300), cond
	if err := env.Client.Status().Update(ctx, s.DeepCopy()); err == nil {
		t.Fatal("the API server took a slot status over its limits: the test proves nothing")
	}
	s.Status.TruncateTexts()
	if err := env.Client.Status().Update(ctx, s); err != nil {
		t.Errorf("truncated slot status refused: %v", err)
	}

	// Each limit alone: a long condition message, then a long pre-pull message (Coolify's log).
	p := pool()
	p.Namespace = ns
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	longCond := func() []metav1.Condition {
		return []metav1.Condition{{Type: v1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "ImagePullFailed",
			Message: strings.Repeat("x", 40000), LastTransitionTime: metav1.Now()}}
	}
	p.Status.Conditions = longCond()
	if err := env.Client.Status().Update(ctx, p.DeepCopy()); err == nil {
		t.Fatal("the API server took a pool condition over its limit: the test proves nothing")
	}
	p.Status.Conditions = nil
	p.Status.Servers = []v1.ServerStatus{{UUID: "s1", State: v1.ServerActive, Pull: &v1.ImagePull{
		Image: "ghcr.io/example/bot:v2", State: v1.ImagePullFailed, Since: metav1.Now(), Message: long}}}
	if err := env.Client.Status().Update(ctx, p.DeepCopy()); err == nil {
		t.Fatal("the API server took a pre-pull message over its limit: the test proves nothing")
	}
	p.Status.Conditions = longCond()
	p.Status.TruncateTexts()
	if err := env.Client.Status().Update(ctx, p); err != nil {
		t.Errorf("truncated pool status refused: %v", err)
	}
}
