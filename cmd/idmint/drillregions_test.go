package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idmint/idmint/client"
	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/region"
	"github.com/idmint/idmint/testkit/drill"
	"github.com/idmint/idmint/testkit/hacluster"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/servetest"
	"github.com/idmint/idmint/testkit/testutil"
)

// The regions drill's shape (make drill-regions): three regions in block
// order, the one whose database and instances are killed, the one added by
// a split, the Patroni one, the tag, instances per region and callers of
// each kind.
const (
	rdTag       = "order"
	rdKilled    = "ap"
	rdAdded     = "sa"
	rdPatroni   = "us"
	rdInstances = 2 // per region
	rdPlain     = 2 // GET /id callers per instance
	rdGo        = 2 // goroutines on each region's Go client
	// rdPace is the pause of a caller between two IDs: the load is a few
	// thousand IDs a second per region, what 2 cores carry beside the
	// databases and a Patroni pair.
	rdPace = 2 * time.Millisecond
)

var rdRegions = []string{"eu", rdPatroni, rdKilled}

// rdConfig is what the drill's flags ask of it.
type rdConfig struct {
	steady, down, back, added time.Duration // the phases' load
	block, step               int64
	wait                      time.Duration // a Go caller's wait for one ID
}

// The regions drill's flags: make drill-regions passes them after -args,
// e.g. go test -run '^TestDrillRegions$' ./cmd/idmint -args -drill.regions
// -drill.regions.down=30s.
var (
	drillRegionsOn = flag.Bool("drill.regions", false, "run the regions drill (TestDrillRegions; needs patroni, etcd and the PostgreSQL server binaries)")
	rdFlags        = rdConfig{}
)

func init() {
	flag.DurationVar(&rdFlags.steady, "drill.regions.steady", 10*time.Second, "the steady phase's load")
	flag.DurationVar(&rdFlags.down, "drill.regions.down", 15*time.Second, "the load while ap is down")
	flag.DurationVar(&rdFlags.back, "drill.regions.back", 10*time.Second, "the load once ap is back")
	flag.DurationVar(&rdFlags.added, "drill.regions.added", 15*time.Second, "the load once sa is added")
	flag.Int64Var(&rdFlags.block, "drill.regions.block", 20000, "the share's block")
	flag.Int64Var(&rdFlags.step, "drill.regions.step", 500, "the tag's step and max_step")
	flag.DurationVar(&rdFlags.wait, "drill.regions.wait", 5*time.Second, "a Go caller's deadline for one ID")
}

// rdConfigFromFlags checks the drill's flags.
func rdConfigFromFlags(t *testing.T) rdConfig {
	c := rdFlags
	for name, d := range map[string]time.Duration{"steady": c.steady, "down": c.down, "back": c.back, "added": c.added, "wait": c.wait} {
		if d <= 0 {
			t.Fatalf("-drill.regions.%s=%v: want a positive duration", name, d)
		}
	}
	if c.step < 1 || c.block < c.step {
		t.Fatalf("-drill.regions.block %d, -drill.regions.step %d: want 1 <= step <= block (a claim refuses a block below max_step)", c.block, c.step)
	}
	return c
}

