package controllers

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/kubetest"
)

// TestBurstOfTenBotsPerSlot: ten times as many Bots as the pool may have slots arrive at once
// on an empty pool: 300 on at most 30 slots in make test, 1000 on 100 in make soak
// (BOTPOOL_SOAK=long; under -race on a shared machine the full size took eight minutes of
// CI's time, the same waves at a third of the objects take a fraction). Exactly maxSlots are
// bound, never a bot twice or a slot twice, and as the bound ones finish, the queue is served
// strictly in priority-then-arrival order; the bots with a short queueTimeout that wait too
// long end Fatal/QueueTimeout instead. Invariants 1 and 2 are checked continuously, 3 and 4
// after every wave.
func TestBurstOfTenBotsPerSlot(t *testing.T) {
	if testing.Short() {
		t.Skip("the burst takes a minute")
	}
	total, maxSlots := 300, 30
	if os.Getenv("BOTPOOL_SOAK") == "long" {
		total, maxSlots = 1000, 100
	}
	sc := newScenario(t, "thousand", sim.Config{}, func(p *v1.BotPool) { p.Spec.MaxSlots, p.Spec.MinIdle = int32(maxSlots), 0 })
	sc.warm()
	ctx := context.Background()

	stop := make(chan struct{})
	var violation error
	var vmu sync.Mutex
	done := make(chan struct{})
	go func() { // invariants 1 and 2, continuously
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if err := invariantsOneTwo(ctx, sc.ns, maxSlots); err != nil {
				vmu.Lock()
				violation = err
				vmu.Unlock()
				return
			}
		}
	}()

	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range total {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			newBot(t, sc.ns, fmt.Sprintf("bot-%04d", i), sc.pool.Name, func(b *v1.Bot) {
				b.Spec.Priority = int32(i % 7) // a mix of priorities
				if i%10 == 9 {
					b.Spec.QueueTimeout = "45s" // some give up early
				}
			})
		}()
	}
	wg.Wait()

	bots := func() []v1.Bot {
		var l v1.BotList
		if err := env.Client.List(ctx, &l, client.InNamespace(sc.ns)); err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	countPhase := func(bs []v1.Bot, p v1.BotPhase) int {
		n := 0
		for i := range bs {
			if bs[i].Status.Phase == p {
				n++
			}
		}
		return n
	}
	// Wave 0: the pool grows to maxSlots, as many bots are bound, the others wait. The deadlines are generous:
	// this checks correctness under -race on a shared machine; speed is make bench's job.
	kubetest.Eventually(t, 3*time.Minute, func() error {
		bs := bots()
		if n := countPhase(bs, v1.BotDeploying); n != maxSlots || countPhase(bs, v1.BotQueued) != total-maxSlots {
			return fmt.Errorf("%d deploying, %d queued", n, countPhase(bs, v1.BotQueued))
		}
		return nil
	})

	served := map[string]bool{}
	for wave := 1; ; wave++ {
		step(10 * time.Second) // warm deployments finish
		bs := bots()
		// Invariant 4: the bound ones are exactly the head of the queue as it stood.
		var waiting []*v1.Bot
		for i := range bs {
			b := &bs[i]
			switch {
			case b.Status.Phase == v1.BotQueued:
				waiting = append(waiting, b)
			case b.Status.Phase == v1.BotDeploying && !served[b.Name]:
				served[b.Name] = true
				// The first wave binds bots while others still arrive; from the second on,
				// every waiter was queued before any binding, so the order is strict.
				if wave > 1 && !checkServedBefore(b, bs) {
					t.Fatalf("wave %d: %s (priority %d) was served before a bot ahead of it", wave, b.Name, b.Spec.Priority)
				}
			}
		}
		if len(waiting) == 0 {
			break
		}
		if wave > 20 {
			t.Fatalf("%d bots still waiting after 20 waves", len(waiting))
		}
		// The running bots finish; their slots go to the head of the queue.
		for i := range bs {
			if bs[i].Status.Phase == v1.BotDeploying {
				finish(t, &bs[i])
			}
		}
		kubetest.Eventually(t, 3*time.Minute, func() error {
			bs := bots()
			free := 0
			for _, s := range listSlots(t, sc.ns) {
				if s.Status.Phase == v1.SlotIdle && s.Spec.BotRef == nil {
					free++
				}
			}
			queued := countPhase(bs, v1.BotQueued)
			if queued > 0 && free > 0 { // invariant 3, once the wave settled
				return fmt.Errorf("%d bots queued while %d slots are free", queued, free)
			}
			if d := countPhase(bs, v1.BotDeploying); d != min(maxSlots, queued+d) {
				return fmt.Errorf("%d deploying", d)
			}
			return nil
		})
	}
	close(stop)
	<-done
	if violation != nil {
		t.Fatal(violation)
	}
	bs := bots()
	timedOut := 0
	for i := range bs {
		switch b := &bs[i]; {
		case b.Status.Phase == v1.BotFatal && b.Status.Reason == v1.ReasonQueueTimeout:
			timedOut++
			if b.Spec.QueueTimeout != "45s" {
				t.Errorf("%s timed out with the pool's 5m default", b.Name)
			}
		case b.Status.Phase != v1.BotDone && b.Status.Phase != v1.BotDeploying:
			t.Errorf("%s ended %s/%s", b.Name, b.Status.Phase, b.Status.Reason)
		}
	}
	t.Logf("%d bots served, %d timed out in the queue", len(served), timedOut)
	if len(served)+timedOut != total {
		t.Errorf("%d served + %d timed out, want %d", len(served), timedOut, total)
	}
}

// checkServedBefore reports whether no bot that is still queued was ahead of b in the queue
// (higher priority, or the same priority and queued earlier).
func checkServedBefore(b *v1.Bot, all []v1.Bot) bool {
	for i := range all {
		o := &all[i]
		if o.Status.Phase == v1.BotQueued && o.Status.QueuedAt != nil && b.Status.QueuedAt != nil && policy.QueueLess(o, b) {
			return false
		}
	}
	return true
}

// invariantsOneTwo checks, on a live list, that no bot is bound to two slots and the pool
// never holds more than maxSlots.
func invariantsOneTwo(ctx context.Context, ns string, maxSlots int) error {
	var l v1.BotPoolSlotList
	if err := env.Client.List(ctx, &l, client.InNamespace(ns)); err != nil {
		return nil //nolint:nilerr // a failed read proves nothing either way
	}
	if len(l.Items) > maxSlots {
		return fmt.Errorf("invariant 2: %d slots, maxSlots %d", len(l.Items), maxSlots)
	}
	seen := map[string]string{}
	for _, s := range l.Items {
		if ref := s.Spec.BotRef; ref != nil {
			if other, dup := seen[string(ref.UID)]; dup {
				return fmt.Errorf("invariant 1: bot %s bound to %s and %s", ref.Name, other, s.Name)
			}
			seen[string(ref.UID)] = s.Name
		}
	}
	names := make([]string, 0, len(l.Items))
	for _, s := range l.Items {
		names = append(names, s.Name)
	}
	sort.Strings(names)
	for i := 1; i < len(names); i++ {
		if names[i] == names[i-1] {
			return fmt.Errorf("invariant 2: duplicate slot name %s", names[i])
		}
	}
	return nil
}
