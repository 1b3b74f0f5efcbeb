package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"
)

// Groups of bot phases the live view counts.
const (
	gWaiting = "waiting" // pending, or scheduled for later
	gQueued  = "queued"
	gBound   = "bound" // has a slot, its container is being deployed
	gBusy    = "busy"  // its container runs: joining, in the call, leaving
	gDone    = "done"
	gFailed  = "failed"
)

var groupOrder = []string{gWaiting, gQueued, gBound, gBusy, gDone, gFailed}

func group(p v1.BotPhase) string {
	switch p {
	case v1.BotQueued:
		return gQueued
	case v1.BotDeploying:
		return gBound
	case v1.BotJoiningCall, v1.BotInWaitingRoom, v1.BotInCall, v1.BotLeaving, v1.BotCallEnded:
		return gBusy
	case v1.BotDone:
		return gDone
	case v1.BotFatal:
		return gFailed
	}
	return gWaiting
}

// slotBoundIdle counts Idle slots already bound to a bot whose deployment has not started: it
// waits at the deploy gate (a cold image's first pull runs alone, at most
// maxConcurrentDeployments at once) or for the slot controller's next pass.
const slotBoundIdle v1.SlotPhase = "Bound-idle"

var slotOrder = []v1.SlotPhase{v1.SlotCreating, v1.SlotIdle, slotBoundIdle, v1.SlotDeploying, v1.SlotBusy, v1.SlotReleasing, v1.SlotError}

// maxRows is how many bots the terminal view lists; beyond it only unfinished ones show.
const maxRows = 24

// view draws the live progress: a table redrawn in place on a terminal, else one line when
// something changed (and every ten seconds), so a CI log stays readable.
type view struct {
	out      io.Writer
	tty      bool
	start    time.Time
	maxSlots int
	standby  bool // the pool keeps standby containers: show how many are Ready
	servers  bool // the pool spreads over several servers: show its slots on each

	drawn    int // lines of the last terminal frame, to redraw over
	lastLine string
	lastAt   time.Time
}

// frame is what one tick shows.
type frame struct {
	bots  []botRecord
	slots []slotRecord
	// pool is what the demo saw of the pool: its status.servers (slots on each server and the
	// server's health) and the health changes so far.
	pool   poolRecord
	note   string // what the demo is doing now
	status string // Coolify traffic and faults
}

func (v *view) draw(f frame) {
	if !v.tty {
		v.line(f)
		return
	}
	var b strings.Builder
	v.table(printer{&b}, f)
	if v.drawn > 0 {
		printer{v.out}.f("\033[%dA\033[J", v.drawn) // up to the frame's first line, clear below
	}
	printer{v.out}.f("%s", b.String())
	v.drawn = strings.Count(b.String(), "\n")
}

// forget keeps the last frame on screen: what follows is printed below it.
func (v *view) forget() { v.drawn = 0 }

func counts(f frame) (map[string]int, map[v1.SlotPhase]int, int) {
	bots := map[string]int{}
	for _, b := range f.bots {
		bots[group(b.phase)]++
	}
	slots, total := map[v1.SlotPhase]int{}, 0
	for _, s := range f.slots {
		if s.deleted {
			continue
		}
		total++
		if s.phase == v1.SlotIdle && s.bound {
			slots[slotBoundIdle]++
		} else {
			slots[s.phase]++
		}
	}
	return bots, slots, total
}

// readyStandby counts free slots whose standby container is Ready: what a bot starts on at once.
func readyStandby(f frame) int {
	n := 0
	for _, s := range f.slots {
		if !s.deleted && !s.bound && s.phase == v1.SlotIdle && s.standby == v1.StandbyReady {
			n++
		}
	}
	return n
}

func (v *view) line(f frame) {
	bots, slots, total := counts(f)
	var b strings.Builder
	fmt.Fprintf(&b, "bots %d:", len(f.bots))
	for _, g := range groupOrder {
		fmt.Fprintf(&b, " %s %d", g, bots[g])
	}
	fmt.Fprintf(&b, " | slots %d/%d:", total, v.maxSlots)
	for _, p := range slotOrder {
		fmt.Fprintf(&b, " %s %d", strings.ToLower(string(p)), slots[p])
	}
	if v.standby {
		fmt.Fprintf(&b, " standby-ready %d", readyStandby(f))
	}
	if v.servers && len(f.pool.servers) > 0 {
		fmt.Fprintf(&b, " | servers %s", serversLine(f.pool.servers))
	}
	if f.note != "" {
		fmt.Fprintf(&b, " | %s", f.note)
	}
	s := b.String()
	if s == v.lastLine && time.Since(v.lastAt) < 10*time.Second {
		return
	}
	v.lastLine, v.lastAt = s, time.Now()
	printer{v.out}.f("[%s] %s\n", clock(time.Since(v.start)), s)
}

