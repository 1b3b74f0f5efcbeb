package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/promql/parser"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	"botpool.dev/botpool/internal/kubetest"
	"botpool.dev/botpool/internal/pgtest"
)

// TestDashboardAndAlertsNameRealMetrics renders the chart with its Grafana dashboard and its
// PrometheusRule, parses every PromQL expression in them (each dashboard target, the query of
// each dashboard variable, each alert) with Prometheus' own parser, and checks that every
// metric they name is registered by a running manager (on Postgres, so the store's metrics
// are there too). A renamed metric, or a typo in a panel, fails here with its name instead of
// drawing an empty graph or an alert that can never fire.
func TestDashboardAndAlertsNameRealMetrics(t *testing.T) {
	m := renderChart(t, "--set", "grafana.dashboards.enabled=true", "--set", "prometheusRule.enabled=true")
	var exprs []promExpr
	var cm struct {
		Data map[string]string `json:"data"`
	}
	decodeRendered(t, m, "ConfigMap/botpool-dashboard", &cm)
	dash, err := dashboardExprs([]byte(cm.Data["botpool.json"]))
	if err != nil {
		t.Fatal(err)
	}
	exprs = append(exprs, dash...)
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert       string            `json:"alert"`
					Expr        string            `json:"expr"`
					Annotations map[string]string `json:"annotations"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	decodeRendered(t, m, "PrometheusRule/botpool", &rule)
	runbooks := readRepoFile(t, "docs/runbooks.md")
	alerts := 0
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			alerts++
			exprs = append(exprs, promExpr{where: "alert " + r.Alert, query: r.Expr})
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("alert %s has no %s", r.Alert, a)
				}
			}
			// The runbook_url points at a heading of docs/runbooks.md named after the alert.
			anchor := strings.ToLower(r.Alert)
			if !strings.HasSuffix(r.Annotations["runbook_url"], "docs/runbooks.md#"+anchor) {
				t.Errorf("alert %s: runbook_url %q, want docs/runbooks.md#%s", r.Alert, r.Annotations["runbook_url"], anchor)
			}
			if !regexp.MustCompile(`(?m)^## ` + regexp.QuoteMeta(r.Alert) + `$`).MatchString(runbooks) {
				t.Errorf("docs/runbooks.md has no section \"## %s\"", r.Alert)
			}
		}
	}
	if len(dash) < 20 || alerts != 8 {
		t.Fatalf("%d dashboard expressions and %d alerts: the chart did not render what this test expects", len(dash), alerts)
	}

	names := map[string][]string{} // metric name → where it is used
	for _, e := range exprs {
		ns, err := metricNames(e.query)
		if err != nil {
			t.Errorf("%s: %v", e.where, err)
			continue
		}
		if len(ns) == 0 {
			t.Errorf("%s: %q names no metric", e.where, e.query)
		}
		for _, n := range ns {
			names[n] = append(names[n], e.where)
		}
	}

	registered := runningManagerMetrics(t)
	for _, n := range slices.Sorted(maps.Keys(names)) {
		if !registered.has(n) {
			t.Errorf("%s is not a metric of the running manager; used by %s", n, strings.Join(slices.Compact(names[n]), ", "))
		}
	}
	// The check can fail: a name the manager does not have is caught, and so is a histogram
	// suffix on a counter.
	for _, bogus := range []string{"botpool_pool_slotz", "botpool_coolify_requests_total_bucket"} {
		if registered.has(bogus) {
			t.Errorf("the check accepts %s", bogus)
		}
	}
}

// promExpr is one PromQL expression of the dashboard or the rules, and where it is.
type promExpr struct{ where, query string }

// labelValues is Grafana's label_values(selector, label) variable query, which is not PromQL.
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)

