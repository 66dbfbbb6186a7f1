package faults_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/drill"
	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/testlog"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/testutil"
	"github.com/idmint/idmint/testkit/toxic"
)

// drillFar is how long TestDrillFar measures (make drill-far); 0 skips it.
var drillFar = flag.Duration("drill.far", 0, "measure GET /id near and far from PostgreSQL for this long (TestDrillFar)")

// serveAttemptTimeout is idmint serve's attempt timeout: the floor fit for a
// nearby database.
const serveAttemptTimeout = 3 * time.Second

// far puts oneWay of latency each way between the test and the database at
// dbURL (a WAN away), and returns the proxy.
func far(tb testing.TB, dbURL string, oneWay time.Duration) *toxic.Proxy {
	tb.Helper()
	px := toxic.New(tb, dbURL)
	attrs := fmt.Sprintf(`{"latency":%d,"jitter":0}`, oneWay.Milliseconds())
	px.Add(tb, "far-up", "latency", "upstream", attrs)
	px.Add(tb, "far-down", "latency", "downstream", attrs)
	return px
}

// near removes far's latency.
func near(tb testing.TB, px *toxic.Proxy) {
	tb.Helper()
	px.Remove(tb, "far-up")
	px.Remove(tb, "far-down")
}

// fetchCalls counts the store calls of segment fetches: every attempt,
// first or retried.
type fetchCalls struct {
	allocator.Store
	calls, failed atomic.Int64
}

func (s *fetchCalls) Allocate(ctx context.Context, req allocator.Request) (allocator.Segment, error) {
	s.calls.Add(1)
	seg, err := s.Store.Allocate(ctx, req)
	if err != nil {
		s.failed.Add(1)
	}
	return seg, err
}

func (s *fetchCalls) Lookup(ctx context.Context, id uuid.UUID) (allocator.Segment, error) {
	s.calls.Add(1)
	seg, err := s.Store.Lookup(ctx, id)
	if err != nil {
		s.failed.Add(1)
	}
	return seg, err
}

// pingAsServe pings store until it answers, as idmint serve does before it
// serves: the first round trips are measured then.
func pingAsServe(tb testing.TB, store *postgres.Store) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := store.Ping(ctx); err != nil {
		tb.Fatal(err)
	}
}

// coldFetches loads tags at once on an instance over store, which has one
// warm connection: the other fetches need a connection of their own, a
// connect of several round trips. It returns how many store calls went
// beyond one per load (retries) and how many first requests failed.
func coldFetches(t *testing.T, store *postgres.Store, tags []string, rt *allocator.RoundTrip) (retries, failures int64, a *allocator.Allocator) {
	t.Helper()
	counted := &fetchCalls{Store: store}
	a = newInstance(t, counted, "far", func(c *allocator.Config) {
		// The serve defaults, but a request waits for the first segment
		// as long as the load takes: this counts fetch attempts.
		c.AttemptTimeout, c.RetryMin, c.RetryMax = serveAttemptTimeout, 0, 0
		c.Segment = segment.Config{WaitTimeout: time.Minute}
		c.RoundTrip = rt
	})
	var wg sync.WaitGroup
	var failed atomic.Int64
	for _, tag := range tags {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := a.Next(ctx, tag); err != nil {
				failed.Add(1)
				t.Logf("%s: %v", tag, err)
			}
		})
	}
	wg.Wait()
	failures = failed.Load()
	var loads int64
	for _, tag := range tags {
		st := tagStats(a, tag)
		loads += st.Loads
	}
	return counted.calls.Load() - loads, failures, a
}

