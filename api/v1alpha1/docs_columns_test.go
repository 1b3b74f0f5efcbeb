package v1alpha1_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"botpool.dev/botpool/internal/kubetest"
)

// The printer columns (`kubectl get`) are generated from the kinds' markers into the CRDs; the
// docs describe them by hand. These tests hold the docs to the CRDs, so a column added, removed,
// renamed, moved or moved to -o wide fails until docs/api.md says so.

// printerColumn is a column as kubectl prints it.
type printerColumn struct {
	header string // the name upper-cased, as kubectl heads the column
	wide   bool   // priority above 0: shown by -o wide only
}

func (c printerColumn) String() string {
	if c.wide {
		return c.header + " (-o wide)"
	}
	return c.header
}

// columnList is columns for a message: "PLATFORM, QUEUE POSITION, START (-o wide)".
func columnList(columns []printerColumn) string {
	s := make([]string, len(columns))
	for i, c := range columns {
		s[i] = c.String()
	}
	return strings.Join(s, ", ")
}

// crdKind is what these tests read of a CRD (the full type would make the apiextensions module a
// direct dependency for four fields).
type crdKind struct {
	Spec struct {
		Names struct {
			Kind       string   `json:"kind"`
			Plural     string   `json:"plural"`
			Singular   string   `json:"singular"`
			ShortNames []string `json:"shortNames"`
		} `json:"names"`
		Versions []struct {
			Name    string `json:"name"`
			Storage bool   `json:"storage"`
			Columns []struct {
				Name     string `json:"name"`
				Priority int32  `json:"priority"`
			} `json:"additionalPrinterColumns"`
		} `json:"versions"`
	} `json:"spec"`
}

// crdColumns reads config/crd/bases: each kind's printer columns (of its storage version, the
// one kubectl is served), and the names `kubectl get` takes for it.
func crdColumns(t *testing.T) (columns map[string][]printerColumn, resources map[string]string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(kubetest.RepoRoot(), "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in config/crd/bases: %v", err)
	}
	columns, resources = map[string][]printerColumn{}, map[string]string{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd crdKind
		if err := yaml.Unmarshal(raw, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		names := crd.Spec.Names
		for _, v := range crd.Spec.Versions {
			if !v.Storage {
				continue
			}
			cols := []printerColumn{}
			for _, c := range v.Columns {
				cols = append(cols, printerColumn{header: strings.ToUpper(c.Name), wide: c.Priority > 0})
			}
			columns[names.Kind] = cols
		}
		if _, ok := columns[names.Kind]; !ok {
			t.Fatalf("%s: %s has no storage version", f, names.Kind)
		}
		for _, r := range append([]string{names.Plural, names.Singular}, names.ShortNames...) {
			resources[r] = names.Kind
		}
	}
	return columns, resources
}

// columnsMarker introduces a kind's table of columns in docs/api.md.
var columnsMarker = regexp.MustCompile(`^<!-- printer-columns: (\w+) -->$`)

// columnCell is the first cell of a row: the column's header in a code span.
var columnCell = regexp.MustCompile("^`([A-Z][A-Z0-9 ]*)`$")

// docColumnTables parses the tables of columns of a Markdown file: after a line
// `<!-- printer-columns: Kind -->`, a table whose rows are
// | `HEADER` | always or `-o wide` | what it shows |.
func docColumnTables(t *testing.T, rel string) map[string][]printerColumn {
	t.Helper()
	lines := strings.Split(readDoc(t, rel), "\n")
	tables := map[string][]printerColumn{}
	for i := 0; i < len(lines); i++ {
		m := columnsMarker.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			continue
		}
		kind, at := m[1], fmt.Sprintf("%s:%d", rel, i+1)
		if _, dup := tables[kind]; dup {
			t.Errorf("%s: a second table of %s's columns", at, kind)
		}
		if i+2 >= len(lines) || !strings.HasPrefix(lines[i+1], "|") || !strings.HasPrefix(strings.TrimSpace(lines[i+2]), "| ---") {
			t.Errorf("%s: the marker must be followed by a table (header row, then | --- |)", at)
			continue
		}
		cols := []printerColumn{}
		for i += 3; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
			cells := strings.Split(strings.Trim(strings.TrimSpace(lines[i]), "|"), "|")
			if len(cells) < 3 {
				t.Errorf("%s:%d: want | `COLUMN` | always or `-o wide` | what it shows |, got %q", rel, i+1, lines[i])
				continue
			}
			name, shown, what := strings.TrimSpace(cells[0]), strings.TrimSpace(cells[1]), strings.TrimSpace(strings.Join(cells[2:], "|"))
			c := columnCell.FindStringSubmatch(name)
			if c == nil {
				t.Errorf("%s:%d: the first cell must be the column's header in a code span (`QUEUE POSITION`), got %q", rel, i+1, name)
				continue
			}
			col := printerColumn{header: c[1]}
			switch shown {
			case "always":
			case "`-o wide`":
				col.wide = true
			default:
				t.Errorf("%s:%d: %s: the second cell must say always or `-o wide`, got %q", rel, i+1, col.header, shown)
			}
			if what == "" {
				t.Errorf("%s:%d: %s: say what the column shows", rel, i+1, col.header)
			}
			cols = append(cols, col)
		}
		tables[kind] = cols
	}
	return tables
}

