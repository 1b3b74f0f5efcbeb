package v1alpha1_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/format"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"botpool.dev/botpool/internal/kubetest"
)

// The README and docs/ are what users copy from, so their examples are tested like code: the
// YAML against the API server, the samples against config/samples, the Go program against the
// compiler, and the names they cite (metrics, make targets) against the source.

// codeBlock is one fenced code block of a Markdown file.
type codeBlock struct {
	file string // relative to the repository root
	line int    // of the opening fence
	lang string // the info string's first word
	body string // the content, the fence's indentation removed, each line ending in \n
	// sample is the path in a `<!-- sample: path -->` comment on the line above the fence: the
	// block must then be that file, byte for byte.
	sample string
}

func (b codeBlock) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

var sampleMarker = regexp.MustCompile(`^\s*<!--\s*sample:\s*(\S+)\s*-->\s*$`)

// docFiles are README.md and every docs/*.md, relative to the repository root.
func docFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(kubetest.RepoRoot(), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	for _, d := range docs {
		files = append(files, filepath.Join("docs", filepath.Base(d)))
	}
	return files
}

func readDoc(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(kubetest.RepoRoot(), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// codeBlocks parses the fenced code blocks (``` or ~~~, possibly indented inside a list item)
// of one Markdown file.
func codeBlocks(t *testing.T, rel string) []codeBlock {
	t.Helper()
	lines := strings.Split(readDoc(t, rel), "\n")
	var blocks []codeBlock
	for i := 0; i < len(lines); i++ {
		indent, fence, info, ok := openingFence(lines[i])
		if !ok {
			continue
		}
		b := codeBlock{file: rel, line: i + 1, lang: strings.ToLower(firstWord(info))}
		for j := i - 1; j >= 0; j-- {
			if strings.TrimSpace(lines[j]) == "" {
				continue
			}
			if m := sampleMarker.FindStringSubmatch(lines[j]); m != nil {
				b.sample = m[1]
			}
			break
		}
		var body strings.Builder
		closed := false
		for i++; i < len(lines); i++ {
			if strings.HasPrefix(strings.TrimSpace(lines[i]), fence) && strings.Trim(strings.TrimSpace(lines[i]), fence[:1]) == "" {
				closed = true
				break
			}
			line := lines[i]
			for k := 0; k < indent && strings.HasPrefix(line, " "); k++ {
				line = line[1:]
			}
			body.WriteString(line + "\n")
		}
		if !closed {
			t.Fatalf("%s:%d: a code block that never closes", rel, b.line)
		}
		b.body = body.String()
		blocks = append(blocks, b)
	}
	return blocks
}

var fenceLine = regexp.MustCompile("^( *)(`{3,}|~{3,})(.*)$")

func openingFence(line string) (indent int, fence, info string, ok bool) {
	m := fenceLine.FindStringSubmatch(line)
	if m == nil || (m[2][0] == '`' && strings.Contains(m[3], "`")) {
		return 0, "", "", false
	}
	return len(m[1]), m[2], strings.TrimSpace(m[3]), true
}

func firstWord(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}

// TestDocExamplesAccepted: every botpool.dev object in a YAML block of the README or docs/ is
// accepted by the API server — the CRDs' schema and CEL rules, with unknown fields refused
// (strict field validation) — in a server-side dry run, so examples may share names. An
// object of this API in any other kind of block fails too: it would escape the check.
func TestDocExamplesAccepted(t *testing.T) {
	ns := env.Namespace(t)
	readmeKinds := map[string]int{}
	for _, file := range docFiles(t) {
		for _, b := range codeBlocks(t, file) {
			if b.lang != "yaml" && b.lang != "yml" {
				if strings.Contains(b.body, "apiVersion: botpool.dev/") {
					t.Errorf("%s: a botpool.dev object in a ```%s block: put it in a ```yaml block of its own so that this test checks it", b, b.lang)
				}
				continue
			}
			for _, obj := range yamlObjects(t, b) {
				if !strings.HasPrefix(obj.GetAPIVersion(), "botpool.dev/") {
					continue
				}
				obj.SetNamespace(ns)
				err := env.Client.Create(context.Background(), obj, client.DryRunAll, client.FieldValidation("Strict"))
				if err != nil {
					t.Errorf("%s: the %s %q is refused by the API server: %v", b, obj.GetKind(), obj.GetName(), err)
				}
				if file == "README.md" {
					readmeKinds[obj.GetKind()]++
				}
			}
		}
	}
	// The check above passes vacuously on a README without examples: the guide needs them.
	for _, kind := range []string{"BotPool", "Bot"} {
		if readmeKinds[kind] == 0 {
			t.Errorf("README.md shows no %s in a ```yaml block", kind)
		}
	}
}

// yamlObjects decodes the documents of a YAML block strictly (a duplicated key is an error).
func yamlObjects(t *testing.T, b codeBlock) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(b.body)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		var m map[string]any
		if err := yaml.UnmarshalStrict(doc, &m); err != nil {
			t.Errorf("%s: not valid YAML: %v", b, err)
			continue
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

// TestDocSamplesMatch: a block marked `<!-- sample: config/samples/x.yaml -->` is that file
// byte for byte (the samples are applied by TestSamplesAreAcceptedAndDefaulted), and the
// README shows every botpool.dev sample, so the guide and config/samples cannot drift apart.
func TestDocSamplesMatch(t *testing.T) {
	shown := map[string]bool{}
	for _, file := range docFiles(t) {
		for _, b := range codeBlocks(t, file) {
			if b.sample == "" {
				continue
			}
			if b.lang != "yaml" {
				t.Errorf("%s: the sample %s is shown in a ```%s block; want ```yaml", b, b.sample, b.lang)
			}
			want, err := os.ReadFile(filepath.Join(kubetest.RepoRoot(), filepath.FromSlash(b.sample)))
			if err != nil {
				t.Errorf("%s: %v", b, err)
				continue
			}
			if diff := firstDifference(b.body, string(want), "the file has"); diff != "" {
				t.Errorf("%s is not %s (copy the file into the block): %s", b, b.sample, diff)
			}
			if file == "README.md" {
				shown[b.sample] = true
			}
		}
	}
	samples, err := filepath.Glob(filepath.Join(kubetest.RepoRoot(), "config", "samples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range samples {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel := "config/samples/" + filepath.Base(p)
		if bytes.Contains(data, []byte("apiVersion: botpool.dev/")) && !shown[rel] {
			t.Errorf("README.md does not show the sample %s: add it in a ```yaml block after <!-- sample: %s -->", rel, rel)
		}
	}
	if len(shown) == 0 {
		t.Error("README.md shows no sample at all")
	}
}

// firstDifference describes the first line where got and want differ, wantIs introducing
// want's line; "" when they are equal.
func firstDifference(got, want, wantIs string) string {
	if got == want {
		return ""
	}
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl || i >= len(g) || i >= len(w) {
			return fmt.Sprintf("line %d is %q, %s %q", i+1, gl, wantIs, wl)
		}
	}
	return "they differ"
}

// TestDocGoPrograms type-checks every Go block that is a whole program (starts with a package
// clause) against this module's packages, so the bot-image example of the README keeps up with
// botapi/botclient, and wants it gofmt-formatted. Fragments without a package clause are left
// alone.
func TestDocGoPrograms(t *testing.T) {
	readme := 0
	for _, file := range docFiles(t) {
		for _, b := range codeBlocks(t, file) {
			if b.lang != "go" || !strings.HasPrefix(strings.TrimSpace(b.body), "package ") {
				continue
			}
			if file == "README.md" {
				readme++
			}
			if formatted, err := format.Source([]byte(b.body)); err == nil && string(formatted) != b.body {
				t.Errorf("%s is not gofmt-formatted: %s", b, firstDifference(b.body, string(formatted), "gofmt makes it"))
			}
			fset := token.NewFileSet()
			// A line directive makes errors point into the Markdown file.
			src := fmt.Sprintf("//line %s:%d\n%s", b.file, b.line+1, b.body)
			f, err := parser.ParseFile(fset, b.file, src, parser.ParseComments)
			if err != nil {
				t.Errorf("%s: %v", b, err)
				continue
			}
			var errs []error
			conf := types.Config{
				Importer: exportDataImporter(t, fset, f),
				Error:    func(err error) { errs = append(errs, err) },
			}
			_, _ = conf.Check(f.Name.Name, fset, []*ast.File{f}, nil)
			if len(errs) > 0 {
				t.Errorf("%s does not compile:\n%v", b, errors.Join(errs...))
			}
		}
	}
	if readme == 0 {
		t.Error("README.md has no complete Go program (the bot API example) to check")
	}
}

// exportDataImporter imports the packages f uses from the compiler's export data, which
// `go list -export` builds (or finds in the build cache): much faster than type-checking the
// standard library from source, above all under -race.
func exportDataImporter(t *testing.T, fset *token.FileSet, f *ast.File) types.Importer {
	t.Helper()
	args := []string{"list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}"}
	for _, imp := range f.Imports {
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, p)
	}
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = kubetest.RepoRoot()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	exports := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(line, "="); ok && file != "" {
			exports[path] = file
		}
	}
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
}

// TestDocMetricNames: every botpool_* metric the docs name is one the code registers — a
// string literal of a non-test Go file — so a renamed metric cannot leave a dead name in a
// dashboard recipe. Histogram series (_bucket, _sum, _count) and prefixes (botpool_coolify_*)
// count; names followed by a dot (file names such as botpool_v1alpha1_bot.yaml) are not metrics.
func TestDocMetricNames(t *testing.T) {
	literals := goStringLiterals(t, regexp.MustCompile(`"(botpool_[a-z0-9_]+)"`))
	name := regexp.MustCompile(`botpool_[a-z0-9_]*[a-z0-9]`)
	checked := 0
	for _, file := range docFiles(t) {
		text := readDoc(t, file)
		for _, loc := range name.FindAllStringIndex(text, -1) {
			n, rest := text[loc[0]:loc[1]], text[loc[1]:]
			switch {
			case strings.HasPrefix(rest, "."):
				continue
			case strings.HasPrefix(rest, "_*") || strings.HasPrefix(rest, "*"):
				if !slices.ContainsFunc(literals, func(l string) bool { return strings.HasPrefix(l, n) }) {
					t.Errorf("%s names %s*, and no metric starts so", file, n)
				}
			default:
				base := n
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if s, ok := strings.CutSuffix(n, suffix); ok && slices.Contains(literals, s) {
						base = s
					}
				}
				if !slices.Contains(literals, base) {
					t.Errorf("%s names %s, which no Go file of the repository defines", file, n)
				}
			}
			checked++
		}
	}
	if checked == 0 {
		t.Error("the docs name no metric: the check matched nothing")
	}
}

