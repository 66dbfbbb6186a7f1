package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/snowflake"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/testutil"
	"github.com/idmint/idmint/wire"
)

// Snowflake flags of the process tests: two worker IDs, a 2 s lease.
var snowflakeFlags = []string{"--snowflake-bits", "50/1/12", "--snowflake-lease-ttl", "2s",
	"--snowflake-margin", "200ms", "--snowflake-renew-every", "300ms"}

var twoWorkers = snowflake.Layout{Epoch: snowflake.DefaultEpoch, TimeBits: 50, WorkerBits: 1, SequenceBits: 12}

// buildBinary builds idmint into dir.
func buildBinary(tb testing.TB, dir string) string {
	tb.Helper()
	bin := filepath.Join(dir, "idmint")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		tb.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// snowflakeSetup builds idmint and migrates a fresh PostgreSQL database, or
// the SQLite file at sqlitePath when it is not empty. It returns the work
// directory, the binary and the database URL.
func snowflakeSetup(t *testing.T, sqlitePath string) (dir, bin, url string) {
	t.Helper()
	if testing.Short() {
		t.Skip("real processes")
	}
	dir = t.TempDir()
	bin = buildBinary(t, dir)
	if sqlitePath != "" {
		url = "sqlite://" + filepath.Join(dir, sqlitePath)
	} else {
		url = pgtest.Shared(t).NewDatabase(t)
	}
	idmint(t, "migrate", "--database-url", url)
	return dir, bin, url
}

// snowflakeProcs makes n processes (not started) on one database.
func snowflakeProcs(tb testing.TB, bin, url, dir string, names ...string) []*process {
	procs := make([]*process, len(names))
	for i, name := range names {
		procs[i] = &process{bin: bin, url: url, addr: testutil.FreeAddr(tb), instance: name,
			logPath: filepath.Join(dir, name+".log"), args: snowflakeFlags}
	}
	return procs
}

// snowflakeState reads the snowflake part of a process's /id/health.
func snowflakeState(tb testing.TB, p *process) httpapi.SnowflakeHealth {
	tb.Helper()
	var h httpapi.Health
	// 503 is a valid answer too: a process woken from a pause may find its
	// database connections dead and report itself unavailable for a moment;
	// the body still says how its Snowflake generator is doing.
	if code := testutil.GetJSON(tb, "http://"+p.addr+"/id/health", &h); (code != http.StatusOK && code != http.StatusServiceUnavailable) || h.Snowflake == nil {
		tb.Fatalf("%s /id/health: %d %+v", p.instance, code, h)
	}
	return *h.Snowflake
}

// waitState polls p's snowflake health until cond holds, for at most 20 s.
func waitState(tb testing.TB, p *process, what string, cond func(httpapi.SnowflakeHealth) bool) httpapi.SnowflakeHealth {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := snowflakeState(tb, p)
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			logs, _ := os.ReadFile(p.logPath)
			tb.Fatalf("%s: timed out waiting for %s; last state %+v\n%s", p.instance, what, st, tail(logs, 3000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func workerIs(w int64) func(httpapi.SnowflakeHealth) bool {
	return func(st httpapi.SnowflakeHealth) bool { return st.Serving && st.WorkerID != nil && *st.WorkerID == w }
}

// collector asks one process for Snowflake IDs, one request at a time, so
// that the order it sees is the process's order, until stopped.
type collector struct {
	p      *process
	c      *checker.Checker
	client string
	httpc  *http.Client
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex // protects ids
	ids    []int64
}

func collect(p *process, c *checker.Checker, client string) *collector {
	k := &collector{p: p, c: c, client: client, httpc: &http.Client{Timeout: 30 * time.Second},
		stop: make(chan struct{}), done: make(chan struct{})}
	go k.run()
	return k
}

func (k *collector) run() {
	defer close(k.done)
	ctx := context.Background()
	for {
		select {
		case <-k.stop:
			return
		default:
		}
		k.c.Attempt()
		id, _, err := fetchID(ctx, k.httpc, "http://"+k.p.addr+"/snowflake")
		if err != nil {
			k.c.Fail(err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		k.c.Ack(k.client, "snowflake", id)
		k.mu.Lock()
		k.ids = append(k.ids, id)
		k.mu.Unlock()
	}
}

func (k *collector) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.ids)
}

// waitIDs waits until the collector has n IDs more than before.
func (k *collector) waitIDs(tb testing.TB, n int) {
	tb.Helper()
	want := k.count() + n
	deadline := time.Now().Add(20 * time.Second)
	for k.count() < want {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: %d ids, want %d", k.client, k.count(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// halt stops the collector, bounded: a request in flight ends by its
// client timeout.
func (k *collector) halt() []int64 {
	close(k.stop)
	<-k.done
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.ids
}

// TestSnowflake_SIGSTOPPastLease pauses a real idmint serve process
// (SIGSTOP) for longer than its lease while a client waits on it, lets a new
// process take its worker ID and issue IDs, then wakes it (SIGCONT). The
// woken process must refuse, or issue only inside its old window: no ID
// comes out twice, every process's IDs increase, and the new holder's IDs
// of that worker ID all come after the old holder's.
func TestSnowflake_SIGSTOPPastLease(t *testing.T) {
	dir, bin, url := snowflakeSetup(t, "")
	procs := snowflakeProcs(t, bin, url, dir, "paused", "steady", "successor")
	paused, steady, successor := procs[0], procs[1], procs[2]
	paused.start(t)
	waitState(t, paused, "worker id 0", workerIs(0))
	steady.start(t)
	waitState(t, steady, "worker id 1", workerIs(1))

	c := checker.New()
	kPaused, kSteady := collect(paused, c, "paused"), collect(steady, c, "steady")
	kPaused.waitIDs(t, 500)
	kSteady.waitIDs(t, 500)

	if err := paused.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			paused.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	pausedBefore := kPaused.count()

	successor.start(t)
	if st := snowflakeState(t, successor); st.Serving || st.State != wire.CodeSnowflakeNoWorker {
		t.Fatalf("successor with both worker ids held: %+v", st)
	}
	// The paused process's lease expires: the successor takes worker 0.
	st := waitState(t, successor, "worker id 0 after the lease expired", workerIs(0))
	if st.Epoch < 2 {
		t.Fatalf("successor holds worker 0 at epoch %d", st.Epoch)
	}
	kSuccessor := collect(successor, c, "successor")
	kSuccessor.waitIDs(t, 500)

	if err := paused.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	// The woken process finds its lease lost (and, normally, no worker ID
	// free: the other two keep theirs).
	waitState(t, paused, "the lease lost", func(st httpapi.SnowflakeHealth) bool { return st.LeasesLost >= 1 })
	kSuccessor.waitIDs(t, 500)
	kSteady.waitIDs(t, 500)

	pausedIDs, steadyIDs, successorIDs := kPaused.halt(), kSteady.halt(), kSuccessor.halt()
	r := c.Report()
	t.Logf("paused: %d ids before SIGSTOP, %d after SIGCONT; steady %d; successor %d\n%s",
		pausedBefore, len(pausedIDs)-pausedBefore, len(steadyIDs), len(successorIDs), r)
	if !r.Valid() {
		t.Fatalf("duplicates or order violations:\n%s", r)
	}
	// The fence: every worker-0 ID of the successor is later than every one
	// of the paused process.
	var lastPaused int64
	for _, id := range pausedIDs {
		p, _ := twoWorkers.Parse(id)
		if p.Worker != 0 {
			t.Fatalf("paused process issued worker %d's id %d", p.Worker, id)
		}
		lastPaused = max(lastPaused, p.UnixMilli)
	}
	for _, id := range successorIDs {
		if p, _ := twoWorkers.Parse(id); p.Worker != 0 || p.UnixMilli <= lastPaused {
			t.Fatalf("successor id %d (%+v) not after the paused process's last millisecond %d", id, p, lastPaused)
		}
	}
	for _, p := range procs {
		p.stop(t, syscall.SIGTERM)
	}
}

// TestSnowflake_RaceForTheLastWorkerID starts two processes at once when one
// worker ID is left: exactly one serves, the other answers 503
// snowflake_no_worker and keeps trying, and takes the worker ID when the
// winner shuts down (releasing it).
func TestSnowflake_RaceForTheLastWorkerID(t *testing.T) {
	dir, bin, url := snowflakeSetup(t, "")
	procs := snowflakeProcs(t, bin, url, dir, "first", "racer-a", "racer-b")
	procs[0].start(t)
	waitState(t, procs[0], "worker id 0", workerIs(0))
	var wg sync.WaitGroup
	for _, p := range procs[1:] {
		wg.Go(func() { p.start(t) })
	}
	wg.Wait()
	// Both are up; each has made its first attempt.
	var winner, loser *process
	for _, p := range procs[1:] {
		st := waitState(t, p, "a first lease attempt", func(st httpapi.SnowflakeHealth) bool { return st.Serving || st.LastError != "" })
		if st.Serving {
			if winner != nil {
				t.Fatalf("both racers serve: %s and %s", winner.instance, p.instance)
			}
			winner = p
			if *st.WorkerID != 1 {
				t.Fatalf("winner holds worker %d", *st.WorkerID)
			}
		} else {
			loser = p
		}
	}
	if winner == nil || loser == nil {
		t.Fatalf("want one winner and one loser: %v %v", winner, loser)
	}
	if _, answered, err := fetchID(context.Background(), http.DefaultClient, "http://"+loser.addr+"/snowflake"); !answered || err == nil ||
		!strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), wire.CodeSnowflakeNoWorker) {
		t.Fatalf("loser's /snowflake: %v", err)
	}
	if _, _, err := fetchID(context.Background(), http.DefaultClient, "http://"+winner.addr+"/snowflake"); err != nil {
		t.Fatal(err)
	}
	winner.stop(t, syscall.SIGTERM)
	waitState(t, loser, "the released worker id", workerIs(1))
	procs[0].stop(t, syscall.SIGTERM)
	loser.stop(t, syscall.SIGTERM)
}

// TestSnowflake_RestartReusesWorkerID stops a process (SIGTERM: it
// releases its worker ID and records the last millisecond used) and starts
// it again at once on the SQLite file: it takes the same worker ID at the
// next epoch, and its IDs continue above the ones before. A SIGKILLed
// process releases nothing: its restart takes the other worker ID.
func TestSnowflake_RestartReusesWorkerID(t *testing.T) {
	dir, bin, url := snowflakeSetup(t, "ids.db")
	p := snowflakeProcs(t, bin, url, dir, "restarted")[0]
	c := checker.New()
	epoch := int64(0)
	for round := range 3 {
		p.start(t)
		st := waitState(t, p, "worker id 0", workerIs(0))
		if st.Epoch != epoch+1 {
			t.Fatalf("round %d: epoch %d, want %d", round, st.Epoch, epoch+1)
		}
		epoch = st.Epoch
		k := collect(p, c, "restarted") // one client: the process's order across restarts
		k.waitIDs(t, 2000)
		k.halt()
		p.stop(t, syscall.SIGTERM)
	}
	p.start(t)
	waitState(t, p, "worker id 0", workerIs(0))
	k := collect(p, c, "restarted")
	k.waitIDs(t, 2000)
	k.halt()
	p.stop(t, syscall.SIGKILL)
	p.start(t)
	waitState(t, p, "worker id 1 (0 is still leased by the killed process)", workerIs(1))
	k = collect(p, c, "after-kill")
	k.waitIDs(t, 2000)
	k.halt()
	p.stop(t, syscall.SIGTERM)
	if r := c.Report(); !r.Valid() || r.IDs() < 10_000 {
		t.Fatalf("%s", r)
	}
}

// TestDrill_Snowflake runs `idmint drill --snowflake` against two serving
// processes on one SQLite file: every acknowledged Snowflake ID goes through
// the checker, one at a time and in batches.
func TestDrill_Snowflake(t *testing.T) {
	dir := t.TempDir()
	a, _ := startServe(t, "--data-dir", dir)
	b, _ := startServe(t, "--data-dir", dir)
	for _, count := range []string{"1", "50"} {
		out := idmint(t, "drill", "--target", a, "--target", b, "--snowflake", "--duration", "1s", "--concurrency", "4", "--count", count)
		if !strings.Contains(out, "biz_tag (snowflake): ") || !strings.Contains(out, " 0 duplicates") || !strings.Contains(out, "valid: no duplicates") {
			t.Fatalf("drill --count %s:\n%s", count, out)
		}
	}
}

func TestSnowflakeParse(t *testing.T) {
	out := idmint(t, "snowflake", "parse", "4214791", "--snowflake-bits", "41/10/12", "--snowflake-epoch", "2025-01-01T00:00:00Z")
	var p wire.ParsedSnowflake
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// 4214791 = 1<<22 | 5<<12 | 7: 1 ms after the epoch, worker 5, sequence 7.
	if p.ID != 4214791 || p.WorkerID != 5 || p.Sequence != 7 || p.UnixMS != snowflake.DefaultEpoch.UnixMilli()+1 {
		t.Fatalf("parse: %+v", p)
	}
	var stderr strings.Builder
	for _, args := range [][]string{
		{"snowflake", "parse", "0"},
		{"snowflake", "parse", "x"},
		{"snowflake", "parse", "1", "--snowflake-bits", "41/10/13"},
		{"snowflake", "parse", "1", "--snowflake-epoch", "yesterday"},
		{"snowflake", "parse"},
		{"snowflake"},
	} {
		if err := run(context.Background(), args, io.Discard, &stderr); err == nil {
			t.Errorf("idmint %s: no error", strings.Join(args, " "))
		}
	}
}

// TestServe_SnowflakeLayoutMismatch: an instance with another layout than
// the one recorded in the database refuses to start.
func TestServe_SnowflakeLayoutMismatch(t *testing.T) {
	dir := t.TempDir()
	_, stop := startServe(t, "--data-dir", dir)
	stop()
	var stderr strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := run(ctx, []string{"serve", "--data-dir", dir, "--listen", testutil.FreeAddr(t), "--snowflake-bits", "42/9/12"}, io.Discard, &stderr)
	if err == nil || !errors.Is(err, snowflake.ErrLayoutMismatch) {
		t.Fatalf("serve with another layout: %v\n%s", err, stderr.String())
	}
	if err := run(ctx, []string{"serve", "--data-dir", dir, "--snowflake-bits", "41/10/13"}, io.Discard, &stderr); err == nil {
		t.Fatal("serve with bits summing to 64 started")
	}
}

// TestSnowflake_Chaos runs four real processes on two worker IDs (so half
// of them wait for one) while a seeded chaos loop pauses one past its lease
// (SIGSTOP, SIGCONT), kills one (SIGKILL) or stops one (SIGTERM) and starts
// it again. Two clients per process ask for IDs all along, each from one
// process (restarts included); every acknowledged ID goes through the
// checker: no duplicate, and each client's IDs increase.
func TestSnowflake_Chaos(t *testing.T) {
	dir, bin, url := snowflakeSetup(t, "")
	names := []string{"p0", "p1", "p2", "p3"}
	procs := snowflakeProcs(t, bin, url, dir, names...)
	for _, p := range procs {
		p.start(t)
	}
	c := checker.New()
	var collectors []*collector
	for i, p := range procs {
		for j := range 2 {
			collectors = append(collectors, collect(p, c, fmt.Sprintf("%s-client%d", names[i], j)))
		}
	}
	rng := rand.New(rand.NewPCG(11, 0))
	var events []string
	for range 6 {
		p := procs[rng.IntN(len(procs))]
		switch kind := rng.IntN(3); kind {
		case 0:
			p.cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(2500 * time.Millisecond) // past the 2 s lease
			p.cmd.Process.Signal(syscall.SIGCONT)
			events = append(events, p.instance+" paused")
		case 1, 2:
			sig := map[int]syscall.Signal{1: syscall.SIGKILL, 2: syscall.SIGTERM}[kind]
			p.stop(t, sig)
			p.start(t)
			events = append(events, fmt.Sprintf("%s %v and restarted", p.instance, sig))
		}
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
	}
	// After the chaos, both worker IDs are held and serve again: the
	// clients of their holders get IDs.
	deadline := time.Now().Add(20 * time.Second)
	for {
		serving := 0
		for i, p := range procs {
			if st := snowflakeState(t, p); st.Serving {
				serving++
				collectors[2*i].waitIDs(t, 100)
			}
		}
		if serving == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d processes serve after the chaos, want 2", serving)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, k := range collectors {
		k.halt()
	}
	for _, p := range procs {
		p.stop(t, syscall.SIGTERM)
	}
	r := c.Report()
	t.Logf("events: %v\n%s", events, r)
	if !r.Valid() || r.IDs() < 10_000 {
		t.Fatalf("want valid, at least 10,000 ids:\n%s", r)
	}
}
