package chart_test

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestEveryValueDocumented: each value in values.yaml has a comment right above it, or sits
// inside a block whose key carries a "# --" comment (the probe timings, resources, ...).
func TestEveryValueDocumented(t *testing.T) {
	t.Parallel()
	keyLine := regexp.MustCompile(`^(\s*)(- )?([A-Za-z][\w.-]*):(.*)$`)
	type ancestor struct {
		indent     int
		documented bool // the key has a "# --" comment
	}
	var stack []ancestor
	comment := "" // the first line of the comment block right above the current line
	inComment := false
	for i, line := range strings.Split(string(readFile(t, "values.yaml")), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			if !inComment {
				comment, inComment = trimmed, true
			}
			continue
		}
		above := ""
		if inComment {
			above = comment
		}
		inComment = false
		m := keyLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		indent := len(m[1]) + len(m[2])
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		inDocumentedBlock := slices.ContainsFunc(stack, func(a ancestor) bool { return a.documented })
		isGroup := strings.TrimSpace(m[4]) == "" // its children are checked one by one
		if above == "" && !inDocumentedBlock && !isGroup {
			t.Errorf("values.yaml:%d: %q has no comment", i+1, m[3])
		}
		stack = append(stack, ancestor{indent: indent, documented: strings.HasPrefix(above, "# --")})
	}
}

// TestSchemaCoversValues: every value of values.yaml is described by values.schema.json and
// every property the schema describes exists in values.yaml, so the two cannot drift apart.
// (Helm itself already refuses values.yaml keys the schema does not allow; see TestLint.)
func TestSchemaCoversValues(t *testing.T) {
	t.Parallel()
	var values map[string]any
	if err := yaml.Unmarshal(readFile(t, "values.yaml"), &values); err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(readFile(t, "values.schema.json"), &schema); err != nil {
		t.Fatal(err)
	}
	if schema["$schema"] != "http://json-schema.org/draft-07/schema#" {
		t.Errorf("$schema = %v: Helm 3 validates draft-07", schema["$schema"])
	}
	definitions, _ := schema["definitions"].(map[string]any)
	var walk func(path string, s map[string]any, v any)
	walk = func(path string, s map[string]any, v any) {
		if ref, ok := s["$ref"].(string); ok {
			s, _ = definitions[strings.TrimPrefix(ref, "#/definitions/")].(map[string]any)
		}
		props, ok := s["properties"].(map[string]any)
		if !ok {
			return // a value passed through to Kubernetes (resources, affinity, ...)
		}
		vm, _ := v.(map[string]any)
		for name, sub := range props {
			if path == "" && name == "global" {
				continue
			}
			child, present := vm[name]
			if !present {
				t.Errorf("values.schema.json describes %s%s, which values.yaml does not set", path, name)
				continue
			}
			subSchema, _ := sub.(map[string]any)
			walk(path+name+".", subSchema, child)
		}
		for name := range vm {
			if _, ok := props[name]; !ok {
				t.Errorf("values.yaml sets %s%s, which values.schema.json does not describe", path, name)
			}
		}
	}
	walk("", schema, values)
}
