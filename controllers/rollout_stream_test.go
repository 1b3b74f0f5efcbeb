package controllers

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/controllers/internal/policy"
	slotctrl "botpool.dev/botpool/controllers/slot"
	"botpool.dev/botpool/coolify/sim"
	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/internal/simbot"
)

// TestRolloutUnderAStreamOfBots is BenchmarkRollout's promise at the size of a test (issue 17):
// a pool of two warm slots on one server (at most five) serves a steady stream of bots — each
// created as the one before it finished, each meeting 20 s of the fake clock — before, during
// and after a change of imageTag to a tag just pushed, cold on the server, whose pull takes
// 30 s. Then:
//
//   - the rollout ends with every slot on the new tag, and the pool says so;
//   - every bot of the stream ends Done, started once (no failed start recorded), and those
//     created while the image was pulled started on the old image: nobody waits for the pull;
//   - no slot's deployment pulled cold (only the pool's puller may);
//   - the ready free slots (free and Idle; in a Running pool with a Ready standby container)
//     seen during the rollout never fall below the fewer of the fewest seen in the window
//     before it and the update strategy's floor (minIdle - maxUnavailable, 2 - 0 here).
//
// The last is the benchmark's criterion, and not simply "never below the floor", because the
// stream itself takes ready slots: a bot arriving while the slot of the bot before it is
// still being recycled (Running: a fresh standby container deploys) binds one of minIdle
// ready slots and leaves fewer, rollout or not. The pool admits a slot for its update only
// while minIdle others stay ready, but cannot foresee the next bot, so that dip is the
// stream's, and the window before the rollout measures it under the same stream. A rollout
// that takes a ready slot away below the floor (or a Stopped pool's free slot at all) shows
// as fewer than both.
//
// The stream is paced by the fake clock, which moves a second at a time and stands while a
// step of the stream happens in real time: a free slot's binding, a container taking its bot,
// a bound Stopped slot's deploy request, a released slot coming back. Each bot then meets the
// pool in the same state in both windows whatever the machine's speed, and the containers
// never see their clock run out under them.
func TestRolloutUnderAStreamOfBots(t *testing.T) {
	for _, mode := range []v1.StandbyMode{v1.StandbyStopped, v1.StandbyRunning} {
		t.Run(string(mode), func(t *testing.T) { rolloutUnderStream(t, mode) })
	}
}

// The stream's shape: how many bots each window creates (0: as many as it lasts), and how
// long a meeting lasts on the fake clock — long enough for a recycled slot's fresh standby
// container (a warm deployment of 8 s) to be Ready again before the next bot but one.
const (
	streamMeeting   = 20 * time.Second
	streamRampBots  = 2 // the pool grows to minIdle free slots beside the busy one
	streamBefore    = 3
	streamAfterBots = 1
)

