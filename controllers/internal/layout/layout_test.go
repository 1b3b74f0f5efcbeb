package layout

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const (
	module = "botpool.dev/botpool"
	// root is controllers/, seen from this package's directory.
	root = "../.."
	// packageLines is the most non-test lines a package under controllers/ may hold: past it, a
	// newcomer cannot find their way in it, and it wants splitting by concern.
	packageLines = 3000
)

// mayImport is what each package under controllers/ may import of the others (by its path
// under controllers/, internal/ dropped), besides packages outside controllers/. The root
// (Setup and the wake-up graph) may import everything; nothing may import the root (the
// compiler says so: it would be a cycle). The reconcilers (pool, slot, bot) import no other
// reconciler, except bot, which imports dispatch for the reservation ledger: a scheduled
// bot's reservation is decided under the per-pool lock a binding wave runs under. A package
// missing from the table fails the test: a new package must say what it may use.
var mayImport = map[string][]string{
	"policy": nil, "metrics": nil,
	"index":       {"policy"}, // a bot's deduplication key is indexed as policy computes it
	"coolifyview": {"policy"},
	"pass":        {"policy", "coolifyview"},
	"deploygate":  {"policy", "coolifyview"},
	"tenantshare": {"metrics"},
	"tenancy":     {"policy"},
	"fakeapi":     {"index"}, // imported by tests only
	"layout":      nil,
	"dispatch":    {"policy", "pass", "index", "metrics", "tenancy"},
	"bot":         {"policy", "pass", "index", "metrics", "dispatch", "tenancy"},
	"pool":        {"policy", "pass", "index", "metrics", "coolifyview", "deploygate"},
	"slot":        {"policy", "pass", "index", "metrics", "coolifyview", "deploygate"},
}

// packages lists the directories of the packages under dir (dir included) that hold Go files.
func packages(t *testing.T, dir string) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || !e.IsDir() {
			return err
		}
		if files, _ := filepath.Glob(filepath.Join(path, "*.go")); len(files) > 0 {
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// nonTestFiles lists the non-test Go files of the package in dir.
func nonTestFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, "_test.go") })
}

// importProblems reports every import of a non-test file in dir that may does not allow.
func importProblems(t *testing.T, dir string, may func(path string) bool) []string {
	t.Helper()
	var problems []string
	for _, p := range nonTestFiles(t, dir) {
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); !may(path) {
				problems = append(problems, fmt.Sprintf("%s imports %s", filepath.Base(p), path))
			}
		}
	}
	return problems
}

// layoutProblems reports, for every package under dir (controllers/ or a copy of its shape),
// the imports mayImport does not allow it and a package the table does not know.
func layoutProblems(t *testing.T, dir string) []string {
	t.Helper()
	var problems []string
	for _, pkg := range packages(t, dir) {
		rel, err := filepath.Rel(dir, pkg)
		if err != nil {
			t.Fatal(err)
		}
		if rel == "." {
			continue // the root may import everything
		}
		name := strings.TrimPrefix(filepath.ToSlash(rel), "internal/")
		allowed, known := mayImport[name]
		if !known {
			problems = append(problems, fmt.Sprintf("%s: a package the layout table (mayImport) does not know", rel))
			continue
		}
		for _, p := range importProblems(t, pkg, func(path string) bool {
			under, ok := strings.CutPrefix(path, module+"/controllers")
			return !ok || under != "" && slices.Contains(allowed, strings.TrimPrefix(strings.TrimPrefix(under, "/"), "internal/"))
		}) {
			problems = append(problems, fmt.Sprintf("%s: %s, which the layout does not allow", rel, p))
		}
	}
	slices.Sort(problems)
	return problems
}

// TestPackagesImportOnlyWhatTheyMay walks every package under controllers/.
func TestPackagesImportOnlyWhatTheyMay(t *testing.T) {
	if n := len(packages(t, root)); n < 10 {
		t.Fatalf("found %d packages under controllers/: the walk runs in the wrong directory", n)
	}
	for _, p := range layoutProblems(t, root) {
		t.Error(p)
	}
}

// policyMayImport: pure decisions import no I/O: no client, clock, store, Coolify client,
// context or network; the API types and apimachinery's value types are data.
func policyMayImport(path string) bool {
	switch {
	case path == module+"/api/v1alpha1", path == "k8s.io/api/core/v1",
		strings.HasPrefix(path, "k8s.io/apimachinery/"):
		return true
	case strings.Contains(strings.SplitN(path, "/", 2)[0], "."):
		return false // any other module
	}
	for _, io := range []string{"context", "net", "os", "io", "syscall", "database", "log"} {
		if path == io || strings.HasPrefix(path, io+"/") {
			return false
		}
	}
	return true
}