// TestDocPrinterColumns: docs/api.md has a table of each kind's columns that lists exactly the
// CRD's printer columns, in their order, the -o wide ones marked so.
func TestDocPrinterColumns(t *testing.T) {
	want, _ := crdColumns(t)
	rel := filepath.Join("docs", "api.md")
	got := docColumnTables(t, rel)
	for kind, cols := range want {
		doc, ok := got[kind]
		switch {
		case !ok:
			t.Errorf("%s has no table of %s's columns (a line <!-- printer-columns: %s --> above it); the CRD's: %s", rel, kind, kind, columnList(cols))
		case !slices.Equal(doc, cols):
			t.Errorf("%s: %s's columns are\n\t%s\nbut the CRD's (config/crd/bases, from the markers in api/v1alpha1) are\n\t%s", rel, kind, columnList(doc), columnList(cols))
		}
	}
	for kind := range got {
		if _, ok := want[kind]; !ok {
			t.Errorf("%s: a table of columns of %s, which is no kind of the CRDs", rel, kind)
		}
	}
}

// kubectlGet is a `$ kubectl get <resource>` line of a code block, without a comment.
var kubectlGet = regexp.MustCompile(`^\$ kubectl get ([a-z,]+)((?:\s+[^#\s]+)*)\s*(?:#.*)?$`)

// columnGap separates the columns of kubectl's output, which pads them with three spaces or
// more; a header holds single ones ("QUEUE POSITION").
var columnGap = regexp.MustCompile(`\s{2,}`)

// wideOutput and allNamespaces are the flags that change the columns kubectl prints.
var (
	wideOutput    = regexp.MustCompile(`(^|\s)(-o|--output)(=|\s+)?wide(\s|$)`)
	allNamespaces = regexp.MustCompile(`(^|\s)(-A|--all-namespaces)(\s|$)`)
)

// headerLine is the header kubectl prints for a kind with these columns, given the flags of
// `kubectl get`.
func headerLine(flags string, columns []printerColumn) []string {
	header := []string{"NAME"}
	if allNamespaces.MatchString(flags) {
		header = []string{"NAMESPACE", "NAME"}
	}
	wide := wideOutput.MatchString(flags)
	for _, c := range columns {
		if wide || !c.wide {
			header = append(header, c.header)
		}
	}
	return header
}

// TestHeaderLine: the flags that change the columns, as kubectl reads them.
func TestHeaderLine(t *testing.T) {
	cols := []printerColumn{{header: "POOL"}, {header: "SERVER", wide: true}, {header: "AGE"}}
	for flags, want := range map[string]string{
		"":                    "NAME POOL AGE",
		" -w":                 "NAME POOL AGE",
		" -o wide":            "NAME POOL SERVER AGE",
		" -owide -w":          "NAME POOL SERVER AGE",
		" --output=wide":      "NAME POOL SERVER AGE",
		" -A":                 "NAMESPACE NAME POOL AGE",
		" --all-namespaces":   "NAMESPACE NAME POOL AGE",
		" -n team -o wide":    "NAME POOL SERVER AGE",
		" -l app=wide":        "NAME POOL AGE",
		" -A -o wide --watch": "NAMESPACE NAME POOL SERVER AGE",
	} {
		if got := strings.Join(headerLine(flags, cols), " "); got != want {
			t.Errorf("kubectl get x%s: %q, want %q", flags, got, want)
		}
	}
}

// TestDocKubectlGetHeaders: where the README or docs/ show the output of `kubectl get` for one
// of the kinds, its header line is what kubectl prints: NAME (after NAMESPACE with -A), then the
// CRD's columns, the -o wide ones only with -o wide.
func TestDocKubectlGetHeaders(t *testing.T) {
	columns, resources := crdColumns(t)
	shown := 0
	for _, rel := range docFiles(t) {
		for _, b := range codeBlocks(t, rel) {
			lines := strings.Split(b.body, "\n")
			for i := 0; i+1 < len(lines); i++ {
				m := kubectlGet.FindStringSubmatch(strings.TrimSpace(lines[i]))
				if m == nil || !strings.HasPrefix(lines[i+1], "NAME") {
					continue
				}
				kind, ok := resources[m[1]]
				if !ok {
					continue // another kind, or several at once
				}
				want := headerLine(m[2], columns[kind])
				got := columnGap.Split(strings.TrimSpace(lines[i+1]), -1)
				if !slices.Equal(got, want) {
					t.Errorf("%s:%d: %s prints\n\t%s\nnot\n\t%s", rel, b.line+i+2, strings.TrimSpace(lines[i]),
						strings.Join(want, "   "), strings.Join(got, "   "))
				}
				shown++
			}
		}
	}
	if shown == 0 {
		t.Error("no `$ kubectl get` of a kind followed by its header line in the docs: is the test still reading them?")
	}
}