// TestDrillRegions is the regions drill (make drill-regions; docs/regions.md,
// "The drill"): three regions on loopback, eu and ap each a PostgreSQL
// server of their own and us a Patroni pair (testkit/hacluster), each
// database claimed with `idmint region claim`, two `idmint serve` processes
// per region with --region and every other region's instances as
// --region-peer; in each region a Go client (Config.Regions, home first)
// and plain GET /id callers on each instance, all under load, every ID
// into one checker (internal/checker). Then:
//
//   - down: ap's database is killed (an immediate shutdown: no checkpoint,
//     crash recovery at the next start) and its instances SIGKILLed: eu and
//     us must see no error, ap's Go client must be served by another
//     region within a caller's wait (no error), and ap's plain callers
//     fail (their instances are gone), counted;
//   - back: ap's database and instances start again: ap's Go client must
//     come home and ap's callers be served from ap's share, with no error
//     anywhere;
//   - added: `idmint region split --add sa` over the four databases, then
//     sa's instances (peers: every other instance) and callers: no error;
//   - overlap: a fifth database claimed as ap a second time (the same
//     claim, which no database can tell from the first) must be refused by
//     serve beside its peers before it serves an ID; served without peers
//     (the negative control), its IDs and the run's must make the checker
//     report duplicates and the segment-log check overlaps.
//
// Throughout: 0 duplicates, every ID in the share of one region only, and
// in the end every region's segment log read: every range inside its
// region's share and within one block, granted by that region's instances,
// no two regions' ranges overlapping, every ID served from a range in its
// region's log. Its drill report (testkit/drill) has a figure per phase
// with its counts, and the check, overlap and time figures; the test's
// exit status is the verdict. -drill.regions.steady, .down, .back, .added
// (the phases' load), .block, .step (the tag's step = max_step) and .wait
// (a Go caller's deadline) shape it; it needs what make drill-ha needs.
func TestDrillRegions(t *testing.T) {
	if !*drillRegionsOn {
		pgtest.SkipOptional(t, "pass -drill.regions to run the regions drill (make drill-regions; needs patroni, etcd and the PostgreSQL server binaries)")
	}
	cfg := rdConfigFromFlags(t)
	begin := time.Now()
	d := &regionsDrill{t: t, cfg: cfg, checker: checker.New(), dir: t.TempDir(), regions: map[string]*rdRegion{}, report: drill.Start(t, "regions")}
	defer func() {
		if !d.printed {
			d.printPhases()
		}
		d.report.Set("seconds", secs(time.Since(begin)))
		if t.Failed() {
			d.dumpLogs()
		}
	}()
	d.bin = filepath.Join(d.dir, "idmint")
	if out, err := exec.Command("go", "build", "-o", d.bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	d.startDatabases()
	for _, name := range rdRegions {
		d.claim(d.regions[name])
	}
	for _, name := range rdRegions {
		d.startInstances(d.regions[name], rdRegions)
	}
	d.httpc = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2 * rdPlain}}
	load, stopLoad := context.WithCancel(context.Background())
	d.stopLoad = stopLoad
	defer d.stop()
	d.next("steady")
	for _, name := range rdRegions {
		d.drive(load, d.regions[name], rdRegions)
	}
	d.run(cfg.steady)
	restored := d.down(d.next("down"))
	d.back(d.next("back"), restored)
	d.add(load, d.next("added"))
	d.stop()
	d.verdicts()
	d.printPhases()
	d.checkRun()
	d.overlap()
}

// regionsDrill is one run of the drill.
type regionsDrill struct {
	t        *testing.T
	cfg      rdConfig
	bin, dir string
	checker  *checker.Checker
	httpc    *http.Client
	ha       *hacluster.Cluster
	servers  map[string]*pgtest.Server // the standalone regions' servers
	regions  map[string]*rdRegion
	stopLoad context.CancelFunc
	callers  sync.WaitGroup
	stopped  bool
	printed  bool
	report   *drill.Report // one line when the test ends, each phase a figure
	splitAt  int64         // the split's boundary, once it ran (atomic)

	mu     sync.Mutex // protects phases and cur's counts
	phases []*rdPhase
	cur    *rdPhase
}

// rdRegion is one region: its database, instances and Go client.
type rdRegion struct {
	name, url string
	procs     []*servetest.Process
	client    *client.Client
	share     region.Share // read at the end
}

// rdPhase is what the callers saw in one phase.
type rdPhase struct {
	name         string
	begin, end   time.Time
	byRegion     map[string]*rdCounts
	extra        map[string]any // the phase's own figures
	failedChecks []string
}

// rdCounts is one region's callers in one phase.
type rdCounts struct {
	goIDs, plainIDs       int64
	goErrors, plainErrors int64
	goMaxWait             time.Duration
	errorKinds            map[string]int64
	goAcks                []rdAck // the Go client's IDs with when they came
	plainByInstance       map[string][]int64
}

type rdAck struct {
	at time.Time
	id int64
}

func (p *rdPhase) counts(region string) *rdCounts {
	c := p.byRegion[region]
	if c == nil {
		c = &rdCounts{errorKinds: map[string]int64{}, plainByInstance: map[string][]int64{}}
		p.byRegion[region] = c
	}
	return c
}

