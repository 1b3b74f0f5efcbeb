package bench

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// figure is one measured number, with its target when the issue sets one.
type figure struct {
	name    string
	value   string
	target  string
	verdict string // PASS, MISS or empty
}

// report prints a benchmark's figures as a block a person reads: what was measured, by which
// command, each number next to its target with PASS or MISS.
type report struct {
	b       *testing.B
	title   string
	command string
	figures []figure
	notes   []string
}

func newReport(b *testing.B, title string) *report {
	return &report{b: b, title: title, command: benchCommand(b)}
}

// benchCommand is the command that measures b alone (make bench runs them all).
func benchCommand(b *testing.B) string {
	return fmt.Sprintf("KUBEBUILDER_ASSETS=$(hack/envtest.sh) go test -run '^$' -bench '^%s$' -benchtime 1x -count 1 -timeout 60m ./bench/   (part of make bench)", b.Name())
}

// info adds a figure without a target.
func (r *report) info(name, format string, args ...any) {
	r.figures = append(r.figures, figure{name: name, value: fmt.Sprintf(format, args...)})
}

// atMost adds a figure whose target is an upper bound, and reports it to the benchmark
// framework under unit.
func (r *report) atMost(name string, v, limit float64, unit string) {
	r.target(name, v, unit, "≤", limit, v <= limit)
}

// atLeast adds a figure whose target is a lower bound.
func (r *report) atLeast(name string, v, limit float64, unit string) {
	r.target(name, v, unit, "≥", limit, v >= limit)
}

func (r *report) target(name string, v float64, unit, op string, limit float64, ok bool) {
	verdict := "MISS"
	if ok {
		verdict = "PASS"
	}
	r.figures = append(r.figures, figure{name: name, value: fmt.Sprintf("%.4g %s", v, unit),
		target: fmt.Sprintf("%s %.4g %s", op, limit, unit), verdict: verdict})
}

func (r *report) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// metric reports a figure to the benchmark framework (go test's result line).
func (r *report) metric(v float64, unit string) { r.b.ReportMetric(v, unit) }

// print writes the block to stdout, where go test -bench shows it next to the result line.
func (r *report) print() { r.write(os.Stdout) }

func (r *report) write(w io.Writer) {
	width := 0
	for _, f := range r.figures {
		width = max(width, len(f.name))
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n=== %s\n", r.title)
	fmt.Fprintf(&sb, "command: %s\n", r.command)
	fmt.Fprintf(&sb, "machine: %d CPUs (GOMAXPROCS %d), load average %s, %s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), loadAverage(), runtime.Version())
	for _, f := range r.figures {
		fmt.Fprintf(&sb, "  %-*s  %-14s", width, f.name, f.value)
		if f.target != "" {
			fmt.Fprintf(&sb, "  target %-14s %s", f.target, f.verdict)
		}
		sb.WriteString("\n")
	}
	for _, n := range r.notes {
		fmt.Fprintf(&sb, "  note: %s\n", n)
	}
	_, _ = io.WriteString(w, sb.String())
}

// loadAverage is the first three fields of /proc/loadavg: how shared the machine was.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
