package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator/sqlite"
	"github.com/idmint/idmint/testkit/testutil"
)

// process is one idmint binary serving on a loopback port.
type process struct {
	bin, url, addr, instance, logPath string
	args                              []string // more serve flags, after the others: they win
	env                               []string // more environment, after the test's own
	cmd                               *exec.Cmd
	gen                               atomic.Int64 // restarts so far; clients read it
}

func (p *process) start(tb testing.TB) {
	tb.Helper()
	logs, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	defer logs.Close()
	p.cmd = exec.Command(p.bin, "serve", "--database-url", p.url, "--listen", p.addr, "--instance", p.instance,
		"--log-format", "json", "--access-log=false", "--wait-timeout", "5s")
	p.cmd.Args = append(p.cmd.Args, p.args...)
	if len(p.env) > 0 {
		p.cmd.Env = append(os.Environ(), p.env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = logs, logs
	if err := p.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	cmd := p.cmd
	tb.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + p.addr + "/id/health")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			logs, _ := os.ReadFile(p.logPath)
			tb.Fatalf("%s did not come up: %v\n%s", p.instance, err, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the process with sig and waits for it.
func (p *process) stop(tb testing.TB, sig os.Signal) {
	tb.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		tb.Fatal(err)
	}
	p.cmd.Wait()
}

// TestMultiProcess_SQLite runs several real idmint processes on one SQLite
// file with a step of 10, takes 100,000 IDs from them over HTTP at once,
// SIGKILLs one midway and starts it again: no ID may come out twice.
func TestMultiProcess_SQLite(t *testing.T) {
	const (
		processes = 3
		clients   = 4 // per process
		total     = 100_000
		killAt    = total / 3
	)
	dir := t.TempDir()
	bin := filepath.Join(dir, "idmint")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dbPath := filepath.Join(dir, "ids.db")
	url := "sqlite://" + dbPath
	idmint(t, "tag", "create", "order", "--step", "10", "--max-step", "10", "--database-url", url)

	procs := make([]*process, processes)
	for i := range procs {
		procs[i] = &process{bin: bin, url: url, addr: testutil.FreeAddr(t), instance: fmt.Sprint("p", i), logPath: filepath.Join(dir, fmt.Sprint("p", i, ".log"))}
		procs[i].start(t)
	}

	// Each client asks its process for one ID at a time, retrying while the
	// process is down or answers 503, until total IDs are taken.
	type got struct {
		id        int64
		proc, gen int64 // the process that answered, and its restarts before
	}
	var (
		taken                atomic.Int64
		refused, unavailable atomic.Int64 // failed requests: no answer, an HTTP error
		results              = make([][]got, processes*clients)
		killed               = make(chan struct{})
		wg                   sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute) // generous: a bound for a failure, on a loaded machine
	defer cancel()
	httpc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	begin := time.Now()
	for c := range results {
		p := procs[c%processes]
		wg.Go(func() {
			for ctx.Err() == nil && taken.Load() < total {
				gen := p.gen.Load() // before the request: a restart comes after a kill
				id, answered, err := fetchID(ctx, httpc, "http://"+p.addr+"/id?biz_tag=order")
				if err != nil {
					if answered {
						unavailable.Add(1)
					} else {
						refused.Add(1)
					}
					time.Sleep(5 * time.Millisecond)
					continue
				}
				results[c] = append(results[c], got{id, int64(c % processes), gen})
				if taken.Add(1) == killAt {
					close(killed)
				}
			}
		})
	}

	// SIGKILL p0 mid-run: no graceful give-back, its buffered IDs are lost.
	select {
	case <-killed:
	case <-ctx.Done():
		logs, _ := os.ReadFile(procs[0].logPath)
		t.Fatalf("timed out before the kill: %d ids, %d+%d failures\n%s", taken.Load(), refused.Load(), unavailable.Load(), tail(logs, 3000))
	}
	victim := procs[0]
	victim.stop(t, syscall.SIGKILL)
	killedAt := time.Since(begin)
	victim.gen.Add(1)
	victim.instance = "p0-restarted"
	victim.start(t)

	wg.Wait()
	elapsed := time.Since(begin)
	if ctx.Err() != nil {
		t.Fatalf("timed out with %d ids taken", taken.Load())
	}
	for _, p := range procs {
		p.stop(t, syscall.SIGTERM)
	}

	seen := make(map[int64]got, total)
	servedByVictim := 0
	for c, ids := range results {
		for j, g := range ids {
			if other, dup := seen[g.id]; dup {
				t.Fatalf("DUPLICATE id %d from p%d (restart %d) and p%d (restart %d)", g.id, other.proc, other.gen, g.proc, g.gen)
			}
			seen[g.id] = g
			if j > 0 && g.id <= ids[j-1].id {
				t.Errorf("client %d: id %d after %d", c, g.id, ids[j-1].id)
			}
			if g.proc == 0 && g.gen == 0 {
				servedByVictim++
			}
		}
	}

	store, err := sqlite.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var maxID, grantedToVictim int64
	if err := store.DB().QueryRow(`SELECT max_id FROM idmint_tags WHERE biz_tag = 'order'`).Scan(&maxID); err != nil {
		t.Fatal(err)
	}
	if err := store.DB().QueryRow(`SELECT COALESCE(SUM(last_id - first_id + 1), 0) FROM idmint_segments WHERE instance = 'p0'`).Scan(&grantedToVictim); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d ids from %d processes x %d clients over HTTP in %v (%.0f ids/s), 0 duplicates; retried %d requests without an answer, %d answered with an error",
		len(seen), processes, clients, elapsed.Round(time.Millisecond), float64(len(seen))/elapsed.Seconds(), refused.Load(), unavailable.Load())
	t.Logf("p0 SIGKILLed at %v after %d ids: granted %d, served %d: gap %d ids; max_id %d, total gap %d",
		killedAt.Round(time.Millisecond), killAt, grantedToVictim, servedByVictim, grantedToVictim-int64(servedByVictim), maxID, maxID-int64(len(seen)))
}

// fetchID asks for one ID as text. answered reports whether the server
// answered at all.
func fetchID(ctx context.Context, c *http.Client, url string) (id int64, answered bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := c.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, true, fmt.Errorf("%s: %s", resp.Status, body)
	}
	id, err = strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64)
	return id, true, err
}

// tail returns the last n bytes of b.
func tail(b []byte, n int) []byte { return b[max(0, len(b)-n):] }