// TestPolicyDoesNoIO: package policy imports only the standard library's pure packages, the
// API types and apimachinery, so its decisions stay functions of their arguments.
func TestPolicyDoesNoIO(t *testing.T) {
	for _, p := range importProblems(t, filepath.Join(root, "internal", "policy"), policyMayImport) {
		t.Errorf("policy: %s, which may do I/O", p)
	}
}

// The rules can fail: a reconciler importing another, a package the table does not know, and
// a policy file importing context are each reported.
func TestLayoutRulesReportBreaches(t *testing.T) {
	dir := t.TempDir()
	write := func(path, src string) {
		t.Helper()
		full := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("setup.go", "package controllers\n\nimport _ \""+module+"/controllers/slot\"\n")
	write("pool/supply.go", "package pool\n\nimport (\n\t_ \""+module+"/controllers/dispatch\"\n\t_ \""+module+"/controllers/internal/policy\"\n)\n")
	write("bot/controller.go", "package bot\n\nimport _ \""+module+"/controllers/dispatch\"\n")
	write("internal/stray/stray.go", "package stray\n")
	write("internal/policy/free.go", "package policy\n\nimport (\n\t\"context\"\n\t\"strings\"\n)\n")
	want := []string{
		"internal/stray: a package the layout table (mayImport) does not know",
		"pool: supply.go imports " + module + "/controllers/dispatch, which the layout does not allow",
	}
	if got := layoutProblems(t, dir); !slices.Equal(got, want) {
		t.Fatalf("problems = %q, want %q", got, want)
	}
	if got, want := importProblems(t, filepath.Join(dir, "internal", "policy"), policyMayImport), []string{"free.go imports context"}; !slices.Equal(got, want) {
		t.Fatalf("policy import problems = %q, want %q", got, want)
	}
}

// TestNoPackageOutgrowsItsSize: no package under controllers/ holds more than packageLines
// non-test lines.
func TestNoPackageOutgrowsItsSize(t *testing.T) {
	total := 0
	for _, pkg := range packages(t, root) {
		n := 0
		for _, f := range nonTestFiles(t, pkg) {
			n += lines(t, f)
		}
		total += n
		if n > packageLines {
			t.Errorf("%s holds %d non-test lines, more than %d: split it by concern", pkg, n, packageLines)
		}
	}
	if total < 5000 {
		t.Fatalf("counted %d lines under controllers/: the walk missed packages", total)
	}
}

func lines(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		n++
	}
	return n
}

// TestDocSaysWhereEveryFileIs: each package's doc.go under controllers/ names every file of
// its package in "Where things are", so a newcomer's map does not go stale when a file is
// added, moved or renamed.
func TestDocSaysWhereEveryFileIs(t *testing.T) {
	listed := 0
	for _, dir := range packages(t, root) {
		doc, err := os.ReadFile(filepath.Join(dir, "doc.go"))
		if err != nil {
			t.Errorf("%s has no doc.go with its file map: %v", dir, err)
			continue
		}
		for _, f := range nonTestFiles(t, dir) {
			f = filepath.Base(f)
			if f == "doc.go" {
				continue
			}
			if !strings.Contains(string(doc), "//\t"+f+" ") {
				t.Errorf("%s does not say what %s holds (add it under \"Where things are\")", filepath.Join(dir, "doc.go"), f)
			}
			listed++
		}
	}
	if listed < 40 {
		t.Errorf("found only %d files under controllers/: the walk missed packages", listed)
	}
}

// The controllers must not depend on the bot API's HTTP server (package botapi), directly or
// through another package of this module: what they share with it about slot tokens lives in
// internal/slottoken. The walk follows the imports of the non-test files of every package of
// this module that controllers reaches, like `go list -deps ./controllers` does (ignoring build
// constraints, so it errs on the side of finding an import).
func TestControllersReachTokensWithoutBotAPI(t *testing.T) {
	deps := map[string]bool{}
	var walk func(pkg string)
	walk = func(pkg string) {
		if deps[pkg] {
			return
		}
		deps[pkg] = true
		dir := filepath.Join(root, "..", strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/"))
		files, err := os.ReadDir(dir)
		if err != nil {
			t.Fatalf("package %s: %v", pkg, err)
		}
		for _, f := range files {
			if f.IsDir() || !strings.HasSuffix(f.Name(), ".go") || strings.HasSuffix(f.Name(), "_test.go") {
				continue
			}
			parsed, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, f.Name()), nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range parsed.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if path == module || strings.HasPrefix(path, module+"/") {
					walk(path)
				}
			}
		}
	}
	walk(module + "/controllers")

	// The walk must have followed the imports at all for its verdict to mean anything.
	if !deps[module+"/internal/slottoken"] || !deps[module+"/coolify"] {
		t.Fatalf("the walk did not reach packages controllers imports: %v", deps)
	}
	if deps[module+"/botapi"] {
		t.Errorf("controllers depend on %s/botapi (the HTTP server); take token helpers from internal/slottoken", module)
	}
}
