package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idmint/idmint/internal/hacluster"
	"github.com/idmint/idmint/internal/pgtest"
)

// The failover drill's shape: load before the crash, load after the
// promotion, clients per idmint instance.
const (
	haBefore     = 5 * time.Second
	haAfter      = 10 * time.Second
	haClients    = 4
	haTag        = "order"
	haStep       = "50" // step = max_step: a grant every 50 IDs
	haRunTimeout = 4 * time.Minute
)

// haResult is one run of the failover drill.
type haResult struct {
	mode            string
	run             int
	ids, duplicates int64
	orderViolations int64
	lost            int64         // IDs an instance served from a grant the promoted database does not have
	window          time.Duration // longest time no instance handed out an ID
	worst           time.Duration // longest time one of the first two instances handed out none
	unavailable     int64         // requests answered 503
	noAnswer        int64         // requests that got no answer at all
	elapsed         time.Duration
	verdict         string
}

// TestDrillHA is the failover drill on real automatic failover (make
// drill-ha): etcd and two Patroni-run PostgreSQL nodes on loopback, two idmint
// processes on the multi-host URL (target_session_attrs=read-write) of a tag
// with step = max_step = 50, under load from the drill's clients; the
// leader's WAL senders are frozen for DRILL_LAG (default 500ms: the replica
// falls behind, as it does under load or on a slow network), then the leader
// is crashed (SIGKILL to its Patroni and its PostgreSQL), Patroni
// promotes the replica, a third idmint starts, and the load goes on. Every
// acknowledged ID goes through the checker: no duplicate, every client's
// IDs increasing; every instance serves again after the promotion; the
// promoted database's segment log holds, for every acknowledged ID, a grant
// of it to the instance that served it (a grant lost in the failover is a
// duplicate waiting to happen), and max_id is at or above the highest ID.
//
// It runs with IDMINT_DRILL_HA=1; DRILL_MODES (default "sync async": Patroni's
// synchronous_mode on or off), DRILL_RUNS (runs per mode, default 1),
// DRILL_LAG (default 500ms; 0 crashes without stalling replication first) and
// DRILL_SERVE_ARGS (more idmint serve flags) shape it.
func TestDrillHA(t *testing.T) {
	if os.Getenv("IDMINT_DRILL_HA") == "" {
		pgtest.SkipOptional(t, "set IDMINT_DRILL_HA=1 to run the failover drill (make drill-ha; needs patroni, etcd and the PostgreSQL server binaries)")
	}
	modes := strings.Fields(strings.ReplaceAll(envOr("DRILL_MODES", "sync async"), ",", " "))
	runs, err := strconv.Atoi(envOr("DRILL_RUNS", "1"))
	if err != nil || runs < 1 {
		t.Fatalf("DRILL_RUNS=%q: want a positive whole number", os.Getenv("DRILL_RUNS"))
	}
	for _, m := range modes {
		if m != "sync" && m != "async" {
			t.Fatalf("DRILL_MODES: unknown mode %q, want sync or async", m)
		}
	}
	serveArgs := strings.Fields(os.Getenv("DRILL_SERVE_ARGS"))
	lag, err := time.ParseDuration(envOr("DRILL_LAG", "500ms"))
	if err != nil || lag < 0 {
		t.Fatalf("DRILL_LAG=%q: want a duration such as 500ms or 0", os.Getenv("DRILL_LAG"))
	}

	bin := filepath.Join(t.TempDir(), "idmint")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// Ctrl-C ends the run under way through its cleanups, which stop the
	// cluster, instead of killing this process and leaving servers behind.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var results []*haResult
	for _, mode := range modes {
		for i := 1; i <= runs && ctx.Err() == nil; i++ {
			r := &haResult{mode: mode, run: i, verdict: "FAIL"}
			results = append(results, r)
			t.Run(fmt.Sprintf("%s-%d", mode, i), func(t *testing.T) {
				drillHA(ctx, t, bin, r, lag, serveArgs)
				if !t.Failed() {
					r.verdict = "ok"
				}
			})
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "failover drill, replication stalled %v before the crash, serve flags %q:\n", lag, strings.Join(serveArgs, " "))
	fmt.Fprintf(&b, "%-6s %3s %8s %10s %6s %6s %10s %10s %6s %9s %8s %s\n",
		"mode", "run", "ids", "duplicates", "order", "lost", "no-id-any", "no-id-max", "503s", "no-answer", "time", "verdict")
	for _, r := range results {
		fmt.Fprintf(&b, "%-6s %3d %8d %10d %6d %6d %10v %10v %6d %9d %8v %s\n",
			r.mode, r.run, r.ids, r.duplicates, r.orderViolations, r.lost,
			r.window.Round(100*time.Millisecond), r.worst.Round(100*time.Millisecond),
			r.unavailable, r.noAnswer, r.elapsed.Round(time.Second), r.verdict)
	}
	t.Log("\n" + b.String())
}

// drillHA runs the drill once, filling r.
func drillHA(ctx context.Context, t *testing.T, bin string, r *haResult, lag time.Duration, serveArgs []string) {
	begin := time.Now()
	defer func() { r.elapsed = time.Since(begin) }()
	ctx, cancel := context.WithTimeout(ctx, haRunTimeout)
	defer cancel()

	c, err := hacluster.Start(ctx, hacluster.Config{Nodes: 2, Synchronous: r.mode == "sync"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	if _, err := c.WaitReplicating(ctx); err != nil {
		t.Fatalf("%v\n%s", err, c.Logs(3000))
	}
	url := c.URL()
	idmint(t, "migrate", "--database-url", url)
	idmint(t, "tag", "create", haTag, "--step", haStep, "--max-step", haStep, "--database-url", url)

	dir := t.TempDir()
	var procs []*process
	startInstance := func() *process {
		i := len(procs)
		p := &process{bin: bin, url: url, addr: freeAddr(t), instance: fmt.Sprint("i", i),
			logPath: filepath.Join(dir, fmt.Sprint("i", i, ".log")),
			// The default wait before a 503, then the drill's own flags.
			args: append([]string{"--wait-timeout", "2s"}, serveArgs...)}
		p.start(t)
		procs = append(procs, p)
		return p
	}
	defer func() {
		if t.Failed() {
			for _, p := range procs {
				logs, _ := os.ReadFile(p.logPath)
				t.Logf("%s's log ends:\n%s", p.instance, tail(logs, 3000))
			}
		}
	}()

	httpc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: haClients}}
	d := newDrillRun(httpc, 1)
	load, stopLoad := context.WithCancel(ctx)
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(func() { stopLoad(); d.wait() }) }
	defer stop()
	drive := func(p *process) {
		for i := range haClients {
			d.client(load, fmt.Sprintf("%s-c%d", p.instance, i), "http://"+p.addr, haTag)
		}
	}
	drive(startInstance())
	drive(startInstance())
	if !during(ctx, haBefore) {
		t.Fatal("the run's time ran out before the crash")
	}
	if n := d.checker.Report().IDs(); n == 0 {
		t.Fatalf("no ID in %v before the crash", haBefore)
	}

	// The leader now, in case a slow machine made Patroni fail over by
	// itself during the load.
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatalf("%v\n%s", err, c.Logs(3000))
	}
	if lag > 0 {
		if n, err := c.StallReplication(leader); err != nil || n == 0 {
			t.Fatalf("stall replication on %s: %d WAL senders frozen, %v", leader, n, err)
		}
		if !during(ctx, lag) {
			t.Fatal("the run's time ran out before the crash")
		}
	}
	crashed := time.Now()
	if err := c.Crash(leader); err != nil {
		t.Fatal(err)
	}
	promoted, err := c.WaitLeader(ctx, leader)
	if err != nil {
		t.Fatalf("%v\n%s", err, c.Logs(3000))
	}
	promotedAt := time.Now()
	t.Logf("%s crashed at +%v under load, %s promoted %v later", leader,
		crashed.Sub(d.begin).Round(time.Millisecond), promoted, promotedAt.Sub(crashed).Round(time.Millisecond))
	drive(startInstance())

	// Keep the load going for haAfter, and until every instance has served
	// since the promotion (bounded: one that never does fails the run).
	during(ctx, haAfter)
	served := func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, p := range procs {
			if !d.targets["http://"+p.addr].lastOK.After(promotedAt) {
				return false
			}
		}
		return true
	}
	waitUntil(ctx, 30*time.Second, served)
	stop()
	for _, p := range procs {
		p.stop(t, syscall.SIGTERM)
	}
	checkHA(t, c, d, procs, promotedAt, r)
}