// dashboardExprs collects the PromQL of a Grafana dashboard: every panel target (rows' nested
// panels included) and every query variable's selector. The dashboard must have the
// datasource variable its panels use.
func dashboardExprs(data []byte) ([]promExpr, error) {
	var d struct {
		Title      string `json:"title"`
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []dashPanel `json:"panels"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("the dashboard is not JSON: %w", err)
	}
	if d.Title == "" || d.UID == "" {
		return nil, errors.New("the dashboard has no title or uid")
	}
	var out []promExpr
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				return nil, fmt.Errorf("variable %s: query %s", v.Name, v.Query)
			}
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			return nil, fmt.Errorf("variable %s: %q is not label_values(selector, label)", v.Name, q.Query)
		}
		out = append(out, promExpr{where: "dashboard variable " + v.Name, query: m[1]})
	}
	if !vars["datasource"] {
		return nil, errors.New("the dashboard has no datasource variable")
	}
	var walk func(ps []dashPanel) error
	walk = func(ps []dashPanel) error {
		for _, p := range ps {
			if p.Type != "row" && p.Datasource.UID != "${datasource}" {
				return fmt.Errorf("panel %q: datasource %+v, want the datasource variable", p.Title, p.Datasource)
			}
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					return fmt.Errorf("panel %q: target %s has no expr", p.Title, tg.RefID)
				}
				out = append(out, promExpr{where: fmt.Sprintf("panel %q target %s", p.Title, tg.RefID), query: tg.Expr})
			}
			if p.Type != "row" && len(p.Targets) == 0 {
				return fmt.Errorf("panel %q has no target", p.Title)
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	return out, walk(d.Panels)
}

type dashPanel struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

// grafanaVar is a dashboard variable in a query: $name, ${name} or ${name:format}.
var grafanaVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:[a-z]+)?\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// substituteVars replaces Grafana's variables the way Grafana would before the query reaches
// Prometheus: the interval variables by a duration, the others (namespace, pool: inside
// label matchers) by a value.
func substituteVars(q string) string {
	return grafanaVar.ReplaceAllStringFunc(q, func(v string) string {
		name := strings.Trim(v, "${}")
		name, _, _ = strings.Cut(name, ":")
		switch name {
		case "__rate_interval", "__interval", "__range":
			return "5m"
		case "__range_s", "__interval_ms":
			return "300"
		}
		return "x"
	})
}

// metricNames parses query (after substituting Grafana's variables) with Prometheus' parser
// and returns the metric names its selectors name.
func metricNames(query string) ([]string, error) {
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(substituteVars(query))
	if err != nil {
		return nil, fmt.Errorf("PromQL %q does not parse: %w", query, err)
	}
	var names []string
	var bad error
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == "__name__" && name == "" {
				if m.Type.String() != "=" {
					bad = fmt.Errorf("PromQL %q selects metrics by a __name__ pattern: name them", query)
				}
				name = m.Value
			}
		}
		if name != "" && !slices.Contains(names, name) {
			names = append(names, name)
		}
		return nil
	})
	return names, bad
}

// metricFamilies are the families a registry holds, with whether each is a histogram or
// summary (which Prometheus exposes as name_bucket, name_sum and name_count).
type metricFamilies map[string]dto.MetricType

func (f metricFamilies) has(name string) bool {
	if _, ok := f[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		switch f[base] {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			return true
		case dto.MetricType_SUMMARY:
			return suffix != "_bucket"
		}
	}
	return false
}

// recordingRegistry is controller-runtime's metrics.Registry, which the manager registers
// everything with, recording each family registered through it: a vector with no series yet
// (the Coolify client's before its first request) is registered but not gathered.
type recordingRegistry struct {
	metrics.RegistererGatherer
	mu       sync.Mutex
	families metricFamilies
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recordingRegistry) record(c prometheus.Collector) {
	typ := dto.MetricType_UNTYPED
	// prometheus.Histogram and prometheus.Summary have the same methods, so a type switch
	// cannot tell them apart: a single metric says what it is by what it writes.
	switch v := c.(type) {
	case *prometheus.HistogramVec:
		typ = dto.MetricType_HISTOGRAM
	case *prometheus.SummaryVec:
		typ = dto.MetricType_SUMMARY
	case prometheus.Metric:
		var m dto.Metric
		if v.Write(&m) == nil {
			switch {
			case m.Histogram != nil:
				typ = dto.MetricType_HISTOGRAM
			case m.Summary != nil:
				typ = dto.MetricType_SUMMARY
			}
		}
	}
	descs := make(chan *prometheus.Desc)
	go func() { c.Describe(descs); close(descs) }()
	r.mu.Lock()
	defer r.mu.Unlock()
	for d := range descs {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.families[m[1]] = typ
		}
	}
}

func (r *recordingRegistry) Register(c prometheus.Collector) error {
	r.record(c)
	return r.RegistererGatherer.Register(c)
}

func (r *recordingRegistry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		r.record(c)
	}
	r.RegistererGatherer.MustRegister(cs...)
}

// runningManagerMetrics runs the manager as main does (Postgres store, controllers, bot API),
// waits until it is ready, and returns the families it registered or serves.
func runningManagerMetrics(t *testing.T) metricFamilies {
	t.Helper()
	pg := pgtest.StartT(t)

	rec := &recordingRegistry{RegistererGatherer: metrics.Registry, families: metricFamilies{}}
	metrics.Registry = rec
	t.Cleanup(func() { metrics.Registry = rec.RegistererGatherer })

	probeAddr := kubetest.FreeLocalAddr(t)
	o, err := parseFlags([]string{
		"--leader-elect=false", "--database-url=" + pg.NewDatabase(t),
		"--health-probe-bind-address=" + probeAddr, "--metrics-bind-address=" + kubetest.FreeLocalAddr(t),
		"--bot-api-bind-address=" + kubetest.FreeLocalAddr(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	startManager(t, env.Config, o)
	kubetest.Eventually(t, time.Minute, func() error {
		resp, err := http.Get("http://" + probeAddr + "/readyz")
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz answered %d", resp.StatusCode)
		}
		return nil
	})

	gathered, err := rec.Gather()
	if err != nil {
		t.Fatalf("gathering the manager's metrics: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	families := metricFamilies{}
	for n, typ := range rec.families {
		families[n] = typ
	}
	for _, f := range gathered {
		families[f.GetName()] = f.GetType()
	}
	if _, ok := families["botpool_store_up"]; !ok {
		t.Fatal("the manager did not register the store's metrics: not on Postgres?")
	}
	return families
}

// renderChart renders charts/botpool as release botpool in botpool-system with helm (see
// findHelm), keyed by Kind/name.
func renderChart(t *testing.T, args ...string) map[string][]byte {
	t.Helper()
	kube, err := readMakeVar("KUBE_VERSION")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	cmd := exec.CommandContext(t.Context(), findHelm(t), append([]string{"template", "botpool", filepath.Join("charts", "botpool"),
		"--namespace", "botpool-system", "--kube-version", "v" + kube}, args...)...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"), "KUBECONFIG="+filepath.Join(home, "no-kubeconfig"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm template: %v\n%s", err, errOut.String())
	}
	m := map[string][]byte{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(&out))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return m
		}
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Kind != "" {
			m[meta.Kind+"/"+meta.Metadata.Name] = doc
		}
	}
}

func decodeRendered(t *testing.T, m map[string][]byte, key string, into any) {
	t.Helper()
	doc, ok := m[key]
	if !ok {
		t.Fatalf("the chart rendered no %s", key)
	}
	if err := yaml.Unmarshal(doc, into); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
}

// findHelm is the helm the chart tests use: $HELM (which the Makefile exports), else the
// cached build of the version the Makefile pins; the test skips when neither exists.
func findHelm(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("HELM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("HELM=%s: %v", p, err)
		}
		return p
	}
	version, err := readMakeVar("HELM_VERSION")
	if err != nil {
		t.Fatal(err)
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Skipf("HELM is not set and there is no cache directory: %v", err)
		}
		cache = filepath.Join(home, ".cache")
	}
	p := filepath.Join(cache, "botpool", "tools", "helm-"+version)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("HELM is not set and the pinned helm is not built (`make test` builds and passes it): %v", err)
	}
	return p
}

// readMakeVar reads a pinned version (`NAME ?= value`) from the Makefile.
func readMakeVar(name string) (string, error) {
	mk, err := os.ReadFile("Makefile")
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s*\?=\s*(\S+)`).FindSubmatch(mk)
	if m == nil {
		return "", fmt.Errorf("the Makefile pins no %s", name)
	}
	return string(m[1]), nil
}

func readRepoFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.FromSlash(path))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestMetricNamesSeesEverySelector: the name collection the test above relies on finds the
// names in ranges, binary operations, functions and __name__ matchers, substitutes Grafana's
// variables, and refuses what does not parse.
func TestMetricNamesSeesEverySelector(t *testing.T) {
	got, err := metricNames(`sum by (le) (rate(a_bucket{namespace=~"$namespace", pool=~"${pool}"}[$__rate_interval])) / on() b + {__name__="c"} or vector(0)`)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a_bucket", "b", "c"}; !slices.Equal(slices.Sorted(slices.Values(got)), want) {
		t.Errorf("names %v, want %v", got, want)
	}
	if _, err := metricNames(`sum(rate(x[5m])`); err == nil {
		t.Error("an unbalanced parenthesis parses")
	}
	if _, err := metricNames(`{__name__=~"botpool_.*"}`); err == nil {
		t.Error("a __name__ pattern is accepted")
	}
}