// TestFarDatabase_TimeoutsFollowRoundTrip: with 150 ms and 400 ms of
// latency each way, segment fetches on new connections succeed at the first
// attempt, with timeouts derived from the measured round trip; at 400 ms
// the fixed timeout of a nearby database fires on the same fetches. The
// timeout rises with the round trip and falls back to the floor once the
// latency is gone.
func TestFarDatabase_TimeoutsFollowRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("far database: slow round trips")
	}
	srv := pgtest.Shared(t)
	for _, oneWay := range []time.Duration{150 * time.Millisecond, 400 * time.Millisecond} {
		t.Run(fmt.Sprint(oneWay, " each way"), func(t *testing.T) {
			dbURL := pgstore.NewDatabase(t, srv)
			direct := pgstore.Open(t, dbURL)
			tags := []string{"a", "b", "c", "d"}
			for _, tag := range tags {
				createTag(t, direct, tag, 1000, 1000)
			}
			px := far(t, dbURL, oneWay)

			if oneWay >= 400*time.Millisecond {
				// A connect, a prepare and the statement: five round trips
				// of 800 ms, more than a nearby database's 3 s.
				store := pgstore.Open(t, px.URL)
				pingAsServe(t, store)
				retries, failures, a := coldFetches(t, store, tags, nil)
				a.Close(context.Background())
				if retries == 0 && failures == 0 {
					t.Fatalf("fixed %v attempt timeout at %v each way: no retry, no failure; the test proves nothing", serveAttemptTimeout, oneWay)
				}
				t.Logf("fixed timeout of %v: %d retries, %d failed requests", serveAttemptTimeout, retries, failures)
			}

			store := pgstore.Open(t, px.URL)
			rt := store.RoundTrip()
			pingAsServe(t, store)
			if got := rt.Estimate(); got < 2*oneWay {
				t.Fatalf("round trip measured at %v, below the %v the latency adds", got, 2*oneWay)
			}
			retries, failures, a := coldFetches(t, store, tags, rt)
			status := a.RoundTrip()
			t.Logf("%v each way: round trip %v, fetch timeout %v; %d retries, %d failed requests", oneWay, status.RTT, status.FetchTimeout, retries, failures)
			if retries != 0 || failures != 0 {
				t.Fatalf("%d retries and %d failed requests with the timeout following the round trip", retries, failures)
			}
			if want := allocator.DefaultRoundTripFactor * status.RTT; status.FetchTimeout != max(serveAttemptTimeout, want) {
				t.Fatalf("fetch timeout %v with a round trip of %v: want max(%v, %v)", status.FetchTimeout, status.RTT, serveAttemptTimeout, want)
			}
			if oneWay >= 400*time.Millisecond && status.FetchTimeout <= serveAttemptTimeout {
				t.Fatalf("fetch timeout %v at %v each way: did not rise above the floor", status.FetchTimeout, oneWay)
			}

			near(t, px)
			testutil.Eventually(t, 30*time.Second, "the fetch timeout to fall back to the floor", func() bool {
				pingAsServe(t, store)
				return a.RoundTrip().FetchTimeout == serveAttemptTimeout && a.RoundTrip().RTT < 50*time.Millisecond
			})
		})
	}
}

