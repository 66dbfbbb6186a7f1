package httpapi_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/wire"
)

// TestServer_IDsTopOfInt64: /ids on a tag whose last segment ends at
// 2^63-1 hands out the last IDs, in both formats, then answers a clean
// tag_exhausted error; the server keeps serving other tags. The list
// format once looped forever there (id <= Last holds for every int64).
func TestServer_IDsTopOfInt64(t *testing.T) {
	const step = 10
	m := memstore.New()
	for _, tag := range []string{"top-list", "top-ranges", "order"} {
		spec := allocator.TagSpec{Name: tag, Step: step, MaxStep: step, Start: math.MaxInt64 - step + 1}
		if tag == "order" {
			spec.Start = 1
		}
		if _, err := m.CreateTag(context.Background(), spec); err != nil {
			t.Fatal(err)
		}
	}
	a := allocator.New(allocator.Config{Store: m, Logger: testlog.Discard(),
		Segment: segment.Config{WaitTimeout: 2 * time.Second, LoadTimeout: 2 * time.Second, MinBackoff: time.Hour}})
	t.Cleanup(func() { a.Close(context.Background()) })
	srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(), MaxCount: 100,
		RequestTimeout: 5 * time.Second})))
	t.Cleanup(srv.Close)
	srv.Client().Timeout = 10 * time.Second // a looping handler fails the test instead of hanging it

	for _, format := range []string{"list", "ranges"} {
		t.Run(format, func(t *testing.T) {
			path := "/ids?biz_tag=top-" + format + "&format=" + format + "&count="
			var got []int64
			// 4, then 100 of which only the last 6 are left.
			for _, count := range []int{4, 100} {
				status, _, body := get(t, srv, path+strconv.Itoa(count))
				if status != 200 {
					t.Fatalf("count %d: status %d: %.300s", count, status, body)
				}
				got = append(got, decodeIDs(t, body)...)
			}
			if len(got) != step {
				t.Fatalf("%d ids, want the last %d: %v", len(got), step, got)
			}
			for i, id := range got {
				if want := int64(math.MaxInt64 - step + 1 + i); id != want {
					t.Fatalf("ids[%d] = %d, want %d", i, id, want)
				}
			}
			for _, p := range []string{path + "3", "/id?biz_tag=top-" + format} {
				status, _, body := get(t, srv, p)
				if status != 503 || errorCode(t, body) != wire.CodeExhausted {
					t.Fatalf("%s past 2^63-1: status %d: %s, want 503 %s", p, status, body, wire.CodeExhausted)
				}
			}
		})
	}
	if status, _, body := get(t, srv, "/ids?biz_tag=order&count=3"); status != 200 || len(decodeIDs(t, body)) != 3 {
		t.Fatalf("another tag after the top: %d %s", status, body)
	}
}

// decodeIDs reads the IDs of an /ids reply in either format.
func decodeIDs(tb testing.TB, body []byte) []int64 {
	tb.Helper()
	var r struct {
		IDs    []string    `json:"ids"`
		Ranges [][2]string `json:"ranges"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		tb.Fatalf("%v: %.300s", err, body)
	}
	parse := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			tb.Fatalf("id %q: %v", s, err)
		}
		return n
	}
	var ids []int64
	for _, s := range r.IDs {
		ids = append(ids, parse(s))
	}
	for _, rg := range r.Ranges {
		first, last := parse(rg[0]), parse(rg[1])
		if last < first || last-first > 1000 {
			tb.Fatalf("range [%d, %d]", first, last)
		}
		for id := first; ; id++ {
			ids = append(ids, id)
			if id == last {
				break
			}
		}
	}
	return ids
}
