package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "botpool.dev/botpool/api/v1alpha1"
	"botpool.dev/botpool/coolify/sim"
)

var t0 = time.Date(2026, 1, 15, 9, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestClassify(t *testing.T) {
	deps := []sim.DeploymentInfo{
		{AppUUID: "a", Status: "finished", Created: at(1), Finished: at(15)}, // the cold pull
		{AppUUID: "b", Status: "finished", Created: at(15.5), Finished: at(17)},
		{AppUUID: "a", Status: "finished", Created: at(40), Finished: at(42)}, // a's next bot
		{AppUUID: "c", Status: "failed", Created: at(20), Finished: at(22)},
	}
	bots := []botRecord{
		{name: "first", app: "a", bound: at(0.9)},
		{name: "gated", app: "b", bound: at(1.2)}, // bound early, deployed after the pull
		{name: "later", app: "a", bound: at(39.8)},
		{name: "failed", app: "c", bound: at(19.9)},
		{name: "queued", app: ""},
	}
	var got []string
	for _, r := range classify(bots, deps, nil) {
		got = append(got, fmt.Sprintf("%s=%s/%s", r.name, r.start, seconds(r.deployment)))
	}
	want := []string{"first=cold/14.0s", "gated=warm/1.5s", "later=warm/2.0s", "failed=warm/-", "queued=/-"}
	if !slices.Equal(got, want) {
		t.Errorf("classify = %v, want %v", got, want)
	}
	// Nothing finished yet: whatever deployed, deployed cold.
	if r := classify(bots[3:4], deps[3:], nil); r[0].start != startCold {
		t.Errorf("with no finished deployment the start is %q, want cold", r[0].start)
	}
}

func TestInversions(t *testing.T) {
	for _, tc := range []struct {
		name string
		bots []botRecord
		want int
	}{{
		name: "higher priority served first",
		bots: []botRecord{
			{name: "hi", priority: 50, queued: at(1), bound: at(10)},
			{name: "lo", priority: 0, queued: at(1), bound: at(20)},
		},
	}, {
		name: "lower priority bound while a higher one waited",
		bots: []botRecord{
			{name: "hi", priority: 50, queued: at(1), bound: at(20)},
			{name: "lo", priority: 0, queued: at(1), bound: at(10)},
		},
		want: 1,
	}, {
		name: "the higher one arrived after the binding (within the lag margin)",
		bots: []botRecord{
			{name: "hi", priority: 50, queued: at(9.5), bound: at(20)},
			{name: "lo", priority: 0, queued: at(1), bound: at(10)},
		},
	}, {
		name: "the higher one had given up before",
		bots: []botRecord{
			{name: "hi", priority: 50, queued: at(1), finished: at(5), phase: "Fatal"},
			{name: "lo", priority: 0, queued: at(1), bound: at(10)},
		},
	}, {
		name: "the higher one still waits at the end",
		bots: []botRecord{
			{name: "hi", priority: 50, queued: at(1)},
			{name: "lo", priority: 0, queued: at(1), bound: at(10)},
		},
		want: 1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := inversions(tc.bots); len(got) != tc.want {
				t.Errorf("inversions = %v, want %d", got, tc.want)
			}
		})
	}
}

func TestParseFlags(t *testing.T) {
	if o, err := parseFlags(nil, io.Discard); err != nil || o.bots != 16 || o.maxSlots != 5 || o.minIdle != 2 || o.faults != faultsAll || o.standby != "Stopped" {
		t.Errorf("defaults: %+v %v", o, err)
	}
	if o, err := parseFlags([]string{"--standby", "Running"}, io.Discard); err != nil || o.standby != "Running" {
		t.Errorf("--standby Running: %+v %v", o, err)
	}
	if _, err := parseFlags([]string{"--standby", "Paused"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--standby must be Stopped or Running") {
		t.Errorf("--standby Paused: %v, want an error naming the two modes", err)
	}
	for _, args := range [][]string{
		{"--bots", "0"},
		{"--min-idle", "6"},
		{"--speed", "0"},
		{"--meeting-min", "10s", "--meeting-max", "5s"},
		{"--faults", "some"},
		{"--schedule-in", "-1s"},
		{"--standby", "running"}, // the API's spelling only
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%v) accepted it", args)
		}
	}
}

