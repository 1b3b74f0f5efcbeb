package main

import (
	"fmt"
	"strings"
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify/sim"
)

// downWindow is when the demo held a server down: from, and to (zero while it still was).
// The zero value covers nothing.
type downWindow struct {
	server   string
	from, to time.Time
}

// covers reports whether server was down at at.
func (w downWindow) covers(server string, at time.Time) bool {
	return w.server != "" && server == w.server && !w.from.IsZero() && !at.Before(w.from) && (w.to.IsZero() || at.Before(w.to))
}

// failedIn reports whether the deployment dep failed on the server while it was down.
func (w downWindow) failedIn(deps []sim.DeploymentInfo, dep string) bool {
	for _, d := range deps {
		if d.UUID == dep {
			return d.Status == "failed" && w.covers(d.ServerUUID, d.Finished)
		}
	}
	return false
}

// serverSummary is one server's share of the run.
type serverSummary struct {
	uuid  string
	slots int // slots the pool placed there over the run (a retired slot's replacement too)
	// starts counts the bots that ran there by start kind, toRunning their creation → running.
	starts    map[string]int
	toRunning []time.Duration
	// deployments and failed count Coolify's deployments there and those that failed.
	deployments, failed int
}

// serverReport gives each server the slots placed there, the bots that ran on them and its
// deployments. A bot's server is the one of the slot it ran on (the last one it had).
func serverReport(rows []row, placed []slotPlacement, deps []sim.DeploymentInfo, servers []string) []serverSummary {
	out := make([]serverSummary, len(servers))
	index := map[string]int{}
	for i, uuid := range servers {
		out[i] = serverSummary{uuid: uuid, starts: map[string]int{}}
		index[uuid] = i
	}
	for _, p := range placed {
		if i, ok := index[p.server]; ok {
			out[i].slots++
		}
	}
	for _, r := range rows {
		i, ok := index[r.server]
		if !ok || r.running.IsZero() || r.start == "" {
			continue
		}
		out[i].starts[r.start]++
		if !r.asked.IsZero() {
			out[i].toRunning = append(out[i].toRunning, r.running.Sub(r.asked))
		}
	}
	for _, d := range deps {
		if i, ok := index[d.ServerUUID]; ok {
			out[i].deployments++
			if d.Status == "failed" {
				out[i].failed++
			}
		}
	}
	return out
}

// line is the server's row of the summary.
func (s serverSummary) line() string {
	n, kinds := 0, []string{}
	for _, kind := range []string{startStandby, startWarm, startCold} {
		if k := s.starts[kind]; k > 0 {
			n += k
			kinds = append(kinds, fmt.Sprintf("%d %s", k, kind))
		}
	}
	line := fmt.Sprintf("%s: %d slots placed, %d starts", s.uuid, s.slots, n)
	if len(kinds) > 0 {
		line += " (" + strings.Join(kinds, ", ") + ")"
	}
	if len(s.toRunning) > 0 {
		line += fmt.Sprintf(", creation → running median %s, max %s", seconds(median(s.toRunning)), seconds(maxOf(s.toRunning)))
	}
	return line + fmt.Sprintf("; %d deployments, %d failed", s.deployments, s.failed)
}

// outageSummary is what the server the demo took down did to the run.
type outageSummary struct {
	server    string
	planned   time.Duration // after the burst; the bots may all have finished before
	burst     time.Time
	down, up  time.Time // when the demo took it down and brought it back (zero: not)
	poolOut   time.Time // the pool's status.servers first showed it out after down
	poolBack  time.Time // and healthy again after up
	failed    int       // deployments that failed there while it was down
	caught    []string  // Fatal bots the outage failed, with their reasons
	retried   []string  // bots whose start was retried (status.startAttempts), with their phase
	elsewhere int       // bots bound on the other servers while it was down
}

// outageReport finds what the outage did: when the pool saw it, which bots it failed (Fatal on
// a slot of that server, ending once it was down; a failed deployment only when it failed in
// the outage) and which bots had a start retried.
func outageReport(rows []row, deps []sim.DeploymentInfo, pool poolRecord, o *outage, burst time.Time) *outageSummary {
	if o == nil || o.at <= 0 {
		return nil
	}
	down, up := o.window()
	w := downWindow{server: o.server, from: down, to: up}
	s := &outageSummary{server: o.server, planned: o.at, burst: burst, down: down, up: up}
	s.poolOut, s.poolBack = pool.sawOutage(o.server, down, up)
	for _, d := range deps {
		if d.Status == "failed" && w.covers(d.ServerUUID, d.Finished) {
			s.failed++
		}
	}
	for _, r := range rows {
		if r.attempts > 0 {
			s.retried = append(s.retried, fmt.Sprintf("%s (%s)", r.name, r.phase))
		}
		if down.IsZero() {
			continue
		}
		if r.server != o.server && !r.bound.IsZero() && w.covers(o.server, r.bound) {
			s.elsewhere++
		}
		if r.phase != v1.BotFatal || r.server != o.server || r.finished.Before(down) {
			continue
		}
		if r.reason == v1.ReasonDeploymentFailed && r.depUUID != "" && !w.failedIn(deps, r.depUUID) {
			continue // its deployment failed before the outage: the injected pull failure
		}
		s.caught = append(s.caught, fmt.Sprintf("%s (%s)", r.name, r.reason))
	}
	return s
}