// next ends the current phase, if any, and begins the phase name: the
// callers' counts from now on go to it.
func (d *regionsDrill) next(name string) *rdPhase {
	p := &rdPhase{name: name, begin: time.Now(), byRegion: map[string]*rdCounts{}, extra: map[string]any{}}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cur != nil {
		d.cur.end = p.begin
	}
	d.phases = append(d.phases, p)
	d.cur = p
	return p
}

// run lets the load go on for dur.
func (d *regionsDrill) run(dur time.Duration) {
	if !during(context.Background(), dur) {
		d.t.Fatal("interrupted")
	}
}

// record counts one caller's outcome in the current phase.
func (d *regionsDrill) record(regionName, kind, instance string, ids []int64, wait time.Duration, err error) {
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.cur.counts(regionName)
	switch {
	case err != nil && kind == "go":
		c.goErrors++
		c.errorKinds["go: "+err.Error()]++
	case err != nil:
		c.plainErrors++
		c.errorKinds["plain: "+err.Error()]++
	case kind == "go":
		c.goIDs += int64(len(ids))
		c.goMaxWait = max(c.goMaxWait, wait)
		for _, id := range ids {
			c.goAcks = append(c.goAcks, rdAck{now, id})
		}
	default:
		c.plainIDs += int64(len(ids))
		c.plainByInstance[instance] = append(c.plainByInstance[instance], ids...)
	}
}

