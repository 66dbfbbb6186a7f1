package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
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

	"github.com/idmint/idmint/deploy/ha"
	"github.com/idmint/idmint/testkit/drill"
	"github.com/idmint/idmint/testkit/hacluster"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/servetest"
	"github.com/idmint/idmint/testkit/testutil"
)

// The failover drill's shape: load before the crash, load after the
// promotion, clients per idmint instance.
const (
	haBefore  = 5 * time.Second
	haAfter   = 10 * time.Second
	haClients = 4
	haTag     = "order"
	haStep    = "50" // step = max_step: a grant every 50 IDs
	// haRealisticRunway is -drill.tags=realistic's tag runway: several times
	// the 10–11 s a failover takes, as a tag's runway should be in
	// production. The tag keeps the default step and a max_step far above
	// what the runway needs at the drill's load (a few thousand IDs a second
	// per instance), so the ranges grow from the rate each instance
	// measures, not from a step picked by hand.
	haRealisticRunway  = "60s"
	haRealisticMaxStep = "10000000"
	// haRunwayWait bounds the wait, before the crash, for every instance's
	// buffer to hold the realistic tag's runway.
	haRunwayWait = 30 * time.Second
	haRunTimeout = 4 * time.Minute
)

// haResult is one run of the failover drill.
type haResult struct {
	mode            string
	tags            string // -drill.tags: tiny (a grant every 50 IDs) or realistic
	replica         string // what happened to the replica before the crash: stall or disconnect
	control         bool   // a negative control: the wait off, duplicates expected
	run             int
	ids, duplicates int64
	orderViolations int64
	lost            int64         // IDs an instance served from a grant the promoted database does not have
	window          time.Duration // longest time no instance handed out an ID
	worst           time.Duration // longest time one of the first two instances handed out none
	unavailable     int64         // requests answered 503
	noAnswer        int64         // requests that got no answer at all
	resumed         time.Duration // from the crash until IDs flowed again
	// runwayHeld is the least runway_held_seconds of the first two
	// instances when the leader crashed; peak their summed peak rate
	// (IDs/s) and step their largest range then (realistic runs only).
	runwayHeld time.Duration
	peak       float64
	step       int64
	elapsed    time.Duration
	verdict    string
}

