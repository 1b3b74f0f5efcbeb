package coolify_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// specPath finds shared/coolify/openapi.yaml beside the repository: from this file up to the
// directory holding go.mod, then ../shared/coolify/openapi.yaml.
func specPath(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("runtime.Caller failed")
	}
	dir := filepath.Dir(file)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above " + file)
		}
		dir = parent
	}
	return filepath.Join(dir, "..", "shared", "coolify", "openapi.yaml")
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
// kin-openapi v0.152 reads; the document is validated with the 3.1 JSON-schema dialect
// and examples are not validated (several of the spec's examples contradict its schemas,
// which says nothing about the API).
func loadSpec(t testing.TB) *spec {
	t.Helper()
	path := specPath(t)
	if _, err := os.Stat(path); os.IsNotExist(err) {
		t.Skipf("contract tests need %s (CI has it); not found", path)
	}
	specOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromFile(path)
		if err != nil {
			specErr = err
			return
		}
		// The router matches servers by host; route every request by path under /api/v1.
		doc.Servers = openapi3.Servers{{URL: "/api/v1"}}
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

func TestSpecLoads(t *testing.T) {
	s := loadSpec(t)
	if got := len(s.doc.Paths.Map()); got != 192 {
		t.Errorf("spec has %d paths, want 192 (SOURCE.md)", got)
	}
	_ = context.Background()
}