// startDatabases starts the Patroni pair of us (in the background: it takes
// the longest) and a PostgreSQL server for each other region, the added
// one's too, and makes a database on each.
func (d *regionsDrill) startDatabases() {
	t := d.t
	type started struct {
		c   *hacluster.Cluster
		err error
	}
	ha := make(chan started, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		c, err := hacluster.Start(ctx, hacluster.Config{Nodes: 2, Synchronous: true})
		if err == nil {
			if _, err = c.WaitReplicating(ctx); err != nil {
				err = fmt.Errorf("%w\n%s", err, c.Logs(3000))
			}
		}
		ha <- started{c, err}
	}()
	d.servers = map[string]*pgtest.Server{}
	for _, name := range []string{"eu", rdKilled, rdAdded} {
		s := pgtest.New(t)
		d.servers[name] = s
		d.regions[name] = &rdRegion{name: name, url: s.NewDatabase(t)}
	}
	got := <-ha
	if got.c != nil {
		d.ha = got.c
		t.Cleanup(func() {
			if err := got.c.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	d.regions[rdPatroni] = &rdRegion{name: rdPatroni, url: d.ha.URL()}
}

// cli runs the idmint binary as an operator would and returns its output.
func (d *regionsDrill) cli(args ...string) string {
	d.t.Helper()
	var stderr strings.Builder
	cmd := exec.Command(d.bin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		d.t.Fatalf("idmint %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// claim migrates r's database, claims its share of rdRegions as
// docs/regions.md says, and creates the tag.
func (d *regionsDrill) claim(r *rdRegion) {
	d.cli("migrate", "--database-url", r.url)
	d.cli("region", "claim", "--database-url", r.url, "--name", r.name, "--regions", strings.Join(rdRegions, ","),
		"--block", strconv.FormatInt(d.cfg.block, 10))
	d.createTag(r.url)
}

func (d *regionsDrill) createTag(url string) {
	step := strconv.FormatInt(d.cfg.step, 10)
	d.cli("tag", "create", rdTag, "--step", step, "--max-step", step, "--database-url", url)
}

// startInstances starts r's instances, each with every instance of the
// other regions of peers as --region-peer.
func (d *regionsDrill) startInstances(r *rdRegion, peers []string) {
	t := d.t
	if r.procs == nil {
		for i := range rdInstances {
			r.procs = append(r.procs, &servetest.Process{Bin: d.bin, DatabaseURL: r.url, Addr: testutil.FreeAddr(t),
				Instance: fmt.Sprintf("%s-%d", r.name, i), LogPath: filepath.Join(d.dir, fmt.Sprintf("%s-%d.log", r.name, i))})
		}
	}
	var peerURLs []string
	for _, name := range peers {
		if name == r.name || d.regions[name] == nil {
			continue
		}
		for _, p := range d.regions[name].procs {
			peerURLs = append(peerURLs, "http://"+p.Addr)
		}
	}
	for _, p := range r.procs {
		p.Args = []string{"--region", r.name, "--region-peer", strings.Join(peerURLs, ","), "--region-peer-every", "2s", "--wait-timeout", "2s"}
		if r.name == rdPatroni {
			// The HA deployment's settings (deploy/ha/idmint.env).
			deploy, err := envFileFlags("idmint.env")
			if err != nil {
				t.Fatal(err)
			}
			p.Args = append(deploy, p.Args...)
		}
		p.Start(t)
	}
}

// drive starts r's callers: plain GET /id callers on each instance, and a
// Go client whose regions are r first, then the others of order.
func (d *regionsDrill) drive(ctx context.Context, r *rdRegion, order []string) {
	t := d.t
	for _, p := range r.procs {
		for k := range rdPlain {
			name := fmt.Sprintf("plain-%s-%d", p.Instance, k)
			target := "http://" + p.Addr
			d.callers.Go(func() {
				for ctx.Err() == nil {
					ids, err := fetchIDs(ctx, d.httpc, target, rdTag, 1)
					if ctx.Err() != nil {
						return
					}
					d.record(r.name, "plain", p.Instance, ids, 0, err)
					if err != nil {
						d.checker.Fail(err)
						pause(ctx, 50*time.Millisecond)
						continue
					}
					d.checker.Ack(name, rdTag, ids...)
					pause(ctx, rdPace)
				}
			})
		}
	}
	regions := []client.Region{{Name: r.name, URLs: r.urls()}}
	for _, name := range order {
		if name != r.name {
			regions = append(regions, client.Region{Name: name, URLs: d.regions[name].urls()})
		}
	}
	logs, err := os.OpenFile(filepath.Join(d.dir, "go-client-"+r.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logs.Close() })
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := client.New(cctx, client.Config{
		Regions: regions, Tags: []string{rdTag},
		ProbeMin: 250 * time.Millisecond, ProbeMax: 2 * time.Second,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	})
	if err != nil {
		t.Fatalf("Go client of %s: %v", r.name, err)
	}
	r.client = c
	for g := range rdGo {
		d.callers.Go(func() {
			for ctx.Err() == nil {
				callCtx, cancel := context.WithTimeout(ctx, d.cfg.wait)
				start := time.Now()
				id, err := c.Next(callCtx, rdTag)
				cancel()
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					d.record(r.name, "go", "", nil, 0, err)
					d.checker.Fail(err)
					pause(ctx, 50*time.Millisecond)
					continue
				}
				d.record(r.name, "go", "", []int64{id}, time.Since(start), nil)
				// A client's IDs increase within the region that granted
				// them, not across regions: one checker name per region.
				d.checker.Ack(fmt.Sprintf("go-%s-%d@%s", r.name, g, d.ownerName(id)), rdTag, id)
				pause(ctx, rdPace)
			}
		})
	}
}

func (r *rdRegion) urls() []string {
	var out []string
	for _, p := range r.procs {
		out = append(out, "http://"+p.Addr)
	}
	return out
}

// ownerName is the region whose share holds id by the scheme the drill
// set up (for the checker's names and the phases' counts; the shares
// themselves are read at the end): block j of the first epoch is
// rdRegions[j mod 3]'s, block j above the split's boundary the j mod 4th
// of rdRegions and rdAdded.
func (d *regionsDrill) ownerName(id int64) string {
	if at := atomic.LoadInt64(&d.splitAt); at != 0 && id >= at {
		return append(slices.Clone(rdRegions), rdAdded)[(id-at)/d.cfg.block%int64(len(rdRegions)+1)]
	}
	return rdRegions[(id-1)/d.cfg.block%int64(len(rdRegions))]
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// down kills the database of rdKilled and SIGKILLs its instances, lets the
// load run, measures how soon its Go client was served elsewhere, and
// starts the database and the instances again: it returns when they serve.
func (d *regionsDrill) down(p *rdPhase) (restored time.Time) {
	defer func() { restored = d.restore(p) }()
	t, r := d.t, d.regions[rdKilled]
	killedAt := time.Now()
	d.servers[rdKilled].Stop(t, true)
	for _, proc := range r.procs {
		proc.Stop(t, syscall.SIGKILL)
	}
	p.extra["killed"] = rdKilled
	d.run(d.cfg.down)
	// Failover: from the kill to the first ID of another region's share to
	// the killed region's Go client.
	d.mu.Lock()
	defer d.mu.Unlock()
	var first time.Time
	for _, a := range p.counts(rdKilled).goAcks {
		if d.ownerName(a.id) != rdKilled && (first.IsZero() || a.at.Before(first)) {
			first = a.at
		}
	}
	if first.IsZero() {
		p.failedChecks = append(p.failedChecks, fmt.Sprintf("%s's Go client got no ID from another region while %s was down", rdKilled, rdKilled))
		return
	}
	p.extra["failover_seconds"] = secs(first.Sub(killedAt))
	return
}

// restore starts the killed region's database and instances again, and
// returns when it began, once they answer.
func (d *regionsDrill) restore(p *rdPhase) time.Time {
	t, r := d.t, d.regions[rdKilled]
	begin := time.Now()
	d.servers[rdKilled].Start(t)
	for _, proc := range r.procs {
		proc.Start(t)
	}
	p.extra["restore_seconds"] = secs(time.Since(begin))
	return begin
}

// back waits for the killed region's Go client to come home (from the
// start of the restore), and lets the load run.
func (d *regionsDrill) back(p *rdPhase, restored time.Time) {
	r := d.regions[rdKilled]
	home := waitUntil(context.Background(), 30*time.Second, func() bool { return r.client.Stats().Region == rdKilled })
	if !home {
		p.failedChecks = append(p.failedChecks, fmt.Sprintf("%s's Go client did not come home within 30 s of its region's restart", rdKilled))
	} else {
		p.extra["home_after_restore_began_seconds"] = secs(time.Since(restored))
	}
	d.run(d.cfg.back)
	st := r.client.Stats()
	gaps := map[string]int64{}
	for _, rs := range st.Regions {
		gaps[rs.Name] = rs.Gap
	}
	p.extra["go_client_"+rdKilled] = map[string]any{"serving": st.Region, "failovers": st.Failovers, "returns": st.Returns, "gap_ids_by_region": gaps}
}

// add adds rdAdded with `idmint region split` over every region's database
// and the new one's, then starts its instances and callers.
func (d *regionsDrill) add(ctx context.Context, p *rdPhase) {
	r := d.regions[rdAdded]
	d.cli("migrate", "--database-url", r.url)
	// A margin of 1: the boundary is the first cycle start above the
	// highest max_id, so that every region crosses it within the phase.
	args := []string{"region", "split", "--add", rdAdded, "--margin", "1"}
	for _, name := range rdRegions {
		args = append(args, "--database-url", d.regions[name].url)
	}
	out := d.cli(append(args, "--database-url", r.url)...)
	var at int64
	if _, err := fmt.Sscanf(out[strings.Index(out, "split at "):], "split at %d", &at); err != nil || at <= 0 {
		d.t.Fatalf("split: no boundary in its output: %v\n%s", err, out)
	}
	atomic.StoreInt64(&d.splitAt, at)
	p.extra["split_at"] = at
	d.createTag(r.url)
	all := append(slices.Clone(rdRegions), rdAdded)
	d.startInstances(r, all)
	d.drive(ctx, r, all)
	d.run(d.cfg.added)
	// Every instance started before the split says its fenced share, and
	// none sees a conflict.
	for _, name := range all {
		for _, proc := range d.regions[name].procs {
			var h struct {
				Region struct {
					Share    region.Share `json:"share"`
					Conflict any          `json:"conflict"`
				} `json:"region"`
			}
			testutil.GetJSON(d.t, "http://"+proc.Addr+"/id/health", &h)
			if len(h.Region.Share.Epochs) != 2 && name != rdAdded || h.Region.Conflict != nil {
				p.failedChecks = append(p.failedChecks, fmt.Sprintf("%s after the split: epochs %v, conflict %v", proc.Instance, h.Region.Share.Epochs, h.Region.Conflict))
			}
		}
	}
	// Which regions granted above the boundary by the end of the phase.
	above := map[string]int64{}
	d.mu.Lock()
	for name, c := range p.byRegion {
		for _, ids := range c.plainByInstance {
			for _, id := range ids {
				if id >= at {
					above[name]++
				}
			}
		}
	}
	d.mu.Unlock()
	p.extra["plain_ids_above_split_by_region"] = above
}

// stop ends the load and stops every instance gracefully.
func (d *regionsDrill) stop() {
	if d.stopped {
		return
	}
	d.stopped = true
	d.stopLoad()
	d.callers.Wait()
	d.mu.Lock()
	if d.cur != nil {
		d.cur.end = time.Now()
	}
	d.mu.Unlock()
	for _, r := range d.regions {
		if r.client != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			r.client.Close(ctx)
			cancel()
		}
		for _, p := range r.procs {
			if p.Cmd != nil && p.Cmd.ProcessState == nil {
				p.Stop(d.t, syscall.SIGTERM)
			}
		}
	}
}

// checkRun reads every region's share and segment log and checks the run:
// the checker's report, every ID in one share only, the segment logs.
func (d *regionsDrill) checkRun() {
	t := d.t
	all := append(slices.Clone(rdRegions), rdAdded)
	for _, name := range all {
		r := d.regions[name]
		if err := json.Unmarshal([]byte(d.cli("region", "show", "--json", "--database-url", r.url)), &r.share); err != nil {
			t.Fatalf("region show %s: %v", name, err)
		}
	}
	rep := d.checker.Report()
	// Every ID in the share of exactly one region; the plain callers' IDs
	// in the share of the region they asked.
	owners := func(id int64) []string {
		var in []string
		for _, name := range all {
			if d.regions[name].share.Owns(id) {
				in = append(in, name)
			}
		}
		return in
	}
	var notOne int64
	d.checker.Each(rdTag, func(id int64) {
		if len(owners(id)) != 1 {
			notOne++
		}
	})
	var foreign int64
	for _, p := range d.phases {
		for name, c := range p.byRegion {
			for _, ids := range c.plainByInstance {
				for _, id := range ids {
					if !d.regions[name].share.Owns(id) {
						foreign++
					}
				}
			}
		}
	}
	logs := d.readLogs(all)
	check := logs.check(d.regions, all, d.checker)
	d.report.Set("check", map[string]any{
		"ids": rep.IDs(), "duplicates": rep.Duplicates(), "order_violations": rep.OrderViolations,
		"ids_not_in_exactly_one_share": notOne, "plain_ids_outside_their_region": foreign,
		"segment_logs": check})
	if !rep.Valid() || rep.IDs() == 0 {
		t.Errorf("checker: %s", rep)
	}
	if notOne > 0 || foreign > 0 {
		t.Errorf("%d IDs not in exactly one region's share, %d plain callers' IDs outside their region's share", notOne, foreign)
	}
	if !check.ok() {
		t.Errorf("segment logs: %+v", check)
	}
}

// rdGrant is one row of a region's segment log.
type rdGrant struct {
	region, instance string
	first, last      int64
	kept             int64 // the last ID it keeps (returned_from - 1 after a give-back)
}

// rdLogs is every region's segment log.
type rdLogs map[string][]rdGrant

// readLogs reads the segment log of each region's database.
func (d *regionsDrill) readLogs(names []string) rdLogs {
	logs := rdLogs{}
	for _, name := range names {
		logs[name] = readSegmentLog(d.t, name, d.regions[name].url)
	}
	return logs
}

func readSegmentLog(t *testing.T, name, url string) []rdGrant {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT instance, first_id, last_id, COALESCE(returned_from - 1, last_id)
		FROM idmint_segments WHERE biz_tag = $1 ORDER BY first_id`, rdTag)
	if err != nil {
		t.Fatal(err)
	}
	grants, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (rdGrant, error) {
		g := rdGrant{region: name}
		return g, row.Scan(&g.instance, &g.first, &g.last, &g.kept)
	})
	if err != nil {
		t.Fatal(err)
	}
	return grants
}

// rdLogCheck is what the segment logs showed.
type rdLogCheck struct {
	Ranges map[string]int `json:"ranges"`
	// OutsideShare counts ranges not inside their region's share within
	// one block; ByOthers ranges granted by another region's instance;
	// Overlaps pairs of kept ranges (any regions) sharing an ID;
	// IDsWithoutGrant acknowledged IDs in no kept range of their region's
	// log.
	OutsideShare    int   `json:"outside_share"`
	ByOthers        int   `json:"by_other_instances"`
	Overlaps        int   `json:"overlaps"`
	IDsWithoutGrant int64 `json:"ids_without_grant"`
}

func (c rdLogCheck) ok() bool {
	return c.OutsideShare == 0 && c.ByOthers == 0 && c.Overlaps == 0 && c.IDsWithoutGrant == 0
}

// check checks logs against the regions' shares and instances, and every
// ID ck saw against the logs.
func (logs rdLogs) check(regions map[string]*rdRegion, names []string, ck *checker.Checker) rdLogCheck {
	c := rdLogCheck{Ranges: map[string]int{}}
	var kept []rdGrant
	for _, name := range names {
		r := regions[name]
		instances := map[string]bool{}
		for _, p := range r.procs {
			instances[p.Instance] = true
		}
		for _, g := range logs[name] {
			c.Ranges[name]++
			first, blockLast, ok := r.share.NextOwned(g.first - 1)
			if !ok || first != g.first || g.last > blockLast {
				c.OutsideShare++
			}
			// A Go client's range is logged as granted by the instance it
			// asked, with "/client" after its name.
			if !instances[strings.TrimSuffix(g.instance, "/client")] {
				c.ByOthers++
			}
			if g.kept >= g.first {
				kept = append(kept, g)
			}
		}
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].first < kept[j].first })
	for i := 1; i < len(kept); i++ {
		if kept[i].first <= kept[i-1].kept {
			c.Overlaps++
		}
	}
	ck.Each(rdTag, func(id int64) {
		i := sort.Search(len(kept), func(i int) bool { return kept[i].kept >= id })
		if i == len(kept) || kept[i].first > id {
			c.IDsWithoutGrant++
		}
	})
	return c
}

// overlap claims a fifth database as rdKilled a second time: serve beside
// its peers must refuse it before it serves an ID; served without peers,
// its IDs must show as duplicates to the checker and as overlaps in the
// segment logs: the drill would have seen them.
func (d *regionsDrill) overlap() {
	t := d.t
	twin := &rdRegion{name: rdKilled, url: d.servers["eu"].NewDatabase(t)}
	d.claim(twin)
	var peers []string
	for _, name := range append(slices.Clone(rdRegions), rdAdded) {
		peers = append(peers, d.regions[name].urls()...)
	}
	// The deployment's instances stopped at the end of the run: start one
	// of each region again as the twin's peers.
	for _, name := range append(slices.Clone(rdRegions), rdAdded) {
		d.regions[name].procs[0].Start(t)
	}
	line := map[string]any{}
	defer func() { d.report.Set("overlap", line) }()

	addr := testutil.FreeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.bin, "serve", "--database-url", twin.url, "--listen", addr, "--instance", "twin-0",
		"--region", rdKilled, "--region-peer", strings.Join(peers, ","), "--log-format", "json")
	begin := time.Now()
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	refused := errors.As(err, &exit) && strings.Contains(string(out), "conflict")
	var maxID int64
	grants := readSegmentLog(t, "twin", twin.url)
	func() {
		conn, err := pgx.Connect(context.Background(), twin.url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if err := conn.QueryRow(context.Background(), `SELECT max_id FROM idmint_tags WHERE biz_tag = $1`, rdTag).Scan(&maxID); err != nil {
			t.Fatal(err)
		}
	}()
	line["refused"], line["refused_after_seconds"], line["twin_grants_before_refusal"], line["twin_max_id"] =
		refused, secs(time.Since(begin)), len(grants), maxID
	if !refused || len(grants) > 0 || maxID != 0 {
		t.Errorf("serve of a second database claimed as %s beside its peers: %v, %d grants, max_id %d; want a refusal before any grant\n%s",
			rdKilled, err, len(grants), maxID, tail(out, 2000))
		return
	}

	// The negative control: the twin served without peers, beside the
	// run's IDs.
	ctrl := checker.New()
	d.checker.Each(rdTag, func(id int64) { ctrl.Ack("run", rdTag, id) })
	p := &servetest.Process{Bin: d.bin, DatabaseURL: twin.url, Addr: addr, Instance: "twin-0", LogPath: filepath.Join(d.dir, "twin-0.log"),
		Args: []string{"--region", rdKilled}}
	p.Start(t)
	loadCtx, stopLoad := context.WithTimeout(context.Background(), 3*time.Second)
	var twinIDs int64
	for loadCtx.Err() == nil {
		ids, err := fetchIDs(loadCtx, d.httpc, "http://"+addr, rdTag, 1)
		if err == nil {
			ctrl.Ack("twin", rdTag, ids...)
			twinIDs++
		}
	}
	stopLoad()
	p.Stop(t, syscall.SIGTERM)
	rep := ctrl.Report()
	logs := d.readLogs(append(slices.Clone(rdRegions), rdAdded))
	logs["twin"] = readSegmentLog(t, rdKilled, twin.url)
	regions := map[string]*rdRegion{"twin": {name: rdKilled, share: d.regions[rdKilled].share, procs: []*servetest.Process{p}}}
	for name, r := range d.regions {
		regions[name] = r
	}
	check := logs.check(regions, append(append(slices.Clone(rdRegions), rdAdded), "twin"), ctrl)
	line["control_twin_ids"], line["control_duplicates"], line["control_overlaps"] = twinIDs, rep.Duplicates(), check.Overlaps
	if twinIDs == 0 || rep.Duplicates() == 0 || check.Overlaps == 0 {
		t.Errorf("negative control: the twin served %d IDs; the checker found %d duplicates and the logs %d overlaps; want both above 0", twinIDs, rep.Duplicates(), check.Overlaps)
	}
}

// printPhases prints one JSON line per phase.
func (d *regionsDrill) printPhases() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.printed = true
	for _, p := range d.phases {
		end := p.end
		if end.IsZero() {
			end = time.Now()
		}
		regions := map[string]any{}
		for name, c := range p.byRegion {
			servedBy := map[string]int64{}
			for _, a := range c.goAcks {
				servedBy[d.ownerName(a.id)]++
			}
			regions[name] = map[string]any{
				"go_ids": c.goIDs, "plain_ids": c.plainIDs, "go_errors": c.goErrors, "plain_errors": c.plainErrors,
				"go_max_wait_seconds": secs(c.goMaxWait), "go_ids_by_share": servedBy, "errors": c.errorKinds,
			}
		}
		line := map[string]any{"seconds": secs(end.Sub(p.begin)), "regions": regions}
		for k, v := range p.extra {
			line[k] = v
		}
		if len(p.failedChecks) > 0 {
			line["failed_checks"] = p.failedChecks
		}
		d.report.Set(p.name, line)
	}
}

// verdicts checks every phase's counts: no Go caller error anywhere (a
// caller of a region that is down is served by another within its wait),
// no plain caller error but on the killed region's instances while it was
// down, and each phase's own checks.
func (d *regionsDrill) verdicts() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range d.phases {
		for _, f := range p.failedChecks {
			d.t.Errorf("%s: %s", p.name, f)
		}
		for name, c := range p.byRegion {
			if c.goErrors > 0 {
				d.t.Errorf("%s: %d errors to %s's Go callers: %v", p.name, c.goErrors, name, c.errorKinds)
			}
			if c.plainErrors > 0 && !(p.name == "down" && name == rdKilled) {
				d.t.Errorf("%s: %d errors to %s's plain callers: %v", p.name, c.plainErrors, name, c.errorKinds)
			}
			if c.goIDs+c.plainIDs == 0 {
				d.t.Errorf("%s: no ID to %s's callers", p.name, name)
			}
		}
	}
}

// dumpLogs logs the end of every instance's and Go client's log.
func (d *regionsDrill) dumpLogs() {
	files, _ := filepath.Glob(filepath.Join(d.dir, "*.log"))
	for _, f := range files {
		raw, _ := os.ReadFile(f)
		d.t.Logf("%s ends:\n%s", filepath.Base(f), tail(raw, 2000))
	}
}

func secs(d time.Duration) float64 {
	return float64(d.Round(10*time.Millisecond)) / float64(time.Second)
}

// tail is the last n bytes of b.
func tail(b []byte, n int) []byte { return b[max(0, len(b)-n):] }
