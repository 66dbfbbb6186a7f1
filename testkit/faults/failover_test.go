package faults_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/drill"
	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/testutil"
	"github.com/idmint/idmint/testkit/toxic"
)

// failover is a primary+standby pair with running instances that reach it
// through one multi-host URL (target_session_attrs=read-write), as a
// production deployment would.
type failover struct {
	r        *pgtest.Replication
	url      string
	required postgres.Replicas
	mod      func(*allocator.Config) // changes every instance's settings
	c        *checker.Checker
	allocs   []*allocator.Allocator
	loads    []*load
	api      *httptest.Server // the first instance's HTTP API
}

const failoverTag = "order"

// newFailover starts the pair and the first instances with load on them,
// through the pair's multi-host URL.
func newFailover(t *testing.T, opts pgtest.ReplicationOptions, required postgres.Replicas, instances int) *failover {
	t.Helper()
	r := pgtest.NewReplication(t, opts)
	return newFailoverOn(t, r, r.URL(r.NewDatabase(t)), required, instances, productionAttempts)
}

// productionAttempts gives each store call idmint's default bound (3s):
// pgx tries the hosts of the multi-host URL within one attempt, 1s each at
// most (postgres.MultiHostConnectTimeout), so an attempt must leave time
// for the second host. A killed container's published port may still
// accept connections for a moment and never answer.
func productionAttempts(c *allocator.Config) { c.AttemptTimeout = 3 * time.Second }

// newFailoverOn starts instances on the database at url of the pair r: the
// tag has step = max_step = 50, so segments are small and loaded often.
func newFailoverOn(t *testing.T, r *pgtest.Replication, url string, required postgres.Replicas, instances int, mod func(*allocator.Config)) *failover {
	t.Helper()
	f := &failover{r: r, url: url, required: required, mod: mod, c: checker.New()}
	// The run's report (make drill-failover), written last: what the
	// checker saw once the instances stopped.
	rep := drill.Start(t, "failover")
	t.Cleanup(func() {
		rc := f.c.Report()
		rep.Set("pair", r.Primary.Kind())
		rep.Set("replicas_required", required.String())
		rep.Set("instances", len(f.allocs))
		rep.Set("ids", rc.IDs())
		rep.Set("duplicates", rc.Duplicates())
		rep.Set("failed_requests", rc.Failed)
		rep.Set("rollbacks_refused_or_repaired", f.rolledBack())
	})
	pgstore.Migrate(t, f.url)
	createTag(t, pgstore.Open(t, f.url), failoverTag, 50, 50)
	t.Cleanup(f.stop)
	for range instances {
		f.start(t)
	}
	return f
}

// start adds an instance with its own pool and 4 workers asking it for IDs.
func (f *failover) start(t *testing.T) *allocator.Allocator {
	t.Helper()
	store := pgstore.Open(t, f.url)
	store.SetReplication(postgres.ReplicationConfig{Required: f.required, Logger: testlog.Discard()})
	i := len(f.allocs)
	a := newInstance(t, store, fmt.Sprint("failover-", i), f.mod)
	f.allocs = append(f.allocs, a)
	if f.api == nil {
		f.api = httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Replication: store, Logger: testlog.Discard()}))
		t.Cleanup(f.api.Close)
	}
	f.loads = append(f.loads, startLoad(f.c, 4, func(ctx context.Context, w int) (string, string, int64, error) {
		id, err := a.Next(ctx, failoverTag)
		return fmt.Sprintf("instance-%d/worker-%d", i, w), failoverTag, id, err
	}))
	return a
}

func (f *failover) stop() {
	for _, l := range f.loads {
		l.stop()
	}
}

// served waits until the checker acknowledged n more IDs.
func (f *failover) served(t *testing.T, n int64, what string) {
	t.Helper()
	from := f.c.Report().Acknowledged
	testutil.Eventually(t, 60*time.Second, what, func() bool { return f.c.Report().Acknowledged >= from+n })
}

func (f *failover) stats(field func(st segment.Stats) int64) []int64 {
	out := make([]int64, len(f.allocs))
	for i, a := range f.allocs {
		out[i] = field(tagStats(a, failoverTag))
	}
	return out
}