// checkHA checks what the drill saw against the promoted database and
// fills r.
func checkHA(t *testing.T, c *hacluster.Cluster, d *drillRun, procs []*process, promotedAt time.Time, r *haResult) {
	rep := d.checker.Report()
	var report strings.Builder
	report.WriteString(rep.String())
	d.printTargets(&report)
	t.Logf("drill report:\n%s", report.String())
	r.ids, r.duplicates, r.orderViolations = rep.IDs(), rep.Duplicates(), rep.OrderViolations

	d.mu.Lock()
	end := d.end
	r.window = d.all.outageAt(end).duration()
	servedBy := map[int64][]string{} // every acknowledged ID → the instances that served it
	var highest int64
	for i, p := range procs {
		tl := d.targets["http://"+p.addr]
		if i < 2 {
			r.worst = max(r.worst, tl.outageAt(end).duration())
		}
		for kind, n := range tl.failed {
			switch {
			case strings.HasPrefix(kind, "status 503"):
				r.unavailable += n
			case strings.HasPrefix(kind, "request failed"):
				r.noAnswer += n
			}
		}
		if !tl.lastOK.After(promotedAt) {
			t.Errorf("%s served no ID after the promotion", p.instance)
		}
		for _, id := range tl.ids {
			servedBy[id] = append(servedBy[id], p.instance)
			highest = max(highest, id)
		}
	}
	d.mu.Unlock()

	if r.duplicates > 0 || r.orderViolations > 0 {
		var sample []string
		for id, who := range servedBy {
			if len(who) > 1 && len(sample) < 10 {
				sample = append(sample, fmt.Sprintf("%d by %s", id, strings.Join(who, "+")))
			}
		}
		sort.Strings(sample)
		t.Errorf("%d duplicates (e.g. %s), %d order violations", r.duplicates, strings.Join(sample, ", "), r.orderViolations)
	}

	// The promoted database must know every grant an ID was served from,
	// and its high-water mark must be above every served ID: otherwise the
	// next grant hands those IDs out again.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var maxID int64
	if err := conn.QueryRow(ctx, `SELECT max_id FROM idmint_tags WHERE biz_tag = $1`, haTag).Scan(&maxID); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, `SELECT instance, first_id, last_id FROM idmint_segments WHERE biz_tag = $1 ORDER BY first_id`, haTag)
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		instance    string
		first, last int64
	}
	all, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (grant, error) {
		var g grant
		return g, row.Scan(&g.instance, &g.first, &g.last)
	})
	if err != nil {
		t.Fatal(err)
	}
	grants := map[string][]grant{} // by instance, by first ID
	for _, g := range all {
		grants[g.instance] = append(grants[g.instance], g)
	}
	lostBy := map[string]int64{}
	for id, who := range servedBy {
		for _, w := range slices.Compact(slices.Sorted(slices.Values(who))) {
			gs := grants[w]
			i := sort.Search(len(gs), func(i int) bool { return gs[i].last >= id })
			if i == len(gs) || gs[i].first > id {
				lostBy[w]++
				r.lost++
			}
		}
	}
	if r.lost > 0 {
		t.Errorf("%d acknowledged IDs were served from grants the promoted database does not have (by instance: %v)", r.lost, lostBy)
	}
	if maxID < highest {
		t.Errorf("max_id %d on the promoted database is below %d, the highest ID served", maxID, highest)
	}
	t.Logf("%s: %d IDs, %d duplicates, %d from lost grants; no ID from any instance for %v, from one of the first two for up to %v; %d× 503, %d× no answer",
		r.mode, r.ids, r.duplicates, r.lost, r.window.Round(time.Millisecond), r.worst.Round(time.Millisecond), r.unavailable, r.noAnswer)
}

// during lets the load run for d; false if ctx ended first.
func during(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// waitUntil polls cond every 50ms until it holds (true), or limit passed
// or ctx ended (false).
func waitUntil(ctx context.Context, limit time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
