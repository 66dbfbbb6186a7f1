package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/servetest"
	"github.com/idmint/idmint/testkit/snowtest"
	"github.com/idmint/idmint/testkit/testutil"
	"github.com/idmint/idmint/wire"
)

// Snowflake flags of the process tests: two worker IDs, a 2 s lease.
var snowflakeFlags = []string{"--snowflake-bits", "50/1/12", "--snowflake-lease-ttl", "2s",
	"--snowflake-margin", "200ms", "--snowflake-renew-every", "300ms", "--wait-timeout", "5s"}

// snowflakeSetup builds idmint and migrates a fresh PostgreSQL database, or
// the SQLite file at sqlitePath when it is not empty. It returns the work
// directory, the binary and the database URL.
func snowflakeSetup(t *testing.T, sqlitePath string) (dir, bin, url string) {
	t.Helper()
	if testing.Short() {
		t.Skip("real processes")
	}
	dir = t.TempDir()
	bin = servetest.Build(t)
	if sqlitePath != "" {
		url = "sqlite://" + filepath.Join(dir, sqlitePath)
	} else {
		url = pgtest.Shared(t).NewDatabase(t)
	}
	servetest.Run(t, bin, "migrate", "--database-url", url)
	return dir, bin, url
}

// snowflakeProcs makes n processes (not started) on one database.
func snowflakeProcs(tb testing.TB, bin, url, dir string, names ...string) []*servetest.Process {
	procs := make([]*servetest.Process, len(names))
	for i, name := range names {
		procs[i] = &servetest.Process{Bin: bin, DatabaseURL: url, Instance: name,
			LogPath: filepath.Join(dir, name+".log"), Args: snowflakeFlags}
	}
	return procs
}

// snowflakeState reads the snowflake part of a process's /id/health.
func snowflakeState(tb testing.TB, p *servetest.Process) httpapi.SnowflakeHealth {
	tb.Helper()
	var h httpapi.Health
	// 503 is a valid answer too: a process woken from a pause may find its
	// database connections dead and report itself unavailable for a moment;
	// the body still says how its Snowflake generator is doing.
	if code := testutil.GetJSON(tb, p.Base()+"/id/health", &h); (code != http.StatusOK && code != http.StatusServiceUnavailable) || h.Snowflake == nil {
		tb.Fatalf("%s /id/health: %d %+v", p.Instance, code, h)
	}
	return *h.Snowflake
}

// waitState polls p's snowflake health until cond holds, for at most 20 s.
func waitState(tb testing.TB, p *servetest.Process, what string, cond func(httpapi.SnowflakeHealth) bool) httpapi.SnowflakeHealth {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := snowflakeState(tb, p)
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: timed out waiting for %s; last state %+v\n%s", p.Instance, what, st, p.LogTail(3000))
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
	p      *servetest.Process
	c      *checker.Checker
	client string
	httpc  *http.Client
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex // protects ids
	ids    []int64
}

func collect(p *servetest.Process, c *checker.Checker, client string) *collector {
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
		id, _, err := servetest.FetchID(ctx, k.httpc, k.p.Base()+"/snowflake")
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
	paused.Start(t)
	waitState(t, paused, "worker id 0", workerIs(0))
	steady.Start(t)
	waitState(t, steady, "worker id 1", workerIs(1))

	c := checker.New()
	kPaused, kSteady := collect(paused, c, "paused"), collect(steady, c, "steady")
	kPaused.waitIDs(t, 500)
	kSteady.waitIDs(t, 500)

	if err := paused.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			paused.Cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	pausedBefore := kPaused.count()

	successor.Start(t)
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

	if err := paused.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
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
		p, _ := snowtest.TwoWorkers.Parse(id)
		if p.Worker != 0 {
			t.Fatalf("paused process issued worker %d's id %d", p.Worker, id)
		}
		lastPaused = max(lastPaused, p.UnixMilli)
	}
	for _, id := range successorIDs {
		if p, _ := snowtest.TwoWorkers.Parse(id); p.Worker != 0 || p.UnixMilli <= lastPaused {
			t.Fatalf("successor id %d (%+v) not after the paused process's last millisecond %d", id, p, lastPaused)
		}
	}
	for _, p := range procs {
		p.Stop(t, syscall.SIGTERM)
	}
}

