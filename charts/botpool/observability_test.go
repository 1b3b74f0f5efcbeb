package chart_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// The PromQL of the dashboard and of the alerts is parsed, and each metric it names checked
// against a running manager, by TestDashboardAndAlertsNameRealMetrics in the repository's root
// package (it needs the manager). These tests check how the chart renders them.

// TestDashboardConfigMap: off by default; on, a ConfigMap with the sidecar's label (or the
// labels given), the annotations, the namespace override, and the dashboard file verbatim.
func TestDashboardConfigMap(t *testing.T) {
	t.Parallel()
	if n := len(template(t, "botpool").ofKind("ConfigMap")); n != 0 {
		t.Errorf("%d ConfigMaps rendered by default, want none", n)
	}
	m := template(t, "botpool", "--set", "grafana.dashboards.enabled=true")
	cm, ok := m["ConfigMap/botpool-dashboard"]
	if !ok {
		t.Fatalf("no ConfigMap/botpool-dashboard; have %v", m.keys())
	}
	if got := str(cm.u, "metadata", "labels", "grafana_dashboard"); got != "1" {
		t.Errorf("label grafana_dashboard = %q, want \"1\" (the Grafana sidecar's default)", got)
	}
	if got := str(cm.u, "metadata", "namespace"); got != namespace {
		t.Errorf("namespace %q, want the release's", got)
	}
	data := str(cm.u, "data", "botpool.json")
	var rendered, file any
	if err := json.Unmarshal([]byte(data), &rendered); err != nil {
		t.Fatalf("the ConfigMap's botpool.json is not JSON: %v", err)
	}
	if err := json.Unmarshal(readFile(t, "dashboards/botpool.json"), &file); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rendered, file) {
		t.Error("the ConfigMap's dashboard differs from dashboards/botpool.json")
	}

	m = template(t, "botpool", "-f", writeValues(t, `
grafana:
  dashboards:
    enabled: true
    namespace: monitoring
    labels: {grafana_dashboard: "yes", team: bots}
    annotations: {grafana_folder: botpool}
`))
	cm = m["ConfigMap/monitoring/botpool-dashboard"]
	if cm.u == nil {
		t.Fatalf("no ConfigMap in namespace monitoring; have %v", m.keys())
	}
	if str(cm.u, "metadata", "labels", "grafana_dashboard") != "yes" || str(cm.u, "metadata", "labels", "team") != "bots" ||
		str(cm.u, "metadata", "annotations", "grafana_folder") != "botpool" {
		t.Errorf("labels and annotations not applied: %v", dig(cm.u, "metadata"))
	}
}

type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func alertRules(t *testing.T, m manifest, key string) map[string]alertRule {
	t.Helper()
	o, ok := m[key]
	if !ok {
		t.Fatalf("no %s; have %v", key, m.keys())
	}
	var pr struct {
		Spec struct {
			Groups []struct {
				Rules []alertRule `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(mustJSON(t, o.u), &pr); err != nil {
		t.Fatal(err)
	}
	rules := map[string]alertRule{}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			rules[r.Alert] = r
		}
	}
	return rules
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPrometheusRule: off by default; on, the eight alerts with severity, summary, description
// and runbook_url; the values reach them (thresholds, for, labels, namespace, runbook base).
func TestPrometheusRule(t *testing.T) {
	t.Parallel()
	if n := len(template(t, "botpool").ofKind("PrometheusRule")); n != 0 {
		t.Errorf("%d PrometheusRules rendered by default, want none", n)
	}
	rules := alertRules(t, template(t, "botpool", "--set", "prometheusRule.enabled=true"), "PrometheusRule/botpool")
	want := []string{"BotpoolPoolStalled", "BotpoolQueueWaitHigh", "BotpoolBotsFailing", "BotpoolCoolifyThrottled",
		"BotpoolStoreDown", "BotpoolHeartbeatTimeoutsRising", "BotpoolWebhooksGivenUp", "BotpoolWebhooksLagging"}
	if len(rules) != len(want) {
		t.Errorf("%d alerts, want %v", len(rules), want)
	}
	for _, name := range want {
		r, ok := rules[name]
		if !ok {
			t.Errorf("no alert %s", name)
			continue
		}
		if r.Expr == "" || r.For == "" || r.Labels["severity"] == "" {
			t.Errorf("%s: expr %q, for %q, labels %v", name, r.Expr, r.For, r.Labels)
		}
		for _, a := range []string{"summary", "description"} {
			if r.Annotations[a] == "" {
				t.Errorf("%s has no %s", name, a)
			}
		}
		if got, want := r.Annotations["runbook_url"], "docs/runbooks.md#"+strings.ToLower(name); got != want {
			t.Errorf("%s: runbook_url %q, want %q", name, got, want)
		}
	}

	m := template(t, "botpool", "-f", writeValues(t, `
prometheusRule:
  enabled: true
  namespace: monitoring
  labels: {release: prometheus}
  additionalLabels: {team: bots}
  runbookBaseURL: https://docs.example.com/botpool/runbooks
  alerts:
    queueWaitHigh: {quantile: 0.99, thresholdSeconds: 300, window: 30m, for: 20m}
    coolifyThrottled: {enabled: false}
    storeDown: {severity: page}
`))
	o := m["PrometheusRule/monitoring/botpool"]
	if got := str(o.u, "metadata", "labels", "release"); got != "prometheus" {
		t.Errorf("label release = %q", got)
	}
	rules = alertRules(t, m, "PrometheusRule/monitoring/botpool")
	if _, ok := rules["BotpoolCoolifyThrottled"]; ok {
		t.Error("a disabled alert is rendered")
	}
	q := rules["BotpoolQueueWaitHigh"]
	if q.Expr != "histogram_quantile(0.99, sum by (le) (rate(botpool_bot_queue_wait_seconds_bucket[30m]))) > 300" || q.For != "20m" {
		t.Errorf("queueWaitHigh: expr %q for %q", q.Expr, q.For)
	}
	if rules["BotpoolStoreDown"].Labels["severity"] != "page" {
		t.Errorf("storeDown labels %v", rules["BotpoolStoreDown"].Labels)
	}
	for name, r := range rules {
		if r.Labels["team"] != "bots" {
			t.Errorf("%s lacks the additional label: %v", name, r.Labels)
		}
		if !strings.HasPrefix(r.Annotations["runbook_url"], "https://docs.example.com/botpool/runbooks#") {
			t.Errorf("%s: runbook_url %q", name, r.Annotations["runbook_url"])
		}
	}
}
