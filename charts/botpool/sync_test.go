package chart_test

import (
	"bytes"
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"
)

// The chart cannot read files outside its directory, so the generated CRDs and ClusterRole are
// copied into files/ and templated from there. These tests keep the copies honest.

const syncHint = "the chart's copy of the generated manifests is stale: run `make helm-sync` and commit charts/botpool/files"

// TestFilesMatchGenerated: files/crds and the roles in files/rbac are byte-for-byte what
// controller-gen wrote to config/ — the same files, no stale extra ones.
func TestFilesMatchGenerated(t *testing.T) {
	t.Parallel()
	generated := yamlFiles(t, filepath.Join(repoRoot, "config", "crd", "bases"))
	copied := yamlFiles(t, filepath.Join("files", "crds"))
	if len(generated) == 0 {
		t.Fatal("no generated CRDs in config/crd/bases")
	}
	if !slices.Equal(slices.Sorted(maps.Keys(generated)), slices.Sorted(maps.Keys(copied))) {
		t.Errorf("files/crds holds %v, config/crd/bases %v: %s", slices.Sorted(maps.Keys(copied)), slices.Sorted(maps.Keys(generated)), syncHint)
	}
	for name, gen := range generated {
		if c, ok := copied[name]; ok && !bytes.Equal(c, gen) {
			t.Errorf("files/crds/%s differs from config/crd/bases/%s: %s", name, name, syncHint)
		}
	}
	for _, role := range []string{"role.yaml", "bot_api_role.yaml"} {
		gen := readFile(t, filepath.Join(repoRoot, "config", "rbac", role))
		if !bytes.Equal(readFile(t, filepath.Join("files", "rbac", role)), gen) {
			t.Errorf("files/rbac/%s differs from config/rbac/%s: %s", role, role, syncHint)
		}
	}
}

// TestRenderedCRDsAreGenerated: what the chart installs is the generated CRD, changed only by
// the chart's labels and annotations (the templating through fromYaml/toYaml loses nothing).
func TestRenderedCRDsAreGenerated(t *testing.T) {
	t.Parallel()
	m := template(t, "botpool", "--set", "crds.annotations.example\\.com/owner=platform")
	generated := yamlFiles(t, filepath.Join(repoRoot, "config", "crd", "bases"))
	if n := len(m.ofKind("CustomResourceDefinition")); n != len(generated) {
		t.Errorf("%d CRDs rendered, %d generated", n, len(generated))
	}
	for file, raw := range generated {
		var want map[string]any
		if err := yaml.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		name := str(want, "metadata", "name")
		got, ok := m["CustomResourceDefinition/"+name]
		if !ok {
			t.Errorf("%s (%s) not rendered", name, file)
			continue
		}
		meta, _ := got.u["metadata"].(map[string]any)
		annotations, _ := meta["annotations"].(map[string]any)
		if annotations["helm.sh/resource-policy"] != "keep" || annotations["example.com/owner"] != "platform" {
			t.Errorf("%s annotations %v: want keep and crds.annotations", name, annotations)
		}
		if str(got.u, "metadata", "labels", "app.kubernetes.io/managed-by") != "Helm" {
			t.Errorf("%s lacks the chart's labels", name)
		}
		// Compare without what the chart adds.
		gotCopy := map[string]any{}
		for k, v := range got.u {
			gotCopy[k] = v
		}
		strippedMeta := map[string]any{}
		for k, v := range meta {
			if k != "labels" {
				strippedMeta[k] = v
			}
		}
		strippedAnn := map[string]any{}
		for k, v := range annotations {
			if k != "helm.sh/resource-policy" && k != "example.com/owner" {
				strippedAnn[k] = v
			}
		}
		strippedMeta["annotations"] = strippedAnn
		gotCopy["metadata"] = strippedMeta
		if !reflect.DeepEqual(gotCopy, want) {
			t.Errorf("rendered %s differs from config/crd/bases/%s beyond labels and annotations", name, file)
		}
	}
}

// TestRBACMatchesGenerated: the ClusterRole has exactly the generated rules, and the
// leader-election Role the rules of config/rbac/leader_election_role.yaml.
func TestRBACMatchesGenerated(t *testing.T) {
	t.Parallel()
	m := template(t, "botpool")

	var generated, rendered rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(readFile(t, filepath.Join(repoRoot, "config", "rbac", "role.yaml")), &generated); err != nil {
		t.Fatal(err)
	}
	m.decode(t, "ClusterRole", "botpool-manager", &rendered)
	if len(generated.Rules) == 0 || !reflect.DeepEqual(rendered.Rules, generated.Rules) {
		t.Errorf("ClusterRole rules\n%s\nwant the generated\n%s", mustYAML(t, rendered.Rules), mustYAML(t, generated.Rules))
	}

	var leaderGenerated, leaderRendered rbacv1.Role
	if err := yaml.UnmarshalStrict(readFile(t, filepath.Join(repoRoot, "config", "rbac", "leader_election_role.yaml")), &leaderGenerated); err != nil {
		t.Fatal(err)
	}
	m.decode(t, "Role", "botpool-leader-election", &leaderRendered)
	if !reflect.DeepEqual(leaderRendered.Rules, leaderGenerated.Rules) {
		t.Errorf("leader-election Role rules\n%s\nwant those of config/rbac/leader_election_role.yaml\n%s",
			mustYAML(t, leaderRendered.Rules), mustYAML(t, leaderGenerated.Rules))
	}
}

