package bench

import (
	"fmt"
	"testing"
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// Sizes and targets of the API-server writes benchmark (issue 8, item 5).
const (
	lifecycleBots = 50
	// quietPeriod is how long nothing changes while the manager's writes are counted.
	quietPeriod = time.Minute

	targetWritesPerLifecycle = 8.0
	targetQuietWrites        = 0.0
)

// BenchmarkAPIWrites counts the API server writes (POST, PUT, PATCH, DELETE) the manager
// sends for warm bot lifecycles — bound to an Idle slot, running, Done through the bot API,
// slot released and Idle again; no ttlAfterFinished deletion — and then during a minute in
// which nothing changes. The manager's own client metrics give the totals; the API server's
// metrics say which resources they went to.
func BenchmarkAPIWrites(b *testing.B) {
	for range b.N {
		apiWrites(b)
	}
}

func apiWrites(b *testing.B) {
	fl := newFleet(200*time.Millisecond, false)
	sc := newScenario(b, fl)
	defer sc.close()
	sc.startManager()
	sc.pool("life", lifecycleBots, lifecycleBots, func(p *v1.BotPool) {
		p.Spec.MaxConcurrentDeployments = lifecycleBots
		p.Spec.Timing.DeploymentPollInterval = "100ms"
	})
	sc.waitFor("50 Idle slots", 5*time.Minute, func() error {
		if n := sc.watch.freeIdle(); n < lifecycleBots {
			return fmt.Errorf("%d free Idle slots", n)
		}
		return nil
	})
	before := sc.waitQuiet(3*time.Second, 2*time.Minute)
	serverBefore := sc.serverWrites()

	bots := make([]*v1.Bot, lifecycleBots)
	for i := range bots {
		bots[i] = sc.newBot(fmt.Sprintf("life-%03d", i), "life")
	}
	sc.createBots(bots, createWorkers)
	sc.waitFor("every bot Done and every slot free", 5*time.Minute, func() error {
		done, free := sc.watch.botPhases()[v1.BotDone], sc.watch.freeIdle()
		if done < lifecycleBots || free < lifecycleBots {
			return fmt.Errorf("%d bots Done, %d slots free", done, free)
		}
		return nil
	})
	after := sc.waitQuiet(3*time.Second, 2*time.Minute)
	serverAfter := sc.serverWrites()
	lifecycle := diff(after, before)
	server := diff(serverAfter, serverBefore)
	// The benchmark's own creates are the user's, not the manager's.
	server["POST bots"] -= lifecycleBots
	if server["POST bots"] == 0 {
		delete(server, "POST bots")
	}
	perBot := total(lifecycle) / lifecycleBots

	// A quiet minute: nothing changes, so nothing should be written.
	quietStart := sc.managerWrites()
	serverQuietStart := sc.serverWrites()
	time.Sleep(quietPeriod)
	quiet := diff(sc.managerWrites(), quietStart)
	serverQuiet := diff(sc.serverWrites(), serverQuietStart)

	r := newReport(b, "API server writes (issue 8, item 5)")
	r.atMost("writes per warm bot lifecycle", perBot, targetWritesPerLifecycle, "")
	r.info("  by method", "%s", formatCounts(lifecycle, lifecycleBots))
	r.info("  by resource (API server)", "%s", formatCounts(server, lifecycleBots))
	r.atMost("writes in a quiet minute", total(quiet), targetQuietWrites, "")
	if len(serverQuiet) > 0 {
		r.info("  by resource (API server)", "%s", formatCounts(serverQuiet, 1))
	}
	r.note("%d bots at once on %d Idle slots; each bot reports JoiningCall, InCall, one heartbeat, CallEnded and Done through the bot API (those status writes are the manager's too)",
		lifecycleBots, lifecycleBots)
	r.note("by method: METHOD status-code (a refused write, 409, still costs the API server a request); counts are per lifecycle; 'quiet' is %v with every bot Done and every slot Idle", quietPeriod)
	r.print()
	r.metric(perBot, "writes/lifecycle")
	r.metric(total(quiet), "writes/quiet-min")
}
