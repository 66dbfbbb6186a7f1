package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/segment"
)

// slowStore takes a while per segment, as a loaded database would.
type slowStore struct {
	*memstore.Store
	delay time.Duration
}

func (s *slowStore) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return allocator.Segment{}, ctx.Err()
	}
	return s.Store.Allocate(ctx, req)
}

// TestServer_IDsPartial: /ids on a tag of step 1 that cannot gather count
// IDs before the request timeout hands out the IDs it took, instead of a
// 503 that loses them; the next ID follows them.
func TestServer_IDsPartial(t *testing.T) {
	m := memstore.New()
	if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "tiny", Step: 1, MaxStep: 1}); err != nil {
		t.Fatal(err)
	}
	a := allocator.New(allocator.Config{Store: &slowStore{Store: m, delay: 20 * time.Millisecond}, Logger: testlog.Discard(),
		Segment: segment.Config{WaitTimeout: 5 * time.Second, LoadTimeout: 5 * time.Second}})
	t.Cleanup(func() { a.Close(context.Background()) })
	srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(), MaxCount: 1000,
		RequestTimeout: 300 * time.Millisecond})))
	t.Cleanup(srv.Close)

	status, _, body := get(t, srv, "/ids?biz_tag=tiny&count=1000")
	var got struct{ IDs []string }
	if err := json.Unmarshal(body, &got); status != 200 || err != nil || len(got.IDs) == 0 || len(got.IDs) >= 1000 {
		t.Fatalf("status %d, %d ids: %.200s", status, len(got.IDs), body)
	}
	for i, s := range got.IDs {
		if s != strconv.Itoa(i+1) {
			t.Fatalf("ids[%d] = %s, want %d", i, s, i+1)
		}
	}
	status, _, body = get(t, srv, "/id?biz_tag=tiny")
	var one struct{ ID string }
	json.Unmarshal(body, &one)
	if n, _ := strconv.Atoi(one.ID); status != 200 || n != len(got.IDs)+1 {
		t.Fatalf("next id %s (%d) after %d ids", one.ID, status, len(got.IDs))
	}
	t.Logf("%d of 1000 ids in the 300ms request timeout, at 20ms per segment of 1", len(got.IDs))
}