func rolloutUnderStream(t *testing.T, mode v1.StandbyMode) {
	const minIdle, maxSlots = 2, 5
	pulls := &pullLog{}
	fleet := newBenchFleet(simbot.Behaviour{
		// Meetings last until the stream ends them (endMeeting), by the fake clock.
		MeetingLength: 24 * time.Hour, HeartbeatEvery: 50 * time.Millisecond, PollEvery: 20 * time.Millisecond,
	})
	t.Cleanup(fleet.stopAll) // after the scenario's teardown
	hooks := fleet.hooks()
	hooks.OnPull = pulls.add
	sc := newScenario(t, "rollstream-"+strings.ToLower(string(mode)), sim.Config{ColdPull: 30 * time.Second, Hooks: hooks}, func(p *v1.BotPool) {
		p.Spec.Standby, p.Spec.MaxSlots, p.Spec.MinIdle, p.Spec.ImageTag = mode, maxSlots, minIdle, "1"
		// Beats run in real time: the test is not about a container the machine held up.
		p.Spec.Timing.HeartbeatTimeout = "1h"
	})
	image := sc.pool.Spec.Image
	oldRef, newRef := image+":1", image+":2"
	sc.sim.WarmImage(fixture.ServerUUID, image, "1")
	st := &meetingStream{t: t, sc: sc, fleet: fleet, mode: mode,
		quota: map[string]int{"ramp": streamRampBots, "before": streamBefore, "after": streamAfterBots}, fewest: map[string]int{}}

	st.run("warm on tag 1", 5*time.Minute, func(p *v1.BotPool, slots []v1.BotPoolSlot) bool {
		return upToDate(minIdle)(p) && readyFree(slots, p) == minIdle
	})
	st.window = "ramp"
	st.run("through the stream's ramp", 10*time.Minute, func(*v1.BotPool, []v1.BotPoolSlot) bool {
		return st.finished("ramp") == streamRampBots
	})
	st.window = "before"
	st.run("through the window before the rollout", 10*time.Minute, func(*v1.BotPool, []v1.BotPoolSlot) bool {
		return st.inMeeting("before") == streamBefore // its last bot's meeting just began
	})

	// The change, as a bot's meeting begins: the next bot comes about 20 s into the 30 s pull,
	// and its start (8 s, warm) ends before the pull does.
	old := sc.poolNow().Status.TemplateHash
	sc.sim.PushImage(image, "2")
	sc.updatePool(func(p *v1.BotPool) { p.Spec.ImageTag = "2" })
	st.newRef, st.window = newRef, "during"
	st.run("rolled out to tag 2", 15*time.Minute, func(p *v1.BotPool, _ []v1.BotPoolSlot) bool {
		return p.Status.TemplateImage == newRef && rolledOut(p, old) && p.Status.Rollout == nil
	})
	st.window = "after"
	st.run("through the bots after the rollout", 10*time.Minute, func(*v1.BotPool, []v1.BotPoolSlot) bool {
		return st.finished("after") == streamAfterBots
	})
	st.window = ""
	done := st.run("up to date with every slot free again", 5*time.Minute, func(p *v1.BotPool, slots []v1.BotPoolSlot) bool {
		return upToDate(minIdle+1)(p) && readyFree(slots, p) == minIdle+1 // the stream's busy slot came back
	})

	if done.Status.TemplateImage != newRef {
		t.Errorf("the pool names %s, want %s", done.Status.TemplateImage, newRef)
	}
	sc.slotsOnImage(newRef)
	if cold := pulls.coldStarts(); len(cold) > 0 {
		t.Errorf("slot deployments pulled cold: %v", cold)
	}
	if err := fleet.err(); err != nil {
		t.Error(err)
	}
	duringPull := 0
	for _, sb := range st.bots {
		b := sc.bot(sb.name)
		if b.Status.Phase != v1.BotDone || b.Status.Reason != "" || b.Status.StartedAt == nil || len(b.Status.StartAttempts) > 0 {
			t.Errorf("bot %s (%s): %s/%s %q, started %v, failed starts %+v; want Done, started once",
				sb.name, sb.window, b.Status.Phase, b.Status.Reason, b.Status.Message, b.Status.StartedAt, b.Status.StartAttempts)
		}
		c, _ := fleet.container(sb.name)
		switch {
		case sb.duringPull:
			duringPull++
			if c.c.Image != oldRef {
				t.Errorf("bot %s, created while %s was pulled, started on %q, want the old image %s", sb.name, newRef, c.c.Image, oldRef)
			}
		case sb.window == "after" && c.c.Image != newRef:
			t.Errorf("bot %s, created after the rollout, started on %q, want %s", sb.name, c.c.Image, newRef)
		}
	}
	if duringPull == 0 {
		t.Errorf("no bot of the stream was created while the image was pulled: the test missed its moment")
	}
	floor := minIdle - v1.DefaultMaxUnavailable
	before, okBefore := st.fewest["before"]
	during, okDuring := st.fewest["during"]
	t.Logf("%d bots (%d while the image was pulled); ready free slots: fewest before the rollout %d, during it %d; floor %d",
		len(st.bots), duringPull, before, during, floor)
	if !okBefore || !okDuring {
		t.Fatalf("ready free slots not sampled in both windows: %v", st.fewest)
	}
	if before == 0 {
		// The criterion would hold of anything: the stream outran the pool before the rollout.
		t.Errorf("no ready free slot at times before the rollout: the stream is denser than the pool keeps up with")
	}
	if during < min(before, floor) {
		t.Errorf("ready free slots fell to %d during the rollout, below both the fewest before it under the same stream (%d) and the update strategy's floor (minIdle %d - maxUnavailable %d)",
			during, before, minIdle, v1.DefaultMaxUnavailable)
	}
}