// TestFarDatabase_GiveBack: 150 ms each way, with serve's timeouts, a
// caller's give-back and an instance's at close both succeed within the
// fixed bound of a give-back (allocator.MaxGiveBackTimeout), each on a new
// connection (the worst case: a connect, then the give-back's
// transaction).
func TestFarDatabase_GiveBack(t *testing.T) {
	if testing.Short() {
		t.Skip("far database: slow round trips")
	}
	const tag, step, oneWay = "order", 1000, 150 * time.Millisecond
	ctx := context.Background()
	dbURL := pgstore.NewDatabase(t, pgtest.Shared(t))
	createTag(t, pgstore.Open(t, dbURL), tag, step, step)
	px := far(t, dbURL, oneWay)
	store := pgstore.Open(t, px.URL)
	pingAsServe(t, store)
	a := newInstance(t, store, "far", func(c *allocator.Config) {
		c.AttemptTimeout, c.RetryMin, c.RetryMax = serveAttemptTimeout, 0, 0
		c.Segment = segment.Config{WaitTimeout: 10 * time.Second}
		c.RoundTrip = store.RoundTrip()
	})
	if id, err := a.Next(ctx, tag); err != nil || id != 1 {
		t.Fatalf("Next = %d, %v; want 1", id, err)
	}
	h := allocator.NewHolder("anonymous", "key")
	rr := allocator.RangeRequest{ID: uuid.Must(uuid.NewV7()), Tag: tag, Size: step, Holder: h}
	seg, _, err := a.GrantRange(ctx, rr)
	if err != nil {
		t.Fatal(err)
	}
	// holdIdle takes every idle connection until the returned func, so that
	// the next store call opens a new one.
	holdIdle := func() func() {
		conns := store.Pool().AcquireAllIdle(ctx)
		return func() {
			for _, c := range conns {
				c.Release()
			}
		}
	}
	release := holdIdle()
	start := time.Now()
	ok, err := a.GiveBackRange(ctx, rr.ID, h, tag, seg.First, seg.Last)
	caller := time.Since(start)
	release()
	if err != nil || !ok {
		t.Fatalf("a caller's give-back at %v each way (%v): %v, %v", oneWay, caller, ok, err)
	}
	release = holdIdle()
	start = time.Now()
	err = a.Close(ctx)
	closed := time.Since(start)
	release()
	if err != nil {
		t.Fatal(err)
	}
	if got := maxID(t, store, tag); got != 1 {
		t.Fatalf("max_id %d after both give-backs, want 1", got)
	}
	t.Logf("%v each way (round trip %v): a caller's give-back on a new connection %v, an instance's close %v; bound %v",
		oneWay, store.RoundTrip().Estimate().Round(time.Millisecond), caller.Round(time.Millisecond), closed.Round(time.Millisecond), allocator.MaxGiveBackTimeout)
}

// TestFarDatabase_LinkCut: 150 ms each way, behind the real HTTP server,
// the link is cut (the proxy disabled: every connection dropped, new ones
// refused) while a fetch is due, for longer than a fetch takes and shorter
// than the buffers hold. Callers see no error and no duplicate.
func TestFarDatabase_LinkCut(t *testing.T) {
	if testing.Short() {
		t.Skip("far database: slow round trips")
	}
	const tag, step, clients = "order", 5000, 4
	dbURL := pgstore.NewDatabase(t, pgtest.Shared(t))
	createTag(t, pgstore.Open(t, dbURL), tag, step, step)
	px := far(t, dbURL, 150*time.Millisecond)
	store := pgstore.Open(t, px.URL)
	pingAsServe(t, store)
	counted := &fetchCalls{Store: store}
	a := newInstance(t, counted, "far", func(c *allocator.Config) {
		c.AttemptTimeout, c.RetryMin, c.RetryMax = serveAttemptTimeout, 0, 0
		c.Segment = segment.Config{WaitTimeout: 10 * time.Second}
		c.RoundTrip = store.RoundTrip()
	})
	api := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard()}))
	defer api.Close()
	httpClient := &http.Client{Timeout: 30 * time.Second}
	c := checker.New()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	get := func(client string) {
		c.Attempt()
		resp, err := httpClient.Get(api.URL + "/id?biz_tag=" + tag)
		if err != nil {
			c.Fail(err)
			return
		}
		defer resp.Body.Close()
		var body struct {
			ID string `json:"id"`
		}
		if resp.StatusCode != http.StatusOK {
			c.Fail(fmt.Errorf("status %d", resp.StatusCode))
			return
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			c.Fail(err)
			return
		}
		id, err := strconv.ParseInt(body.ID, 10, 64)
		if err != nil {
			c.Fail(err)
			return
		}
		c.Ack(client, tag, id)
	}
	get("warm-up")
	// Use up the current range, so that the next one is served and a new
	// fetch is due at its 10%.
	drain := func(n int64) {
		ids, err := a.NextN(ctx, tag, int(n))
		c.Attempt()
		if err != nil {
			t.Fatal(err)
		}
		c.Ack("drain", tag, ids...)
	}
	drain(step/10 + 1)
	testutil.Eventually(t, 30*time.Second, "both ranges loaded", func() bool {
		st := tagStats(a, tag)
		return st.NextRange != nil && !st.Loading
	})

	// Callers at a steady pace: some hundreds of IDs a second, so that the
	// next range (90% of 5,000 IDs) lasts for seconds.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range clients {
		wg.Go(func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				case <-tick.C:
					get(fmt.Sprint("client-", w))
				}
			}
		})
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	// The next range is served; the fetch due at its 10% meets the cut.
	drain(tagStats(a, tag).Remaining)
	px.Stop()
	cut := time.Now()
	failedBefore := counted.failed.Load()
	drain(step/10 + 1)
	testutil.Eventually(t, 30*time.Second, "a fetch attempt to fail during the cut", func() bool {
		return counted.failed.Load() > failedBefore
	})
	// Longer than a fetch takes (two round trips of 300 ms).
	testutil.Eventually(t, 10*time.Second, "the cut to outlast a fetch", func() bool { return time.Since(cut) > 2*time.Second })
	if err := px.Start(); err != nil {
		t.Fatal(err)
	}
	outage := time.Since(cut)
	testutil.Eventually(t, time.Minute, "the next range after the cut", func() bool {
		return tagStats(a, tag).NextRange != nil
	})
	close(stop)
	wg.Wait()
	r := c.Report()
	requireValid(t, r)
	if r.Failed != 0 {
		t.Fatalf("%d callers failed across a cut of %v: %v", r.Failed, outage, r.Errors)
	}
	st := tagStats(a, tag)
	t.Logf("cut of %v at 150 ms each way: %d ids to callers, 0 errors, 0 duplicates; %d fetch attempts failed during the cut, %d ids still buffered",
		outage.Round(time.Millisecond), r.IDs(), counted.failed.Load()-failedBefore, st.Available())
}

