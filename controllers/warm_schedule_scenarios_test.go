package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/internal/kubetest"
)

// TestWarmWindowOpensAndCloses: a pool with a daily window opening in five minutes keeps
// spec.minIdle free slots until then, the window's minIdle while it is open (status.minIdle
// and warmWindows say so), and after it closes keeps the slots above spec.minIdle for
// scaleDownDelay (status.surplusSince), then removes them. The clock is set to each edge.
func TestWarmWindowOpensAndCloses(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	key := client.ObjectKey{Namespace: ns, Name: "warm"}
	if err := env.Client.Create(ctx, newPool(ns, "warm", func(p *v1.BotPool) {
		p.Spec.MinIdle, p.Spec.MaxSlots, p.Spec.ScaleDownDelay = 1, 10, "2m"
	})); err != nil {
		t.Fatal(err)
	}
	pullsEnd(t, key) // the cold pre-pull moves the clock by minutes: the window comes after it
	opens := clk.Now().UTC().Add(5 * time.Minute).Truncate(time.Minute)
	if err := updatePoolSpec(&v1.BotPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "warm"}}, func(p *v1.BotPool) {
		p.Spec.WarmSchedule = []v1.WarmWindow{{Schedule: fmt.Sprintf("%d %d * * *", opens.Minute(), opens.Hour()), Duration: "10m", MinIdle: 3}}
	}); err != nil {
		t.Fatal(err)
	}
	waitPool(t, key, "spec.minIdle before the window", func(p *v1.BotPool) bool {
		return p.Status.MinIdle == 1 && len(p.Status.WarmWindows) == 0 && p.Status.Slots != nil && p.Status.Slots.Idle == 1
	})

	clk.SetTime(opens)
	waitPool(t, key, "the window's minIdle while it is open", func(p *v1.BotPool) bool {
		return p.Status.MinIdle == 3 && len(p.Status.WarmWindows) == 1 && p.Status.Slots != nil && p.Status.Slots.Idle == 3
	})

	// Closed: the two slots above spec.minIdle are a surplus from now, kept for scaleDownDelay.
	closes := opens.Add(10 * time.Minute)
	clk.SetTime(closes)
	waitPool(t, key, "back to spec.minIdle, the surplus recorded and kept", func(p *v1.BotPool) bool {
		return p.Status.MinIdle == 1 && len(p.Status.WarmWindows) == 0 && p.Status.SurplusSince != nil &&
			p.Status.SurplusSince.Time.Equal(closes) && len(listLiveSlots(t, ns)) == 3
	})
	clk.SetTime(closes.Add(2 * time.Minute))
	waitPool(t, key, "the surplus removed after scaleDownDelay", func(p *v1.BotPool) bool {
		return p.Status.SurplusSince == nil && len(listLiveSlots(t, ns)) == 1
	})
}

// TestScaleSubresource: kubectl scale, an HPA and KEDA drive a pool's minIdle through its scale
// subresource: it reads spec.minIdle as replicas, the minIdle in force as status replicas and
// the slots' selector, writes spec.minIdle, and the API server refuses a value above maxSlots
// with the CRD's message.
func TestScaleSubresource(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	key := client.ObjectKey{Namespace: ns, Name: "scaled"}
	pool := newPool(ns, "scaled", func(p *v1.BotPool) { p.Spec.MinIdle, p.Spec.MaxSlots = 1, 5 })
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	pullsEnd(t, key)
	waitPool(t, key, "status.minIdle and selector", func(p *v1.BotPool) bool {
		return p.Status.MinIdle == 1 && p.Status.Selector != ""
	})

	scale := &autoscalingv1.Scale{}
	if err := env.Client.SubResource("scale").Get(ctx, pool, scale); err != nil {
		t.Fatal(err)
	}
	if scale.Spec.Replicas != 1 || scale.Status.Replicas != 1 || scale.Status.Selector != "botpool.dev/pool=scaled" {
		t.Errorf("scale %+v, want replicas 1/1 and selector botpool.dev/pool=scaled", scale)
	}

	// The pool controller writes the pool's status meanwhile: a scale read before a write
	// conflicts, and is read again, as kubectl scale does.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.SubResource("scale").Get(ctx, pool, scale); err != nil {
			return err
		}
		scale.Spec.Replicas = 3
		return env.Client.SubResource("scale").Update(ctx, pool, client.WithSubResourceBody(scale))
	}); err != nil {
		t.Fatal(err)
	}
	waitPool(t, key, "three free slots after scaling to 3", func(p *v1.BotPool) bool {
		return p.Spec.MinIdle == 3 && p.Status.MinIdle == 3 && p.Status.Slots != nil && p.Status.Slots.Idle == 3
	})

	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.SubResource("scale").Get(ctx, pool, scale); err != nil {
			return err
		}
		scale.Spec.Replicas = 6
		return env.Client.SubResource("scale").Update(ctx, pool, client.WithSubResourceBody(scale))
	})
	if err == nil || !strings.Contains(err.Error(), "minIdle must not exceed maxSlots") {
		t.Errorf("scaling above maxSlots: %v, want the CRD's refusal", err)
	}
}

// waitPool waits until the pool satisfies cond.
func waitPool(t *testing.T, key client.ObjectKey, what string, cond func(*v1.BotPool) bool) {
	t.Helper()
	kubetest.Eventually(t, 20*time.Second, func() error {
		var p v1.BotPool
		if err := env.Client.Get(context.Background(), key, &p); err != nil {
			return err
		}
		if !cond(&p) {
			return fmt.Errorf("pool %s: not %s: minIdle %d, windows %q, slots %+v", key.Name, what, p.Status.MinIdle, p.Status.WarmWindows, p.Status.Slots)
		}
		return nil
	})
}

// listLiveSlots lists the namespace's slots not being deleted.
func listLiveSlots(t *testing.T, ns string) []v1.BotPoolSlot {
	var live []v1.BotPoolSlot
	for _, s := range listSlots(t, ns) {
		if s.DeletionTimestamp.IsZero() {
			live = append(live, s)
		}
	}
	return live
}
