package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"botpool.dev/botpool/internal/stats"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// Sizes and targets of the warm acquire benchmark (issue 8, items 1 and 2).
const (
	burstBots      = 300
	sequentialBots = 50
	// createWorkers is how many create requests the benchmark keeps in flight for a burst:
	// "created at once" through one client.
	createWorkers = 64
	// rawWorkers matches the dispatcher's bindWorkers: the raw figure is what the same
	// concurrency of single-object updates gets from this API server.
	rawWorkers = 16

	targetUncontendedP50 = 20 * time.Millisecond
	targetUncontendedP99 = 100 * time.Millisecond
	targetBurstRate      = 300.0 // assignments per second
)

// BenchmarkWarmAcquire: 300 Idle slots, 300 Bots created at once, each timed from its create
// request to its binding (the slot's spec.botRef, seen by a watch), and the burst's
// assignments per second; before it, 50 bots one at a time for the uncontended latency; and,
// before the manager starts, the raw rate of single-object updates the same API server takes
// from one client, which bounds what any allocator could reach.
func BenchmarkWarmAcquire(b *testing.B) {
	for range b.N {
		warmAcquire(b)
	}
}

func warmAcquire(b *testing.B) {
	sc := newScenario(b, nil)
	defer sc.close()
	raw := measureRawUpdates(sc, burstBots, rawWorkers)
	rawSeq := measureRawUpdates(sc, 100, 1)

	sc.startManager()
	start := time.Now()
	// One pool holds the sequential bots' slots and the burst's 300 Idle ones; every default
	// is the shipped one (deploys after binding go through the gate at its own pace).
	sc.pool("warm", sequentialBots+burstBots, sequentialBots+burstBots)
	sc.waitFor("350 Idle slots", 10*time.Minute, func() error {
		if n := sc.watch.freeIdle(); n < sequentialBots+burstBots {
			return fmt.Errorf("%d free Idle slots (%v)", n, sc.watch.slotPhases())
		}
		return nil
	})
	warmup := time.Since(start)

	// Uncontended: one bot at a time, each after the last is bound and a pause lets the
	// operator settle (its slot starts deploying).
	var seq []time.Duration
	for i := range sequentialBots {
		bot := sc.newBot(fmt.Sprintf("seq-%03d", i), "warm")
		sent := sc.createBots([]*v1.Bot{bot}, 1)
		at := waitBound(sc, bot.Name, 30*time.Second)
		seq = append(seq, at.Sub(sent[bot.Name]))
		time.Sleep(50 * time.Millisecond)
	}
	sc.waitFor("300 free Idle slots after the sequential bots", time.Minute, func() error {
		if n := sc.watch.freeIdle(); n < burstBots {
			return fmt.Errorf("%d free Idle slots", n)
		}
		return nil
	})

	// The burst.
	bots := make([]*v1.Bot, burstBots)
	names := make([]string, burstBots)
	for i := range bots {
		bots[i] = sc.newBot(fmt.Sprintf("burst-%03d", i), "warm")
		names[i] = bots[i].Name
	}
	profiled := sc.profile("burst", 15*time.Second)
	cpu0 := sc.cpuTime()
	sent := sc.createBots(bots, createWorkers)
	first, lastSent := timeRange(sent)
	var bound map[string]time.Time
	sc.waitFor("every burst bot bound", 5*time.Minute, func() error {
		bound = sc.watch.bound(names)
		if len(bound) < burstBots {
			return fmt.Errorf("%d of %d bound", len(bound), burstBots)
		}
		return nil
	})
	cpu := sc.cpuTime() - cpu0
	profiled()
	burst := make([]time.Duration, 0, burstBots)
	var toQueued, queuedToBound []time.Duration
	for _, n := range names {
		burst = append(burst, bound[n].Sub(sent[n]))
		if q, ok := sc.watch.phaseSeen(n, v1.BotQueued); ok {
			toQueued = append(toQueued, q.Sub(sent[n]))
			queuedToBound = append(queuedToBound, bound[n].Sub(q))
		}
	}
	_, lastBound := timeRange(bound)
	window := lastBound.Sub(first)
	rate := float64(burstBots) / window.Seconds()

	r := newReport(b, "Warm acquire (issue 8, items 1 and 2)")
	r.atMost("uncontended acquire p50", ms(stats.Percentile(seq, 50)), ms(targetUncontendedP50), "ms")
	r.atMost("uncontended acquire p99", ms(stats.Percentile(seq, 99)), ms(targetUncontendedP99), "ms")
	r.info("burst acquire p50", "%.4g ms", ms(stats.Percentile(burst, 50)))
	r.info("burst acquire p99", "%.4g ms", ms(stats.Percentile(burst, 99)))
	r.info("burst create → Queued p50/p99", "%.4g / %.4g ms", ms(stats.Percentile(toQueued, 50)), ms(stats.Percentile(toQueued, 99)))
	r.info("burst Queued → bound p50/p99", "%.4g / %.4g ms", ms(stats.Percentile(queuedToBound, 50)), ms(stats.Percentile(queuedToBound, 99)))
	r.atLeast("burst assignments/s", rate, targetBurstRate, "/s")
	r.info("manager CPU per burst bot", "%.3g ms", ms(cpu)/burstBots)
	r.info("raw updates/s (16 workers)", "%.4g /s", raw)
	r.info("raw updates/s (1 worker)", "%.4g /s", rawSeq)
	r.info("burst rate / raw rate", "%.3g", rate/raw)
	r.note("%d sequential bots, then %d bots created by %d concurrent requests in %v; last bound %v after the first create",
		sequentialBots, burstBots, createWorkers, lastSent.Sub(first).Round(time.Millisecond), window.Round(time.Millisecond))
	r.note("acquire = create request sent → slot.spec.botRef seen by the benchmark's watch; raw = merge patches of one BotPoolSlot's spec.botRef each (optimistic lock), before the manager runs")
	r.note("warm-up: %d slots Idle %v after the pool was created", sequentialBots+burstBots, warmup.Round(time.Second))
	r.print()
	r.metric(ms(stats.Percentile(seq, 50)), "seq-p50-ms")
	r.metric(ms(stats.Percentile(seq, 99)), "seq-p99-ms")
	r.metric(ms(stats.Percentile(burst, 50)), "burst-p50-ms")
	r.metric(ms(stats.Percentile(burst, 99)), "burst-p99-ms")
	r.metric(rate, "assign/s")
	r.metric(raw, "raw-updates/s")
	r.metric(rate/raw, "ratio-vs-raw")
}

