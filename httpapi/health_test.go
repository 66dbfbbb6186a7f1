package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/testutil"
	"github.com/idmint/idmint/wire"
)

// lossyStore is a real Postgres store that can lose the reply of its next
// allocation after the database committed it, as a dropped connection
// would.
type lossyStore struct {
	*postgres.Store
	loseNext atomic.Bool
}

func (s *lossyStore) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	seg, err := s.Store.Allocate(ctx, req)
	if err == nil && s.loseNext.CompareAndSwap(true, false) {
		return allocator.Segment{}, fmt.Errorf("%w: connection reset after commit", allocator.ErrAmbiguous)
	}
	return seg, err
}

// pgInstance is idmint over real PostgreSQL, served on loopback.
type pgInstance struct {
	srv   *httptest.Server
	alloc *allocator.Allocator
	store *lossyStore
}

// newPGInstance migrates a fresh database on srv, creates tags (name →
// step) and serves the API over it with metrics wired as cmd/idmint wires
// them.
func newPGInstance(tb testing.TB, server *pgtest.Server, tags map[string]int64, mod func(*allocator.Config)) *pgInstance {
	tb.Helper()
	ctx := context.Background()
	pg := pgstore.Open(tb, pgstore.NewDatabase(tb, server))
	for name, step := range tags {
		if _, err := pg.CreateTag(ctx, allocator.TagSpec{Name: name, Step: step}); err != nil {
			tb.Fatal(err)
		}
	}
	store := &lossyStore{Store: pg}
	metrics := httpapi.NewMetrics()
	cfg := allocator.Config{
		Store: store, Instance: "e2e", Logger: testlog.Discard(),
		AttemptTimeout: 300 * time.Millisecond, RetryMin: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond,
		Segment: segment.Config{
			Period:      time.Nanosecond, // keep every segment at the tag's step
			LoadTimeout: time.Second, WaitTimeout: 2 * time.Second,
			MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
			OnLoad: metrics.ObserveLoad,
		},
	}
	if mod != nil {
		mod(&cfg)
	}
	a := allocator.New(cfg)
	tb.Cleanup(func() { a.Close(context.Background()) })
	srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{
		Allocator: a, Instance: "e2e", Logger: testlog.Discard(), Metrics: metrics, PingTimeout: 300 * time.Millisecond,
		Replication: pg,
	})))
	tb.Cleanup(srv.Close)
	return &pgInstance{srv: srv, alloc: a, store: store}
}

func (p *pgInstance) health(tb testing.TB, query string) (int, httpapi.Health) {
	tb.Helper()
	status, _, body := getURL(tb, p.srv.URL+"/id/health"+query)
	var h httpapi.Health
	if err := json.Unmarshal(body, &h); err != nil {
		tb.Fatalf("health: %v: %s", err, body)
	}
	return status, h
}

// tag returns tag's entry of /id/health?biz_tag=tag.
func (p *pgInstance) tag(tb testing.TB, tag string) (int, httpapi.Health, httpapi.TagHealth) {
	tb.Helper()
	status, h := p.health(tb, "?biz_tag="+tag)
	if len(h.Tags) != 1 || h.Tags[0].Tag != tag {
		tb.Fatalf("health of %s: %d %+v", tag, status, h)
	}
	return status, h, h.Tags[0]
}

// take asks for n IDs of tag and returns the HTTP status.
func (p *pgInstance) take(tb testing.TB, tag string, n int) int {
	tb.Helper()
	status, _, _ := getURL(tb, fmt.Sprintf("%s/ids?biz_tag=%s&count=%d", p.srv.URL, tag, n))
	return status
}

func (p *pgInstance) exec(tb testing.TB, sql string, args ...any) {
	tb.Helper()
	if _, err := p.store.Pool().Exec(context.Background(), sql, args...); err != nil {
		tb.Fatal(err)
	}
}

func hasReason(h httpapi.Health, part string) bool {
	return slices.ContainsFunc(h.Reasons, func(r string) bool { return strings.Contains(r, part) })
}