// TestDrillHA is the failover drill on real automatic failover (make
// drill-ha): etcd and two Patroni-run PostgreSQL nodes on loopback, rendered
// from deploy/ha's files, two idmint processes with deploy/ha's idmint.env
// on the multi-host URL (target_session_attrs=read-write) of a tag with
// step = max_step = 50, under load from the drill's clients. Then the
// replica falls behind, one of two ways (-drill.replica):
//
//   - disconnect (the default): the replica is cut off for -drill.down
//     (default 3s) while grants go on: its Patroni frozen, its PostgreSQL
//     killed. In asynchronous mode the leader is crashed while the replica
//     is still away, then the replica comes back and Patroni promotes it
//     (it is within maximum_lag_on_failover): it lacks whatever the leader
//     committed meanwhile. In synchronous mode Patroni drops the replica
//     from the synchronous set while it is away and would never promote it,
//     so it comes back first, and the leader is crashed once it is the
//     synchronous standby again.
//   - stall: the leader's WAL senders are frozen for -drill.lag (default
//     500ms; the replica stays connected and receives nothing), then the
//     leader is crashed.
//
// The crash is SIGKILL to the leader's Patroni and PostgreSQL; after the
// promotion a third idmint starts, and the load goes on. Every acknowledged
// ID goes through the checker: no duplicate, every client's IDs increasing;
// every instance serves again after the promotion; the promoted database's
// segment log holds, for every acknowledged ID, a grant of it to the
// instance that served it (a grant lost in the failover is a duplicate
// waiting to happen), and max_id is at or above the highest ID.
//
// -drill.expect=duplicates turns the runs into negative controls: each passes
// only if the checker found duplicates (run it with -drill.modes=async and
// -drill.serve-args='--replicas-required off' to show that the drill catches
// what idmint's standby wait prevents). In a control the first two
// instances die with the leader and start again after the promotion, so
// that no instance's floor repairs max_id past the lost grants: otherwise
// whether they come out twice depends on which instance fetches first, and
// the control would pass or fail by chance. -drill.control=1 (make drill-ha's
// default) adds one such run after the others.
//
// -drill.tags (default tiny; make drill-ha runs "tiny realistic") picks the
// tag of the runs: tiny is the above; realistic has a tag runway over the
// failover time (haRealisticRunway) with the default step, so that the
// ranges grow from the measured rate until the buffers outlast the
// failover; the leader crashes once every buffer holds the runway, and a
// run fails on any 503 or unanswered request as well; its runs use the modes
// of -drill.realistic-modes (default -drill.modes).
//
// It runs with -drill.ha; -drill.modes (default "sync async": Patroni's
// synchronous_mode on or off), -drill.replica (default disconnect; a list runs
// each), -drill.runs (runs per mode and variant, default 1), -drill.down,
// -drill.lag, -drill.expect, -drill.control and -drill.serve-args (more serve flags) shape
// it. Each run writes a drill report (testkit/drill) with its figures.
func TestDrillHA(t *testing.T) {
	if !*drillHAOn {
		pgtest.SkipOptional(t, "pass -drill.ha to run the failover drill (make drill-ha; needs patroni, etcd and the PostgreSQL server binaries)")
	}
	modes := drillList("modes", "sync async")
	tagSets := drillList("tags", "tiny")
	for _, m := range drillList("realistic-modes", "async") {
		if m != "sync" && m != "async" {
			t.Fatalf("-drill.realistic-modes: unknown mode %q, want sync or async", m)
		}
	}
	for _, ts := range tagSets {
		if ts != "tiny" && ts != "realistic" {
			t.Fatalf("-drill.tags: unknown %q, want tiny or realistic", ts)
		}
	}
	variants := drillList("replica", "disconnect")
	runs, err := strconv.Atoi(drillOpt("runs", "1"))
	if err != nil || runs < 1 {
		t.Fatalf("-drill.runs=%q: want a positive whole number", drillOpt("runs", ""))
	}
	for _, m := range modes {
		if m != "sync" && m != "async" {
			t.Fatalf("-drill.modes: unknown mode %q, want sync or async", m)
		}
	}
	for _, v := range variants {
		if v != "stall" && v != "disconnect" {
			t.Fatalf("-drill.replica: unknown variant %q, want stall or disconnect", v)
		}
	}
	cfg := haConfig{serveArgs: strings.Fields(drillOpt("serve-args", ""))}
	if cfg.lag, err = time.ParseDuration(drillOpt("lag", "500ms")); err != nil || cfg.lag < 0 {
		t.Fatalf("-drill.lag=%q: want a duration such as 500ms or 0", drillOpt("lag", ""))
	}
	if cfg.down, err = time.ParseDuration(drillOpt("down", "3s")); err != nil || cfg.down <= 0 {
		t.Fatalf("-drill.down=%q: want a positive duration such as 3s", drillOpt("down", ""))
	}
	switch expect := drillOpt("expect", ""); expect {
	case "":
	case "duplicates":
		cfg.expectDuplicates, cfg.restart = true, true
	default:
		t.Fatalf("-drill.expect=%q: want duplicates (a negative control) or nothing", expect)
	}
	// The deployment's idmint settings, as flags: the drill's instances run
	// as deploy/ha's do, then with the drill's own flags.
	if cfg.deployArgs, err = envFileFlags("idmint.env"); err != nil {
		t.Fatal(err)
	}

	bin := servetest.Build(t)
	// Ctrl-C ends the run under way through its cleanups, which stop the
	// cluster, instead of killing this process and leaving servers behind.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var results []*haResult
	run := func(name string, r *haResult, cfg haConfig) {
		results = append(results, r)
		t.Run(name, func(t *testing.T) {
			// One report per run, also after a Fatal; its figures are
			// set when the run ends (cleanups run last in, first out).
			rep := drill.Start(t, "ha")
			t.Cleanup(func() {
				rep.Set("mode", r.mode)
				rep.Set("tags", r.tags)
				rep.Set("replica", r.replica)
				rep.Set("run", r.run)
				rep.Set("serve_args", strings.Join(cfg.serveArgs, " "))
				rep.Set("expect", cfg.expect())
				rep.Set("ids", r.ids)
				rep.Set("duplicates", r.duplicates)
				rep.Set("order_violations", r.orderViolations)
				rep.Set("lost", r.lost)
				rep.Set("unavailable", r.unavailable)
				rep.Set("no_answer", r.noAnswer)
				rep.Set("no_id_any_s", r.window)
				rep.Set("no_id_max_s", r.worst)
				rep.Set("ids_again_after_s", r.resumed)
				rep.Set("runway_held_at_crash_s", r.runwayHeld)
				rep.Set("peak_ids_per_s", r.peak)
				rep.Set("step", r.step)
				rep.Set("elapsed_s", r.elapsed)
			})
			defer func() {
				if !t.Failed() {
					r.verdict = "ok"
				}
			}()
			drillHA(ctx, t, bin, r, cfg)
		})
	}
	for _, ts := range tagSets {
		tcfg := cfg
		tcfg.realistic = ts == "realistic"
		tsModes := modes
		if tcfg.realistic {
			tsModes = drillList("realistic-modes", strings.Join(modes, " "))
		}
		for _, mode := range tsModes {
			for _, variant := range variants {
				for i := 1; i <= runs && ctx.Err() == nil; i++ {
					run(fmt.Sprintf("%s-%s-%s-%d", ts, mode, variant, i), &haResult{mode: mode, tags: ts, replica: variant, run: i, verdict: "FAIL"}, tcfg)
				}
			}
		}
	}
	if drillOpt("control", "") == "1" && ctx.Err() == nil {
		// The negative control: the same drill with idmint's standby wait
		// off must hand out duplicates, or the drill has lost its teeth.
		control := cfg
		control.serveArgs = append(slices.Clone(cfg.serveArgs), "--replicas-required", "off")
		control.expectDuplicates, control.restart = true, true
		run("control-async-disconnect", &haResult{mode: "async", tags: "tiny", replica: "disconnect", run: 1, verdict: "FAIL", control: true}, control)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "failover drill, replica disconnected %v or stalled %v before the crash, deployment flags %q, serve flags %q, expect %s:\n",
		cfg.down, cfg.lag, strings.Join(cfg.deployArgs, " "), strings.Join(cfg.serveArgs, " "), cfg.expect())
	fmt.Fprintf(&b, "%-7s %-9s %-10s %3s %8s %10s %6s %6s %10s %10s %6s %9s %9s %11s %8s %s\n",
		"mode", "tags", "replica", "run", "ids", "duplicates", "order", "lost", "no-id-any", "no-id-max", "503s", "no-answer", "ids-again", "runway-held", "time", "verdict")
	for _, r := range results {
		mode := r.mode
		if r.control {
			mode += "*"
		}
		fmt.Fprintf(&b, "%-7s %-9s %-10s %3d %8d %10d %6d %6d %10v %10v %6d %9d %9v %11v %8v %s\n",
			mode, r.tags, r.replica, r.run, r.ids, r.duplicates, r.orderViolations, r.lost,
			r.window.Round(100*time.Millisecond), r.worst.Round(100*time.Millisecond),
			r.unavailable, r.noAnswer, r.resumed.Round(100*time.Millisecond), r.runwayHeld.Round(100*time.Millisecond),
			r.elapsed.Round(time.Second), r.verdict)
	}
	if drillOpt("control", "") == "1" {
		b.WriteString("* the negative control: --replicas-required off, passes only with duplicates\n")
	}
	t.Log("\n" + b.String())
}