// lines are the outage's rows of the summary.
func (s *outageSummary) lines() []string {
	if s.down.IsZero() {
		return []string{fmt.Sprintf("%s was to go down %s after the burst; the bots had all finished before", s.server, s.planned)}
	}
	at := func(t time.Time) string { return seconds(t.Sub(s.burst)) }
	first := fmt.Sprintf("%s down %s after the burst (Coolify unreachable)", s.server, at(s.down))
	if s.up.IsZero() {
		first += ", still down at the end"
	} else {
		first += fmt.Sprintf(", back at %s", at(s.up))
	}
	switch {
	case s.poolOut.IsZero() && s.failed == 0:
		first += "; the pool never marked it out (nothing failed there, and its next read of the servers came after)"
	case s.poolOut.IsZero():
		first += fmt.Sprintf("; the pool never marked it out: %d deployments failed there, but its read of the servers came too late", s.failed)
	default:
		first += fmt.Sprintf("; %d deployments failed there, the pool marked it out %s after it went down (status.servers health, ServerOut)",
			s.failed, seconds(s.poolOut.Sub(s.down)))
	}
	switch {
	case s.up.IsZero() || s.poolOut.IsZero():
	case s.poolBack.IsZero():
		first += ", and had not seen it back by the end (it reads the servers once a minute)"
	default:
		first += fmt.Sprintf(", and healthy again %s after it was back", seconds(s.poolBack.Sub(s.up)))
	}
	second := fmt.Sprintf("%d bots failed by it", len(s.caught))
	if len(s.caught) > 0 {
		second += ": " + strings.Join(s.caught, ", ")
	}
	second += fmt.Sprintf("; %d retried a start (status.startAttempts)", len(s.retried))
	if len(s.retried) > 0 {
		second += ": " + strings.Join(s.retried, ", ")
	}
	second += fmt.Sprintf("; %d bots bound on the other servers while it was down", s.elsewhere)
	return []string{first, second}
}

// printServers writes the per-server rows and the outage's, for pools on several servers.
func (rp report) printServers(w printer) {
	for i, s := range rp.servers {
		label := ""
		if i == 0 {
			label = "servers"
		}
		w.f("  %-13s %s\n", label, s.line())
	}
	if rp.outage == nil {
		return
	}
	for i, l := range rp.outage.lines() {
		label := ""
		if i == 0 {
			label = "outage"
		}
		w.f("  %-13s %s\n", label, l)
	}
}

// sawOutage is when the pool's status.servers first showed server out after down, and healthy
// again after up (zero: not seen, or up is zero).
func (p poolRecord) sawOutage(server string, down, up time.Time) (out, back time.Time) {
	if down.IsZero() {
		return out, back
	}
	for _, h := range p.health {
		switch {
		case h.server != server || h.at.Before(down):
		case h.health.Out() && out.IsZero():
			out = h.at
		case !h.health.Out() && !out.IsZero() && !up.IsZero() && !h.at.Before(up) && back.IsZero():
			back = h.at
		}
	}
	return out, back
}

// outageStatus is the live view's word on the outage: when Coolify lost the server and when
// the pool noticed, relative to the demo's start.
func outageStatus(o *outage, pool poolRecord, start time.Time) string {
	down, up := o.window()
	if down.IsZero() {
		return fmt.Sprintf("%s goes down %s after the burst", o.server, o.at)
	}
	status := fmt.Sprintf("%s down at %s", o.server, clock(down.Sub(start)))
	out, back := pool.sawOutage(o.server, down, up)
	if !out.IsZero() {
		status += fmt.Sprintf(", pool saw it out at %s", clock(out.Sub(start)))
	}
	if !up.IsZero() {
		status += fmt.Sprintf(", back at %s", clock(up.Sub(start)))
	}
	if !back.IsZero() {
		status += fmt.Sprintf(", pool saw it back at %s", clock(back.Sub(start)))
	}
	if pool.serverOut != "" {
		status += " (ServerOut)"
	}
	return status
}

// warmServers are the servers seeded with the image.
func warmServers(servers []string, cold bool) map[string]bool {
	warm := map[string]bool{}
	if !cold {
		for _, s := range servers {
			warm[s] = true
		}
	}
	return warm
}