// TestArgsAcceptedByManager parses every argument the chart renders with a flag set built from
// the manager's own flag definitions: the fs.<Type>Var(&..., "name", ...) calls in main.go,
// read with go/ast (parseFlags is in package main, which a test elsewhere cannot import),
// plus the zap flags that main.go binds through controller-runtime's zap.Options.BindFlags.
// A flag renamed or removed in main.go, or a value of the wrong type, fails here.
func TestArgsAcceptedByManager(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		release string
		args    []string
	}{
		{"botpool", nil},
		{"pool", []string{"-f", nondefaultValues}},
		{"botpool", []string{"--set", "metrics.enabled=false", "--set", "logging.level=3"}},
	} {
		m := template(t, tc.release, tc.args...)
		var d appsv1.Deployment
		m.decode(t, "Deployment", fullname(tc.release), &d)
		args := manager(t, d.Spec.Template.Spec).Args
		fs := managerFlags(t)
		if err := fs.Parse(args); err != nil {
			t.Errorf("values %v: the manager would refuse %v: %v", tc.args, args, err)
		}
		if fs.NArg() != 0 {
			t.Errorf("values %v: positional arguments %v", tc.args, fs.Args())
		}
	}
}

// notFromValues are the manager flags the chart deliberately does not render, and why.
var notFromValues = map[string]string{
	"leader-election-namespace": "the Lease lives in the pod's namespace, which the manager takes by itself",
	"database-url":              "the URL comes from database.existingSecret as BOTPOOL_DATABASE_URL, never as an argument",
	"pprof-bind-address":        "profiling endpoints are for benchmarks and debugging, not a production setting: extraArgs when needed",
}

// TestEveryManagerFlagRendered: each flag main.go defines is set by the chart from a value, or
// listed in notFromValues with its reason. A flag added to the manager fails here until the
// chart gives it a value (extraArgs alone would leave it undocumented in values.yaml).
func TestEveryManagerFlagRendered(t *testing.T) {
	t.Parallel()
	zapFlags := flag.NewFlagSet("zap", flag.ContinueOnError)
	(&zap.Options{}).BindFlags(zapFlags)

	rendered := map[string]bool{}
	// The defaults, and the values that add flags only when set (the bot API's TLS Secret, the
	// bot API apart: --components, in both of its Deployments).
	for _, args := range [][]string{nil, {"--set", "botApi.tls.secretName=bot-api-tls"},
		{"--set", "botApi.separate=true", "--set", "database.existingSecret=pg"}} {
		m := template(t, "botpool", args...)
		for _, d := range m.ofKind("Deployment") {
			var dep appsv1.Deployment
			m.decode(t, "Deployment", d.name(), &dep)
			for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
				name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
				rendered[name] = true
			}
		}
	}
	managerFlags(t).VisitAll(func(f *flag.Flag) {
		if zapFlags.Lookup(f.Name) != nil {
			return // logging: the chart sets level and encoder; the rest go through extraArgs
		}
		_, skipped := notFromValues[f.Name]
		switch {
		case rendered[f.Name] && skipped:
			t.Errorf("--%s is rendered, yet listed in notFromValues", f.Name)
		case !rendered[f.Name] && !skipped:
			t.Errorf("--%s (main.go) is not set by the chart: add a value for it to values.yaml, the schema and templates/deployment.yaml, or list it in notFromValues", f.Name)
		}
	})
	for name := range notFromValues {
		if managerFlags(t).Lookup(name) == nil {
			t.Errorf("notFromValues lists --%s, which main.go no longer defines", name)
		}
	}
}

func fullname(release string) string {
	if strings.Contains(release, "botpool") {
		return release
	}
	return release + "-botpool"
}

// managerFlags builds a flag set with the manager's flags, typed like main.go defines them.
func managerFlags(t *testing.T) *flag.FlagSet {
	t.Helper()
	fset := token.NewFileSet()
	// Every Go file of package main (main.go and the flag blocks beside it), tests aside.
	srcs, err := filepath.Glob(filepath.Join(repoRoot, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, src := range srcs {
		if strings.HasSuffix(src, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, src, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	fs := flag.NewFlagSet("botpool", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	bindsZap := false
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if sel.Sel.Name == "BindFlags" {
				bindsZap = true
				return true
			}
			recv, ok := sel.X.(*ast.Ident)
			if !ok || recv.Name != "fs" || !strings.HasSuffix(sel.Sel.Name, "Var") || len(call.Args) < 2 {
				return true
			}
			lit, ok := call.Args[1].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				t.Errorf("%s: a flag whose name is not a literal; teach this test to read it", fset.Position(call.Pos()))
				return true
			}
			name, _ := strconv.Unquote(lit.Value)
			switch sel.Sel.Name {
			case "StringVar":
				fs.String(name, "", "")
			case "BoolVar":
				fs.Bool(name, false, "")
			case "IntVar":
				fs.Int(name, 0, "")
			case "Int64Var":
				fs.Int64(name, 0, "")
			case "UintVar":
				fs.Uint(name, 0, "")
			case "Float64Var":
				fs.Float64(name, 0, "")
			case "DurationVar":
				fs.Duration(name, 0, "")
			default:
				t.Errorf("%s: fs.%s(%q): teach this test the flag's type", fset.Position(call.Pos()), sel.Sel.Name, name)
			}
			return true
		})
	}
	for _, want := range []string{"leader-elect", "metrics-bind-address", "health-probe-bind-address", "bot-api-bind-address"} {
		if fs.Lookup(want) == nil {
			t.Fatalf("found no --%s in main.go: the flag definitions moved; update managerFlags", want)
		}
	}
	if !bindsZap {
		t.Fatal("main.go no longer calls zap's BindFlags: update managerFlags")
	}
	(&zap.Options{}).BindFlags(fs)
	return fs
}

func yamlFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, p := range paths {
		files[filepath.Base(p)] = readFile(t, p)
	}
	return files
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