// TestDrillFar measures GET /id side by side, in one run and under the same
// load: one instance next to the database, one 150 ms away each way
// (through toxiproxy), on one tag whose segments (5,000 IDs) last some
// seconds at this load: the far instance fetches several times, each fetch
// taking some round trips of 300 ms. It prints the p50, p99 and max of each
// and the p50 and p99 ratios, as a drill report. It runs only when -drill.far is a duration (make
// drill-far); a figure, not a timing assertion: the checks are 0 errors
// and 0 duplicates.
func TestDrillFar(t *testing.T) {
	duration := *drillFar
	if duration <= 0 {
		t.Skip("pass -drill.far=20s (make drill-far) to measure")
	}
	rep := drill.Start(t, "far")
	// The tag is sized by a runway, as an operator would set it, not by a
	// hand-picked step: its ranges grow from the default step to hold 10 s
	// at the measured rate, so a fetch 150 ms away never runs a buffer dry.
	const tag, clients = "order", 4
	const oneWay, runway = 150 * time.Millisecond, 10 * time.Second
	dbURL := pgstore.NewDatabase(t, pgtest.Shared(t))
	createTag(t, pgstore.Open(t, dbURL), tag, allocator.DefaultStep, 10_000_000)
	px := far(t, dbURL, oneWay)

	type side struct {
		name      string
		a         *allocator.Allocator
		url       string
		latencies []time.Duration
	}
	var sides []*side
	for _, s := range []struct{ name, url string }{{"near", dbURL}, {"far", px.URL}} {
		store := pgstore.Open(t, s.url)
		pingAsServe(t, store)
		a := newInstance(t, store, s.name, func(c *allocator.Config) {
			// The serve defaults.
			c.AttemptTimeout, c.RetryMin, c.RetryMax = serveAttemptTimeout, 0, 0
			c.Segment = segment.Config{Runway: runway}
			c.RoundTrip = store.RoundTrip()
		})
		api := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard()}))
		t.Cleanup(api.Close)
		sides = append(sides, &side{name: s.name, a: a, url: api.URL})
	}
	c := checker.New()
	httpClient := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2 * clients}}
	get := func(sd *side, client string) time.Duration {
		c.Attempt()
		start := time.Now()
		resp, err := httpClient.Get(sd.url + "/id?biz_tag=" + tag)
		if err != nil {
			c.Fail(err)
			return 0
		}
		defer resp.Body.Close()
		var body struct {
			ID string `json:"id"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		latency := time.Since(start)
		if resp.StatusCode != http.StatusOK || err != nil {
			c.Fail(fmt.Errorf("%s: status %d: %v", sd.name, resp.StatusCode, err))
			return 0
		}
		id, err := strconv.ParseInt(body.ID, 10, 64)
		if err != nil {
			c.Fail(err)
			return 0
		}
		c.Ack(client, tag, id)
		return latency
	}
	// Warm up: the first segment of each, and both buffers full.
	for _, sd := range sides {
		get(sd, sd.name+"-warm-up")
		testutil.Eventually(t, time.Minute, sd.name+" loaded", func() bool { return tagStats(sd.a, tag).Loads > 0 })
	}
	var mu sync.Mutex
	// run loads both sides with the clients until done says so, keeping
	// the latencies when record is set.
	run := func(done func() bool, record bool) {
		var wg sync.WaitGroup
		for _, sd := range sides {
			for w := range clients {
				wg.Go(func() {
					client := fmt.Sprint(sd.name, "-", w)
					var mine []time.Duration
					for !done() {
						if d := get(sd, client); d > 0 {
							mine = append(mine, d)
						}
					}
					if record {
						mu.Lock()
						sd.latencies = append(sd.latencies, mine...)
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
	}
	// Warm up under the same load until both hold their runway: the peak
	// rate is measured, and the ranges have grown to it.
	warmEnd := time.Now().Add(time.Minute)
	var met atomic.Bool
	stopWarm := make(chan struct{})
	go func() {
		defer close(stopWarm)
		for time.Now().Before(warmEnd) {
			// Met with a peak measured: with no rate yet any runway is
			// "met", vacuously.
			near, far := tagStats(sides[0].a, tag), tagStats(sides[1].a, tag)
			if near.Peak > 0 && near.RunwayMet && far.Peak > 0 && far.RunwayMet {
				met.Store(true)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	run(func() bool {
		select {
		case <-stopWarm:
			return true
		default:
			return false
		}
	}, false)
	if !met.Load() {
		t.Fatalf("the runway of %v was not met within a minute: near %+v, far %+v", runway, tagStats(sides[0].a, tag), tagStats(sides[1].a, tag))
	}
	loadsBefore := map[string]int64{}
	for _, sd := range sides {
		loadsBefore[sd.name] = tagStats(sd.a, tag).Loads
	}
	end := time.Now().Add(duration)
	run(func() bool { return !time.Now().Before(end) }, true)
	r := c.Report()
	requireValid(t, r)
	if r.Failed != 0 {
		t.Fatalf("%d requests failed: %v", r.Failed, r.Errors)
	}
	pct := func(ds []time.Duration, p float64) time.Duration {
		slices.Sort(ds)
		return ds[min(len(ds)-1, int(float64(len(ds))*p))]
	}
	near, farSide := sides[0], sides[1]
	for _, sd := range sides {
		rep.Set(sd.name+"_p50_s", pct(sd.latencies, 0.50))
		rep.Set(sd.name+"_p99_s", pct(sd.latencies, 0.99))
		rep.Set(sd.name+"_max_s", pct(sd.latencies, 1))
		rep.Set(sd.name+"_requests", len(sd.latencies))
		rep.Set(sd.name+"_fetches", tagStats(sd.a, tag).Loads-loadsBefore[sd.name])
	}
	rep.Set("duration_s", duration)
	rep.Set("runway_s", runway)
	rep.Set("clients", clients)
	rep.Set("one_way_s", oneWay)
	rep.Set("far_round_trip_s", farSide.a.RoundTrip().RTT)
	rep.Set("far_fetch_timeout_s", farSide.a.RoundTrip().FetchTimeout)
	rep.Set("ratio_p50", float64(pct(farSide.latencies, 0.50))/float64(pct(near.latencies, 0.50)))
	rep.Set("ratio_p99", float64(pct(farSide.latencies, 0.99))/float64(pct(near.latencies, 0.99)))
	rep.Set("errors", r.Failed)
	rep.Set("duplicates", r.Duplicates())
}
