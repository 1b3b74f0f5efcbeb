package controllers

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The controllers must not depend on the bot API's HTTP server (package botapi), directly or
// through another package of this module: what they share with it about slot tokens lives in
// internal/slottoken. The walk follows the imports of the non-test files of every package of
// this module that controllers reaches, like `go list -deps ./controllers` does (ignoring build
// constraints, so it errs on the side of finding an import).
func TestControllersReachTokensWithoutBotAPI(t *testing.T) {
	const module = "botpool.dev/botpool"
	deps := map[string]bool{}
	var walk func(pkg string)
	walk = func(pkg string) {
		if deps[pkg] {
			return
		}
		deps[pkg] = true
		dir := filepath.Join("..", strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/"))
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

// TestDocSaysWhereEveryFileIs: each package's doc.go under controllers/ names every file of
// its package in "Where things are", so a newcomer's map does not go stale when a file is
// added, moved or renamed.
func TestDocSaysWhereEveryFileIs(t *testing.T) {
	var dirs []string
	err := filepath.WalkDir(".", func(dir string, e fs.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			dirs = append(dirs, dir)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	packages, listed := 0, 0
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			continue
		}
		packages++
		doc, err := os.ReadFile(filepath.Join(dir, "doc.go"))
		if err != nil {
			t.Errorf("%s has no doc.go with its file map: %v", dir, err)
			continue
		}
		for _, f := range files {
			f = filepath.Base(f)
			if strings.HasSuffix(f, "_test.go") || f == "doc.go" {
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
	if packages < 2 {
		t.Fatalf("found only %d packages: the test runs in the wrong directory", packages)
	}
}
