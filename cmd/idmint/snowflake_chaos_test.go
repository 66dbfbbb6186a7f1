package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/testkit/testutil"
)

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
		"--snowflake-margin", "50ms", "--snowflake-renew-every", "150ms"}
	var procs []*process
	for i := range 6 {
		name := fmt.Sprintf("a%d", i)
		p := &process{bin: bin, url: url, addr: testutil.FreeAddr(t), instance: name, logPath: filepath.Join(dir, name+".log"), args: flags}
		p.start(t)
		procs = append(procs, p)
	}
	c := checker.New()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := 0
	for i, p := range procs {
		for j := range 2 {
			client := fmt.Sprintf("%s-c%d", p.instance, j)
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
					ids, err := fetchIDs(context.Background(), hc, "http://"+p.addr, snowflakeTag, n)
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
			p.cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(d)
			p.cmd.Process.Signal(syscall.SIGCONT)
			events = append(events, fmt.Sprintf("%s paused %v", p.instance, d))
		case 2:
			p.cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
			p.stop(t, syscall.SIGKILL)
			p.start(t)
			events = append(events, p.instance+" paused, killed, restarted")
		case 3:
			p.stop(t, syscall.SIGTERM)
			p.start(t)
			events = append(events, p.instance+" termed, restarted")
		}
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // the last paused or killed worker id changes hands
	close(stop)
	wg.Wait()
	for _, p := range procs {
		p.stop(t, syscall.SIGTERM)
	}
	r := c.Report()
	t.Logf("seed %d, %d events, %d ids: %v\n%s", seed, len(events), acked, events, r)
	if !r.Valid() || r.IDs() < 100_000 {
		t.Fatalf("want valid, at least 100,000 ids:\n%s", r)
	}
}
