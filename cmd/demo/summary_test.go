package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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
	for _, r := range classify(bots, deps) {
		got = append(got, fmt.Sprintf("%s=%s/%s", r.name, r.start, seconds(r.deployment)))
	}
	want := []string{"first=cold/14.0s", "gated=warm/1.5s", "later=warm/2.0s", "failed=warm/-", "queued=/-"}
	if !slices.Equal(got, want) {
		t.Errorf("classify = %v, want %v", got, want)
	}
	// Nothing finished yet: whatever deployed, deployed cold.
	if r := classify(bots[3:4], deps[3:]); r[0].start != startCold {
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
	if o, err := parseFlags(nil, io.Discard); err != nil || o.bots != 16 || o.maxSlots != 5 || o.minIdle != 2 || o.faults != faultsAll {
		t.Errorf("defaults: %+v %v", o, err)
	}
	for _, args := range [][]string{
		{"--bots", "0"},
		{"--min-idle", "6"},
		{"--speed", "0"},
		{"--meeting-min", "10s", "--meeting-max", "5s"},
		{"--faults", "some"},
		{"--schedule-in", "-1s"},
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