// goStringLiterals returns the first group of re over the non-test Go files of the repository.
func goStringLiterals(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	var out []string
	root := kubetest.RepoRoot()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "vendor") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllStringSubmatch(string(src), -1) {
			out = append(out, m[1])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDocMakeTargets: every `make <target>` in a code block or code span of the docs is a
// target of the Makefile.
func TestDocMakeTargets(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(kubetest.RepoRoot(), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`).FindAllStringSubmatch(string(mk), -1) {
		targets[m[1]] = true
	}
	invocation := regexp.MustCompile(`(?:^|[\s;&|(` + "`" + `])make (?:-s )?([a-z][a-z0-9-]*)`)
	span := regexp.MustCompile("`[^`\n]+`")
	checked := 0
	for _, file := range docFiles(t) {
		code := make([]string, 0, 16)
		for _, b := range codeBlocks(t, file) {
			code = append(code, b.body)
		}
		code = append(code, span.FindAllString(readDoc(t, file), -1)...)
		for _, c := range code {
			for _, m := range invocation.FindAllStringSubmatch(c, -1) {
				checked++
				if !targets[m[1]] {
					t.Errorf("%s runs `make %s`, which the Makefile does not define", file, m[1])
				}
			}
		}
	}
	if checked == 0 {
		t.Error("the docs run no make target: the check matched nothing")
	}
}

// TestDocReasons: the word of every exported Reason constant of this package (condition
// reasons, status.reason values, Event reasons) appears in a code span or code block of
// docs/*.md, so users can look up every reason the operator gives. The constants are read
// from the source, so a new one fails this test until the docs name it.
func TestDocReasons(t *testing.T) {
	reasons := reasonConstants(t)
	// Guard against a parser that finds nothing: the test would pass vacuously.
	if reasons["ReasonQueueTimeout"] != "QueueTimeout" || reasons["ReasonLivenessUnknown"] != "LivenessUnknown" || len(reasons) < 40 {
		t.Fatalf("read %d reason constants (%v): the source scan is broken", len(reasons), reasons)
	}
	docs, err := filepath.Glob(filepath.Join(kubetest.RepoRoot(), "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	span := regexp.MustCompile("`[^`\n]+`")
	word := regexp.MustCompile(`[A-Za-z0-9]+`)
	documented := map[string]bool{}
	for _, d := range docs {
		rel := filepath.Join("docs", filepath.Base(d))
		code := span.FindAllString(readDoc(t, rel), -1)
		for _, b := range codeBlocks(t, rel) {
			code = append(code, b.body)
		}
		for _, c := range code {
			for _, w := range word.FindAllString(c, -1) {
				documented[w] = true
			}
		}
	}
	names := slices.Sorted(maps.Keys(reasons))
	for _, name := range names {
		if !documented[reasons[name]] {
			t.Errorf("v1alpha1.%s (%q) appears in no code span of docs/*.md: say in the docs when the operator gives it", name, reasons[name])
		}
	}
}

// reasonConstants maps the name of every exported constant named Reason* in this package's
// non-test files to its string value: a string literal, or another such constant.
func reasonConstants(t *testing.T) map[string]string {
	t.Helper()
	dir := filepath.Join(kubetest.RepoRoot(), "api", "v1alpha1")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]ast.Expr{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if strings.HasPrefix(n.Name, "Reason") && i < len(vs.Values) {
						values[n.Name] = vs.Values[i]
					}
				}
			}
		}
	}
	var value func(name string, depth int) string
	value = func(name string, depth int) string {
		switch v := values[name].(type) {
		case *ast.BasicLit:
			if s, err := strconv.Unquote(v.Value); err == nil {
				return s
			}
		case *ast.Ident:
			if depth < 5 {
				return value(v.Name, depth+1)
			}
		}
		t.Errorf("cannot read the value of %s: write it as a string literal", name)
		return ""
	}
	out := map[string]string{}
	for name := range values {
		out[name] = value(name, 0)
	}
	return out
}
