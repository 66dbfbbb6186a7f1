package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestProduct_NoTestSupport: the programs and packages idmint ships link no
// test support: nothing of testkit, no testcontainers, no toxiproxy. And
// internal/ holds only what they use, so test support cannot creep back in
// beside the product.
func TestProduct_NoTestSupport(t *testing.T) {
	product := []string{"../idmint", "../idmint-bench", "../../core", "../../httpapi", "../../rpcapi",
		"../../allocator/...", "../../snowflake", "../../lease", "../../token", "../../migrations"}
	out, err := exec.Command("go", append([]string{"list", "-deps", "-f", "{{.ImportPath}}"}, product...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[p] = true
		for _, banned := range []string{"github.com/idmint/idmint/testkit", "github.com/testcontainers/", "github.com/Shopify/toxiproxy"} {
			if strings.HasPrefix(p, banned) {
				t.Errorf("the product links %s", p)
			}
		}
	}
	if !deps["github.com/idmint/idmint/core"] || !deps["github.com/jackc/pgx/v5"] {
		t.Fatalf("go list -deps found too little (%d packages): the list is wrong", len(deps))
	}
	out, err = exec.Command("go", "list", "../../internal/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list internal: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if !deps[p] {
			t.Errorf("%s is in internal/ but no product package uses it: test support belongs in testkit/", p)
		}
	}
}
