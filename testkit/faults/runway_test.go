package faults_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/drill"
	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/sqlite"
	"github.com/idmint/idmint/client"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/migrations"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/testutil"
	"github.com/idmint/idmint/testkit/toxic"
)

// The runway tests: short runways and outages, so that they stay quick.
const (
	// runwayShort is the runway an outage of outageShort must cost
	// callers nothing under.
	runwayShort = 8 * time.Second
	outageShort = 4 * time.Second
	// runwayLong is the runway an outage that lasts until callers fail
	// must outlast before the first 503.
	runwayLong = 3 * time.Second
	// runwayWorkers callers each ask for an ID every runwayPace: a steady
	// load of about 800 IDs/s over real HTTP.
	runwayWorkers = 4
	runwayPace    = 5 * time.Millisecond
)

// runwayRig is an instance with a runway behind a real HTTP server, and a
// steady load of callers whose every answer the checker records.
type runwayRig struct {
	t     *testing.T
	tag   string
	a     *allocator.Allocator
	api   *httptest.Server
	check *checker.Checker
	next  func(ctx context.Context) (int64, int, error) // one ID: the ID, the HTTP status

	start    time.Time    // the origin of first503 and lastOK
	first503 atomic.Int64 // ns after start of the first 503, 0 before
	lastOK   atomic.Int64 // ns after start of the last ID served
	others   atomic.Int64 // answers that were neither an ID nor a 503
	cancel   context.CancelFunc
	workers  sync.WaitGroup
}

