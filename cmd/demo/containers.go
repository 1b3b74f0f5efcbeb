package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/simbot"
)

// containers runs a simulated bot in every container the simulator starts, and stops it when
// the simulator stops or crashes the container.
type containers struct {
	ctx                context.Context
	meetMin, meetRange time.Duration
	log                printer // one line per container, in the demo directory

	mu      sync.Mutex
	rng     *rand.Rand
	running map[string]runningBot // by application uuid
	// lastSeq is the Seq of each application's last start or stop seen.
	lastSeq map[string]uint64
	wg      sync.WaitGroup
	started int
	errs    []error
}

type runningBot struct {
	seq    uint64
	cancel context.CancelFunc
	// stop is the simulator's reason when it stopped the container (written under mu).
	stop *string
}

func newContainers(ctx context.Context, meetMin, meetMax time.Duration, seed uint64, log io.Writer) *containers {
	return &containers{ctx: ctx, meetMin: meetMin, meetRange: max(meetMax-meetMin, 0), log: printer{log},
		rng: rand.New(rand.NewPCG(seed, 0xb07)), running: map[string]runningBot{},
		lastSeq: map[string]uint64{}}
}

// behaviour draws one meeting: its length uniformly between the flags' bounds, beats every
// second (the pool's heartbeatGracePeriod is 5s), and a short join.
func (c *containers) behaviour() simbot.Behaviour {
	meeting := c.meetMin
	if c.meetRange > 0 {
		meeting += time.Duration(c.rng.Int64N(int64(c.meetRange)))
	}
	return simbot.Behaviour{MeetingLength: meeting, JoinDelay: 500 * time.Millisecond,
		HeartbeatEvery: time.Second, PollEvery: 250 * time.Millisecond}
}

// onStart is the simulator's OnStart hook: a container came up, its bot starts. In a pool with
// standby Stopped the container starts for a bound bot and finds it at its first ask; with
// standby Running it starts for a free slot and keeps asking until a bot is bound (simbot's
// config loop), as a standby bot image does.
func (c *containers) onStart(ctr sim.Container) {
	if simbot.IsPrePull(ctr) {
		return // a pool's image pre-pull: it exits at once, and the pool stops it
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx.Err() != nil {
		return
	}
	// Hooks of two goroutines may arrive out of order: a start older than what this
	// application already did (a later start, or its stop) is over already.
	if ctr.Seq < c.lastSeq[ctr.AppUUID] {
		return
	}
	c.lastSeq[ctr.AppUUID] = ctr.Seq
	if prev, ok := c.running[ctr.AppUUID]; ok {
		*prev.stop = "replaced"
		prev.cancel()
	}
	ctx, cancel := context.WithCancel(c.ctx)
	stop := new(string)
	c.running[ctr.AppUUID] = runningBot{seq: ctr.Seq, cancel: cancel, stop: stop}
	c.started++
	b := c.behaviour()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer cancel()
		res, err := simbot.Run(ctx, ctr, b)
		switch {
		case errors.Is(err, context.Canceled) && res.Bot == "":
			c.log.f("%s %s: container stopped (%s) before a bot was bound\n", stamp(), ctr.AppName, c.stopReason(stop))
		case errors.Is(err, context.Canceled):
			c.log.f("%s %s: container stopped (%s; bot %q, %d heartbeats)\n", stamp(), ctr.AppName, c.stopReason(stop), res.Bot, res.Heartbeats)
		case err != nil:
			c.log.f("%s %s: bot %q failed: %v\n", stamp(), ctr.AppName, res.Bot, err)
			c.mu.Lock()
			c.errs = append(c.errs, fmt.Errorf("%s (bot %s): %w", ctr.AppName, res.Bot, err))
			c.mu.Unlock()
		default:
			c.log.f("%s %s: bot %q %s after a %v meeting, %d heartbeats\n", stamp(), ctr.AppName, res.Bot, res.Outcome, b.MeetingLength.Round(time.Second), res.Heartbeats)
		}
	}()
}

// onStop is the simulator's OnStop hook: the bot of a stopped, crashed, replaced ("redeployed")
// or deleted container stops too, whether it still waited for its binding or was in its
// meeting, as a process does when its container goes.
func (c *containers) onStop(ctr sim.Container) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ctr.Seq < c.lastSeq[ctr.AppUUID] {
		return // a later start already replaced the container this stop was about
	}
	c.lastSeq[ctr.AppUUID] = ctr.Seq
	if r, ok := c.running[ctr.AppUUID]; ok && r.seq < ctr.Seq {
		*r.stop = ctr.Reason
		r.cancel()
		delete(c.running, ctr.AppUUID)
	}
}

// stopReason says why a run's context ended: the simulator's reason, or the demo's end.
func (c *containers) stopReason(stop *string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if *stop != "" {
		return *stop
	}
	return "the demo ended"
}

// wait stops every bot (the demo's context ended) and waits for them.
func (c *containers) wait() {
	c.wg.Wait()
}

// failures are the bots that met an answer a bot image could not make sense of.
func (c *containers) failures() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.errs...)
}

func stamp() string { return time.Now().Format("15:04:05.000") }