// TestHealth_Fields walks one tag through loads, a lost reply, a database
// outage, a refused range and shutdown, over real PostgreSQL and HTTP, and
// checks every /id/health field moves as documented.
func TestHealth_Fields(t *testing.T) {
	// The tag catalog is read again at every miss, so that a made-up tag
	// during the outage below is one the instance cannot tell from a real
	// one. The outage subtest stops the database: a server pgtest owns.
	srv := pgtest.Owned(t)
	p := newPGInstance(t, srv, map[string]int64{"order": 100}, func(c *allocator.Config) { c.CatalogInterval = time.Nanosecond })

	t.Run("fresh", func(t *testing.T) {
		status, h := p.health(t, "")
		if status != 200 || h.Version != 1 || h.Status != httpapi.StatusOK || !h.Database.Reachable ||
			len(h.Tags) != 0 || h.Reasons == nil || len(h.Reasons) != 0 || h.Instance != "e2e" {
			t.Fatalf("%d %+v", status, h)
		}
	})

	t.Run("health never loads", func(t *testing.T) {
		status, h, th := p.tag(t, "order")
		if status != 200 || h.Status != httpapi.StatusOK || th.Serving || th.Current != nil || th.SegmentLoads != 0 || th.Issued != 0 {
			t.Fatalf("%d %+v %+v", status, h, th)
		}
		var maxID int64
		if err := p.store.Pool().QueryRow(context.Background(), `SELECT max_id FROM idmint_tags WHERE biz_tag = 'order'`).Scan(&maxID); err != nil || maxID != 0 {
			t.Fatalf("max_id = %d, %v after a health check; want 0: a read must not allocate", maxID, err)
		}
	})

	var first httpapi.TagHealth
	t.Run("first load", func(t *testing.T) {
		if s := p.take(t, "order", 1); s != 200 {
			t.Fatalf("ids: %d", s)
		}
		status, h, th := p.tag(t, "order")
		if status != 200 || h.Status != httpapi.StatusOK {
			t.Fatalf("%d %+v", status, h)
		}
		if !th.Serving || th.Current == nil || *th.Current != (httpapi.RangeJSON{First: 1, Last: 100}) || th.Next != 2 ||
			th.Remaining != 99 || th.RemainingRatio != 0.99 || th.NextReady || th.NextRange != nil || th.NextLate ||
			th.Step != 100 || th.MinStep != 100 || th.MaxStep != segment.DefaultMaxStep ||
			th.SegmentLoads != 1 || th.LastLoadMS <= 0 || th.AvgLoadMS != th.LastLoadMS || th.LastLoadAt == nil ||
			th.LoadFailures != 0 || th.Recovered != 0 || th.Refused != 0 || th.Issued != 1 || th.Abandoned != 0 ||
			th.Available != 99 || th.LastError != "" {
			t.Fatalf("%+v", th)
		}
		first = th
	})

	t.Run("prefetch", func(t *testing.T) {
		if s := p.take(t, "order", 49); s != 200 {
			t.Fatalf("ids: %d", s)
		}
		var th httpapi.TagHealth
		testutil.Eventually(t, 10*time.Second, "next range", func() bool { _, _, th = p.tag(t, "order"); return th.NextReady })
		if th.SegmentLoads != 2 || th.Issued != 50 || th.Next != 51 || th.Remaining != 50 || th.RemainingRatio != 0.5 ||
			th.NextRange == nil || *th.NextRange != (httpapi.RangeJSON{First: 101, Last: 200}) || th.Available != 150 ||
			th.LastLoadAt.Before(*first.LastLoadAt) || th.IDsPerSecond <= 0 || th.SecondsUntilDry == nil {
			t.Fatalf("%+v", th)
		}
		// seconds_until_dry is available over the rate, both rounded.
		if want := float64(th.Available) / th.IDsPerSecond; math.Abs(*th.SecondsUntilDry-want) > want*0.01+0.01 {
			t.Fatalf("seconds_until_dry %v, want about %v", *th.SecondsUntilDry, want)
		}
	})

	t.Run("lost reply recovered", func(t *testing.T) {
		p.store.loseNext.Store(true)
		p.take(t, "order", 100) // into [101,200]: past its threshold
		var th httpapi.TagHealth
		testutil.Eventually(t, 10*time.Second, "recovered load", func() bool { _, _, th = p.tag(t, "order"); return th.NextReady })
		if th.Recovered != 1 || th.SegmentLoads != 3 || th.LoadFailures != 0 || *th.NextRange != (httpapi.RangeJSON{First: 201, Last: 300}) {
			t.Fatalf("%+v", th)
		}
	})

	t.Run("database outage", func(t *testing.T) {
		srv.Stop(t, false)
		stopped := true
		defer func() {
			if stopped {
				srv.Start(t)
			}
		}()
		status, h, th := p.tag(t, "order")
		if status != 200 || h.Status != httpapi.StatusDegraded || h.Database.Reachable || h.Database.Error == "" ||
			!hasReason(h, "database unreachable") || !th.Serving || th.NextLate {
			t.Fatalf("buffers full: %d %+v", status, h)
		}
		// A made-up tag cannot be told from a real one without the
		// database (once the catalog is stale), and cannot serve: asked for by name it is unavailable,
		// but it does not take the instance down.
		if s := p.take(t, "made-up", 1); s != 503 {
			t.Fatalf("made-up tag during the outage: %d", s)
		}
		if status, h, _ := p.tag(t, "made-up"); status != 503 || h.Status != httpapi.StatusUnavailable {
			t.Fatalf("made-up tag asked for: %d %+v", status, h)
		}
		// Nor does it leave a buffer behind to be listed.
		if status, h := p.health(t, ""); status != 200 || h.Status != httpapi.StatusDegraded || len(h.Tags) != 1 {
			t.Fatalf("made-up tag listed: %d %+v", status, h)
		}
		p.take(t, "order", 60) // the rest of [101,200], then [201,210]: 10% of the next
		testutil.Eventually(t, 10*time.Second, "failed load", func() bool { _, _, th = p.tag(t, "order"); return th.LoadFailures > 0 })
		status, h, th = p.tag(t, "order")
		if status != 200 || h.Status != httpapi.StatusDegraded || !th.Serving || !th.NextLate || th.NextReady ||
			th.LastError == "" || !hasReason(h, "next range late") || th.Available != 90 {
			t.Fatalf("next late: %d %+v", status, h)
		}
		if s := p.take(t, "order", 90); s != 200 {
			t.Fatalf("serving from memory: %d", s)
		}
		if s := p.take(t, "order", 1); s != 503 {
			t.Fatalf("dry: %d", s)
		}
		status, h, th = p.tag(t, "order")
		if status != 503 || h.Status != httpapi.StatusUnavailable || th.Serving || th.Remaining != 0 || th.Available != 0 ||
			th.RemainingRatio != 0 || !hasReason(h, "buffers empty") {
			t.Fatalf("dry: %d %+v", status, h)
		}
		srv.Start(t)
		stopped = false
		testutil.Eventually(t, 10*time.Second, "recovery", func() bool {
			p.take(t, "order", 1)
			_, h, th = p.tag(t, "order")
			return h.Status == httpapi.StatusOK
		})
		if !th.Serving || th.LastError != "" || th.NextLate || th.LoadFailures == 0 || len(h.Reasons) != 0 {
			t.Fatalf("recovered: %+v", h)
		}
	})

	t.Run("repaired rollback", func(t *testing.T) {
		_, _, before := p.tag(t, "order")
		highest := before.Current.Last
		if before.NextRange != nil {
			highest = before.NextRange.Last
		}
		p.exec(t, `UPDATE idmint_tags SET max_id = 150 WHERE biz_tag = 'order'`) // a restored backup
		p.take(t, "order", int(before.Remaining))                                // drain the current range
		p.take(t, "order", 20)                                                   // into the next, past its threshold
		var th httpapi.TagHealth
		var h httpapi.Health
		testutil.Eventually(t, 10*time.Second, "repaired rollback", func() bool { _, h, th = p.tag(t, "order"); return th.Repaired > 0 && th.NextReady })
		// The instance raised max_id to its floor and serves above it;
		// the alarm stays until restart, because other instances may
		// have served the rolled-back IDs.
		if h.Status != httpapi.StatusDegraded || !hasReason(h, "went back in time") || th.LastError != "" ||
			th.Refused != 0 || th.NextRange.First <= highest {
			t.Fatalf("repaired: %+v", h)
		}
	})

	t.Run("abandoned on close", func(t *testing.T) {
		_, _, before := p.tag(t, "order")
		p.alloc.Close(context.Background())
		if _, _, th := p.tag(t, "order"); th.Abandoned+th.GivenBack != before.Available || th.Serving || th.Issued != before.Issued {
			t.Fatalf("after close: abandoned %d + given back %d, want %d: %+v", th.Abandoned, th.GivenBack, before.Available, th)
		}
	})
}