// haConfig is what the environment asks of the drill's runs.
type haConfig struct {
	lag              time.Duration // -drill.lag: WAL senders frozen before the crash (stall)
	down             time.Duration // -drill.down: the replica cut off before the crash (disconnect)
	serveArgs        []string      // -drill.serve-args
	deployArgs       []string      // deploy/ha/idmint.env as flags
	expectDuplicates bool          // -drill.expect=duplicates: a negative control
	realistic        bool          // -drill.tags=realistic: a tag runway over the failover, 0 errors required
	restart          bool          // the first instances killed with the leader, started after the promotion
}

func (c haConfig) expect() string {
	if c.expectDuplicates {
		return "duplicates"
	}
	return "none"
}

// envFileFlags reads deploy/ha's env file name (IDMINT_WAIT_TIMEOUT=2s
// lines) and returns it as serve flags (--wait-timeout 2s).
func envFileFlags(name string) ([]string, error) {
	raw, err := ha.Files.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var args []string
	for i, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || !strings.HasPrefix(k, "IDMINT_") {
			return nil, fmt.Errorf("deploy/ha/%s:%d: want IDMINT_NAME=value, got %q", name, i+1, line)
		}
		args = append(args, "--"+strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k, "IDMINT_")), "_", "-"), v)
	}
	return args, nil
}

