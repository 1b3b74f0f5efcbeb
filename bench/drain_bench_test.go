package bench

import (
	"fmt"
	"testing"
	"time"

	"botpool.dev/botpool/internal/stats"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// Sizes and targets of the queue drain benchmark (issue 8, item 3).
const (
	drainSlots  = 100
	drainQueued = 1000
	// drainMeeting is how long each bot stays in its meeting once meetings may end: long
	// enough for its slot to be Busy first (the normal path of a release), short enough that
	// the ten generations of the queue pass in seconds.
	drainMeeting = 500 * time.Millisecond

	targetReleaseToBound = 50 * time.Millisecond // p50 and p99
)

// drainPool is a pool whose deployments are never the bottleneck: every slot may deploy at
// once and polls its deployment every 100ms (the simulator finishes deployments at once).
func drainPool(p *v1.BotPool) {
	p.Spec.MaxConcurrentDeployments = drainSlots
	p.Spec.Timing.DeploymentPollInterval = "100ms"
	p.Spec.Queue = v1.QueuePolicy{DefaultTimeout: "10m", MaxTimeout: "10m"}
}

// BenchmarkQueueDrain: a pool of 100 slots, all Busy, and 1000 bots queued behind them. When
// bots finish (they report Done through the bot API, which releases their slot), each slot
// goes to the head of the queue: the time from a slot's release (its spec.botRef cleared) to
// the next bot bound to it, and the time to serve all 1000.
func BenchmarkQueueDrain(b *testing.B) {
	for range b.N {
		queueDrain(b)
	}
}

func queueDrain(b *testing.B) {
	fl := newFleet(drainMeeting, true)
	sc := newScenario(b, fl)
	defer sc.close()
	sc.startManager()
	sc.pool("drain", drainSlots, drainSlots, drainPool)
	sc.waitFor("100 Idle slots", 5*time.Minute, func() error {
		if n := sc.watch.freeIdle(); n < drainSlots {
			return fmt.Errorf("%d free Idle slots", n)
		}
		return nil
	})

	first := make([]*v1.Bot, drainSlots)
	for i := range first {
		first[i] = sc.newBot(fmt.Sprintf("busy-%03d", i), "drain")
	}
	sc.createBots(first, createWorkers)
	sc.waitFor("100 Busy slots whose bots are in their call", 5*time.Minute, func() error {
		slots, bots := sc.watch.slotPhases(), sc.watch.botPhases()
		if slots[string(v1.SlotBusy)] < drainSlots || bots[v1.BotInCall] < drainSlots {
			return fmt.Errorf("slots %v, bots %v", slots, bots)
		}
		return nil
	})

	queued := make([]*v1.Bot, drainQueued)
	names := make([]string, drainQueued)
	for i := range queued {
		queued[i] = sc.newBot(fmt.Sprintf("queued-%04d", i), "drain")
		names[i] = queued[i].Name
	}
	sc.createBots(queued, createWorkers)
	sc.waitFor("1000 Queued bots", 5*time.Minute, func() error {
		if n := sc.watch.botPhases()[v1.BotQueued]; n < drainQueued {
			return fmt.Errorf("%d Queued", n)
		}
		return nil
	})

	cpu0 := sc.cpuTime()
	start := time.Now()
	profiled := sc.profile("drain", 15*time.Second)
	fl.release()
	var bound map[string]time.Time
	sc.waitFor("every queued bot bound", 10*time.Minute, func() error {
		bound = sc.watch.bound(names)
		if len(bound) < drainQueued {
			return fmt.Errorf("%d of %d bound", len(bound), drainQueued)
		}
		return nil
	})
	_, lastBound := timeRange(bound)
	served := lastBound.Sub(start)
	sc.waitFor("every bot Done", 10*time.Minute, func() error {
		if n := sc.watch.botPhases()[v1.BotDone]; n < drainSlots+drainQueued {
			return fmt.Errorf("%d of %d Done (%v)", n, drainSlots+drainQueued, sc.watch.botPhases())
		}
		return nil
	})
	cpu := sc.cpuTime() - cpu0
	profiled()

	release, fromDone, fromIdle := turnarounds(sc.watch.histories(), fl)
	if len(release) < drainQueued {
		sc.fatalf("%d releases were followed by a binding, want %d", len(release), drainQueued)
	}
	r := newReport(b, "Queue drain (issue 8, item 3)")
	r.atMost("release → next bound p50", ms(stats.Percentile(release, 50)), ms(targetReleaseToBound), "ms")
	r.atMost("release → next bound p99", ms(stats.Percentile(release, 99)), ms(targetReleaseToBound), "ms")
	r.info("Done reported → next bound p50/p99", "%.4g / %.4g ms", ms(stats.Percentile(fromDone, 50)), ms(stats.Percentile(fromDone, 99)))
	r.info("slot Idle → next bound p50/p99", "%.4g / %.4g ms", ms(stats.Percentile(fromIdle, 50)), ms(stats.Percentile(fromIdle, 99)))
	r.info("time to serve all 1000", "%.3g s", served.Seconds())
	r.info("manager CPU per served bot", "%.3g ms", ms(cpu)/float64(drainQueued+drainSlots))
	r.note("%d slots Busy, %d bots queued; each bot stays %v in its meeting (±50%%) once the first ones may end; served = release of the first bots → last queued bot bound",
		drainSlots, drainQueued, drainMeeting)
	r.note("release = the slot's spec.botRef cleared (the slot controller's answer to Done), seen by the benchmark's watch, like every binding")
	r.print()
	r.metric(ms(stats.Percentile(release, 50)), "release-p50-ms")
	r.metric(ms(stats.Percentile(release, 99)), "release-p99-ms")
	r.metric(ms(stats.Percentile(fromDone, 50)), "done-p50-ms")
	r.metric(served.Seconds(), "serve-1000-s")
}

// turnarounds pairs, on every slot, each release with the next binding: the time from the
// release (spec.botRef cleared), from the released bot's Done report, and from the slot's
// turning Idle, to the next bot bound. A release no bot followed (the last ones) counts not.
func turnarounds(histories map[string][]slotEvent, fl *fleet) (release, fromDone, fromIdle []time.Duration) {
	for _, events := range histories {
		for i, e := range events {
			if e.kind != evReleased {
				continue
			}
			var idle time.Time
			for _, next := range events[i+1:] {
				if next.kind == evIdle && idle.IsZero() {
					idle = next.at
				}
				if next.kind != evBound {
					continue
				}
				release = append(release, next.at.Sub(e.at))
				if done, ok := fl.doneAt(e.bot); ok {
					fromDone = append(fromDone, next.at.Sub(done))
				}
				if !idle.IsZero() {
					fromIdle = append(fromIdle, next.at.Sub(idle))
				}
				break
			}
		}
	}
	return release, fromDone, fromIdle
}