// TestHealth_UnknownTag: an unknown tag is a 404 and leaves no trace.
func TestHealth_UnknownTag(t *testing.T) {
	p := newPGInstance(t, pgtest.Shared(t), map[string]int64{"order": 10}, nil)
	status, _, body := getURL(t, p.srv.URL+"/id/health?biz_tag=nope")
	if status != 404 || errorCode(t, body) != wire.CodeUnknownTag {
		t.Fatalf("%d %s", status, body)
	}
	if _, h := p.health(t, ""); len(h.Tags) != 0 {
		t.Fatalf("unknown tag listed: %+v", h.Tags)
	}
}

// TestHealth_ListedTags: the tags an instance is told of (idmint serve
// --tag) are in /id/health, over real HTTP, from the start: before any
// request for them, with their state (not serving, nothing loaded), and
// after one of them loads; a tag it was not told of shows only once asked
// for.
func TestHealth_ListedTags(t *testing.T) {
	m := memstore.New()
	for _, name := range []string{"order", "user", "other"} {
		if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: name, Step: 10}); err != nil {
			t.Fatal(err)
		}
	}
	p := newTokenInstanceWith(t, m, httpapi.AuthConfig{}, httpapi.Limits{}, func(c *httpapi.Config) {
		c.Tags = []string{"user", "order", "user"}
	})
	health := func(t *testing.T) httpapi.Health {
		t.Helper()
		status, _, body := get(t, p.srv, "/id/health")
		var h httpapi.Health
		if err := json.Unmarshal(body, &h); err != nil || status != 200 {
			t.Fatalf("/id/health: %d %s (%v)", status, body, err)
		}
		return h
	}
	names := func(h httpapi.Health) []string {
		var out []string
		for _, th := range h.Tags {
			out = append(out, th.Tag)
		}
		return out
	}

	h := health(t)
	if got := names(h); !slices.Equal(got, []string{"order", "user"}) {
		t.Fatalf("before any request: tags %v, want [order user]", got)
	}
	for _, th := range h.Tags {
		if th.Serving || th.Current != nil || th.SegmentLoads != 0 {
			t.Errorf("%s before any request: %+v, want not serving, nothing loaded", th.Tag, th)
		}
	}
	if h.Status != httpapi.StatusOK {
		t.Errorf("before any request: status %s %v, want ok", h.Status, h.Reasons)
	}

	if status, _, body := get(t, p.srv, "/id?biz_tag=order"); status != 200 {
		t.Fatalf("/id?biz_tag=order: %d %s", status, body)
	}
	h = health(t)
	if got := names(h); !slices.Equal(got, []string{"order", "user"}) {
		t.Fatalf("after order loaded: tags %v, want [order user]", got)
	}
	if !h.Tags[0].Serving || h.Tags[0].SegmentLoads < 1 || h.Tags[1].Serving {
		t.Errorf("after order loaded: %+v, want order serving, loaded, user not serving", h.Tags)
	}

	if status, _, body := get(t, p.srv, "/id?biz_tag=other"); status != 200 {
		t.Fatalf("/id?biz_tag=other: %d %s", status, body)
	}
	if got := names(health(t)); !slices.Equal(got, []string{"order", "other", "user"}) {
		t.Errorf("after other loaded: tags %v, want [order other user]", got)
	}
}
