// Package chart_test renders the botpool Helm chart with the pinned helm binary and checks the
// objects it produces. The chart is not Go code; the tests live next to it so that `go test
// ./...` (and so `make test` and CI) covers it like every other part of the repository.
package chart_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	// repoRoot is where the generated manifests and the Makefile are, seen from this package.
	repoRoot  = "../.."
	namespace = "botpool-system"
)

var (
	helmOnce sync.Once
	helmPath string
	helmSkip string
	helmErr  error
)

// helm finds the helm binary: $HELM (which the Makefile exports), else the cached build of the
// version the Makefile pins. It skips only when neither exists, so a plain `go test ./...`
// without the tool still passes; a $HELM that does not exist is an error.
func helm(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() { helmPath, helmSkip, helmErr = findHelm() })
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	if helmSkip != "" {
		t.Skip(helmSkip)
	}
	return helmPath
}

func findHelm() (path, skip string, err error) {
	if p := os.Getenv("HELM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", "", fmt.Errorf("HELM=%s: %w (build it with `make %s`)", p, err, p)
		}
		return p, "", nil
	}
	version, err := readMakeVar("HELM_VERSION")
	if err != nil {
		return "", "", err
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Sprintf("helm chart tests skipped: HELM is not set and there is no cache directory to look in: %v", err), nil
		}
		cache = filepath.Join(home, ".cache")
	}
	p := filepath.Join(cache, "botpool", "tools", "helm-"+version)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Sprintf("helm chart tests skipped: HELM is not set and the pinned helm is not built (`make test` builds and passes it): %v", err), nil
	}
	return p, "", nil
}

// makeVar reads a pinned version (`NAME ?= value`) from the Makefile, the one place versions
// are written down.
func makeVar(t *testing.T, name string) string {
	t.Helper()
	v, err := readMakeVar(name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func readMakeVar(name string) (string, error) {
	mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s*\?=\s*(\S+)`).FindSubmatch(mk)
	if m == nil {
		return "", fmt.Errorf("the Makefile pins no %s", name)
	}
	return string(m[1]), nil
}

// kubeVersion is passed to every render: a helm built by `go install` lacks the link-time
// Kubernetes version of the release builds and would assume v1.20, below the chart's
// kubeVersion. The envtest version is the one the project tests against.
func kubeVersion(t *testing.T) string {
	return "v" + makeVar(t, "KUBE_VERSION")
}

// runHelm runs helm in this directory with its own empty config, cache and data directories,
// so nothing of the user's helm setup (repositories, plugins) leaks in.
func runHelm(t *testing.T, args ...string) (stdout string, err error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), helm(t), args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "no-kubeconfig"),
	)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, errOut.String(), out.String())
	}
	return out.String(), nil
}

// object is one rendered document: its raw YAML (for strict typed decoding) and a generic view.
type object struct {
	raw []byte
	u   map[string]any
}

func (o object) kind() string { return str(o.u, "kind") }
func (o object) name() string { return str(o.u, "metadata", "name") }

// manifest is a rendered release, keyed by "Kind/name".
type manifest map[string]object

// template renders the chart as release `release` in botpool-system with the given extra
// arguments (-f files, --set ...), failing the test on a helm error.
func template(t *testing.T, release string, args ...string) manifest {
	t.Helper()
	out, err := templateErr(t, release, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func templateErr(t *testing.T, release string, args ...string) (manifest, error) {
	t.Helper()
	return templateInErr(t, namespace, release, args...)
}

// templateIn renders the chart into namespace ns.
func templateIn(t *testing.T, ns, release string, args ...string) manifest {
	t.Helper()
	out, err := templateInErr(t, ns, release, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func templateInErr(t *testing.T, ns, release string, args ...string) (manifest, error) {
	t.Helper()
	out, err := runHelm(t, append([]string{"template", release, ".", "--namespace", ns,
		"--kube-version", kubeVersion(t)}, args...)...)
	if err != nil {
		return nil, err
	}
	m := manifest{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return m, nil
		}
		if err != nil {
			t.Fatalf("reading the rendered manifest: %v", err)
		}
		var u map[string]any
		if err := yaml.Unmarshal(doc, &u); err != nil {
			t.Fatalf("rendered YAML does not parse: %v\n%s", err, doc)
		}
		if u == nil {
			continue // a template that rendered nothing
		}
		o := object{raw: doc, u: u}
		key := o.kind() + "/" + o.name()
		if objNS := str(u, "metadata", "namespace"); objNS != "" && objNS != ns {
			// An object in another namespace (the Roles of watchNamespaces) is keyed with it.
			key = o.kind() + "/" + objNS + "/" + o.name()
		}
		if _, dup := m[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		m[key] = o
	}
}

// keys lists the rendered objects, for failure messages.
func (m manifest) keys() []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// decode strictly decodes the object kind/name into into: a field the API type does not have
// (a typo in a template) fails the test.
func (m manifest) decode(t *testing.T, kind, name string, into any) {
	t.Helper()
	o, ok := m[kind+"/"+name]
	if !ok {
		t.Fatalf("no %s/%s rendered; have %v", kind, name, m.keys())
	}
	if err := yaml.UnmarshalStrict(o.raw, into); err != nil {
		t.Fatalf("%s/%s does not decode strictly: %v\n%s", kind, name, err, o.raw)
	}
}

func (m manifest) ofKind(kind string) []object {
	var objs []object
	for _, o := range m {
		if o.kind() == kind {
			objs = append(objs, o)
		}
	}
	return objs
}

// str digs a string out of nested maps; "" when any step is missing.
func str(u map[string]any, path ...string) string {
	s, _ := dig(u, path...).(string)
	return s
}

func dig(u map[string]any, path ...string) any {
	var cur any = u
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

// writeValues writes a values file for one test and returns its path.
func writeValues(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