// TestSnowflake_RaceForTheLastWorkerID starts two processes at once when one
// worker ID is left: exactly one serves, the other answers 503
// snowflake_no_worker and keeps trying, and takes the worker ID when the
// winner shuts down (releasing it).
func TestSnowflake_RaceForTheLastWorkerID(t *testing.T) {
	dir, bin, url := snowflakeSetup(t, "")
	procs := snowflakeProcs(t, bin, url, dir, "first", "racer-a", "racer-b")
	procs[0].Start(t)
	waitState(t, procs[0], "worker id 0", workerIs(0))
	var wg sync.WaitGroup
	for _, p := range procs[1:] {
		wg.Go(func() { p.Start(t) })
	}
	wg.Wait()
	// Both are up; each has made its first attempt.
	var winner, loser *servetest.Process
	for _, p := range procs[1:] {
		st := waitState(t, p, "a first lease attempt", func(st httpapi.SnowflakeHealth) bool { return st.Serving || st.LastError != "" })
		if st.Serving {
			if winner != nil {
				t.Fatalf("both racers serve: %s and %s", winner.Instance, p.Instance)
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
	if _, answered, err := servetest.FetchID(context.Background(), http.DefaultClient, loser.Base()+"/snowflake"); !answered || err == nil ||
		!strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), wire.CodeSnowflakeNoWorker) {
		t.Fatalf("loser's /snowflake: %v", err)
	}
	if _, _, err := servetest.FetchID(context.Background(), http.DefaultClient, winner.Base()+"/snowflake"); err != nil {
		t.Fatal(err)
	}
	winner.Stop(t, syscall.SIGTERM)
	waitState(t, loser, "the released worker id", workerIs(1))
	procs[0].Stop(t, syscall.SIGTERM)
	loser.Stop(t, syscall.SIGTERM)
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
		p.Start(t)
		st := waitState(t, p, "worker id 0", workerIs(0))
		if st.Epoch != epoch+1 {
			t.Fatalf("round %d: epoch %d, want %d", round, st.Epoch, epoch+1)
		}
		epoch = st.Epoch
		k := collect(p, c, "restarted") // one client: the process's order across restarts
		k.waitIDs(t, 2000)
		k.halt()
		p.Stop(t, syscall.SIGTERM)
	}
	p.Start(t)
	waitState(t, p, "worker id 0", workerIs(0))
	k := collect(p, c, "restarted")
	k.waitIDs(t, 2000)
	k.halt()
	p.Stop(t, syscall.SIGKILL)
	p.Start(t)
	waitState(t, p, "worker id 1 (0 is still leased by the killed process)", workerIs(1))
	k = collect(p, c, "after-kill")
	k.waitIDs(t, 2000)
	k.halt()
	p.Stop(t, syscall.SIGTERM)
	if r := c.Report(); !r.Valid() || r.IDs() < 10_000 {
		t.Fatalf("%s", r)
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
		p.Start(t)
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
			p.Cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(2500 * time.Millisecond) // past the 2 s lease
			p.Cmd.Process.Signal(syscall.SIGCONT)
			events = append(events, p.Instance+" paused")
		case 1, 2:
			sig := map[int]syscall.Signal{1: syscall.SIGKILL, 2: syscall.SIGTERM}[kind]
			p.Stop(t, sig)
			p.Start(t)
			events = append(events, fmt.Sprintf("%s %v and restarted", p.Instance, sig))
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
		p.Stop(t, syscall.SIGTERM)
	}
	r := c.Report()
	t.Logf("events: %v\n%s", events, r)
	if !r.Valid() || r.IDs() < 10_000 {
		t.Fatalf("want valid, at least 10,000 ids:\n%s", r)
	}
}

