package controllers

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/coolifyview"
	"botpool.dev/botpool/coolify"
	"botpool.dev/botpool/internal/kubetest"
)

// TestPoolGrowsLazilyToMaxUnderABurst: 300 bots start waiting at once on an empty pool of at
// most 40 slots. The pool creates exactly 40, named pool-zoom-001…040, and never holds more
// than 40 at any moment.
func TestPoolGrowsLazilyToMaxUnderABurst(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	const maxSlots, bots = 40, 300
	if err := env.Client.Create(ctx, newPool(ns, "burst", func(p *v1.BotPool) { p.Spec.MaxSlots = maxSlots })); err != nil {
		t.Fatal(err)
	}
	if n := len(listSlots(t, ns)); n != 0 {
		t.Fatalf("a lazy pool with nobody waiting created %d slots", n)
	}

	stop := make(chan struct{})
	violations := make(chan string, 1)
	go func() { // invariant 2, checked continuously while the burst is served
		for {
			select {
			case <-stop:
				return
			default:
			}
			bound := map[string]bool{}
			slots := listSlots(t, ns)
			for _, s := range slots {
				if ref := s.Spec.BotRef; ref != nil {
					if bound[string(ref.UID)] {
						select {
						case violations <- "bot " + ref.Name + " is bound to two slots":
						default:
						}
					}
					bound[string(ref.UID)] = true
				}
			}
			if n := len(slots); n > maxSlots {
				select {
				case violations <- fmt.Sprintf("pool holds %d slots, more than maxSlots %d", n, maxSlots):
				default:
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	var wg sync.WaitGroup
	for i := range bots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			newBot(t, ns, fmt.Sprintf("bot-%03d", i), "burst")
		}()
	}
	wg.Wait()

	kubetest.Eventually(t, 30*time.Second, func() error {
		if n := len(listSlots(t, ns)); n != maxSlots {
			return fmt.Errorf("%d slots, want %d", n, maxSlots)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond) // a late, stale pass must not add any
	close(stop)
	select {
	case v := <-violations:
		t.Fatal(v)
	default:
	}

	names := map[string]bool{}
	valid := regexp.MustCompile(`^pool-zoom-0(0[1-9]|[1-3][0-9]|40)$`)
	for _, s := range listSlots(t, ns) {
		if !valid.MatchString(s.Name) || names[s.Name] {
			t.Errorf("unexpected or duplicate slot %s", s.Name)
		}
		names[s.Name] = true
		if s.Spec.Pool != "burst" || s.Labels[v1.LabelPool] != "burst" || len(s.OwnerReferences) != 1 {
			t.Errorf("slot %s: pool %q, labels %v, owners %v", s.Name, s.Spec.Pool, s.Labels, s.OwnerReferences)
		}
	}

	var pool v1.BotPool
	kubetest.Eventually(t, 10*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "burst"}, &pool); err != nil {
			return err
		}
		if pool.Status.Slots == nil || pool.Status.Slots.Total != maxSlots || pool.Status.Queued != bots-maxSlots {
			return fmt.Errorf("status slots %+v queued %d, want %d slots and %d queued", pool.Status.Slots, pool.Status.Queued, maxSlots, bots-maxSlots)
		}
		return nil
	})
	// Ready once its image is on the server: the pre-pull that began with the pool ends.
	pullsEnd(t, client.ObjectKey{Namespace: ns, Name: "burst"})
	kubetest.Eventually(t, 10*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "burst"}, &pool); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(pool.Status.Conditions, v1.ConditionReady) {
			return fmt.Errorf("Ready is not True: %+v", pool.Status.Conditions)
		}
		return nil
	})
}

