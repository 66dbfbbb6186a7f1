package client_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/client"
)

// TestClient_TopOfInt64: NextN on a tag whose last range ends at 2^63-1
// hands out every ID up to it once, increasing, in a bounded number of
// calls, then fails with the instance's tag_exhausted error.
func TestClient_TopOfInt64(t *testing.T) {
	const ids, step = 20, 10
	first := int64(math.MaxInt64 - ids + 1)
	m := memstore.New()
	if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "top", Step: step, MaxStep: step, Start: first}); err != nil {
		t.Fatal(err)
	}
	_, url := startLosing(t, m, 0)
	c := newClient(t, client.Config{URLs: []string{url}})
	last := first - 1
	var err error
	for call := 0; call <= ids; call++ { // each successful call takes at least one ID
		var got []int64
		if got, err = c.NextN(t.Context(), "top", 5); err != nil {
			break
		}
		for _, id := range got {
			if id <= last || id < first {
				t.Fatalf("id %d after %d: repeated, decreasing or below the tag's start %d", id, last, first)
			}
			last = id
		}
	}
	// Batches of 5 divide the segments of 10: no batch fails with IDs
	// taken (NextN makes those a gap).
	if err == nil {
		t.Fatalf("no error after %d calls (last id %d)", ids+1, last)
	}
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != "tag_exhausted" {
		t.Fatalf("past the last segment: %v, want tag_exhausted", err)
	}
	if last != math.MaxInt64 {
		t.Fatalf("last id %d, want 2^63-1", last)
	}
	if _, err := c.Next(t.Context(), "top"); err == nil {
		t.Fatal("Next past the last segment succeeded")
	}
}
