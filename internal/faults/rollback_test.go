package faults_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/internal/pgtest"
	"github.com/idmint/idmint/internal/testlog"
)

// TestDatabaseRolledBack lowers max_id behind the running instances' backs,
// as a restored backup or a failover to a lagging replica would. Every
// instance must refuse every range at or below what it was granted, say so
// in its log and /id/health, and never serve a duplicate; the refusals must
// not move max_id (or they would climb into IDs other instances served).
// Then the operator's way out, a bump past the highest ID handed out, lets
// them serve again without a restart.
func TestDatabaseRolledBack(t *testing.T) {
	const instances, workersPer, step = 3, 4, 10
	dbURL := newDatabase(t, pgtest.Shared(t))
	admin := open(t, dbURL)
	createTag(t, admin, "order", step, step)

	logs := &testlog.Buffer{}
	allocs := make([]*allocator.Allocator, instances)
	for i := range allocs {
		allocs[i] = newInstance(t, open(t, dbURL), fmt.Sprint("rollback-", i), func(c *allocator.Config) {
			c.Logger = slog.New(slog.NewTextHandler(logs, nil))
		})
	}
	api := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: allocs[0], Logger: quiet()}))
	defer api.Close()

	c := checker.New()
	l := startLoad(c, instances*workersPer, func(ctx context.Context, w int) (string, string, int64, error) {
		id, err := allocs[w%instances].Next(ctx, "order")
		return fmt.Sprint("worker-", w), "order", id, err
	})
	defer l.stop()
	time.Sleep(time.Second)

	ctx := context.Background()
	before := maxID(t, admin, "order")
	restored := before / 2
	if _, err := admin.Pool().Exec(ctx, `UPDATE idmint_tags SET max_id = $1 WHERE biz_tag = 'order'`, restored); err != nil {
		t.Fatal(err)
	}
	rolledBack := time.Now()
	waitFor(t, 30*time.Second, "every instance to refuse", func() bool {
		for _, a := range allocs {
			if tagStats(a, "order").Refused == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(time.Second) // keep asking while rolled back
	if m := maxID(t, admin, "order"); m != restored {
		t.Fatalf("max_id moved from %d to %d while every instance refused: refusals climbed", restored, m)
	}
	if !strings.Contains(logs.String(), "REFUSED segment") {
		t.Fatal("no REFUSED alarm in the logs")
	}
	var h httpapi.Health
	resp, err := http.Get(api.URL + "/id/health")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if h.Status == httpapi.StatusOK || len(h.Tags) != 1 || h.Tags[0].Refused == 0 {
		t.Fatalf("/id/health while rolled back: %d %+v", resp.StatusCode, h)
	}
	refusedIDs := c.Report()
	t.Logf("max_id rolled back from %d to %d: all %d instances refused within %v; /id/health %s, refused_ranges %d; max_id stayed %d",
		before, restored, instances, time.Since(rolledBack).Round(time.Millisecond), h.Status, h.Tags[0].Refused, restored)

	// The operator's way out: bump past the highest ID handed out.
	highest := refusedIDs.Tag("order").Highest
	if _, err := admin.Bump(ctx, "order", highest+1000, 0); err != nil {
		t.Fatal(err)
	}
	bumped := time.Now()
	acked := c.Report().Acknowledged
	waitFor(t, 30*time.Second, "every instance to serve again", func() bool {
		for _, a := range allocs {
			if st := tagStats(a, "order"); !st.Serving || st.Highest <= highest {
				return false
			}
		}
		return c.Report().Acknowledged > acked+100
	})
	resumed := time.Since(bumped)
	time.Sleep(500 * time.Millisecond)
	l.stop()
	r := c.Report()
	requireValid(t, r)
	var refused int64
	for _, a := range allocs {
		refused += tagStats(a, "order").Refused
	}
	t.Logf("after `tag bump --to %d`: all instances serving again %v later, without a restart; %d ids, %d refused loads, 0 duplicates",
		highest+1000, resumed.Round(time.Millisecond), r.IDs(), refused)
}