// TestPoolKeepsMinIdleWarm: minIdle slots exist before any bot; binding one makes the pool
// create another; maxSlots caps it.
func TestPoolKeepsMinIdleWarm(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	if err := env.Client.Create(ctx, newPool(ns, "warm", func(p *v1.BotPool) { p.Spec.MaxSlots, p.Spec.MinIdle = 4, 2 })); err != nil {
		t.Fatal(err)
	}
	wantSlots := func(n int) {
		t.Helper()
		kubetest.Eventually(t, 10*time.Second, func() error {
			if got := len(listSlots(t, ns)); got != n {
				return fmt.Errorf("%d slots, want %d", got, n)
			}
			return nil
		})
	}
	wantSlots(2)
	waitPhases(t, ns, map[v1.SlotPhase]int{v1.SlotIdle: 2})
	// Each bot takes a warm slot; the pool makes another to keep two free, up to maxSlots.
	slotOf(t, newBot(t, ns, "a", "warm"))
	wantSlots(3)
	slotOf(t, newBot(t, ns, "b", "warm"))
	wantSlots(4)
	slotOf(t, newBot(t, ns, "c", "warm"))
	slotOf(t, newBot(t, ns, "d", "warm"))
	newBot(t, ns, "e", "warm") // waits: the pool is full
	time.Sleep(300 * time.Millisecond)
	wantSlots(4)
}

// TestPoolStallsOnCredentialProblems: a problem a person must fix shows as Stalled with a
// clear reason, creates nothing, and clears once fixed.
func TestPoolStallsOnCredentialProblems(t *testing.T) {
	tests := []struct {
		err    error
		reason string
	}{
		{fmt.Errorf("%w: coolify", coolifyview.ErrCredentialsNotFound), v1.ReasonCredentialsNotFound},
		{fmt.Errorf("%w: no token", coolifyview.ErrCredentialsInvalid), v1.ReasonCredentialsInvalid},
		{fmt.Errorf("%w: no opt-in label", coolifyview.ErrCredentialsNotAllowed), v1.ReasonCredentialsNotAllowed},
		{fmt.Errorf("get-version: %w", coolify.ErrUnauthorized), v1.ReasonCredentialsRejected},
		{fmt.Errorf("get-version: %w", coolify.ErrAPIDisabled), v1.ReasonAPIDisabled},
	}
	for i, tt := range tests {
		t.Run(tt.reason, func(t *testing.T) {
			ctx := context.Background()
			ns := env.Namespace(t)
			name := fmt.Sprintf("stalled-%d", i)
			connector.fail(name, tt.err)
			if err := env.Client.Create(ctx, newPool(ns, name, func(p *v1.BotPool) { p.Spec.MinIdle = 1 })); err != nil {
				t.Fatal(err)
			}
			key := client.ObjectKey{Namespace: ns, Name: name}
			var pool v1.BotPool
			kubetest.Eventually(t, 10*time.Second, func() error {
				if err := env.Client.Get(ctx, key, &pool); err != nil {
					return err
				}
				c := meta.FindStatusCondition(pool.Status.Conditions, v1.ConditionStalled)
				if c == nil || c.Status != metav1.ConditionTrue || c.Reason != tt.reason || c.Message == "" {
					return fmt.Errorf("Stalled condition = %+v, want True/%s", c, tt.reason)
				}
				return nil
			})
			if meta.IsStatusConditionTrue(pool.Status.Conditions, v1.ConditionReady) {
				t.Error("a stalled pool reports Ready")
			}
			if n := len(listSlots(t, ns)); n != 0 {
				t.Errorf("a stalled pool created %d slots", n)
			}

			// Fixed: the next check (a spec change triggers one at once) clears the stall, and
			// the pool is Ready once its image is pulled.
			connector.fail(name, nil)
			pool.Spec.MaxSlots = 5
			if err := env.Client.Update(ctx, &pool); err != nil {
				t.Fatal(err)
			}
			pullsEnd(t, key)
			kubetest.Eventually(t, 10*time.Second, func() error {
				if err := env.Client.Get(ctx, key, &pool); err != nil {
					return err
				}
				if meta.FindStatusCondition(pool.Status.Conditions, v1.ConditionStalled) != nil ||
					!meta.IsStatusConditionTrue(pool.Status.Conditions, v1.ConditionReady) || len(listSlots(t, ns)) != 1 {
					return fmt.Errorf("not recovered: conditions %+v", pool.Status.Conditions)
				}
				if pool.Status.ObservedGeneration != pool.Generation {
					return fmt.Errorf("observedGeneration %d, generation %d", pool.Status.ObservedGeneration, pool.Generation)
				}
				return nil
			})
		})
	}
}

