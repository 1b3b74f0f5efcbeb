package coolify_test

import (
	"context"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// specPath is the vendored copy of Coolify's published spec (testdata/README.md says which
// release), found from this file so the tests load it from any working directory.
func specPath(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("runtime.Caller failed")
	}
	return filepath.Join(filepath.Dir(file), "testdata", "openapi.yaml")
}

type spec struct {
	doc    *openapi3.T
	router routers.Router
}

var (
	specOnce sync.Once
	specVal  *spec
	specErr  error
)

// loadSpec loads openapi.yaml once per test binary. It declares OpenAPI 3.1.0, which
// kin-openapi v0.152 reads and validates with JSON Schema 2020-12. Two documented tweaks:
//   - the spec is generated in a mix of dialects: 190 schemas say `nullable: true` (OpenAPI
//     3.0), a keyword 3.1 dropped and kin-openapi ignores for 3.1 documents, so null would be
//     refused where the authors allowed it. nullableToTypeNull rewrites each into the 3.1
//     spelling (`type: [T, "null"]`, and null in its enum) before validating.
//   - examples are not validated: several contradict their schemas, which says nothing about
//     the API.
func loadSpec(t testing.TB) *spec {
	t.Helper()
	// The spec is part of the repository: a missing file fails instead of skipping, so the
	// contract checks cannot silently stop running.
	path := specPath(t)
	specOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromFile(path)
		if err != nil {
			specErr = err
			return
		}
		nullableToTypeNull(doc)
		r, err := legacy.NewRouter(doc, openapi3.DisableExamplesValidation())
		if err != nil {
			specErr = err
			return
		}
		specVal = &spec{doc: doc, router: r}
	})
	if specErr != nil {
		t.Fatalf("load %s: %v", path, specErr)
	}
	return specVal
}

// nullableToTypeNull turns 3.0's `nullable: true` into 3.1's `"null"` type, everywhere.
func nullableToTypeNull(doc *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	var walk func(ref *openapi3.SchemaRef)
	walk = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		sc := ref.Value
		seen[sc] = true
		if sc.Nullable && sc.Type != nil && !sc.Type.IncludesNull() {
			t := append(openapi3.Types{}, *sc.Type...)
			t = append(t, openapi3.TypeNull)
			sc.Type = &t
			if len(sc.Enum) > 0 {
				sc.Enum = append(sc.Enum, nil)
			}
		}
		for _, p := range sc.Properties {
			walk(p)
		}
		walk(sc.Items)
		walk(sc.AdditionalProperties.Schema)
		walk(sc.Not)
		for _, list := range []openapi3.SchemaRefs{sc.AllOf, sc.AnyOf, sc.OneOf} {
			for _, r := range list {
				walk(r)
			}
		}
	}
	content := func(c openapi3.Content) {
		for _, mt := range c {
			walk(mt.Schema)
		}
	}
	for _, sc := range doc.Components.Schemas {
		walk(sc)
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for _, p := range op.Parameters {
				if p.Value != nil {
					walk(p.Value.Schema)
				}
			}
			if op.RequestBody != nil && op.RequestBody.Value != nil {
				content(op.RequestBody.Value.Content)
			}
			for _, r := range op.Responses.Map() {
				if r.Value != nil {
					content(r.Value.Content)
				}
			}
		}
	}
}

func TestSpecLoads(t *testing.T) {
	s := loadSpec(t)
	if got := len(s.doc.Paths.Map()); got != 192 {
		t.Errorf("spec has %d paths, want 192 (testdata/README.md)", got)
	}
	_ = context.Background()
}
