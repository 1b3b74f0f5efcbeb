package v1alpha1_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"botpool.dev/botpool/internal/kubetest"
)

// The repository stands alone: what its comments and docs cite (an invariant by number, a
// test by name, the Coolify contract) is in the repository, not in a sibling directory a clean
// clone does not have.

// invariantCitation matches "invariant 4", "Invariants 1 and 2", "invariants 8, 9 and 10".
var invariantCitation = regexp.MustCompile(`(?i)\binvariants?\s+(\d+(?:\s*(?:,|and|or)\s*\d+)*)\b`)

var digits = regexp.MustCompile(`\d+`)

// invariantHeading is an entry of docs/invariants.md: "## 4. Queue order holds".
var invariantHeading = regexp.MustCompile(`(?m)^## (\d+)\. `)

// outsideRefs are citations of files that live beside the repository, never in it. The
// patterns are escaped, so this file does not match itself.
var outsideRefs = regexp.MustCompile(`\.\./shared/|shared\/coolify/|CONTRACT\.md|DESIGN\.md`)

// repoFiles returns the files under the repository root whose name satisfies keep, relative to
// the root, skipping version control, build output and vendored code.
func repoFiles(t *testing.T, keep func(name string) bool) []string {
	t.Helper()
	root := kubetest.RepoRoot()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "vendor", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if keep(d.Name()) {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// citedInvariants returns, for each invariant number cited in src, the first line citing it.
func citedInvariants(src string) map[int]int {
	out := map[int]int{}
	for _, loc := range invariantCitation.FindAllStringSubmatchIndex(src, -1) {
		line := 1 + strings.Count(src[:loc[0]], "\n")
		for _, n := range digits.FindAllString(src[loc[2]:loc[3]], -1) {
			i, _ := strconv.Atoi(n)
			if _, seen := out[i]; !seen {
				out[i] = line
			}
		}
	}
	return out
}

// documentedInvariants returns the numbers docs/invariants.md has an entry for.
func documentedInvariants(doc string) map[int]bool {
	out := map[int]bool{}
	for _, m := range invariantHeading.FindAllStringSubmatch(doc, -1) {
		n, _ := strconv.Atoi(m[1])
		out[n] = true
	}
	return out
}

// TestInvariantsCitedAreDocumented: every "invariant N" a Go file cites (comments, test
// messages, model-check violations) has its entry "## N." in docs/invariants.md.
func TestInvariantsCitedAreDocumented(t *testing.T) {
	documented := documentedInvariants(readDoc(t, filepath.Join("docs", "invariants.md")))
	if len(documented) == 0 {
		t.Fatal(`docs/invariants.md has no "## N. …" entry: the check matched nothing`)
	}
	cited := 0
	for _, file := range repoFiles(t, func(name string) bool { return strings.HasSuffix(name, ".go") }) {
		for n, line := range citedInvariants(readDoc(t, file)) {
			cited++
			if !documented[n] {
				t.Errorf("%s:%d cites invariant %d, which docs/invariants.md has no entry for", file, line, n)
			}
		}
	}
	if cited == 0 {
		t.Error("no Go file cites an invariant: the check matched nothing")
	}
}

// TestCitationPatterns: the citation and heading patterns find what they are meant to, so the
// test above cannot pass by matching nothing in a changed wording.
func TestCitationPatterns(t *testing.T) {
	src := "a\n// invariant 4: order\nb // Invariants 1 and 2 are checked\n" +
		"x(\"invariants 8, 9 and 10\") // invariant rounds, invariants.md\n"
	got := citedInvariants(src)
	want := map[int]int{4: 2, 1: 3, 2: 3, 8: 4, 9: 4, 10: 4}
	if len(got) != len(want) {
		t.Errorf("citedInvariants = %v, want %v", got, want)
	}
	for n, line := range want {
		if got[n] != line {
			t.Errorf("invariant %d: cited on line %d, want %d (all: %v)", n, got[n], line, got)
		}
	}
	doc := "# Invariants\n\n## 1. One\n\ntext 2. not a heading\n## 12. Twelve\n### 3. a sub-heading\n"
	if d := documentedInvariants(doc); len(d) != 2 || !d[1] || !d[12] {
		t.Errorf("documentedInvariants = %v, want 1 and 12", d)
	}
}

// TestNoReferencesOutsideTheRepository: no Go file, doc, script or manifest points at the
// design notes or the Coolify contract beside the repository (../shared); what they say is in
// docs/invariants.md and docs/coolify.md, and Coolify's spec is vendored in coolify/testdata.
func TestNoReferencesOutsideTheRepository(t *testing.T) {
	text := func(name string) bool {
		switch filepath.Ext(name) {
		case ".go", ".md", ".yaml", ".yml", ".json", ".sh", ".tpl", ".txt":
			return true
		}
		return name == "Makefile" || name == "Dockerfile" || name == "run" || name == "PROJECT"
	}
	files := repoFiles(t, text)
	if len(files) == 0 {
		t.Fatal("no files found: the check matched nothing")
	}
	for _, file := range files {
		src, err := os.ReadFile(filepath.Join(kubetest.RepoRoot(), file))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range bytes.Split(src, []byte("\n")) {
			if m := outsideRefs.Find(line); m != nil {
				t.Errorf("%s:%d cites %q, which is outside the repository: point to docs/ instead", file, i+1, m)
			}
		}
	}
}

// TestInvariantsDocNamesRealTests: every test docs/invariants.md names (`TestX`) exists, and
// every Go file it names is in the repository, so a renamed test or file cannot leave the
// list of checks pointing at nothing.
func TestInvariantsDocNamesRealTests(t *testing.T) {
	doc := readDoc(t, filepath.Join("docs", "invariants.md"))
	tests := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	for _, file := range repoFiles(t, func(name string) bool { return strings.HasSuffix(name, "_test.go") }) {
		for _, m := range decl.FindAllStringSubmatch(readDoc(t, file), -1) {
			tests[m[1]] = true
		}
	}
	var missing []string
	named := regexp.MustCompile("`(Test\\w+)`").FindAllStringSubmatch(doc, -1)
	for _, m := range named {
		if !tests[m[1]] && !slices.Contains(missing, m[1]) {
			missing = append(missing, m[1])
		}
	}
	sort.Strings(missing)
	for _, name := range missing {
		t.Errorf("docs/invariants.md names %s, which no test file declares", name)
	}
	paths := regexp.MustCompile("`([\\w./-]+\\.go)`").FindAllStringSubmatch(doc, -1)
	for _, m := range paths {
		if _, err := os.Stat(filepath.Join(kubetest.RepoRoot(), m[1])); err != nil {
			t.Errorf("docs/invariants.md names %s, which is not in the repository", m[1])
		}
	}
	if len(named) == 0 || len(paths) == 0 {
		t.Errorf("docs/invariants.md names %d tests and %d files: the check matched nothing", len(named), len(paths))
	}
}