// meetingStream plays the stream of bots: one bot at a time, each created as the one before
// it finished (Done, and its slot let it go), each meeting streamMeeting of the fake clock.
type meetingStream struct {
	t     *testing.T
	sc    *scenario
	fleet *benchFleet
	mode  v1.StandbyMode
	// window labels the bots created and the ready free slots seen; "" creates no bot.
	window string
	// quota is how many bots a window creates at most (none: no limit).
	quota map[string]int
	// newRef, once set, is the image rolled out: a bot created before the pool lists it as
	// pulled on the server is counted as created during the pull.
	newRef string
	bots   []*streamBot
	// fewest is the fewest ready free slots (readyFree) seen in each window.
	fewest map[string]int
}

type streamBot struct {
	name, window string
	duringPull   bool
	finished     bool
}

// run drives the stream until cond holds of the pool and its slots, moving the fake clock a
// second at a time when the stream does not hold it, for at most limit of simulated time.
func (st *meetingStream) run(what string, limit time.Duration, cond func(*v1.BotPool, []v1.BotPoolSlot) bool) *v1.BotPool {
	st.t.Helper()
	began, wall := clk.Now(), time.Now()
	defer func() {
		st.t.Logf("%s: %s of the fake clock, %s real", what, clk.Since(began), time.Since(wall).Round(time.Millisecond))
	}()
	var p *v1.BotPool
	kubetest.Eventually(st.t, 3*time.Minute, func() error {
		if err := st.fleet.err(); err != nil {
			st.t.Fatalf("%s: %v", what, err)
		}
		hold, busy := st.drive()
		p = st.sc.poolNow()
		slots := listSlots(st.t, st.sc.ns)
		if cond(p, slots) {
			return nil
		}
		if clk.Since(began) > limit {
			st.t.Fatalf("%s: not within %s of the fake clock: %s", what, limit, st.progress(p, slots))
		}
		switch {
		case hold:
		case busy && st.mode.Running():
			step(time.Second) // paced: the standby containers ask again as their long-polls end
		case busy:
			clk.Step(time.Second)
		default:
			st.sc.advance() // only while a deployment or the pull takes Coolify's time
		}
		return fmt.Errorf("%s: %s", what, st.progress(p, slots))
	})
	return p
}

// drive moves the stream on at the clock's present time: it records the ready free slots,
// ends a meeting that lasted, and creates the next bot once the last one finished. hold says
// the stream waits for something that happens in real time and the clock must stand; busy that
// a bot of the stream needs the clock to move (its meeting, its deployment, a slot for it).
func (st *meetingStream) drive() (hold, busy bool) {
	st.t.Helper()
	slots := listSlots(st.t, st.sc.ns)
	if st.window != "" {
		n := readyFree(slots, st.sc.poolNow())
		if f, seen := st.fewest[st.window]; !seen || n < f {
			st.fewest[st.window] = n
		}
	}
	if n := len(st.bots); n > 0 && !st.bots[n-1].finished {
		cur := st.bots[n-1]
		if hold = st.follow(cur, slots); !cur.finished {
			return hold, true
		}
	}
	if st.window == "" || (st.quota[st.window] > 0 && st.count(st.window) >= st.quota[st.window]) {
		return false, false
	}
	sb := &streamBot{name: fmt.Sprintf("stream-%02d", len(st.bots)), window: st.window}
	if st.newRef != "" {
		sb.duringPull = !policy.CachedOn(st.sc.poolNow(), fixture.ServerUUID, st.newRef, "")
	}
	newBot(st.t, st.sc.ns, sb.name, st.sc.pool.Name)
	st.bots = append(st.bots, sb)
	return true, true // the next look finds it bound or waiting
}