func TestViewLine(t *testing.T) {
	var b strings.Builder
	v := &view{out: &b, maxSlots: 5, start: time.Now()}
	f := frame{
		bots:  []botRecord{{name: "a", phase: "Queued"}, {name: "b", phase: "InCall"}, {name: "c", phase: "Done"}},
		slots: []slotRecord{{name: "s1", phase: "Busy", bound: true}, {name: "s2", phase: "Idle", bound: true}, {name: "s3", phase: "Idle"}},
	}
	v.draw(f)
	v.draw(f) // unchanged: not repeated
	got := b.String()
	if strings.Count(got, "\n") != 1 {
		t.Errorf("an unchanged frame was printed again:\n%s", got)
	}
	for _, want := range []string{"bots 3:", "queued 1", "busy 1", "done 1", "slots 3/5:", "idle 1", "bound-idle 1", "busy 1"} {
		if !strings.Contains(got, want) {
			t.Errorf("line %q lacks %q", got, want)
		}
	}
}

func TestSlotWas(t *testing.T) {
	created := map[string]time.Time{"warm": at(0), "made": at(3)} // the burst begins at 1
	bots := []botRecord{
		{name: "first", slot: "warm", asked: at(1), bound: at(1.1), finished: at(20)},
		{name: "second", slot: "made", asked: at(1.5), bound: at(4), finished: at(30)},
		{name: "third", slot: "warm", asked: at(1.2), bound: at(20.5)},                 // waited for first
		{name: "fourth", slot: "made", asked: at(50), bound: at(50.1)},                 // second had left it free
		{name: "fifth", slot: "made", asked: at(2), bound: at(3.5), finished: at(3.9)}, // made for the queue, before second
		{name: "queued", asked: at(2)},
	}
	want := map[string]string{"first": slotWasIdle, "second": slotWasFreed, "third": slotWasFreed, "fourth": slotWasIdle, "fifth": slotWasNew, "queued": ""}
	for _, b := range bots {
		if got := slotWas(b, bots, created, at(1)); got != want[b.name] {
			t.Errorf("slotWas(%s) = %q, want %q", b.name, got, want[b.name])
		}
	}
}

func TestCountLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "manager.log")
	log := `{"level":"info","msg":"Starting manager"}
{"level":"error","msg":"Reconciler error","error":"Coolify answered 500"}
{"level":"error","msg":"Observed a panic","panic":"runtime error"}
{"level":"error","msg":"Reconciler error","error":"panic: runtime error"}
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	if errs, panics := countLog(path); errs != 3 || panics != 1 {
		t.Errorf("countLog = %d errors, %d panics; want 3 and 1", errs, panics)
	}
}

func TestClassifyStandby(t *testing.T) {
	deps := []sim.DeploymentInfo{
		{UUID: "d1", AppUUID: "a", Status: "finished", Created: at(0), Finished: at(14)},  // a's first standby container
		{UUID: "d2", AppUUID: "a", Status: "finished", Created: at(31), Finished: at(33)}, // a's recycle after "first"
		{UUID: "d3", AppUUID: "b", Status: "finished", Created: at(20), Finished: at(22)}, // "stopped-way" bot's own deployment
	}
	bots := []botRecord{
		{name: "first", app: "a", slot: "s-a", standby: true, asked: at(20), bound: at(20.1), running: at(20.4), finished: at(30)},
		{name: "stopped-way", app: "b", slot: "s-b", asked: at(19.8), bound: at(19.9), running: at(23), finished: at(40)},
		{name: "second", app: "a", slot: "s-a", standby: true, asked: at(21), bound: at(35), running: at(35.2), finished: at(50)},
	}
	rows := classify(bots, deps, nil)
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%s=%s/%s", r.name, r.start, r.depUUID))
	}
	// A standby bot never claims a deployment, even the recycle closest to its binding.
	if want := []string{"first=standby/", "stopped-way=warm/d3", "second=standby/"}; !slices.Equal(got, want) {
		t.Errorf("classify = %v, want %v", got, want)
	}
	rp := report{standby: "Running"}
	slotsSeen := []slotRecord{{name: "s-a", readyAt: []time.Time{at(15), at(34)}}, {name: "s-b"}}
	rp.standbyDeployments(rows, slotsSeen, deps)
	if rp.firstStandby != 1 || len(rp.recycles) != 1 || rp.recycles[0] != 2*time.Second {
		t.Errorf("first containers %d, recycles %v; want 1 first (d1) and one recycle of 2s (d2)", rp.firstStandby, rp.recycles)
	}
	// first ended at 30, s-a was Ready again at 34; second and stopped-way not yet.
	if len(rp.readyAgain) != 1 || rp.readyAgain[0] != 4*time.Second || rp.notReadyYet != 2 {
		t.Errorf("ready again %v (%d not yet), want [4s] and 2 not yet", rp.readyAgain, rp.notReadyYet)
	}
}

func TestCountRequests(t *testing.T) {
	bots := []botRecord{
		{name: "a", asked: at(10), running: at(12)},
		{name: "b", asked: at(10), running: at(15)},
		{name: "c", asked: at(10), finished: at(11), phase: "Fatal"}, // never ran
		{name: "later", asked: at(30)},                               // still waits
	}
	var log []sim.Request
	for _, s := range []float64{5, 10.5, 13, 14.9, 16, 20, 31} {
		log = append(log, sim.Request{At: at(s)})
	}
	run, starting := countRequests(log, bots, at(10))
	// since the burst: all but 5; while one waited: 10.5, 13, 14.9 (b), 31 (later).
	if run != 6 || starting != 4 {
		t.Errorf("countRequests = %d, %d; want 6 since the burst, 4 while a bot waited to start", run, starting)
	}
}

func TestP90(t *testing.T) {
	var ds []time.Duration
	for i := 10; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Second)
	}
	if got := p90(ds); got != 9*time.Second {
		t.Errorf("p90 of 1..10s = %v, want 9s", got)
	}
	if got := p90(ds[:1]); got != 10*time.Second {
		t.Errorf("p90 of one = %v", got)
	}
	if p90(nil) != -1 {
		t.Error("p90 of none is not -1")
	}
}

// TestContainersHookOrder: the simulator may deliver the hooks of two goroutines out of
// order; a stop ends the run of the container it stopped whatever mode the pool is in, and a
// start older than the last stop starts nothing.
func TestContainersHookOrder(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newContainers(ctx, time.Second, time.Second, 1, io.Discard)
	// Nothing answers there: the bot keeps asking for its config, as a standby container
	// waiting for its binding does, until its context ends.
	ctr := func(seq uint64, reason string) sim.Container {
		return sim.Container{AppUUID: "app", AppName: "pool-zoom-001", Reason: reason, Seq: seq,
			Env: map[string]string{"BOTPOOL_API_URL": "http://127.0.0.1:1", "POOL_SLOT_UUID": "app", "BOTPOOL_SLOT_TOKEN": "t"}}
	}
	c.onStart(ctr(1, "deployed"))
	c.onStop(ctr(2, "stopped"))
	waitDone(t, c, "a stopped container's bot still runs")

	c.onStop(ctr(4, "stopped"))
	c.onStart(ctr(3, "deployed")) // older than the stop just seen: that container is gone
	c.mu.Lock()
	_, running := c.running["app"]
	c.mu.Unlock()
	if running {
		t.Error("a start delivered after its own stop started a bot")
	}

	c.onStart(ctr(5, "deployed"))
	c.onStart(ctr(7, "redeployed"))
	c.onStop(ctr(6, "redeployed")) // the stop of 5, delivered after 7 started
	c.mu.Lock()
	r, ok := c.running["app"]
	c.mu.Unlock()
	if !ok || r.seq != 7 {
		t.Fatalf("after a redeploy the running container is %+v (%v), want seq 7", r, ok)
	}
	c.onStop(ctr(8, "redeployed"))
	waitDone(t, c, "a replaced container's bot still runs")
}

func waitDone(t *testing.T, c *containers, msg string) {
	t.Helper()
	done := make(chan struct{})
	go func() { c.wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute): // a liveness bound: a busy machine only waits longer
		t.Fatal(msg)
	}
}

// TestPullRetried: a bot whose start the pull failure failed is named however it ended after
// the retry (a live run's retried bot then met the crash and was left out of the summary).
func TestPullRetried(t *testing.T) {
	for _, tc := range []struct {
		b    botRecord
		down downWindow
		want string
		ok   bool
	}{
		{botRecord{name: "ran", attempts: 1, phase: v1.BotDone}, downWindow{}, "ran", true},
		{botRecord{name: "crashed", attempts: 1, phase: v1.BotFatal, reason: v1.ReasonHeartbeatTimeout}, downWindow{},
			"crashed (which then ended Fatal/HeartbeatTimeout)", true},
		{botRecord{name: "ran-out", attempts: 3, phase: v1.BotFatal, reason: v1.ReasonDeploymentFailed}, downWindow{}, "", false},
		{botRecord{name: "never-failed", phase: v1.BotDone}, downWindow{}, "", false},
		{botRecord{name: "outage", attempts: 1, phase: v1.BotDone}, downWindow{server: "srv-2"}, "", false},
	} {
		if got, ok := pullRetried(tc.b, tc.down); got != tc.want || ok != tc.ok {
			t.Errorf("pullRetried(%s) = %q, %v; want %q, %v", tc.b.name, got, ok, tc.want, tc.ok)
		}
	}
}
