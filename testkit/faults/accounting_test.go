package faults_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/testlog"
	"github.com/idmint/idmint/testkit/testutil"
	"github.com/idmint/idmint/testkit/toxic"
)

// TestColdTagDuringReplyOutage: a tag's first load commits while every
// reply from PostgreSQL is lost (a timeout toxic on the proxy's downstream
// direction), so callers get 503 and the tag's buffer is dropped while that
// load still retries. The network heals, a new buffer serves from a newer
// range, and the first load finds its range only then, for a buffer nobody
// serves from. Every ID up to max_id must be accounted for after shutdown:
// handed out, or counted (and logged) as abandoned. None twice.
func TestColdTagDuringReplyOutage(t *testing.T) {
	const step = 100
	dbURL := pgstore.NewDatabase(t, pgtest.Shared(t))
	direct := pgstore.Open(t, dbURL)
	createTag(t, direct, "warm", step, step)
	createTag(t, direct, "cold", step, step)
	px := toxic.New(t, dbURL)
	logs := &testlog.Buffer{}
	// One connection, whose allocation and lookup statements are prepared
	// before the toxic (on tag warm), so that the first allocation of cold
	// reaches PostgreSQL and commits.
	a := newInstance(t, pgstore.Open(t, px.URL+"&pool_max_conns=1"), "cold-tag", func(c *allocator.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(logs, nil))
		c.AttemptTimeout = 300 * time.Millisecond
		c.Segment.WaitTimeout = 300 * time.Millisecond
		c.Segment.LoadTimeout = 5 * time.Second
		c.Segment.MinBackoff = 50 * time.Millisecond
	})
	ctx := context.Background()
	if _, err := a.Next(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "warm's prefetch", func() bool { return !tagStats(a, "warm").Loading })

	px.Add(t, "lose-replies", "timeout", "downstream", `{"timeout":0}`)
	time.Sleep(200 * time.Millisecond) // the proxy installs toxics asynchronously
	c := checker.New()
	next := func() error {
		c.Attempt()
		id, err := a.Next(ctx, "cold")
		if err != nil {
			c.Fail(err)
			return err
		}
		c.Ack("client", "cold", id)
		return nil
	}
	if err := next(); !errors.Is(err, allocator.ErrUnavailable) {
		t.Fatalf("first request during the outage: %v, want ErrUnavailable", err)
	}
	testutil.Eventually(t, 10*time.Second, "the first load to commit", func() bool { return maxID(t, direct, "cold") > 0 })
	// Callers keep asking for a while; the buffers they make cannot load.
	for range 5 {
		next()
		time.Sleep(50 * time.Millisecond)
	}
	px.Remove(t, "lose-replies")
	testutil.Eventually(t, 20*time.Second, "cold to serve", func() bool { return next() == nil })
	for range 3 * step {
		if err := next(); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r := c.Report()
	requireValid(t, r)
	st := tagStats(a, "cold")
	m := maxID(t, direct, "cold")
	if st.Issued != r.Tag("cold").IDs || st.Issued+st.Abandoned != m {
		t.Fatalf("max_id %d, %d ids handed out (%d acknowledged), %d abandoned: %d ids unaccounted for",
			m, st.Issued, r.Tag("cold").IDs, st.Abandoned, m-st.Issued-st.Abandoned)
	}
	if st.Abandoned > 0 && !strings.Contains(logs.String(), `"msg":"ABANDONED ids`) {
		t.Fatal("ids abandoned without an ABANDONED line")
	}
	t.Logf("cold tag through a reply outage: max_id %d = %d handed out + %d abandoned (logged); %d given back; 0 duplicates",
		m, st.Issued, st.Abandoned, st.GivenBack)
}
