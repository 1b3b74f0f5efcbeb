package bench

import (
	"fmt"
	"testing"
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// Sizes and target of the memory benchmark (issue 8, item 7).
const (
	memorySlots = 1000
	memoryBots  = 10_000

	targetRSS = 150 << 20 // bytes
)

// BenchmarkOperatorMemory: the manager's resident memory with 10,000 Bots (1,000 bound, the
// rest queued) and 1,000 slots in its caches, read from /proc once it has stopped writing.
func BenchmarkOperatorMemory(b *testing.B) {
	for range b.N {
		operatorMemory(b)
	}
}

func operatorMemory(b *testing.B) {
	sc := newScenario(b, nil)
	defer sc.close()
	sc.startManager()
	idleRSS, _, err := sc.mgr.memory()
	if err != nil {
		sc.fatalf("reading the manager's memory: %v", err)
	}

	start := time.Now()
	sc.pool("mem", memorySlots, memorySlots, func(p *v1.BotPool) {
		// Deploys of the bound bots finish quickly, so the manager comes to rest; their
		// containers never beat, so the heartbeat timeout is long enough not to fail them
		// (and churn the queue) while memory is measured.
		p.Spec.MaxConcurrentDeployments = 100
		p.Spec.Timing.DeploymentPollInterval = "500ms"
		p.Spec.Timing.HeartbeatTimeout = "2h"
		p.Spec.Queue = v1.QueuePolicy{DefaultTimeout: "10m", MaxTimeout: "10m"}
	})
	sc.waitFor("1000 Idle slots", 15*time.Minute, func() error {
		if n := sc.watch.freeIdle(); n < memorySlots {
			return fmt.Errorf("%d free Idle slots (%v)", n, sc.watch.slotPhases())
		}
		return nil
	})
	warm := time.Since(start)

	bots := make([]*v1.Bot, memoryBots)
	for i := range bots {
		bots[i] = sc.newBot(fmt.Sprintf("mem-%05d", i), "mem")
	}
	start = time.Now()
	sc.createBots(bots, createWorkers)
	created := time.Since(start)
	sc.waitFor("1000 bound bots, 9000 queued", 10*time.Minute, func() error {
		slots, bots := sc.watch.slotPhases(), sc.watch.botPhases()
		if slots["bound"] < memorySlots || bots[v1.BotQueued] < memoryBots-memorySlots {
			return fmt.Errorf("slots %v, bots %v", slots, bots)
		}
		return nil
	})
	sc.waitQuiet(5*time.Second, 5*time.Minute)
	settled := time.Since(start)
	rss, peak, err := sc.mgr.memory()
	if err != nil {
		sc.fatalf("reading the manager's memory: %v", err)
	}
	sc.heapProfile("settled")
	m, err := sc.mgr.scrape()
	if err != nil {
		sc.fatalf("scraping the manager's metrics: %v", err)
	}

	r := newReport(b, "Operator memory (issue 8, item 7)")
	r.atMost("RSS with 10,000 Bots, 1,000 slots", mib(rss), mib(targetRSS), "MiB")
	r.info("peak RSS (VmHWM)", "%.4g MiB", mib(peak))
	r.info("Go heap in use", "%.4g MiB", mib(int64(m.sum("go_memstats_heap_inuse_bytes", nil))))
	r.info("RSS of the idle manager at start", "%.4g MiB", mib(idleRSS))
	r.note("slots Idle %v after the pool was created; 10,000 Bots created in %v, quiet (no write for 5s) %v after the first create",
		warm.Round(time.Second), created.Round(time.Second), settled.Round(time.Second))
	r.print()
	r.metric(mib(rss), "rss-MiB")
	r.metric(mib(peak), "peak-MiB")
}

func mib(bytes int64) float64 { return float64(bytes) / (1 << 20) }