// okTimes is a transport that records when each request got a 200: when
// IDs flowed.
type okTimes struct {
	next  http.RoundTripper
	mu    sync.Mutex // protects times
	times []time.Time
}

func (o *okTimes) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := o.next.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusOK {
		now := time.Now()
		o.mu.Lock()
		o.times = append(o.times, now)
		o.mu.Unlock()
	}
	return resp, err
}

// resumedAfter returns how long after t IDs flowed again: the end of the
// longest time without a 200 that follows t (counted from the last 200
// before t), minus t. Buffers may serve a little past a crash; the longest
// silence after it is the failover.
func (o *okTimes) resumedAfter(t time.Time) time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	times := slices.Clone(o.times)
	slices.SortFunc(times, time.Time.Compare)
	i, _ := slices.BinarySearchFunc(times, t, time.Time.Compare)
	prev := t
	if i > 0 {
		prev = times[i-1]
	}
	var gap, end time.Duration
	for _, at := range times[i:] {
		if d := at.Sub(prev); d > gap {
			gap, end = d, at.Sub(t)
		}
		prev = at
	}
	return end
}

// drillHA runs the drill once, filling r.
func drillHA(ctx context.Context, t *testing.T, bin string, r *haResult, cfg haConfig) {
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
	tagArgs := []string{"--step", haStep, "--max-step", haStep}
	if cfg.realistic {
		// The default step; the runway sizes the ranges.
		tagArgs = []string{"--runway", haRealisticRunway, "--max-step", haRealisticMaxStep}
	}
	idmint(t, append([]string{"tag", "create", haTag, "--database-url", url}, tagArgs...)...)

	dir := t.TempDir()
	var procs []*servetest.Process
	startInstance := func() *servetest.Process {
		i := len(procs)
		p := &servetest.Process{Bin: bin, DatabaseURL: url, Instance: fmt.Sprint("i", i),
			LogPath: filepath.Join(dir, fmt.Sprint("i", i, ".log")),
			// The deployment's settings, then the drill's own flags.
			Args: serveArgs(append(slices.Clone(cfg.deployArgs), cfg.serveArgs...)...)}
		p.Start(t)
		procs = append(procs, p)
		return p
	}
	defer func() {
		if t.Failed() {
			for _, p := range procs {
				t.Logf("%s's log ends:\n%s", p.Instance, p.LogTail(3000))
			}
		}
	}()

	flow := &okTimes{next: &http.Transport{MaxIdleConnsPerHost: haClients}}
	httpc := &http.Client{Timeout: 10 * time.Second, Transport: flow}
	d := newDrillRun(httpc, 1)
	load, stopLoad := context.WithCancel(ctx)
	var stopOnce sync.Once
	stop := func() { stopOnce.Do(func() { stopLoad(); d.wait() }) }
	defer stop()
	drive := func(p *servetest.Process) {
		for i := range haClients {
			d.client(load, fmt.Sprintf("%s-c%d", p.Instance, i), "http://"+p.Addr, haTag)
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

	if cfg.realistic {
		// The crash comes once every instance's buffer holds the tag's
		// runway at the rate it measured: what a production instance
		// under steady load holds when its database fails.
		want, err := time.ParseDuration(haRealisticRunway)
		if err != nil {
			t.Fatal(err)
		}
		var held []runwayState
		met := func() bool {
			held = held[:0]
			for _, p := range procs {
				st := runwayOf(t, p)
				held = append(held, st)
				// The tag's runway in force, not none: a buffer without
				// one is "met" at once.
				if !st.Met || st.Runway != want.Seconds() {
					return false
				}
			}
			return true
		}
		if !waitUntil(ctx, haRunwayWait, met) {
			t.Fatalf("the buffers did not hold the tag's %s runway within %v: %+v", haRealisticRunway, haRunwayWait, held)
		}
		r.runwayHeld = time.Duration(math.MaxInt64)
		for _, st := range held {
			r.runwayHeld = min(r.runwayHeld, time.Duration(st.Held*float64(time.Second)))
			r.peak += st.Peak
			r.step = max(r.step, st.Step)
		}
		t.Logf("runway at the crash: %+v", held)
	}

	// The leader now, in case a slow machine made Patroni fail over by
	// itself during the load.
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatalf("%v\n%s", err, c.Logs(3000))
	}
	crashed, err := breakReplica(ctx, t, c, leader, r, cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, c.Logs(3000))
	}
	if cfg.restart {
		// The first instances die with the leader: after the promotion no
		// running instance remembers (by its floor) the grants lost with
		// it, so the promoted server grants them again at once.
		for _, p := range procs {
			p.Stop(t, syscall.SIGKILL)
		}
	}
	promoted, err := c.WaitLeader(ctx, leader)
	if err != nil {
		t.Fatalf("%v\n%s", err, c.Logs(3000))
	}
	promotedAt := time.Now()
	t.Logf("%s crashed at +%v under load, %s promoted %v later", leader,
		crashed.Sub(d.begin).Round(time.Millisecond), promoted, promotedAt.Sub(crashed).Round(time.Millisecond))
	if cfg.restart {
		for _, p := range procs {
			p.Start(t)
		}
	}
	drive(startInstance())

	// Keep the load going for haAfter, and until every instance has served
	// since the promotion (bounded: one that never does fails the run).
	during(ctx, haAfter)
	served := func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, p := range procs {
			if !d.targets["http://"+p.Addr].lastOK.After(promotedAt) {
				return false
			}
		}
		return true
	}
	waitUntil(ctx, 30*time.Second, served)
	stop()
	for _, p := range procs {
		p.Stop(t, syscall.SIGTERM)
	}
	r.resumed = flow.resumedAfter(crashed)
	checkHA(t, c, d, procs, promotedAt, r, cfg.expectDuplicates)
	if cfg.realistic && (r.unavailable > 0 || r.noAnswer > 0) {
		// Buffers that outlast the failover carry every caller through it.
		t.Errorf("steps sized for the load: %d 503s and %d requests without an answer during the failover, want none", r.unavailable, r.noAnswer)
	}
}