// health returns the first instance's /id/health and /metrics.
func (f *failover) health(t *testing.T) (httpapi.Health, string) {
	t.Helper()
	var h httpapi.Health
	testutil.GetJSON(t, f.api.URL+"/id/health", &h)
	if h.Replication == nil {
		t.Fatalf("/id/health has no replication block: %+v", h)
	}
	mresp, err := http.Get(f.api.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer mresp.Body.Close()
	metrics, _ := io.ReadAll(mresp.Body)
	return h, string(metrics)
}

// failOver kills the primary, promotes the standby, starts one more
// instance, and checks every ID served by every instance: no duplicate, no
// rollback refused or repaired (no served grant was lost), and the new
// instance served. It returns the checker's report and how long the old
// instances took to load from the promoted server.
func (f *failover) failOver(t *testing.T) (checker.Report, time.Duration) {
	t.Helper()
	recovery := f.promote(t)
	late := f.start(t)
	testutil.Eventually(t, 30*time.Second, "the instance started after the failover to load", func() bool {
		return tagStats(late, failoverTag).Loads > 0
	})
	f.served(t, 2000, "ids after the failover")
	f.stop()
	r := f.c.Report()
	requireValid(t, r)
	if n := f.rolledBack(); n != 0 {
		t.Fatalf("%d ranges refused or rollbacks repaired: a served grant was lost in the failover", n)
	}
	return r, recovery
}

// rolledBack sums the ranges every instance refused and the rollbacks it
// repaired: either means a grant it had served was missing after the
// failover.
func (f *failover) rolledBack() int64 {
	var n int64
	for _, v := range f.stats(func(st segment.Stats) int64 { return st.Refused + st.Repaired }) {
		n += v
	}
	return n
}

// promote kills the primary, promotes the standby, and returns how long
// from the start of the promotion (pg_promote) until every instance running
// before loaded a segment from the promoted server, by itself.
func (f *failover) promote(t *testing.T) time.Duration {
	t.Helper()
	f.r.KillPrimary(t)
	before := f.stats(func(st segment.Stats) int64 { return st.Loads })
	promoted := time.Now()
	f.r.Promote(t)
	testutil.Eventually(t, 60*time.Second, "every instance to load from the promoted server", func() bool {
		for i, n := range f.stats(func(st segment.Stats) int64 { return st.Loads }) {
			if n <= before[i] {
				return false
			}
		}
		return true
	})
	return time.Since(promoted)
}

// TestFailover_AsyncLaggingStandby is the failover that loses commits: the
// asynchronous standby stops receiving WAL while it stays connected (the
// primary still lists it as streaming), the instances keep loading
// segments, the primary dies, and the lagging standby is promoted. Then a
// new instance starts, knowing nothing of the lost grants.
//
// With idmint waiting for the standby (replicas auto, the default), no
// segment the standby did not have was ever served: 0 duplicates, and no
// rollback refused or repaired, across the old instances and the new one. With the wait off,
// the same run hands out IDs twice: the check has teeth.
func TestFailover_AsyncLaggingStandby(t *testing.T) {
	t.Run("replicas auto", func(t *testing.T) {
		f := newFailover(t, pgtest.ReplicationOptions{}, postgres.ReplicasAuto, 2)
		f.served(t, 2000, "ids before the stall")
		h, metrics := f.health(t)
		if h.Status != httpapi.StatusDegraded || h.Replication.ReplicasConnected != 1 || h.Replication.SyncReplicas != 0 ||
			h.Replication.GrantsAtRisk || h.Replication.GrantWaits == 0 || !strings.Contains(strings.Join(h.Reasons, ";"), "only asynchronous replicas") {
			t.Fatalf("/id/health with an asynchronous standby: %s %+v %q; want degraded, 1 async replica, waits, not at risk", h.Status, *h.Replication, h.Reasons)
		}
		if !strings.Contains(metrics, "idmint_database_replicas_connected 1") || !strings.Contains(metrics, "idmint_database_sync_replicas 0") {
			t.Fatal("/metrics does not report 1 replica, 0 synchronous")
		}
		f.r.StallWAL(t)
		// Long enough for every instance to need a new segment, which the
		// stalled standby never confirms.
		fails := f.c.Report().Failed
		testutil.Eventually(t, 30*time.Second, "the instances to run dry while the standby lags", func() bool {
			return f.c.Report().Failed > fails+100
		})
		highestBefore := f.c.Report().Tag(failoverTag).Highest
		r, recovery := f.failOver(t)
		h, metrics = f.health(t)
		if !h.Replication.TimelineChanged || h.Replication.Timeline != 2 || h.Replication.ReplicasConnected != 0 ||
			!strings.Contains(metrics, "idmint_database_timeline_changed 1") {
			t.Fatalf("/id/health after the failover: %+v; want timeline 1 -> 2, no replica", *h.Replication)
		}
		t.Logf("async standby stalled then promoted (%s pair), replicas auto: %d ids from %d instances (one started after the failover), highest before the failover %d, %d failed requests (503) while the standby lagged, 0 duplicates, no rollback refused or repaired; old instances loading from the promoted server %v after the promotion",
			f.r.Primary.Kind(), r.IDs(), len(f.allocs), highestBefore, r.Failed, recovery.Round(time.Millisecond))
	})

	t.Run("replicas off", func(t *testing.T) {
		f := newFailover(t, pgtest.ReplicationOptions{}, 0, 2)
		f.served(t, 2000, "ids before the stall")
		f.r.StallWAL(t)
		f.served(t, 2000, "ids served from grants the standby never gets")
		// The old instances stop asking and finish their loads, so that none
		// of them reaches the promoted server first and raises max_id back
		// to its floor (which would hide the lost grants from the new
		// instance, and make this check a race).
		f.stop()
		testutil.Eventually(t, 30*time.Second, "the old instances' loads to finish", func() bool {
			for _, a := range f.allocs {
				if tagStats(a, failoverTag).Loading {
					return false
				}
			}
			return true
		})
		f.r.KillPrimary(t)
		f.r.Promote(t)
		f.start(t)
		testutil.Eventually(t, 60*time.Second, "the new instance to hand out ids served before", func() bool {
			return f.c.Report().Duplicates() > 0
		})
		f.stop()
		r := f.c.Report()
		t.Logf("the same failover without waiting for the standby: %d duplicate ids, %d refused ranges or repaired rollbacks", r.Duplicates(), f.rolledBack())
	})
}

// TestFailover_Synchronous kills the primary under load with a synchronous
// standby (synchronous_standby_names = '*', synchronous_commit=on) and
// idmint's own wait off: the database alone must lose nothing. 0 duplicates,
// no rollback refused or repaired, and the instances follow the promotion by
// themselves.
func TestFailover_Synchronous(t *testing.T) {
	f := newFailover(t, pgtest.ReplicationOptions{Synchronous: true}, 0, 2)
	f.served(t, 3000, "ids before the failover")
	h, metrics := f.health(t)
	if h.Status != httpapi.StatusOK || h.Replication.SyncReplicas != 1 || h.Replication.GrantsAtRisk ||
		h.Replication.SynchronousStandbyNames != "*" || !strings.Contains(metrics, "idmint_database_sync_replicas 1") {
		t.Fatalf("/id/health with a synchronous standby: %s %+v %q; want ok, 1 sync replica", h.Status, *h.Replication, h.Reasons)
	}
	highestBefore := f.c.Report().Tag(failoverTag).Highest
	failed := f.c.Report().Failed
	r, recovery := f.failOver(t)
	t.Logf("synchronous standby promoted under load (%s pair), replicas off: %d ids from %d instances (one started after the failover), highest before %d, %d failed requests (503) around the failover, 0 duplicates, no rollback refused or repaired; old instances loading from the promoted server %v after the promotion",
		f.r.Primary.Kind(), r.IDs(), len(f.allocs), highestBefore, r.Failed-failed, recovery.Round(time.Millisecond))
}

// TestFailover_PrimaryVanishes is a failover where the old primary does not
// refuse connections but swallows them (a dead machine, a partition): the
// instances reach it through a proxy, replaced once the failover starts by
// a listener on its address that accepts and never answers. pgx tries the
// hosts of a multi-host URL in order, so without a connect timeout per host
// (MultiHostConnectTimeout) the first one would use up every attempt and
// the promoted standby would never be tried. The instances must serve from
// the promoted server within seconds, by themselves.
func TestFailover_PrimaryVanishes(t *testing.T) {
	r := pgtest.NewReplication(t, pgtest.ReplicationOptions{Synchronous: true})
	db := r.NewDatabase(t)
	p := toxic.New(t, r.PrimaryURL(db))
	primary, _ := url.Parse(r.PrimaryURL(db))
	multi := strings.Replace(r.URL(db), primary.Host, p.Listen, 1)
	f := newFailoverOn(t, r, multi, 0, 2, productionAttempts)
	f.served(t, 2000, "ids before the failover")

	// The primary's address now accepts connections and never answers.
	p.Stop()
	tarpit(t, p.Listen)
	r2, recovery := f.failOver(t)
	t.Logf("primary vanished (accepts, never answers), standby promoted (%s pair): instances loading from the promoted server %v after the promotion, %d ids, %d failed requests, 0 duplicates",
		r.Primary.Kind(), recovery.Round(time.Millisecond), r2.IDs(), r2.Failed)
}

// tarpit listens on addr, accepts connections and never answers, until the
// test ends.
func tarpit(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
}

// kill stops the instances' load and closes them as a SIGKILL would leave
// them: loads stopped, nothing given back, held grants forgotten.
func (f *failover) kill(t *testing.T) {
	t.Helper()
	f.stop()
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	for _, a := range f.allocs {
		_ = a.Close(dead)
	}
}

// TestFailover_DisconnectedStandby is the failover a standby streaming at
// the time cannot catch: the asynchronous standby's server stops (it is no
// longer in pg_stat_replication) while the instances go on loading
// segments; then the instances die, the primary dies, and the stale standby
// is promoted (as Patroni would: its lag in bytes is tiny). A new instance
// with the defaults starts after the failover, knowing nothing.
//
// With replicas auto (the default), the standby the instances saw streaming
// is remembered (idmint_standbys) and holds every grant back while it is
// away: 0 duplicates. The promoted server starts a new timeline with no
// standby, so the new instance serves within seconds, by itself: the time
// until IDs flow again is logged. With the wait off, the same run hands out
// IDs twice: the drill can fail.
func TestFailover_DisconnectedStandby(t *testing.T) {
	for _, tt := range []struct {
		name     string
		required postgres.Replicas
	}{
		{name: "replicas auto", required: postgres.ReplicasAuto},
		{name: "replicas off", required: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFailover(t, pgtest.ReplicationOptions{}, tt.required, 2)
			f.served(t, 2000, "ids before the standby stops")
			if tt.required != 0 {
				admin := pgstore.Open(t, f.url)
				testutil.Eventually(t, 30*time.Second, "the standby to be recorded", func() bool {
					recs, err := admin.Standbys(ctx)
					return err == nil && len(recs) == 1
				})
			}
			f.r.Standby.Stop(t, false)
			failedBefore := f.c.Report().Failed
			if tt.required != 0 {
				testutil.Eventually(t, 30*time.Second, "the instances to run dry while the standby is away", func() bool {
					return f.c.Report().Failed > failedBefore+100
				})
				h, metrics := f.health(t)
				if len(h.Replication.HeldStandbys) != 1 || h.Replication.HeldStandbys[0].Kind != postgres.KindRemembered ||
					!strings.Contains(metrics, "idmint_replication_held_standbys 1") ||
					!strings.Contains(strings.Join(h.Reasons, ";"), "held back since") {
					t.Fatalf("/id/health while the standby is away: %+v %q; want it held, remembered", h.Replication.HeldStandbys, h.Reasons)
				}
			} else {
				f.served(t, 2000, "ids served from grants the standby never gets")
			}
			f.kill(t)
			f.r.KillPrimary(t)
			f.r.Standby.Start(t)
			acked := f.c.Report().Acknowledged
			promoted := time.Now()
			f.r.Promote(t)
			f.start(t)
			if tt.required == 0 {
				testutil.Eventually(t, 60*time.Second, "the new instance to hand out ids served before", func() bool {
					return f.c.Report().Duplicates() > 0
				})
				f.stop()
				t.Logf("the same failover without waiting for the standby: %d duplicate ids", f.c.Report().Duplicates())
				return
			}
			testutil.Eventually(t, 60*time.Second, "the new instance to serve", func() bool { return f.c.Report().Acknowledged > acked })
			dark := time.Since(promoted)
			f.served(t, 2000, "ids after the failover")
			f.stop()
			r := f.c.Report()
			requireValid(t, r)
			if n := f.rolledBack(); n != 0 {
				t.Fatalf("%d ranges refused or rollbacks repaired: a served grant was lost in the failover", n)
			}
			t.Logf("disconnected standby promoted (%s pair), replicas auto: %d ids, %d failed requests (503) while it was away, 0 duplicates, no rollback refused or repaired; the new instance served %v after the promotion started",
				f.r.Primary.Kind(), r.IDs(), r.Failed-failedBefore, dark.Round(time.Millisecond))
		})
	}
}