// waitBound waits for the watch to see bot bound, polling every millisecond so the next
// sequential bot is not held back by the poll.
func waitBound(sc *scenario, bot string, timeout time.Duration) time.Time {
	sc.b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if t, ok := sc.watch.bound([]string{bot})[bot]; ok {
			return t
		}
		if time.Now().After(deadline) {
			sc.fatalf("bot %s not bound within %v (slots %v, bots %v)", bot, timeout, sc.watch.slotPhases(), sc.watch.botPhases())
		}
		time.Sleep(time.Millisecond)
	}
}

func timeRange(ts map[string]time.Time) (first, last time.Time) {
	for _, t := range ts {
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	return first, last
}

// measureRawUpdates measures the API server's rate of single-object updates from one client:
// n BotPoolSlots in a scratch namespace, each bound and released with a merge patch of
// spec.botRef under its resourceVersion — the dispatcher's own write — from workers
// goroutines. The objects are deleted afterwards (no manager runs yet, so no finalizer holds
// them). It returns updates per second.
func measureRawUpdates(sc *scenario, n, workers int) float64 {
	sc.b.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "raw-"}}
	if err := sc.c.Create(ctx, ns); err != nil {
		sc.b.Fatal(err)
	}
	slots := make([]*v1.BotPoolSlot, n)
	for i := range slots {
		slots[i] = &v1.BotPoolSlot{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: fmt.Sprintf("raw-%04d", i)},
			Spec: v1.BotPoolSlotSpec{Pool: "raw"}}
	}
	parallel(sc, slots, createWorkers, func(s *v1.BotPoolSlot) error { return sc.c.Create(ctx, s) })

	start := time.Now()
	for _, bind := range []bool{true, false} {
		parallel(sc, slots, workers, func(s *v1.BotPoolSlot) error {
			patch := client.MergeFromWithOptions(s.DeepCopy(), client.MergeFromWithOptimisticLock{})
			s.Spec.BotRef = nil
			if bind {
				s.Spec.BotRef = &v1.BotReference{Name: "bot-" + s.Name, UID: types.UID("uid-" + s.Name)}
			}
			return sc.c.Patch(ctx, s, patch)
		})
	}
	rate := float64(2*n) / time.Since(start).Seconds()
	if err := sc.c.DeleteAllOf(ctx, &v1.BotPoolSlot{}, client.InNamespace(ns.Name)); err != nil {
		sc.b.Fatal(err)
	}
	return rate
}

// parallel runs do on every object from workers goroutines and fails the benchmark on the
// first error.
func parallel[T any](sc *scenario, objs []T, workers int, do func(T) error) {
	sc.b.Helper()
	work := make(chan T)
	var once sync.Once
	var firstErr error
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for o := range work {
				if err := do(o); err != nil {
					once.Do(func() { firstErr = err })
				}
			}
		})
	}
	for _, o := range objs {
		work <- o
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		sc.b.Fatal(firstErr)
	}
}