// follow looks at the stream's current bot and reports whether the clock must stand for it;
// it ends the bot's meeting once it lasted streamMeeting, and marks the bot finished once it
// is Done and its slot let it go.
func (st *meetingStream) follow(cur *streamBot, slots []v1.BotPoolSlot) (hold bool) {
	st.t.Helper()
	b := st.sc.bot(cur.name)
	c, known := st.fleet.container(cur.name)
	switch {
	case b.Status.Phase == v1.BotFatal:
		st.t.Fatalf("bot %s failed: %s (%s); slots: %s", b.Name, b.Status.Reason, b.Status.Message, slotsLine(slots))
	case b.Status.Phase == v1.BotDone:
		for i := range slots {
			s := &slots[i]
			if s.Spec.BotRef != nil && s.Spec.BotRef.UID == b.UID ||
				s.Name == b.Status.SlotName && (s.Status.Phase == v1.SlotBusy || s.Status.Phase == v1.SlotReleasing) {
				// Its release runs in real time. A bot created before it ended would find one
				// free slot fewer than the pool keeps, which the pool makes up for with a slot
				// more: not the stream this test means.
				return true
			}
		}
		cur.finished = true
		return false
	case known && c.ended:
		return true // its Done is on its way
	case known && !c.reportedAt.IsZero():
		if clk.Since(c.reportedAt) >= streamMeeting {
			st.fleet.endMeetings(st.t, []string{cur.name})
			return true
		}
		return false // in its meeting
	}
	var bound *v1.BotPoolSlot
	free := false
	for i := range slots {
		s := &slots[i]
		if s.Spec.BotRef != nil && s.Spec.BotRef.UID == b.UID {
			bound = s
		}
		free = free || policy.IsFree(s)
	}
	switch {
	case bound == nil:
		return free // the dispatcher binds it to a free slot at once
	case st.fleet.busyLearning(bound.Status.ApplicationUUID) || bound.Status.Standby == v1.StandbyReady:
		return true // its container takes it
	}
	// Bound to a slot that deploys for it: the deploy request goes out at once, unless the
	// deploy gate (or a busy Coolify) holds it until a deployment ends.
	msg := bound.Status.Message
	return bound.Status.Phase == v1.SlotIdle && !strings.Contains(msg, slotctrl.GateWaitMessage) && !strings.HasPrefix(msg, "Coolify is busy")
}

// count is how many bots the window created; finished and inMeeting how many of them are
// finished, and are finished or in their meeting.
func (st *meetingStream) count(window string) int {
	n := 0
	for _, sb := range st.bots {
		if sb.window == window {
			n++
		}
	}
	return n
}

func (st *meetingStream) finished(window string) int {
	n := 0
	for _, sb := range st.bots {
		if sb.window == window && sb.finished {
			n++
		}
	}
	return n
}

func (st *meetingStream) inMeeting(window string) int {
	n := 0
	for _, sb := range st.bots {
		if c, ok := st.fleet.container(sb.name); sb.window == window && (sb.finished || ok && !c.reportedAt.IsZero()) {
			n++
		}
	}
	return n
}

// progress says where the stream and the pool are, for a wait's message.
func (st *meetingStream) progress(p *v1.BotPool, slots []v1.BotPoolSlot) string {
	cur := "none"
	if n := len(st.bots); n > 0 {
		sb := st.bots[n-1]
		b := st.sc.bot(sb.name)
		cur = fmt.Sprintf("%s (%s) %s on %s", sb.name, sb.window, b.Status.Phase, b.Status.SlotName)
	}
	su := "?"
	for _, c := range p.Status.Conditions {
		if c.Type == v1.ConditionSlotsUpdated {
			su = fmt.Sprintf("%s %s", c.Status, c.Reason)
		}
	}
	return fmt.Sprintf("at %s, %d bots, the last %s; pool on %s, SlotsUpdated %s, updated %d, rollout %v; slots: %s",
		clk.Now().Format("15:04:05"), len(st.bots), cur, p.Status.TemplateImage, su, p.Status.UpdatedSlots, p.Status.Rollout != nil, slotsLine(slots))
}

// slotsLine is the slots in one line: name, phase, standby state, bot, image.
func slotsLine(slots []v1.BotPoolSlot) string {
	parts := make([]string, 0, len(slots))
	for i := range slots {
		s := &slots[i]
		bot := ""
		if s.Spec.BotRef != nil {
			bot = "+" + s.Spec.BotRef.Name
		}
		gone := ""
		if !s.DeletionTimestamp.IsZero() {
			gone = " (deleted)"
		}
		parts = append(parts, fmt.Sprintf("%s %s/%s%s %s%s", s.Name, s.Status.Phase, s.Status.Standby, bot, s.Status.Image, gone))
	}
	return strings.Join(parts, ", ")
}
