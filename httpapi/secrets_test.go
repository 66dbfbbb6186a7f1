package httpapi_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/segment"
)

// leakyStore fails its loads with an error that names the database, as
// pgx's connection errors do.
type leakyStore struct {
	*memstore.Store
	down *atomic.Bool
}

var errLeaky = errors.New("failed to connect to `user=idmint_app database=orders_prod`: 10.20.30.40:6543 (db-primary.internal.example): dial error: connection refused")

func (s leakyStore) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	if s.down.Load() {
		return allocator.Segment{}, errLeaky
	}
	return s.Store.Allocate(ctx, req)
}

func (s leakyStore) Ping(context.Context) error {
	if s.down.Load() {
		return errLeaky
	}
	return nil
}

// TestHealth_NoConnectionDetails: /id/health reports a failing database
// without its user, name, address or host.
func TestHealth_NoConnectionDetails(t *testing.T) {
	m := memstore.New()
	if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 10}); err != nil {
		t.Fatal(err)
	}
	down := &atomic.Bool{}
	a := allocator.New(allocator.Config{Store: leakyStore{m, down}, Logger: testlog.Discard(), RetryMin: time.Millisecond, RetryMax: time.Millisecond,
		Segment: segment.Config{LoadTimeout: 500 * time.Millisecond, WaitTimeout: 100 * time.Millisecond, MinBackoff: 10 * time.Millisecond}})
	t.Cleanup(func() { a.Close(context.Background()) })
	srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard()})))
	t.Cleanup(srv.Close)
	get(t, srv, "/id?biz_tag=order")
	down.Store(true)
	// Take IDs until a load has failed, leaving its error in the stats.
	for i := 0; ; i++ {
		// The load error must carry the details this test hides (a load
		// cut by its timeout before its first reply would not).
		if st, _ := a.TagStats(context.Background(), "order"); strings.Contains(st.LastError, "10.20.30.40") {
			break
		}
		if i == 1000 {
			t.Fatal("no load failed")
		}
		get(t, srv, "/id?biz_tag=order")
	}
	for _, path := range []string{"/id/health", "/id/health?biz_tag=order", "/id?biz_tag=order", "/metrics"} {
		_, _, body := get(t, srv, path)
		// The port as it would show in an address or a key=value pair: the
		// bare digits also occur in /metrics' floats by chance.
		for _, secret := range []string{"idmint_app", "orders_prod", "10.20.30.40", ":6543", "=6543", "db-primary"} {
			if strings.Contains(string(body), secret) {
				t.Errorf("%s shows %q: %.400s", path, secret, body)
			}
		}
	}
}
