package faults_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator/sqlite"
	"github.com/idmint/idmint/testkit/servetest"
)

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
	if testing.Short() {
		t.Skip("real processes")
	}
	dir := t.TempDir()
	bin := servetest.Build(t)
	dbPath := filepath.Join(dir, "ids.db")
	url := "sqlite://" + dbPath
	servetest.Run(t, bin, "tag", "create", "order", "--step", "10", "--max-step", "10", "--database-url", url)

	procs := make([]*servetest.Process, processes)
	gens := make([]atomic.Int64, processes) // each process's restarts so far; clients read it
	for i := range procs {
		procs[i] = &servetest.Process{Bin: bin, DatabaseURL: url, Instance: fmt.Sprint("p", i), LogPath: filepath.Join(dir, fmt.Sprint("p", i, ".log")),
			Args: []string{"--wait-timeout", "5s"}}
		procs[i].Start(t)
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
		p, gen := procs[c%processes], &gens[c%processes]
		wg.Go(func() {
			for ctx.Err() == nil && taken.Load() < total {
				gen := gen.Load() // before the request: a restart comes after a kill
				id, answered, err := servetest.FetchID(ctx, httpc, p.Base()+"/id?biz_tag=order")
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
		t.Fatalf("timed out before the kill: %d ids, %d+%d failures\n%s", taken.Load(), refused.Load(), unavailable.Load(), procs[0].LogTail(3000))
	}
	victim := procs[0]
	victim.Stop(t, syscall.SIGKILL)
	killedAt := time.Since(begin)
	gens[0].Add(1)
	victim.Instance = "p0-restarted"
	victim.Start(t)

	wg.Wait()
	elapsed := time.Since(begin)
	if ctx.Err() != nil {
		t.Fatalf("timed out with %d ids taken", taken.Load())
	}
	for _, p := range procs {
		p.Stop(t, syscall.SIGTERM)
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