// runwayState is one instance's runway for haTag, from its /id/health.
type runwayState struct {
	Instance string
	Runway   float64 // the runway in force, seconds
	Held     float64 // how long the IDs held last at the peak rate, seconds
	Met      bool
	Peak     float64 // IDs/s
	Step     int64   // the last range's size
	Short    string
}

// runwayOf reads p's runway for haTag.
func runwayOf(tb testing.TB, p *servetest.Process) runwayState {
	tb.Helper()
	var h struct {
		Tags []struct {
			Tag    string   `json:"biz_tag"`
			Runway float64  `json:"runway_seconds"`
			Held   *float64 `json:"runway_held_seconds"`
			Met    bool     `json:"runway_met"`
			Short  string   `json:"runway_short_reason"`
			Peak   float64  `json:"peak_ids_per_second"`
			Step   int64    `json:"step"`
		} `json:"tags"`
	}
	testutil.GetJSON(tb, "http://"+p.Addr+"/id/health", &h)
	st := runwayState{Instance: p.Instance}
	for _, tg := range h.Tags {
		if tg.Tag == haTag && tg.Held != nil {
			st.Runway, st.Held, st.Met, st.Peak, st.Step, st.Short = tg.Runway, *tg.Held, tg.Met, tg.Peak, tg.Step, tg.Short
		}
	}
	return st
}

