package chart_test

import (
	"flag"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"
)

// TestReadmeFlagTable: the README's table of manager flags ("| `--flag` | default | Helm value
// | meaning |") lists exactly the flags main.go defines (zap's only where named), and each Helm
// value it names is a key of values.yaml, so the table the chart's docs point to stays true.
func TestReadmeFlagTable(t *testing.T) {
	t.Parallel()
	var values map[string]any
	if err := yaml.Unmarshal(readFile(t, "values.yaml"), &values); err != nil {
		t.Fatal(err)
	}
	fs := managerFlags(t)
	zapFlags := flag.NewFlagSet("zap", flag.ContinueOnError)
	(&zap.Options{}).BindFlags(zapFlags)

	flagName := regexp.MustCompile("`--([a-z0-9-]+)`")
	valuePath := regexp.MustCompile("`([A-Za-z][A-Za-z0-9.]*)`")
	listed := map[string]bool{}
	rows := 0
	for i, line := range strings.Split(string(readFile(t, filepath.Join(repoRoot, "README.md"))), "\n") {
		if !strings.HasPrefix(line, "| `--") {
			continue
		}
		rows++
		cells := strings.Split(line, "|")
		if len(cells) != 6 {
			t.Errorf("README.md:%d: want | flag | default | Helm value | meaning |, got %d cells", i+1, len(cells)-2)
			continue
		}
		for _, m := range flagName.FindAllStringSubmatch(cells[1], -1) {
			listed[m[1]] = true
			if fs.Lookup(m[1]) == nil {
				t.Errorf("README.md:%d lists --%s, which the manager does not define", i+1, m[1])
			}
		}
		for _, m := range valuePath.FindAllStringSubmatch(cells[3], -1) {
			if _, ok := digPath(values, strings.Split(m[1], ".")); !ok {
				t.Errorf("README.md:%d names the Helm value %s, which values.yaml lacks", i+1, m[1])
			}
		}
	}
	if rows == 0 {
		t.Fatal("README.md has no flag table (rows starting with | `--)")
	}
	fs.VisitAll(func(f *flag.Flag) {
		if zapFlags.Lookup(f.Name) == nil && !listed[f.Name] {
			t.Errorf("README.md's flag table lacks --%s", f.Name)
		}
	})
}

func digPath(m map[string]any, path []string) (any, bool) {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = mm[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}
