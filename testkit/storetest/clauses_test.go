package storetest

import (
	"regexp"
	"testing"
)

// TestClauses_Listed: every clause has a name a -run pattern can select
// alone, and a sentence; go test -v -run TestClauses_Listed lists them.
func TestClauses_Listed(t *testing.T) {
	ident := regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
	seen := map[string]bool{}
	for _, c := range Clauses() {
		if !ident.MatchString(c.Name) || seen[c.Name] || c.What == "" || c.Run == nil {
			t.Errorf("clause %q (%q): want a unique CamelCase name, a sentence and a body", c.Name, c.What)
		}
		seen[c.Name] = true
		t.Logf("%-24s %s", c.Name, c.What)
	}
	if len(seen) < 20 {
		t.Fatalf("%d clauses: the contract lost some", len(seen))
	}
}
