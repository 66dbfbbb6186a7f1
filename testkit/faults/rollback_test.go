package faults_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/testlog"
	"github.com/idmint/idmint/testkit/testutil"
)

// TestDatabaseRolledBack lowers max_id behind a running instance's back, as
// a restored backup or a failover to a lagging replica would. The instance
// must find max_id below the highest ID it was granted, raise it back there
// in its allocation (one statement), say so loudly in its log, /id/health and
// /metrics, and serve again above it without a restart. An instance started
// after the repair, with no memory of the lost grants, must not hand out any
// of them: 0 duplicates over every ID both served.
func TestDatabaseRolledBack(t *testing.T) {
	const workers, step = 4, 10
	dbURL := pgstore.NewDatabase(t, pgtest.Shared(t))
	admin := pgstore.Open(t, dbURL)
	createTag(t, admin, "order", step, step)

	logs := &testlog.Buffer{}
	running := newInstance(t, pgstore.Open(t, dbURL), "rollback-running", func(c *allocator.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	metrics := httpapi.NewMetrics()
	api := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: running, Metrics: metrics, Logger: testlog.Discard()}))
	defer api.Close()

	c := checker.New()
	var late atomic.Pointer[allocator.Allocator] // started after the repair
	l := startLoad(c, 2*workers, func(ctx context.Context, w int) (string, string, int64, error) {
		a, client := running, fmt.Sprint("running-", w)
		if w >= workers {
			if a = late.Load(); a == nil {
				return "", "", 0, errNotStarted
			}
			client = fmt.Sprint("late-", w)
		}
		id, err := a.Next(ctx, "order")
		return client, "order", id, err
	})
	defer l.stop()
	testutil.Eventually(t, 30*time.Second, "ids before the rollback", func() bool { return c.Report().Acknowledged > 500 })

	ctx := context.Background()
	before := maxID(t, admin, "order")
	restored := before / 2
	if _, err := admin.Pool().Exec(ctx, `UPDATE idmint_tags SET max_id = $1 WHERE biz_tag = 'order'`, restored); err != nil {
		t.Fatal(err)
	}
	repairedIn := testutil.Eventually(t, 30*time.Second, "the running instance to repair", func() bool {
		return tagStats(running, "order").Repaired > 0
	})
	st := tagStats(running, "order")
	if m := maxID(t, admin, "order"); m < st.Highest || m <= before {
		t.Fatalf("max_id %d after the repair: want it at or above %d, the highest id granted (and above %d before the rollback)", m, st.Highest, before)
	}
	if st.Refused != 0 {
		t.Fatalf("%d ranges refused: a repair serves, it does not refuse", st.Refused)
	}
	if !strings.Contains(logs.String(), "REPAIRED rollback") {
		t.Fatal("no REPAIRED alarm in the logs")
	}

	// An instance with no memory of the lost grants starts now.
	late.Store(newInstance(t, pgstore.Open(t, dbURL), "rollback-late", nil))
	acked := c.Report().Acknowledged
	testutil.Eventually(t, 30*time.Second, "both instances to serve", func() bool {
		return tagStats(late.Load(), "order").Issued > 100 && c.Report().Acknowledged > acked+500
	})
	l.stop()

	var h httpapi.Health
	code := testutil.GetJSON(t, api.URL+"/id/health", &h)
	if code != http.StatusOK || h.Status != httpapi.StatusDegraded || len(h.Tags) != 1 || h.Tags[0].Repaired == 0 {
		t.Fatalf("/id/health after the repair: %d %+v", code, h)
	}
	if got := scrapeValue(t, api.URL, "idmint_rollbacks_repaired_total"); got != float64(h.Tags[0].Repaired) {
		t.Fatalf("idmint_rollbacks_repaired_total = %v, /id/health says %d", got, h.Tags[0].Repaired)
	}
	r := c.Report()
	requireValid(t, r)
	t.Logf("max_id rolled back from %d to %d; repaired %v later by the running instance (%d repair(s), 0 refused, /id/health %s); an instance started after: %d ids, %d in all, 0 duplicates",
		before, restored, repairedIn.Round(time.Millisecond), h.Tags[0].Repaired, h.Status, tagStats(late.Load(), "order").Issued, r.IDs())
}

var errNotStarted = errors.New("instance not started yet")

// scrapeValue returns the value of the metric name (one series) at url.
func scrapeValue(tb testing.TB, url, name string) float64 {
	tb.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, name+"{") {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				tb.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	tb.Fatalf("no %s in /metrics", name)
	return 0
}