// newRunwayRig serves tag from store with runway, through HTTP.
func newRunwayRig(t *testing.T, store allocator.Store, tag string, runway time.Duration) *runwayRig {
	t.Helper()
	a := newInstance(t, store, "runway", func(c *allocator.Config) {
		// A one-second period: the runway, not the period, sizes the
		// ranges, so that they hold about the runway and no more.
		c.Segment.Period, c.Segment.Runway = time.Second, runway
	})
	api := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard()}))
	t.Cleanup(api.Close)
	httpc := &http.Client{Timeout: 10 * time.Second}
	r := &runwayRig{t: t, tag: tag, a: a, api: api, check: checker.New(), start: time.Now()}
	r.next = func(ctx context.Context) (int64, int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, api.URL+"/id?biz_tag="+tag, nil)
		if err != nil {
			return 0, 0, err
		}
		resp, err := httpc.Do(req)
		if err != nil {
			return 0, 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			io.Copy(io.Discard, resp.Body)
			return 0, resp.StatusCode, fmt.Errorf("status %d", resp.StatusCode)
		}
		var body struct {
			ID string `json:"id"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return 0, resp.StatusCode, err
		}
		id, err := strconv.ParseInt(body.ID, 10, 64)
		return id, resp.StatusCode, err
	}
	return r
}

// run starts the steady load.
func (r *runwayRig) run() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	r.cancel = cancel
	for w := range runwayWorkers {
		r.workers.Go(func() {
			tick := time.NewTicker(runwayPace)
			defer tick.Stop()
			for range maxRequests {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				r.check.Attempt()
				id, status, err := r.next(ctx)
				at := int64(time.Since(r.start))
				switch {
				case err == nil:
					r.check.Ack(fmt.Sprint("caller-", w), r.tag, id)
					r.lastOK.Store(at)
				case ctx.Err() != nil:
					// Stopped mid-request: unfinished, not the service's
					// failure.
					return
				case status == http.StatusServiceUnavailable:
					r.check.Fail(err)
					r.first503.CompareAndSwap(0, at)
				default:
					r.check.Fail(err)
					r.others.Add(1)
				}
			}
		})
	}
	r.t.Cleanup(r.stop)
}

// stop ends the load and waits for its callers.
func (r *runwayRig) stop() {
	if r.cancel != nil {
		r.cancel()
	}
	r.workers.Wait()
}

// warm waits until the tag holds its runway with both ranges loaded and
// the current one nearly used up, and returns its stats then. An outage
// that starts then is the worst case: the buffers hold the least they ever
// hold with a next range, and the load that follows the switch, moments
// later, meets the outage.
func (r *runwayRig) warm(stats func() segment.Stats) segment.Stats {
	r.t.Helper()
	var st segment.Stats
	testutil.EventuallyOr(r.t, time.Minute, "the runway held with both ranges loaded, the current one nearly used", func() bool {
		st = stats()
		return st.Loads >= 3 && st.Peak > 0 && st.RunwayMet && st.NextRange != nil && !st.Loading &&
			float64(st.Remaining) < st.Peak/2
	}, func() string { return fmt.Sprintf("%+v", st) })
	return st
}

// since is the time from start to a stamp of the rig's.
func (r *runwayRig) since(at int64) time.Duration { return time.Duration(at) }

// shortOutage runs the load, takes the store away for outageShort with
// cut, brings it back with heal, and proves that callers saw no error and
// no duplicate.
func shortOutage(t *testing.T, r *runwayRig, stats func() segment.Stats, cut, heal func()) {
	t.Helper()
	d := drill.Start(t, "runway")
	cut, heal = once(t, cut, heal)
	r.run()
	st := r.warm(stats)
	cut()
	outageAt := time.Now()
	select {
	case <-time.After(outageShort): // the outage's length, not a wait for a state
	case <-t.Context().Done():
	}
	during := stats()
	heal()
	if during.LoadFailures == 0 && !during.Loading {
		t.Fatalf("no load was tried during the outage: it was never felt: %+v", during)
	}
	healed := time.Now()
	testutil.EventuallyOr(t, 30*time.Second, "a load to succeed after the outage", func() bool {
		s := stats()
		return s.Loads > during.Loads && s.LastError == ""
	}, func() string { return fmt.Sprintf("%+v", stats()) })
	resumed := time.Since(healed)
	// A second of load after: the callers go on without a pause.
	okBefore := r.lastOK.Load()
	testutil.Eventually(t, 10*time.Second, "IDs served after the outage", func() bool { return r.lastOK.Load() > okBefore })
	r.stop()
	rep := r.check.Report()
	requireValid(t, rep)
	if rep.Failed != 0 {
		t.Fatalf("an outage of %v under a runway of %v (held %v at %.0f IDs/s when it began) cost callers %d errors: %v",
			outageShort, st.Runway, st.RunwayHeld.Round(time.Millisecond), st.Peak, rep.Failed, rep.Errors)
	}
	t.Logf("RUNWAY FIGURE: runway %v, held %v at a peak of %.0f IDs/s (step %d) when the outage began; outage %v: %d IDs served, 0 errors, 0 duplicates; held %v at its end (%d load failures); a load succeeded %v after the store came back",
		st.Runway, st.RunwayHeld.Round(time.Millisecond), st.Peak, st.Step, time.Since(outageAt).Round(time.Millisecond)-time.Since(healed).Round(time.Millisecond),
		rep.Acknowledged, during.RunwayHeld.Round(time.Millisecond), during.LoadFailures, resumed.Round(time.Millisecond))
	d.Set("outage", "shorter")
	d.Set("runway_s", st.Runway)
	d.Set("held_at_start_s", st.RunwayHeld)
	d.Set("peak_ids_per_s", st.Peak)
	d.Set("step", st.Step)
	d.Set("outage_s", healed.Sub(outageAt))
	d.Set("ids", rep.Acknowledged)
	d.Set("errors", rep.Failed)
	d.Set("duplicates", rep.Duplicates())
	d.Set("held_at_end_s", during.RunwayHeld)
	d.Set("load_failures", during.LoadFailures)
	d.Set("resumed_after_s", resumed)
}

// longOutage runs the load, takes the store away until callers get a 503,
// and proves that the first 503 came only once the runway held when the
// outage began was spent (loosely), that /id/health said the runway was
// short on the way, and that the service resumed by itself.
func longOutage(t *testing.T, r *runwayRig, stats func() segment.Stats, cut, heal func()) {
	t.Helper()
	d := drill.Start(t, "runway")
	cut, heal = once(t, cut, heal)
	r.run()
	st := r.warm(stats)
	cut()
	outageAt := r.since(int64(time.Since(r.start)))
	var short segment.Stats
	testutil.Eventually(t, time.Minute, "a 503 once the runway is spent", func() bool {
		if s := stats(); !s.RunwayMet {
			short = s // the last word before the first 503
		}
		return r.first503.Load() != 0
	})
	first503 := r.since(r.first503.Load()) - outageAt
	heal()
	healedAt := r.since(int64(time.Since(r.start)))
	testutil.Eventually(t, time.Minute, "service to resume by itself", func() bool { return r.since(r.lastOK.Load()) > healedAt })
	resumed := r.since(r.lastOK.Load()) - healedAt
	r.stop()
	rep := r.check.Report()
	requireValid(t, rep)
	if n := r.others.Load(); n != 0 {
		t.Fatalf("%d answers were neither an ID nor a 503: %v", n, rep.Errors)
	}
	if short.Tag == "" || short.RunwayShort != segment.RunwayShortStore {
		t.Errorf("the stats never said the runway was short for the store before the first 503: %+v", short)
	}
	t.Logf("RUNWAY FIGURE: runway %v, held %v at a peak of %.0f IDs/s (step %d) when the outage began; first 503 after %v; runway reported short (%s) on the way; IDs served again %v after the store came back; %d IDs, %d 503s, 0 duplicates",
		st.Runway, st.RunwayHeld.Round(time.Millisecond), st.Peak, st.Step, first503.Round(time.Millisecond), short.RunwayShort, resumed.Round(time.Millisecond), rep.Acknowledged, rep.Failed)
	d.Set("outage", "longer")
	d.Set("runway_s", st.Runway)
	d.Set("held_at_start_s", st.RunwayHeld)
	d.Set("peak_ids_per_s", st.Peak)
	d.Set("step", st.Step)
	d.Set("first_503_after_s", first503)
	d.Set("short_reason", short.RunwayShort)
	d.Set("resumed_after_s", resumed)
	d.Set("ids", rep.Acknowledged)
	d.Set("unavailable", rep.Failed)
	d.Set("duplicates", rep.Duplicates())
	// Loose: the callers ran at most at the peak rate, so the IDs held
	// lasted at least the runway held, less what the machine's noise and
	// the rate's estimate take.
	if slack := st.RunwayHeld/4 + time.Second; first503 < st.RunwayHeld-slack {
		t.Errorf("the first 503 came %v into the outage, with %v held at the peak rate: the runway was not there", first503, st.RunwayHeld)
	}
}

// once returns cut and heal such that heal runs once after cut, at the
// latest when the test ends: a test that fails mid-outage must not leave
// the store away for its cleanups (a pool's Close on a cut connection).
func once(t *testing.T, cut, heal func()) (func(), func()) {
	var mu sync.Mutex
	away := false
	h := func() {
		mu.Lock()
		defer mu.Unlock()
		if away {
			away = false
			heal()
		}
	}
	t.Cleanup(h)
	return func() {
		mu.Lock()
		defer mu.Unlock()
		cut()
		away = true
	}, h
}

// pgRunway is a PostgreSQL database behind a proxy the test can cut, with
// one tag.
func pgRunway(t *testing.T, tag string) (store allocator.Store, px *toxic.Proxy) {
	t.Helper()
	dbURL := pgstore.NewDatabase(t, pgtest.Shared(t))
	createTag(t, pgstore.Open(t, dbURL), tag, 100, 0)
	px = toxic.New(t, dbURL)
	return pgstore.Open(t, px.URL), px
}

// TestRunway_PostgresOutageShorterThanRunway: a database outage (a
// partition: connections open, nothing comes back) shorter than the runway
// costs callers over HTTP no error and no duplicate.
func TestRunway_PostgresOutageShorterThanRunway(t *testing.T) {
	if testing.Short() {
		t.Skip("outage: long")
	}
	store, px := pgRunway(t, "order")
	r := newRunwayRig(t, store, "order", runwayShort)
	stats := func() segment.Stats { return tagStats(r.a, "order") }
	shortOutage(t, r, stats, func() { px.Cut(t) }, func() { px.Heal(t) })
}

// TestRunway_PostgresOutageLongerThanRunway: an outage longer than the
// runway fails callers with 503 only once the runway is spent, and the
// service resumes by itself when the database returns.
func TestRunway_PostgresOutageLongerThanRunway(t *testing.T) {
	if testing.Short() {
		t.Skip("outage: long")
	}
	store, px := pgRunway(t, "order")
	r := newRunwayRig(t, store, "order", runwayLong)
	stats := func() segment.Stats { return tagStats(r.a, "order") }
	longOutage(t, r, stats, func() { px.Cut(t) }, func() { px.Heal(t) })
}

// sqliteRunway is a SQLite file with one tag, and a way to take it away: a
// second process holding an exclusive write transaction on it, as another
// program (a backup tool, a careless sqlite3 shell) would.
func sqliteRunway(t *testing.T, tag string) (store allocator.Store, lock, unlock func()) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idmint.db")
	s, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := migrations.Up(t.Context(), s.DB(), migrations.SQLite, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateTag(t.Context(), allocator.TagSpec{Name: tag, Step: 100}); err != nil {
		t.Fatal(err)
	}
	var holder *exec.Cmd
	var stdin io.WriteCloser
	lock = func() {
		holder = exec.Command(os.Args[0], "-test.run=^TestRunway_HoldSQLiteLock$")
		holder.Env = append(os.Environ(), "IDMINT_FAULTS_SQLITE_LOCK="+path)
		stdin, err = holder.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := holder.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := holder.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stdin.Close(); holder.Wait() })
		// The holder says "locked" once its transaction holds the lock.
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "locked" {
				go io.Copy(io.Discard, out)
				return
			}
		}
		t.Fatalf("the lock holder ended without the lock: %v", sc.Err())
	}
	unlock = func() {
		stdin.Close() // the holder rolls back and exits
		if err := holder.Wait(); err != nil {
			t.Fatalf("lock holder: %v", err)
		}
	}
	return s, lock, unlock
}

// TestRunway_HoldSQLiteLock is the lock holder of the SQLite runway tests,
// run in a process of its own: it holds an exclusive write transaction on
// the file in IDMINT_FAULTS_SQLITE_LOCK until its stdin closes.
func TestRunway_HoldSQLiteLock(t *testing.T) {
	path := os.Getenv("IDMINT_FAULTS_SQLITE_LOCK")
	if path == "" {
		t.Skip("the lock holder of the SQLite runway tests")
	}
	db, err := sql.Open("sqlite", path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
	// A write, so that the lock is the writer's in every journal mode.
	if _, err := conn.ExecContext(context.Background(), "UPDATE idmint_tags SET description = description"); err != nil {
		t.Fatal(err)
	}
	fmt.Println("locked")
	io.Copy(io.Discard, os.Stdin)
	if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
}

// TestRunway_SQLiteOutageShorterThanRunway: the SQLite file locked by
// another process for less than the runway costs callers nothing.
func TestRunway_SQLiteOutageShorterThanRunway(t *testing.T) {
	if testing.Short() {
		t.Skip("outage: long")
	}
	store, lock, unlock := sqliteRunway(t, "order")
	r := newRunwayRig(t, store, "order", runwayShort)
	stats := func() segment.Stats { return tagStats(r.a, "order") }
	shortOutage(t, r, stats, lock, unlock)
}

// TestRunway_SQLiteOutageLongerThanRunway: locked for longer, callers get
// 503 once the runway is spent, and the service resumes by itself.
func TestRunway_SQLiteOutageLongerThanRunway(t *testing.T) {
	if testing.Short() {
		t.Skip("outage: long")
	}
	store, lock, unlock := sqliteRunway(t, "order")
	r := newRunwayRig(t, store, "order", runwayLong)
	stats := func() segment.Stats { return tagStats(r.a, "order") }
	longOutage(t, r, stats, lock, unlock)
}

// TestRunway_ClientThroughServerOutage: a Go client with a runway, whose
// instance loses its database for less than that runway, serves its
// callers from its own buffers without an error or a duplicate.
func TestRunway_ClientThroughServerOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("outage: long")
	}
	store, px := pgRunway(t, "order")
	r := newRunwayRig(t, store, "order", 0)
	cl, err := client.New(t.Context(), client.Config{
		URLs:     []string{r.api.URL},
		Tags:     []string{"order"},
		Runway:   runwayShort,
		RetryMin: 5 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		Segment: segment.Config{Period: time.Second, WaitTimeout: time.Second, MaxBackoff: 500 * time.Millisecond},
		Logger:  testlog.Discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(context.Background()) })
	r.next = func(ctx context.Context) (int64, int, error) {
		id, err := cl.Next(ctx, "order")
		return id, 0, err
	}
	stats := func() segment.Stats {
		for _, st := range cl.Stats().Tags {
			if st.Tag == "order" {
				return st
			}
		}
		return segment.Stats{}
	}
	shortOutage(t, r, stats, func() { px.Cut(t) }, func() { px.Heal(t) })
}