// TestPoolCountsSlotsByPhase: the status mirrors the slots' phases and the queue.
func TestPoolCountsSlotsByPhase(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	if err := env.Client.Create(ctx, newPool(ns, "counts", func(p *v1.BotPool) { p.Spec.MaxSlots, p.Spec.MinIdle = 3, 3 })); err != nil {
		t.Fatal(err)
	}
	waitPhases(t, ns, map[v1.SlotPhase]int{v1.SlotIdle: 3})
	pullsEnd(t, client.ObjectKey{Namespace: ns, Name: "counts"}) // the gate holds no start behind it
	slotOf(t, newBot(t, ns, "deploying", "counts"))              // the clock stands: it stays Deploying
	want := v1.SlotCounts{Total: 3, Idle: 2, Deploying: 1}
	kubetest.Eventually(t, 10*time.Second, func() error {
		var pool v1.BotPool
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "counts"}, &pool); err != nil {
			return err
		}
		if pool.Status.Slots == nil || *pool.Status.Slots != want || pool.Status.Queued != 0 {
			return fmt.Errorf("status slots %+v queued %d, want %+v and none", pool.Status.Slots, pool.Status.Queued, want)
		}
		return nil
	})
}

// TestPoolDeletionDeletesItsSlots: the finalizer removes the slots first, then lets go.
func TestPoolDeletionDeletesItsSlots(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	pool := newPool(ns, "doomed", func(p *v1.BotPool) { p.Spec.MinIdle = 3 })
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 10*time.Second, func() error {
		if n := len(listSlots(t, ns)); n != 3 {
			return fmt.Errorf("%d slots", n)
		}
		return nil
	})
	// A slot finalizer (the slot controller's, cleaning Coolify) holds the pool until it goes.
	held := listSlots(t, ns)[0]
	kubetest.Eventually(t, 10*time.Second, func() error { // the slot controller writes too: retry conflicts
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(&held), &held); err != nil {
			return err
		}
		held.Finalizers = append(held.Finalizers, "botpool.dev/test-cleanup")
		return env.Client.Update(ctx, &held)
	})
	if err := env.Client.Delete(ctx, pool); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 10*time.Second, func() error {
		slots := listSlots(t, ns)
		if len(slots) != 1 || slots[0].DeletionTimestamp.IsZero() {
			return fmt.Errorf("%d slots left; want only the held one, being deleted", len(slots))
		}
		return nil
	})
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
		t.Fatalf("the pool went before its last slot: %v", err)
	}
	kubetest.Eventually(t, 10*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(&held), &held); err != nil {
			return err
		}
		held.Finalizers = slices.DeleteFunc(held.Finalizers, func(f string) bool { return f == "botpool.dev/test-cleanup" })
		return env.Client.Update(ctx, &held)
	})
	kubetest.Eventually(t, 10*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pool still there (%w)", err)
		}
		return nil
	})
	// Through the slots' finalizers, the pool's applications are gone from Coolify too.
	step(11 * time.Second)
	for _, app := range coolifySim.Apps() {
		if slices.Contains(app.Tags, coolifyview.ClusterPoolTag(suiteCluster, pool.Namespace, pool.Name)) {
			t.Errorf("application %s (%s) of the deleted pool still exists", app.Name, app.UUID)
		}
	}
}

// TestPoolShrinksToALoweredMaxSlots: lowering maxSlots removes free slots, highest numbers
// first, and never a bound one.
func TestPoolShrinksToALoweredMaxSlots(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)
	pool := newPool(ns, "shrinking", func(p *v1.BotPool) { p.Spec.MaxSlots, p.Spec.MinIdle = 3, 3 })
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	waitPhases(t, ns, map[v1.SlotPhase]int{v1.SlotIdle: 3})
	keeper := slotOf(t, newBot(t, ns, "keeper", "shrinking"))
	kubetest.Eventually(t, 10*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
			return err
		}
		pool.Spec.MaxSlots, pool.Spec.MinIdle = 1, 0
		return env.Client.Update(ctx, pool)
	})
	kubetest.Eventually(t, 10*time.Second, func() error {
		var names []string
		for _, s := range listSlots(t, ns) {
			if s.DeletionTimestamp.IsZero() {
				names = append(names, s.Name)
			}
		}
		if fmt.Sprint(names) != "["+keeper.Name+"]" {
			return fmt.Errorf("slots %v, want only the bound %s", names, keeper.Name)
		}
		return nil
	})
}
