package main

import (
	"slices"
	"testing"

	"github.com/idmint/idmint/testkit/testutil"
)

// TestServe_TagsInHealth: serve --tag creates the tags and /id/health lists
// them before anything asked for them.
func TestServe_TagsInHealth(t *testing.T) {
	base, _ := startServe(t, "--tag", "alpha,beta")
	var h struct {
		Tags []struct {
			Tag     string `json:"biz_tag"`
			Serving bool   `json:"serving"`
		}
	}
	if status := testutil.GetJSON(t, base+"/id/health", &h); status != 200 {
		t.Fatalf("/id/health: %d", status)
	}
	var names []string
	for _, th := range h.Tags {
		names = append(names, th.Tag)
	}
	for _, want := range []string{"alpha", "beta"} {
		if !slices.Contains(names, want) {
			t.Errorf("/id/health lists %v before any request, want %s in it", names, want)
		}
	}
}