// breakReplica makes the replica fall behind the leader as r.replica says,
// crashes the leader and returns when.
func breakReplica(ctx context.Context, t *testing.T, c *hacluster.Cluster, leader string, r *haResult, cfg haConfig) (time.Time, error) {
	var replica string
	for _, n := range c.Nodes() {
		if n != leader {
			replica = n
		}
	}
	crash := func() (time.Time, error) {
		at := time.Now()
		return at, c.Crash(leader)
	}
	if r.replica == "stall" {
		if cfg.lag > 0 {
			if n, err := c.StallReplication(leader); err != nil || n == 0 {
				return time.Time{}, fmt.Errorf("stall replication on %s: %d WAL senders frozen, %w", leader, n, err)
			}
			if !during(ctx, cfg.lag) {
				return time.Time{}, ctx.Err()
			}
		}
		return crash()
	}
	if err := c.Disconnect(replica); err != nil {
		return time.Time{}, err
	}
	if !during(ctx, cfg.down) {
		return time.Time{}, ctx.Err()
	}
	if r.mode == "sync" {
		// Patroni promotes only the standby etcd names synchronous: crash
		// the leader once the replica is that again.
		if err := c.Reconnect(replica); err != nil {
			return time.Time{}, err
		}
		back := time.Now()
		if _, err := c.WaitReplicating(ctx); err != nil {
			return time.Time{}, err
		}
		t.Logf("%s cut off for %v, the synchronous standby again %v after it came back", replica, cfg.down, time.Since(back).Round(time.Millisecond))
		return crash()
	}
	at, err := crash()
	if err != nil {
		return at, err
	}
	t.Logf("%s cut off for %v, then %s crashed; %s comes back", replica, cfg.down, leader, replica)
	return at, c.Reconnect(replica)
}

// checkHA checks what the drill saw against the promoted database and
// fills r.
//
// With expectDuplicates (a negative control) the run must show duplicates,
// and what follows from them (lost grants, max_id too low) is only logged.
func checkHA(t *testing.T, c *hacluster.Cluster, d *drillRun, procs []*servetest.Process, promotedAt time.Time, r *haResult, expectDuplicates bool) {
	var violations []string
	defer func() {
		switch {
		case expectDuplicates && r.duplicates == 0:
			t.Errorf("negative control: no duplicate among %d IDs, though the drill was set up to produce them (-drill.expect=duplicates)", r.ids)
		case expectDuplicates:
			t.Logf("negative control: as expected, %s", strings.Join(violations, "; "))
		default:
			for _, v := range violations {
				t.Error(v)
			}
		}
	}()
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
		tl := d.targets["http://"+p.Addr]
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
			t.Errorf("%s served no ID after the promotion", p.Instance)
		}
		for _, id := range tl.ids {
			servedBy[id] = append(servedBy[id], p.Instance)
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
		violations = append(violations, fmt.Sprintf("%d duplicates (e.g. %s), %d order violations", r.duplicates, strings.Join(sample, ", "), r.orderViolations))
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
		violations = append(violations, fmt.Sprintf("%d acknowledged IDs were served from grants the promoted database does not have (by Instance: %v)", r.lost, lostBy))
	}
	if maxID < highest {
		violations = append(violations, fmt.Sprintf("max_id %d on the promoted database is below %d, the highest ID served", maxID, highest))
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

// The drill's flags: make drill-ha passes them after -args, e.g.
// go test -run '^TestDrillHA$' ./cmd/idmint -args -drill.ha -drill.modes=async.
var (
	drillHAOn = flag.Bool("drill.ha", false, "run the failover drill (TestDrillHA; needs patroni, etcd and the PostgreSQL server binaries)")
	haFlags   = map[string]*string{
		"modes":           flag.String("drill.modes", "", `Patroni's synchronous_mode on or off: "sync async" (the default), sync or async`),
		"tags":            flag.String("drill.tags", "", "tiny (the default), realistic, or both"),
		"realistic-modes": flag.String("drill.realistic-modes", "", "the modes of the realistic runs (default async)"),
		"replica":         flag.String("drill.replica", "", "how the replica falls behind: disconnect (the default), stall, or both"),
		"runs":            flag.String("drill.runs", "", "runs per mode and variant (default 1)"),
		"down":            flag.String("drill.down", "", "how long the replica is cut off (disconnect; default 3s)"),
		"lag":             flag.String("drill.lag", "", "how long replication is frozen before the crash (stall; default 500ms)"),
		"expect":          flag.String("drill.expect", "", "duplicates: every run a negative control"),
		"control":         flag.String("drill.control", "", "1: a negative control run after the others"),
		"serve-args":      flag.String("drill.serve-args", "", "more idmint serve flags"),
	}
)

// drillList splits the drill flag name (spaces or commas) or, if empty, def.
func drillList(name, def string) []string {
	return strings.Fields(strings.ReplaceAll(drillOpt(name, def), ",", " "))
}

// drillOpt is the drill flag name, or def if it is empty.
func drillOpt(name, def string) string {
	if v := *haFlags[name]; v != "" {
		return v
	}
	return def
}
