package bench

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// sample is one line of the Prometheus text format: a series and its value.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// samples is a scrape.
type samples []sample

// parseMetrics reads the Prometheus text exposition format, which is all the manager's and
// the API server's /metrics speak; comments and HELP/TYPE lines are skipped.
func parseMetrics(r io.Reader) (samples, error) {
	var out samples
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseSample(line string) (sample, error) {
	s := sample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return s, fmt.Errorf("metric line without a value: %q", line)
	}
	s.name = line[:i]
	rest := line[i:]
	if strings.HasPrefix(rest, "{") {
		var err error
		if rest, err = parseLabels(rest[1:], s.labels); err != nil {
			return s, fmt.Errorf("%w in %q", err, line)
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return s, fmt.Errorf("metric line without a value: %q", line)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, fmt.Errorf("metric value in %q: %w", line, err)
	}
	s.value = v
	return s, nil
}

// parseLabels reads `a="x",b="y"}` into labels and returns what follows the brace.
func parseLabels(in string, labels map[string]string) (string, error) {
	for {
		in = strings.TrimLeft(in, " ,")
		if strings.HasPrefix(in, "}") {
			return in[1:], nil
		}
		eq := strings.Index(in, "=\"")
		if eq <= 0 {
			return "", fmt.Errorf("malformed labels")
		}
		name := in[:eq]
		in = in[eq+2:]
		var val strings.Builder
		for i := 0; ; i++ {
			if i >= len(in) {
				return "", fmt.Errorf("unterminated label value")
			}
			c := in[i]
			if c == '\\' && i+1 < len(in) {
				i++
				switch in[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(in[i])
				}
				continue
			}
			if c == '"' {
				in = in[i+1:]
				break
			}
			val.WriteByte(c)
		}
		labels[name] = val.String()
	}
}

// sum adds the values of the series named name whose labels match every pair of match.
func (ss samples) sum(name string, match map[string]string) float64 {
	total := 0.0
	for _, s := range ss {
		if s.name != name {
			continue
		}
		ok := true
		for k, v := range match {
			if s.labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			total += s.value
		}
	}
	return total
}

// writeVerbs are the HTTP methods that change the API server's state.
var writeVerbs = []string{"POST", "PUT", "PATCH", "DELETE"}

// writes counts the API server write requests a client-go process sent, by method and status
// code ("PATCH 200"), from rest_client_requests_total (which controller-runtime registers for
// its clients).
func (ss samples) writes() map[string]float64 {
	out := map[string]float64{}
	for _, s := range ss {
		if s.name == "rest_client_requests_total" && slices.Contains(writeVerbs, s.labels["method"]) {
			out[s.labels["method"]+" "+s.labels["code"]] += s.value
		}
	}
	return out
}

// serverWrites counts the writes the API server served, by resource (with subresource) and
// verb, from apiserver_request_total: the breakdown a client's own metrics cannot give. The
// leases the API server renews for itself are left out.
func (ss samples) serverWrites() map[string]float64 {
	out := map[string]float64{}
	for _, s := range ss {
		if s.name != "apiserver_request_total" {
			continue
		}
		verb := s.labels["verb"]
		switch verb {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY":
		default:
			continue
		}
		res := s.labels["resource"]
		if res == "leases" {
			continue // the API server's own identity leases, renewed every 10s: no client's
		}
		if sub := s.labels["subresource"]; sub != "" {
			res += "/" + sub
		}
		out[verb+" "+res] += s.value
	}
	return out
}

// diff subtracts before from after, key by key, keeping the keys that changed.
func diff(after, before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func total(m map[string]float64) float64 {
	t := 0.0
	for _, v := range m {
		t += v
	}
	return t
}

// formatCounts prints a count map largest first, e.g. "PATCH bots/status 120, POST events 80".
func formatCounts(m map[string]float64, per float64) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			if m[a] > m[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, m[k]/per))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
