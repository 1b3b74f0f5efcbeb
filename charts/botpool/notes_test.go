package chart_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// TestNotes renders NOTES.txt (helm template leaves it out, and helm install --dry-run needs a
// release build's Kubernetes version) by wrapping it into a ConfigMap of a copy of the chart.
func TestNotes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		set  []string
		want []string
	}{
		{nil, []string{
			"http://botpool-bot-api.botpool-system.svc:8082",
			"resolves only inside the cluster",
			"embedded in-memory store",
			"create secret generic coolify-credentials",
			"kind: BotPool",
		}},
		{[]string{"podDisruptionBudget.enabled=true"}, []string{"it blocks node drains"}},
		{[]string{"botApi.service.type=LoadBalancer", "database.existingSecret=pg", "crds.install=false", "podDisruptionBudget.enabled=true"}, []string{
			"(2 replica(s), leader-elected)",
			"get service botpool-bot-api",
			"Postgres, URL from the Secret pg (key url)",
			"crds.install is false",
		}},
		{[]string{"botApi.separate=true", "database.existingSecret=pg", "podDisruptionBudget.enabled=true", "botApi.replicaCount=1"}, []string{
			"The bot API runs apart from the controllers (botApi.separate): Deployment botpool-bot-api,",
			"1 replica(s), ServiceAccount botpool-bot-api (no access to Secrets)",
			"the bot API's PodDisruptionBudget keeps 1 of 1 pod(s) available: it blocks node drains",
		}},
	}
	for _, tt := range tests {
		notes := renderNotes(t, tt.set...)
		for _, w := range tt.want {
			if !strings.Contains(notes, w) {
				t.Errorf("NOTES with %v do not contain %q:\n%s", tt.set, w, notes)
			}
		}
	}
}

// renderNotes renders NOTES.txt for the release botpool in botpool-system with --set values.
func renderNotes(t *testing.T, set ...string) string {
	t.Helper()
	args := []string{"template", "botpool", copyChartWithNotesAsConfigMap(t), "--namespace", namespace,
		"--kube-version", kubeVersion(t), "--show-only", "templates/zz-notes.yaml"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := runHelm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict([]byte(out), &cm); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return cm.Data["notes"]
}

func copyChartWithNotesAsConfigMap(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "botpool")
	if err := os.CopyFS(dst, os.DirFS(".")); err != nil {
		t.Fatal(err)
	}
	notes, err := os.ReadFile("templates/NOTES.txt")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"templates/_zz-notes.tpl": `{{- define "test.notes" -}}` + string(notes) + `{{- end }}`,
		"templates/zz-notes.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n" +
			`  notes: {{ include "test.notes" . | quote }}` + "\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dst, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// notesExamples decodes the objects of the <<'YAML' ... YAML blocks of the notes, with the
// placeholders (<project uuid>) filled in.
func notesExamples(t *testing.T, notes string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, block := range strings.Split(notes, "<<'YAML'\n")[1:] {
		body, _, ok := strings.Cut(block, "\nYAML\n")
		if !ok {
			t.Fatalf("an example in NOTES.txt does not end with a YAML line:\n%s", block)
		}
		body = regexp.MustCompile(`<[a-z ]+>`).ReplaceAllString(body, "kgsc8wwo0kw4w8wcwo8ggsk4")
		u := &unstructured.Unstructured{}
		if err := yaml.UnmarshalStrict([]byte(body), &u.Object); err != nil {
			t.Fatalf("an example in NOTES.txt: %v\n%s", err, body)
		}
		objs = append(objs, u)
	}
	if len(objs) != 2 {
		t.Fatalf("%d examples in NOTES.txt, want a BotPool and a Bot", len(objs))
	}
	return objs
}
