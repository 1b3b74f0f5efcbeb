package controllers

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The layout rules of issue 31 in their in-package form. Step 2 moves each file to the
// package layoutHome names; until then the compiler cannot say what a file may touch, so this
// test does: a reconciler's files use no other reconciler's names (except the bot reconciler
// the dispatcher's reservation ledger), the shared layer uses no reconciler's, and a method
// lives with its type. Package policy (controllers/internal/policy, moved) imports nothing
// that may do I/O (TestPolicyDoesNoIO); nothing it declares can reach back into this package.
// In step 3 the rules become a walk over the packages' imports.

// layoutHome is the package each non-test file of controllers/ moves to in step 2 of issue 31
// (controllers/internal/... for the shared layer, controllers/<kind> for a reconciler, "root"
// for what stays here). A file without an entry fails the test: a new file must say where it
// belongs. Files named pool_*, slot_* and bot_* belong to their kind unless listed.
var layoutHome = map[string]string{
	"setup.go": "root", "watches.go": "root", "doc.go": "root",

	"warm_schedule.go": "pool",
}

// layoutUses is what each future package may use besides itself. The root (Setup and the
// wake-up graph) may use everything. bot → dispatch is the one declared edge between
// reconcilers: the bot reconciler shares the dispatcher's reservation ledger.
var layoutUses = map[string][]string{
	"policy": nil, "index": nil, "metrics": nil,
	"coolifyview": {"policy"},
	"pass":        {"policy", "coolifyview"},
	"deploygate":  {"policy", "coolifyview"},
	"tenantshare": {"metrics"},
	"fakeapi":     {"index"}, // imported by tests only
	"dispatch":    {"policy", "pass", "index", "metrics"},
	"bot":         {"policy", "pass", "index", "metrics", "dispatch"},
	"pool":        {"policy", "pass", "index", "metrics", "coolifyview", "deploygate"},
	"slot":        {"policy", "pass", "index", "metrics", "coolifyview", "deploygate"},
}

const layoutPrefix = "botpool.dev/botpool/controllers/"

func layoutHomeOf(file string) string {
	if h, ok := layoutHome[file]; ok {
		return h
	}
	for _, kind := range []string{"pool", "slot", "bot"} {
		if strings.HasPrefix(file, kind+"_") {
			return kind
		}
	}
	return ""
}

// policyMayImport: pure decisions import no I/O: no client, clock, store, Coolify client,
// context or network; the API types and apimachinery's value types are data.
func policyMayImport(path string) bool {
	switch {
	case path == "botpool.dev/botpool/api/v1alpha1", path == "k8s.io/api/core/v1",
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

// layoutProblems parses the package's non-test files in dir and reports every use of a
// top-level name (type, func, const, var) declared in a file of a future package the user's
// may not use, every method declared away from its type's future package, every file without
// a home, and every import of a policy file that may do I/O. It resolves names the way the
// parser does (a name no file-local declaration resolves is the package's), so it needs no
// type checking.
func layoutProblems(dir string) ([]string, error) {
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	files := map[string]*ast.File{}
	declaredIn := map[string]string{}
	consts := map[string]bool{}
	var problems []string
	for _, p := range paths {
		name := filepath.Base(p)
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return nil, err
		}
		files[name] = f
		if layoutHomeOf(name) == "" {
			problems = append(problems, name+": no future package (add it to layoutHome)")
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					declaredIn[d.Name.Name] = name
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						declaredIn[s.Name.Name] = name
					case *ast.ValueSpec:
						for _, id := range s.Names {
							declaredIn[id.Name] = name
							consts[id.Name] = consts[id.Name] || d.Tok == token.CONST
						}
					}
				}
			}
		}
	}
	for name, f := range files {
		from := layoutHomeOf(name)
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if to, ok := strings.CutPrefix(path, layoutPrefix); ok && from != "root" &&
				!slices.Contains(layoutUses[from], strings.TrimPrefix(to, "internal/")) {
				problems = append(problems, fmt.Sprintf("%s (%s) imports %s", name, from, path))
			}
		}
		skip := map[*ast.Ident]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				skip[n.Sel] = true
			case *ast.FuncDecl:
				skip[n.Name] = true
				if n.Recv == nil {
					break
				}
				t := n.Recv.List[0].Type
				if s, ok := t.(*ast.StarExpr); ok {
					t = s.X
				}
				if id, ok := t.(*ast.Ident); ok {
					if df, ok := declaredIn[id.Name]; ok && layoutHomeOf(df) != from {
						problems = append(problems, fmt.Sprintf("%s (%s) declares %s.%s, a method of a type of %s (%s)",
							name, from, id.Name, n.Name.Name, df, layoutHomeOf(df)))
					}
				}
			case *ast.CompositeLit:
				for _, e := range n.Elts {
					if kv, ok := e.(*ast.KeyValueExpr); ok {
						if id, ok := kv.Key.(*ast.Ident); ok && !consts[id.Name] {
							skip[id] = true // a struct field's name, not a use
						}
					}
				}
			}
			return true
		})
		reported := map[string]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok || skip[id] || id.Obj != nil || id.Name == "_" {
				return true
			}
			df, ok := declaredIn[id.Name]
			if !ok || df == name {
				return true
			}
			to := layoutHomeOf(df)
			if to == from || from == "root" || reported[id.Name] {
				return true
			}
			if slices.Contains(layoutUses[from], to) {
				return true
			}
			reported[id.Name] = true
			problems = append(problems, fmt.Sprintf("%s (%s) uses %s of %s (%s)", name, from, id.Name, df, to))
			return true
		})
	}
	sort.Strings(problems)
	return problems, nil
}

