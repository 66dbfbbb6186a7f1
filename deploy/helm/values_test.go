package helm_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// passThrough are the values handed to Kubernetes as they are: documented
// as one row, not key by key.
var passThrough = []string{"resources", "podSecurityContext", "securityContext", "strategy"}

// TestValues_Documented: every value of values.yaml has its row in the
// values table of docs/kubernetes.md, named in full.
func TestValues_Documented(t *testing.T) {
	b, err := os.ReadFile(chartDir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]any
	if err := yaml.Unmarshal(b, &vals); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(root + "/docs/kubernetes.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "\n## Values\n")
	if !ok {
		t.Fatal("docs/kubernetes.md: no ## Values")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	var rows []string
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(line, "| `") {
			rows = append(rows, strings.SplitN(line, " | ", 2)[0])
		}
	}
	keys := leaves("", vals)
	if len(keys) < 40 {
		t.Fatalf("%d values: the walk is broken", len(keys))
	}
	for _, key := range keys {
		if !slices.ContainsFunc(rows, func(row string) bool { return strings.Contains(row, "`"+key+"`") }) {
			t.Errorf("value %s has no row in the values table of docs/kubernetes.md", key)
		}
	}
}

// leaves lists the keys of values, dotted, down to the values that are no
// map, an empty map, or one of passThrough.
func leaves(prefix string, values map[string]any) []string {
	var out []string
	for k, v := range values {
		key := prefix + k
		if m, ok := v.(map[string]any); ok && len(m) > 0 && !slices.Contains(passThrough, key) {
			out = append(out, leaves(key+".", m)...)
			continue
		}
		out = append(out, key)
	}
	slices.Sort(out)
	return out
}
