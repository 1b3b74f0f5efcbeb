package bench

import (
	"strings"
	"testing"
	"time"

	"botpool.dev/botpool/internal/stats"
)

// The measuring helpers decide every figure the benchmarks print, so they are tested on
// their own (these run with `go test ./bench/`, without the scenarios).

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0.1, time.Millisecond}} {
		if got := stats.Percentile(ds, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if got := stats.Percentile([]time.Duration{7}, 99); got != 7 {
		t.Errorf("p99 of one = %v, want 7", got)
	}
	if got := stats.Percentile(nil, 50); got != 0 {
		t.Errorf("p50 of none = %v, want 0", got)
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("percentile sorted its input in place")
	}
}

const exposition = `# HELP rest_client_requests_total Number of HTTP requests, partitioned by status code, method, and host.
# TYPE rest_client_requests_total counter
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="GET"} 12
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="PATCH"} 30
rest_client_requests_total{code="409",host="127.0.0.1:6443",method="PATCH"} 2
rest_client_requests_total{code="201",host="127.0.0.1:6443",method="POST"} 5
rest_client_requests_total{code="200",host="127.0.0.1:6443",method="PUT"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="botpool.dev",resource="bots",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 9
apiserver_request_total{code="201",component="apiserver",dry_run="",group="events.k8s.io",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="botpool.dev",resource="bots",scope="namespace",subresource="",verb="LIST",version="v1alpha1"} 100
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 6
odd_label{msg="a \"quoted\", comma\\ and } brace"} 1.5e+02
go_memstats_heap_inuse_bytes 4.2e+07
`

func TestParseMetrics(t *testing.T) {
	s, err := parseMetrics(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	w := s.writes()
	if len(w) != 4 || w["PATCH 200"] != 30 || w["PATCH 409"] != 2 || w["POST 201"] != 5 || w["PUT 200"] != 4 {
		t.Errorf("writes = %v", w)
	}
	if got := total(w); got != 41 {
		t.Errorf("total writes = %v, want 41 (GET is a read)", got)
	}
	sw := s.serverWrites()
	if len(sw) != 2 || sw["PATCH bots/status"] != 9 || sw["POST events"] != 3 {
		t.Errorf("server writes = %v", sw)
	}
	if got := s.sum("go_memstats_heap_inuse_bytes", nil); got != 4.2e7 {
		t.Errorf("heap = %v", got)
	}
	if got := s.sum("odd_label", map[string]string{"msg": `a "quoted", comma\ and } brace`}); got != 150 {
		t.Errorf("escaped label value not matched: %v", got)
	}
	for _, bad := range []string{"name_only", `x{a="1"`, `x{a=1} 2`, "x notanumber"} {
		if _, err := parseMetrics(strings.NewReader(bad)); err == nil {
			t.Errorf("%q parsed without error", bad)
		}
	}
}

func TestDiffAndFormat(t *testing.T) {
	d := diff(map[string]float64{"a": 10, "b": 3, "c": 7}, map[string]float64{"a": 4, "b": 3})
	if len(d) != 2 || d["a"] != 6 || d["c"] != 7 {
		t.Errorf("diff = %v", d)
	}
	if got := formatCounts(d, 2); got != "c 3.50, a 3.00" {
		t.Errorf("formatCounts = %q", got)
	}
	if got := formatCounts(nil, 1); got != "none" {
		t.Errorf("formatCounts(nil) = %q", got)
	}
}

func TestParseProc(t *testing.T) {
	status := "Name:\tmanager\nVmPeak:\t 2000000 kB\nVmHWM:\t  180000 kB\nVmRSS:\t  120000 kB\nThreads:\t12\n"
	rss, peak, err := parseProcStatus(strings.NewReader(status))
	if err != nil || rss != 120000<<10 || peak != 180000<<10 {
		t.Errorf("parseProcStatus = %d, %d, %v", rss, peak, err)
	}
	if _, _, err := parseProcStatus(strings.NewReader("Name:\tx\n")); err == nil {
		t.Error("a status without VmRSS parsed")
	}
	// The command name may hold spaces and parentheses; utime 250 and stime 50 ticks.
	stat := "4242 (my (odd) mgr) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 12 0 100 0 0"
	cpu, err := parseProcStat(stat)
	if err != nil || cpu != 3*time.Second {
		t.Errorf("parseProcStat = %v, %v; want 3s", cpu, err)
	}
	if _, err := parseProcStat("4242 (x) S 1"); err == nil {
		t.Error("a short stat parsed")
	}
}

func TestTurnarounds(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	fl := newFleet(0, false)
	fl.done["a"] = at(-5)
	fl.done["b"] = at(95)
	histories := map[string][]slotEvent{
		"slot-1": {
			{kind: evBound, bot: "a", at: at(-100)},
			{kind: evReleased, bot: "a", at: at(0)},
			{kind: evIdle, at: at(20)},
			{kind: evBound, bot: "b", at: at(30)},
			{kind: evReleased, bot: "b", at: at(100)}, // the last release: no bot follows
			{kind: evIdle, at: at(110)},
		},
		"slot-2": {
			{kind: evReleased, bot: "c", at: at(0)}, // c's Done was not seen: no Done figure
			{kind: evBound, bot: "d", at: at(40)},   // rebound before an Idle was seen
		},
	}
	release, fromDone, fromIdle := turnarounds(histories, fl)
	if !sameDurations(release, 30*time.Millisecond, 40*time.Millisecond) {
		t.Errorf("release = %v", release)
	}
	if !sameDurations(fromDone, 35*time.Millisecond) {
		t.Errorf("fromDone = %v", fromDone)
	}
	if !sameDurations(fromIdle, 10*time.Millisecond) {
		t.Errorf("fromIdle = %v", fromIdle)
	}
}

func sameDurations(got []time.Duration, want ...time.Duration) bool {
	if len(got) != len(want) {
		return false
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			if g == w {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func TestReportVerdicts(t *testing.T) {
	r := &report{title: "t", command: "cmd"}
	r.atMost("latency", 12, 20, "ms")
	r.atMost("slow", 30, 20, "ms")
	r.atLeast("rate", 250, 300, "/s")
	r.info("plain", "%d", 7)
	var sb strings.Builder
	r.write(&sb)
	out := sb.String()
	for _, want := range []string{"latency", "≤ 20 ms", "PASS", "slow", "MISS", "≥ 300 /s", "plain", "cmd"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "MISS") != 2 || strings.Count(out, "PASS") != 1 {
		t.Errorf("verdicts wrong:\n%s", out)
	}
}