// importProblems reports every import of a non-test file in dir that may not imports.
func importProblems(dir string, may func(string) bool) ([]string, error) {
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return nil, err
		}
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); !may(path) {
				problems = append(problems, fmt.Sprintf("%s imports %s, which may do I/O", filepath.Base(p), path))
			}
		}
	}
	sort.Strings(problems)
	return problems, nil
}

// TestPolicyDoesNoIO: package policy imports only the standard library's pure packages, the
// API types and apimachinery, so its decisions stay functions of their arguments.
func TestPolicyDoesNoIO(t *testing.T) {
	problems, err := importProblems("internal/policy", policyMayImport)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestMovedPackagesImportOnlyWhatTheyMay: a package already moved under controllers/ imports
// of the others only what layoutUses allows it (the compiler already keeps them from
// importing this package: that would be a cycle).
func TestMovedPackagesImportOnlyWhatTheyMay(t *testing.T) {
	dirs, err := filepath.Glob("internal/*")
	if err != nil {
		t.Fatal(err)
	}
	more, err := filepath.Glob("[a-z]*")
	if err != nil {
		t.Fatal(err)
	}
	moved := 0
	for _, dir := range append(dirs, more...) {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() || dir == "internal" {
			continue
		}
		name := filepath.Base(dir)
		allowed, known := layoutUses[name]
		if !known {
			t.Errorf("%s: a package layoutUses does not know", dir)
			continue
		}
		moved++
		problems, err := importProblems(dir, func(path string) bool {
			rest, ok := strings.CutPrefix(path, layoutPrefix)
			return !ok || slices.Contains(allowed, strings.TrimPrefix(rest, "internal/"))
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("%s: %s", dir, strings.Replace(p, "which may do I/O", "which layoutUses does not allow", 1))
		}
	}
	if moved == 0 {
		t.Fatal("no moved package found: the test runs in the wrong directory")
	}
}

func TestLayoutRules(t *testing.T) {
	problems, err := layoutProblems(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	if layoutHome["setup.go"] != "root" {
		t.Fatal("layoutHome does not place setup.go: the table was lost")
	}
}

// The rules can fail: a pool file reaching a slot name or importing a package its kind may
// not, a method away from its type, a file without a home, and a policy file importing context
// are each reported.
func TestLayoutRulesReportBreaches(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte("package controllers\n\n"+src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("slot_a.go", "type slotThing struct{}\n\nfunc slotHelper() int { return 1 }\n")
	write("pool_b.go", "import \"botpool.dev/botpool/controllers/dispatch\"\n\nvar _ dispatch.Ledger\n\n"+
		"func (slotThing) poolMethod() {}\n\nfunc poolUse() int { return slotHelper() }\n")
	write("unplaced.go", "func unplaced() {}\n")
	problems, err := layoutProblems(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"pool_b.go (pool) declares slotThing.poolMethod, a method of a type of slot_a.go (slot)",
		"pool_b.go (pool) imports botpool.dev/botpool/controllers/dispatch",
		"pool_b.go (pool) uses slotHelper of slot_a.go (slot)",
		"pool_b.go (pool) uses slotThing of slot_a.go (slot)",
		"unplaced.go: no future package (add it to layoutHome)",
	}
	if !slices.Equal(problems, want) {
		t.Fatalf("problems = %q, want %q", problems, want)
	}

	dir = t.TempDir()
	write("free.go", "import (\n\t\"context\"\n\t\"strings\"\n\n\tv1 \"botpool.dev/botpool/api/v1alpha1\"\n)\n\nvar _ context.Context\n")
	problems, err = importProblems(dir, policyMayImport)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"free.go imports context, which may do I/O"}; !slices.Equal(problems, want) {
		t.Fatalf("import problems = %q, want %q", problems, want)
	}
}
