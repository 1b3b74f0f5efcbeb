package main

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/simbot"
)

// Fault modes of --faults.
const (
	faultsAll       = "all"       // transient Coolify errors, one failed pull, one crash
	faultsTransient = "transient" // only errors the operator retries: no bot is harmed
	faultsNone      = "none"
)

// faults injects trouble into the simulated Coolify at moments that show something: transient
// errors all along, one image pull failing once the image is cached (a warm deployment that
// fails), and one container crashing in the middle of its meeting.
type faults struct {
	mode  string
	sim   *sim.Server
	image string // the pool's image reference, image:tag
	speed float64
	// meetMin is the shortest meeting: a crash must come before the meeting ends.
	meetMin time.Duration
	// down is the demo's server outage, whose failed deployments are not the pull failure.
	down *outage

	mu         sync.Mutex
	pullArmed  time.Time
	crashArmed time.Time
	crashTaken bool    // a container started with the crash armed: disarm
	crashed    []crash // containers that crashed
}

// crash is one crashed container: its application and when.
type crash struct {
	app string
	at  time.Time
}

// start turns on the errors that last the whole run: 5% of all requests answer 500, and the
// first two application lists answer 429. The operator retries both; no bot notices.
func (f *faults) start() {
	if f.mode == faultsNone {
		return
	}
	f.sim.SetFault("*", sim.Fault{ErrorRate: 0.05})
	f.sim.SetFault("list-applications", sim.Fault{Burst: 2, BurstCode: http.StatusTooManyRequests})
}

// tick arms the one-off faults when the run has reached the moment for them.
func (f *faults) tick(bots []botRecord) {
	if f.mode != faultsAll {
		return
	}
	running, done, scheduledWaiting := 0, 0, false
	for _, b := range bots {
		if !b.running.IsZero() {
			running++
		}
		if b.phase == v1.BotDone {
			done++
		}
		if b.scheduled && b.running.IsZero() && !b.terminal() {
			scheduledWaiting = true
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// After a couple of bots run, the image is cached: the next deployment to ask the registry
	// (sim.Config.PullFailAfter into its pull) fails there, as a registry hiccup would make it. Neither fault picks the scheduled bot,
	// whose story is being on time.
	if f.pullArmed.IsZero() && running >= 2 && !scheduledWaiting {
		f.sim.FailPulls(f.image, 1)
		f.pullArmed = time.Now()
	}
	// Once a bot is done, the next container to start crashes a few seconds into its meeting.
	if f.crashArmed.IsZero() && done >= 1 && !scheduledWaiting {
		after := min(4*time.Second, f.meetMin/2)
		f.sim.CrashContainers(f.image, sim.Crash{After: time.Duration(float64(after) * f.speed)})
		f.crashArmed = time.Now()
	}
}

// onStart disarms the crash once one container has started with it armed.
func (f *faults) onStart(c sim.Container) {
	if simbot.IsPrePull(c) {
		return // the crash is armed for a bot's container
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.crashArmed.IsZero() && !f.crashTaken {
		f.crashTaken = true
		f.sim.CrashContainers(f.image, sim.Crash{})
	}
}

func (f *faults) onStop(c sim.Container) {
	if c.Reason != "crashed" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.crashed = append(f.crashed, crash{app: c.AppUUID, at: time.Now()})
}

// coolifyErrors counts the injected and rate-limit answers the operator had to retry.
func (f *faults) coolifyErrors() (requests, server, tooMany int) {
	for _, codes := range f.sim.Counts() {
		for code, n := range codes {
			requests += n
			switch {
			case code >= 500:
				server += n
			case code == http.StatusTooManyRequests:
				tooMany += n
			}
		}
	}
	return requests, server, tooMany
}

// status is one line about the one-off faults for the live view.
func (f *faults) status() string {
	if f.mode != faultsAll {
		return "faults: " + f.mode
	}
	// Deployments runs the simulator's hooks, which take f.mu: ask before locking.
	pullFired := f.pullFailed()
	f.mu.Lock()
	defer f.mu.Unlock()
	state := func(armed time.Time, fired bool) string {
		switch {
		case fired:
			return "fired"
		case armed.IsZero():
			return "waiting"
		}
		return "armed"
	}
	return fmt.Sprintf("pull failure %s, crash %s", state(f.pullArmed, pullFired), state(f.crashArmed, len(f.crashed) > 0))
}

// pullFailed reports whether a deployment failed other than in the server outage (only the
// armed pull failure fails one). Callers must not hold f.mu.
func (f *faults) pullFailed() bool {
	down := f.down.downWindow()
	for _, d := range f.sim.Deployments() {
		if d.Status == "failed" && !down.covers(d.ServerUUID, d.Finished) {
			return true
		}
	}
	return false
}

func (f *faults) crashes() []crash {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]crash(nil), f.crashed...)
}