// TestSnowflake_ChaosOneWorkerBit: six real processes on one worker-id bit
// (two worker ids, so four processes wait), a 1 s lease with a 50 ms
// margin, for 20 s: pauses drawn across the lease's end (700 ms to 1.4 s),
// processes killed while paused, killed or stopped and started again.
// Clients ask each process for single IDs and for batches of various sizes;
// every acknowledged ID goes through the checker: no duplicate, each
// client's IDs increase. The seed is IDMINT_CHAOS_SEED (default 0), the
// database PostgreSQL, or the SQLite file IDMINT_CHAOS_SQLITE names.
func TestSnowflake_ChaosOneWorkerBit(t *testing.T) {
	seed, _ := strconv.ParseUint(os.Getenv("IDMINT_CHAOS_SEED"), 10, 64)
	dir, bin, url := snowflakeSetup(t, os.Getenv("IDMINT_CHAOS_SQLITE"))
	flags := []string{"--snowflake-bits", "50/1/12", "--snowflake-lease-ttl", "1s",
		"--snowflake-margin", "50ms", "--snowflake-renew-every", "150ms", "--wait-timeout", "5s"}
	var procs []*servetest.Process
	for i := range 6 {
		name := fmt.Sprintf("a%d", i)
		p := &servetest.Process{Bin: bin, DatabaseURL: url, Instance: name, LogPath: filepath.Join(dir, name+".log"), Args: flags}
		p.Start(t)
		procs = append(procs, p)
	}
	c := checker.New()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := 0
	for i, p := range procs {
		for j := range 2 {
			client := fmt.Sprintf("%s-c%d", p.Instance, j)
			n := 1
			if j == 1 {
				n = 1 + i*97
			}
			wg.Go(func() {
				hc := &http.Client{Timeout: 10 * time.Second}
				for {
					select {
					case <-stop:
						return
					default:
					}
					ids, err := fetchSnowflakes(hc, p, n)
					if err != nil {
						time.Sleep(5 * time.Millisecond)
						continue
					}
					for _, id := range ids {
						c.Ack(client, "snowflake", id)
					}
					mu.Lock()
					acked += len(ids)
					mu.Unlock()
				}
			})
		}
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	var events []string
	end := time.Now().Add(20 * time.Second)
	for time.Now().Before(end) {
		p := procs[rng.IntN(len(procs))]
		switch rng.IntN(4) {
		case 0, 1:
			d := time.Duration(700+rng.IntN(700)) * time.Millisecond
			p.Cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(d)
			p.Cmd.Process.Signal(syscall.SIGCONT)
			events = append(events, fmt.Sprintf("%s paused %v", p.Instance, d))
		case 2:
			p.Cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
			p.Stop(t, syscall.SIGKILL)
			p.Start(t)
			events = append(events, p.Instance+" paused, killed, restarted")
		case 3:
			p.Stop(t, syscall.SIGTERM)
			p.Start(t)
			events = append(events, p.Instance+" termed, restarted")
		}
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // the last paused or killed worker id changes hands
	close(stop)
	wg.Wait()
	for _, p := range procs {
		p.Stop(t, syscall.SIGTERM)
	}
	r := c.Report()
	t.Logf("seed %d, %d events, %d ids: %v\n%s", seed, len(events), acked, events, r)
	if !r.Valid() || r.IDs() < 100_000 {
		t.Fatalf("want valid, at least 100,000 ids:\n%s", r)
	}
}

// fetchSnowflakes asks p for n Snowflake IDs: /snowflake for one,
// /snowflakes?count=n for more.
func fetchSnowflakes(hc *http.Client, p *servetest.Process, n int) ([]int64, error) {
	if n == 1 {
		id, _, err := servetest.FetchID(context.Background(), hc, p.Base()+"/snowflake")
		return []int64{id}, err
	}
	ids, _, err := servetest.FetchIDs(context.Background(), hc, p.Base()+"/snowflakes?count="+strconv.Itoa(n))
	return ids, err
}
