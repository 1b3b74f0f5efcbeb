package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify/sim"
)

func TestParseFlagsServers(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		maxSlots int
		cold     bool
	}{
		{args: nil, maxSlots: 5, cold: true}, // one server, as the demo always ran
		{args: []string{"--servers", "3"}, maxSlots: 15, cold: false},
		{args: []string{"--servers", "2", "--max-slots", "4", "--cold-image"}, maxSlots: 4, cold: true},
		{args: []string{"--cold-image=false"}, maxSlots: 5, cold: false},
		{args: []string{"--servers", "3", "--server-down-at", "20s", "--server-down-for", "40s"}, maxSlots: 15, cold: false},
	} {
		o, err := parseFlags(tc.args, io.Discard)
		if err != nil || o.maxSlots != tc.maxSlots || o.coldImage != tc.cold {
			t.Errorf("parseFlags(%v) = maxSlots %d, cold image %v (%v); want %d, %v", tc.args, o.maxSlots, o.coldImage, err, tc.maxSlots, tc.cold)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--servers", "0"}, "--servers must be 1 to 3, got 0"},
		{[]string{"--servers", "4"}, "--servers must be 1 to 3, got 4"},
		{[]string{"--server-down-at", "20s"}, "--server-down-at needs --servers 2 or 3"},
		{[]string{"--servers", "2", "--server-down-for", "20s"}, "--server-down-for needs --server-down-at"},
		{[]string{"--servers", "2", "--server-down-at", "-1s"}, "must not be negative"},
		{[]string{"--servers", "2", "--server-down-at", "5s", "--server-down-for", "-1s"}, "must not be negative"},
	} {
		if _, err := parseFlags(tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%v) = %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}

// TestClassifyPerServer: each server has its own image cache; a server seeded warm never pulls.
func TestClassifyPerServer(t *testing.T) {
	deps := []sim.DeploymentInfo{
		{UUID: "a1", AppUUID: "a", ServerUUID: "srv-1", Status: "finished", Created: at(1), Finished: at(15)}, // srv-1's pull
		{UUID: "b1", AppUUID: "b", ServerUUID: "srv-2", Status: "finished", Created: at(2), Finished: at(16)}, // srv-2's pull
		{UUID: "c1", AppUUID: "c", ServerUUID: "srv-1", Status: "finished", Created: at(17), Finished: at(19)},
		{UUID: "d1", AppUUID: "d", ServerUUID: "srv-3", Status: "finished", Created: at(3), Finished: at(5)}, // warm from the start
		{UUID: "e1", AppUUID: "e", ServerUUID: "srv-2", Status: "finished", Created: at(15.5), Finished: at(17)},
	}
	bots := []botRecord{
		{name: "a", app: "a", bound: at(1)}, {name: "b", app: "b", bound: at(2)},
		{name: "c", app: "c", bound: at(17)}, {name: "d", app: "d", bound: at(3)}, {name: "e", app: "e", bound: at(15.5)},
	}
	var got []string
	for _, r := range classify(bots, deps, map[string]bool{"srv-3": true}) {
		got = append(got, r.name+"="+r.start)
	}
	// e was requested after srv-1 had the image but before srv-2 had it: it waited for srv-2's
	// pull. d was requested before any pull finished, on a server seeded with the image.
	if want := []string{"a=cold", "b=cold", "c=warm", "d=warm", "e=cold"}; !slices.Equal(got, want) {
		t.Errorf("classify = %v, want %v", got, want)
	}
}

func TestServerReport(t *testing.T) {
	// s3 was retired on srv-2 and its replacement, under the same name, placed on srv-1.
	placed := []slotPlacement{{"s1", "srv-1"}, {"s2", "srv-1"}, {"s3", "srv-2"}, {"s3", "srv-1"}}
	rows := []row{
		{botRecord: botRecord{name: "a", slot: "s1", server: "srv-1", asked: at(0), running: at(3)}, start: startWarm},
		{botRecord: botRecord{name: "b", slot: "s2", server: "srv-1", asked: at(0), running: at(5)}, start: startCold},
		{botRecord: botRecord{name: "c", slot: "s3", server: "srv-2", asked: at(1), running: at(3)}, start: startWarm},
		{botRecord: botRecord{name: "d", slot: "s3", server: "srv-2", asked: at(1), finished: at(9), phase: v1.BotFatal}}, // never ran
	}
	deps := []sim.DeploymentInfo{
		{ServerUUID: "srv-1", Status: "finished"}, {ServerUUID: "srv-1", Status: "finished"},
		{ServerUUID: "srv-2", Status: "finished"}, {ServerUUID: "srv-2", Status: "failed"},
	}
	var got []string
	for _, s := range serverReport(rows, placed, deps, []string{"srv-1", "srv-2", "srv-3"}) {
		got = append(got, s.line())
	}
	want := []string{
		"srv-1: 3 slots placed, 2 starts (1 warm, 1 cold), creation → running median 5.0s, max 5.0s; 2 deployments, 0 failed",
		"srv-2: 1 slots placed, 1 starts (1 warm), creation → running median 2.0s, max 2.0s; 2 deployments, 1 failed",
		"srv-3: 0 slots placed, 0 starts; 0 deployments, 0 failed",
	}
	if !slices.Equal(got, want) {
		t.Errorf("server lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRecorderSlotReplaced: a slot re-created under the same name on another server counts as a
// second placement, and the bots keep the server of the slot they were bound to.
func TestRecorderSlotReplaced(t *testing.T) {
	r := newRecorder()
	clock := at(0)
	r.now = func() time.Time { return clock }
	slot := func(uid, server, bot string) *v1.BotPoolSlot {
		s := &v1.BotPoolSlot{}
		s.Name, s.UID, s.Spec.Server = "pool-zoom-003", types.UID(uid), server
		if bot != "" {
			s.Spec.BotRef = &v1.BotReference{Name: bot}
		}
		return s
	}
	bot := func(name, slot string) *v1.Bot {
		b := &v1.Bot{}
		b.Name, b.Status.Phase, b.Status.SlotName = name, v1.BotDeploying, slot
		return b
	}
	r.created("first", 0, false, clock)
	r.created("second", 0, false, clock)
	r.onSlot(slot("u1", "srv-3", ""), false)
	r.onSlot(slot("u1", "srv-3", "first"), false)
	r.onBot(bot("first", "pool-zoom-003"), 0)
	clock = at(30)
	r.onSlot(slot("u1", "srv-3", ""), true) // retired
	r.onSlot(slot("u2", "srv-1", ""), false)
	r.onBot(bot("second", "pool-zoom-003"), 0) // the bot's update before the slot's binding
	r.onSlot(slot("u2", "srv-1", "second"), false)
	bots, slots, _ := r.snapshot()
	if bots[0].server != "srv-3" || bots[1].server != "srv-1" {
		t.Errorf("bots' servers %q and %q, want srv-3 and srv-1", bots[0].server, bots[1].server)
	}
	if want := []slotPlacement{{"pool-zoom-003", "srv-3"}, {"pool-zoom-003", "srv-1"}}; !slices.Equal(r.placements(), want) {
		t.Errorf("placements %v, want %v", r.placements(), want)
	}
	if len(slots) != 1 || !slots[0].created.Equal(at(30)) || slots[0].deleted {
		t.Errorf("the re-created slot %+v: want it live, created at 30s", slots)
	}
}

// switches records the outage's calls in place of the simulator.
type switches []string

func (s *switches) SetServerReachable(server string, reachable bool) {
	*s = append(*s, server+map[bool]string{true: " up", false: " down"}[reachable])
}

func TestOutageTick(t *testing.T) {
	var sw switches
	o := &outage{sim: &sw, server: "srv-3", at: 20 * time.Second, lasts: 40 * time.Second}
	if o.tick(at(100)) != "" || len(sw) > 0 {
		t.Fatalf("before the burst the outage switched %v", sw)
	}
	o.armed(at(0))
	for _, s := range []float64{1, 19.9, 20, 21, 59.9, 60, 61, 200} {
		o.tick(at(s))
	}
	if want := []string{"srv-3 down", "srv-3 up"}; !slices.Equal(sw, want) {
		t.Errorf("switches %v, want %v", sw, want)
	}
	if down, up := o.window(); !down.Equal(at(20)) || !up.Equal(at(60)) {
		t.Errorf("window %v–%v, want 20s–60s", down.Sub(t0), up.Sub(t0))
	}
	// No --server-down-for: down for good.
	sw = nil
	o = &outage{sim: &sw, server: "srv-2", at: time.Second}
	o.armed(at(0))
	for _, s := range []float64{1, 100, 1000} {
		o.tick(at(s))
	}
	if !slices.Equal(sw, []string{"srv-2 down"}) {
		t.Errorf("switches %v, want srv-2 down only", sw)
	}
}

func TestPoolRecordObserve(t *testing.T) {
	var p poolRecord
	status := func(h v1.ServerHealth, out bool) v1.BotPoolStatus {
		st := v1.BotPoolStatus{Servers: []v1.ServerStatus{{UUID: "srv-1", Health: v1.ServerHealthy}, {UUID: "srv-2", Health: h}}}
		if out {
			st.Conditions = []metav1.Condition{{Type: v1.ConditionServerOut, Status: "True", Message: "srv-2 is out"}}
		}
		return st
	}
	p.observe(status(v1.ServerHealthy, false), at(1))
	p.observe(status(v1.ServerHealthy, false), at(2)) // no change: nothing new
	p.observe(status(v1.ServerUnreachable, true), at(10))
	if p.serverOut != "srv-2 is out" {
		t.Errorf("serverOut %q while ServerOut is True", p.serverOut)
	}
	p.observe(status(v1.ServerHealthy, false), at(70))
	var got []string
	for _, h := range p.health {
		got = append(got, h.server+" "+string(h.health)+" "+h.at.Sub(t0).String())
	}
	if want := []string{"srv-1 Healthy 1s", "srv-2 Healthy 1s", "srv-2 Unreachable 10s", "srv-2 Healthy 1m10s"}; !slices.Equal(got, want) {
		t.Errorf("health changes %v, want %v", got, want)
	}
	if p.serverOut != "" {
		t.Errorf("serverOut %q after ServerOut went", p.serverOut)
	}
	out, back := p.sawOutage("srv-2", at(5), at(60))
	if !out.Equal(at(10)) || !back.Equal(at(70)) {
		t.Errorf("sawOutage = %v, %v; want 10s and 70s", out.Sub(t0), back.Sub(t0))
	}
	// Before the server is back, the pool has not seen it back, whatever it said before.
	if _, back := p.sawOutage("srv-2", at(5), time.Time{}); !back.IsZero() {
		t.Errorf("sawOutage saw srv-2 back before it was")
	}
}

func TestOutageReport(t *testing.T) {
	deps := []sim.DeploymentInfo{
		// The injected pull failure, just before the outage; its bot is seen Fatal just after.
		{UUID: "early", ServerUUID: "srv-2", Status: "failed", Finished: at(19.5)},
		{UUID: "lost", ServerUUID: "srv-2", Status: "failed", Finished: at(21)},
		{UUID: "notfunctional", ServerUUID: "srv-2", Status: "failed", Finished: at(30)},
	}
	servers := map[string]string{"s1": "srv-1", "s2": "srv-2", "s3": "srv-2"}
	bot := func(name, slot, dep string, phase v1.BotPhase, reason v1.BotReason, bound, finished float64) row {
		return row{depUUID: dep, botRecord: botRecord{name: name, slot: slot, server: servers[slot], phase: phase, reason: reason,
			bound: at(bound), finished: at(finished)}}
	}
	rows := []row{
		bot("pull", "s2", "early", v1.BotFatal, v1.ReasonDeploymentFailed, 17, 20.5),
		bot("deploying", "s2", "lost", v1.BotFatal, v1.ReasonDeploymentFailed, 18, 22),
		bot("bound-late", "s3", "notfunctional", v1.BotFatal, v1.ReasonDeploymentFailed, 25, 31),
		bot("elsewhere", "s1", "", v1.BotDone, "", 26, 50),
		bot("before", "s3", "", v1.BotDone, "", 1, 10),
		bot("crashed-before", "s3", "", v1.BotFatal, v1.ReasonHeartbeatTimeout, 1, 12),
	}
	rows[3].attempts = 1 // retried from srv-2 (status.startAttempts, once that field exists)
	var sw switches
	o := &outage{sim: &sw, server: "srv-2", at: 20 * time.Second, lasts: 40 * time.Second}
	o.armed(at(0))
	o.tick(at(20))
	o.tick(at(60))
	pool := poolRecord{health: []healthChange{
		{server: "srv-2", health: v1.ServerHealthy, at: at(1)},
		{server: "srv-2", health: v1.ServerUnreachable, at: at(24)},
		{server: "srv-2", health: v1.ServerHealthy, at: at(95)},
	}}
	s := outageReport(rows, deps, pool, o, at(0))
	if want := []string{"deploying (DeploymentFailed)", "bound-late (DeploymentFailed)"}; !slices.Equal(s.caught, want) {
		t.Errorf("caught %v, want %v", s.caught, want)
	}
	if !slices.Equal(s.retried, []string{"elsewhere (Done)"}) || s.elsewhere != 1 {
		t.Errorf("retried %v, %d bound elsewhere; want elsewhere (Done) and 1", s.retried, s.elsewhere)
	}
	lines := strings.Join(s.lines(), "\n")
	for _, want := range []string{
		"srv-2 down 20.0s after the burst (Coolify unreachable), back at 1m0s",
		"2 deployments failed there, the pool marked it out 4.0s after it went down (status.servers health, ServerOut), and healthy again 35.0s after it was back",
		"2 bots failed by it: deploying (DeploymentFailed), bound-late (DeploymentFailed)",
		"1 retried a start (status.startAttempts): elsewhere (Done)",
		"1 bots bound on the other servers while it was down",
	} {
		if !strings.Contains(lines, want) {
			t.Errorf("outage lines lack %q:\n%s", want, lines)
		}
	}
	// The injected pull failure stays the pull failure's; the outage's failures are not.
	w := o.downWindow()
	if w.failedIn(deps, "early") || !w.failedIn(deps, "lost") || !w.failedIn(deps, "notfunctional") {
		t.Errorf("failedIn: early %v, lost %v, notfunctional %v; want false, true, true",
			w.failedIn(deps, "early"), w.failedIn(deps, "lost"), w.failedIn(deps, "notfunctional"))
	}
	if (downWindow{}).covers("srv-2", at(30)) || w.covers("srv-1", at(30)) || w.covers("srv-2", at(60)) {
		t.Error("a window covers what it should not: no outage, another server, or the moment it was back")
	}

	// The bots finished before the outage's moment: nothing happened, and the summary says so.
	sw = nil
	never := &outage{sim: &sw, server: "srv-2", at: time.Hour}
	never.armed(at(0))
	s = outageReport(rows, deps, pool, never, at(0))
	if len(s.caught) != 0 || !strings.Contains(s.lines()[0], "the bots had all finished before") {
		t.Errorf("an outage that never came: caught %v, lines %q", s.caught, s.lines())
	}

	// Deployments failed there, but the pool's read of the servers came after it was back.
	s = outageReport(rows, deps, poolRecord{}, o, at(0))
	if want := "the pool never marked it out: 2 deployments failed there, but its read of the servers came too late"; !strings.Contains(s.lines()[0], want) {
		t.Errorf("outage lines %q lack %q", s.lines(), want)
	}
}

func TestViewLineServers(t *testing.T) {
	var b strings.Builder
	v := &view{out: &b, maxSlots: 10, start: time.Now(), servers: true}
	v.draw(frame{pool: poolRecord{servers: []v1.ServerStatus{
		{UUID: "srv-1", State: v1.ServerActive, Health: v1.ServerHealthy, Slots: 5, Free: 1, Busy: 4},
		{UUID: "srv-2", State: v1.ServerActive, Health: v1.ServerUnreachable, Slots: 5, Busy: 3, MaxSlots: ptr.To[int32](5)},
	}}})
	want := "servers srv-1 5 slots 1 free 4 busy, srv-2 5 slots 0 free 3 busy Unreachable"
	if !strings.Contains(b.String(), want) {
		t.Errorf("line %q lacks %q", b.String(), want)
	}
	row := serverRow(v1.ServerStatus{UUID: "srv-2", State: v1.ServerActive, Health: v1.ServerUnreachable, Slots: 5, Busy: 3})
	if !strings.Contains(row, "Unreachable") || !strings.Contains(row, "out: its free slots are not offered") {
		t.Errorf("terminal row %q does not say the server is out", row)
	}
}

// TestStandbyDeploymentsOutage: a standby container's deployment the outage failed is not the
// injected pull failure.
func TestStandbyDeploymentsOutage(t *testing.T) {
	w := downWindow{server: "srv-2", from: at(20), to: at(60)}
	for _, tc := range []struct {
		dep  sim.DeploymentInfo
		pull bool
	}{
		{sim.DeploymentInfo{UUID: "d", AppUUID: "a", ServerUUID: "srv-2", Status: "failed", Finished: at(30)}, false},
		{sim.DeploymentInfo{UUID: "d", AppUUID: "a", ServerUUID: "srv-1", Status: "failed", Finished: at(30)}, true},
		{sim.DeploymentInfo{UUID: "d", AppUUID: "a", ServerUUID: "srv-2", Status: "failed", Finished: at(10)}, true},
	} {
		rp := report{standby: "Running", down: w}
		rp.standbyDeployments(nil, nil, []sim.DeploymentInfo{tc.dep})
		if rp.pullHitStandby != tc.pull {
			t.Errorf("%s failed at %s: pull failure %v, want %v", tc.dep.ServerUUID, tc.dep.Finished.Sub(t0), rp.pullHitStandby, tc.pull)
		}
	}
}