func (v *view) table(w printer, f frame) {
	bots, slots, total := counts(f)
	w.f("── %s ── elapsed %s ──\n", f.note, clock(time.Since(v.start)))
	w.f("bots  %3d  ", len(f.bots))
	for _, g := range groupOrder {
		w.f(" %s %-3d", g, bots[g])
	}
	w.f("\nslots %d/%d", total, v.maxSlots)
	for _, p := range slotOrder {
		w.f("  %s %d", strings.ToLower(string(p)), slots[p])
	}
	if v.standby {
		w.f("  standby-ready %d", readyStandby(f))
	}
	w.f("\n")
	if v.servers {
		for _, st := range f.pool.servers {
			w.f("%s\n", serverRow(st))
		}
	}
	w.f("%s\n\n", f.status)
	if len(f.bots) == 0 {
		return
	}
	w.f("%-22s %5s  %-24s %-22s %8s %8s\n", "BOT", "PRIO", "PHASE", "SLOT", "WAITED", "RUNNING")
	rows, hidden := f.bots, 0
	if len(rows) > maxRows {
		rows = nil
		for _, b := range f.bots {
			if !b.terminal() && len(rows) < maxRows {
				rows = append(rows, b)
			} else {
				hidden++
			}
		}
	}
	now := time.Now()
	for _, b := range rows {
		phase := string(b.phase)
		if phase == "" {
			phase = "-"
		}
		if b.phase == v1.BotFatal {
			phase += "/" + string(b.reason)
		}
		w.f("%-22s %5d  %-24s %-22s %8s %8s\n", b.name, b.priority, phase, orDash(b.slot),
			seconds(waited(b, now)), seconds(ran(b, now)))
	}
	if hidden > 0 {
		w.f("(%d finished bots not shown)\n", hidden)
	}
}

// serversLine is the pool's slots per server for the one-line view: "srv-1 3 slots 1 free 2
// busy, srv-2 …", with the health of a server that is not Healthy.
func serversLine(servers []v1.ServerStatus) string {
	parts := make([]string, 0, len(servers))
	for _, st := range servers {
		p := fmt.Sprintf("%s %d slots %d free %d busy", st.UUID, st.Slots, st.Free, st.Busy)
		if st.Health != v1.ServerHealthy && st.Health != "" {
			p += " " + string(st.Health)
		}
		if st.State != v1.ServerActive {
			p += " " + string(st.State)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}

// serverRow is one server of the pool's status.servers for the terminal view.
func serverRow(st v1.ServerStatus) string {
	health := string(st.Health)
	if health == "" {
		health = string(v1.ServerHealthUnknown)
	}
	row := fmt.Sprintf("server %-6s %-12s slots %-3d free %-3d busy %-3d", st.UUID, health, st.Slots, st.Free, st.Busy)
	switch {
	case st.State != v1.ServerActive:
		row += "  " + string(st.State)
	case st.Health.Out():
		row += "  out: its free slots are not offered, new slots go elsewhere"
	}
	return row
}

// waited is how long the bot waited for a slot: so far, or until it was bound.
func waited(b botRecord, now time.Time) time.Duration {
	switch {
	case b.asked.IsZero():
		return -1
	case !b.bound.IsZero():
		return b.bound.Sub(b.asked)
	case b.terminal():
		return b.finished.Sub(b.asked)
	}
	return now.Sub(b.asked)
}

// ran is how long the bot's container has run: so far, or until it finished.
func ran(b botRecord, now time.Time) time.Duration {
	switch {
	case b.running.IsZero():
		return -1
	case b.terminal():
		return b.finished.Sub(b.running)
	}
	return now.Sub(b.running)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// seconds formats a duration for the tables: "-" for none, one decimal below a minute.
func seconds(d time.Duration) string {
	switch {
	case d < 0:
		return "-"
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return d.Round(time.Second).String()
}

func clock(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}
