package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/segment"
)

// TestAbuse drives slow bodies, made-up tags and a batch flood at one
// instance on real PostgreSQL, in the token mode with a per-token limit, and
// checks that the limits hold while a legitimate caller keeps a good share
// of the throughput it had alone, without a duplicate.
func TestAbuse(t *testing.T) {
	if testing.Short() {
		t.Skip("abuse run: seconds of load")
	}
	store := stores(t)["postgres"](t)
	ctx := context.Background()
	if _, err := store.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 1000}); err != nil {
		t.Fatal(err)
	}
	// IDs per second per token, for every token: the legitimate caller
	// runs at it or below (the race detector slows the server to a few
	// thousand IDs/s), the flood is held to it.
	const perToken = 2000
	a := allocator.New(allocator.Config{Store: store, Logger: testlog.Discard(),
		Segment: segment.Config{LoadTimeout: 5 * time.Second, WaitTimeout: 5 * time.Second}})
	t.Cleanup(func() { a.Close(context.Background()) })
	api := httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(), MaxCount: 1000,
		Auth:   httpapi.AuthConfig{Tokens: store, IDs: httpapi.AuthToken},
		Limits: httpapi.Limits{IDsPerSecondPerToken: perToken, ReadTimeout: time.Second, ReadHeaderTimeout: time.Second}})
	srv := api.HTTPServer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	base := "http://" + ln.Addr().String()
	_, legit := newToken(t, store, "legit", "ids:order")
	_, flood := newToken(t, store, "flood", "ids")
	_, scanner := newToken(t, store, "scanner", "ids")
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	call := func(path, bearer string) (int, []byte) {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+bearer)
		resp, err := hc.Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}

	var seenMu sync.Mutex
	seen := map[string]bool{}
	dups := 0
	// legitimate asks /ids?count=10 one after another for d and returns
	// the IDs it got per second.
	legitimate := func(d time.Duration) float64 {
		n := 0
		start := time.Now()
		for time.Since(start) < d {
			status, body := call("/ids?biz_tag=order&count=10", legit)
			if status != 200 {
				continue
			}
			var r struct{ IDs []string }
			json.Unmarshal(body, &r)
			seenMu.Lock()
			for _, id := range r.IDs {
				if seen[id] {
					dups++
				}
				seen[id] = true
			}
			seenMu.Unlock()
			n += len(r.IDs)
		}
		return float64(n) / time.Since(start).Seconds()
	}
	alone := legitimate(2 * time.Second)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Slow bodies: 100 connections that declare a body and send one byte.
	var slowClosed atomic.Int64
	for range 100 {
		wg.Go(func() {
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				return
			}
			defer conn.Close()
			fmt.Fprintf(conn, "GET /id?biz_tag=order HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100000\r\n\r\na", legit)
			conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			if _, err := io.Copy(io.Discard, conn); err == nil {
				slowClosed.Add(1) // EOF: the server hung up
			}
		})
	}
	// Made-up tags: every request a new name.
	var madeUp, madeUp404 atomic.Int64
	readsBefore := a.CatalogReads()
	for g := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				status, _ := call(fmt.Sprintf("/id?biz_tag=fake-%d-%d", g, i), scanner)
				madeUp.Add(1)
				// 404, or 429 once the scanner's token has used its
				// allowance: either way the name never reaches the store.
				if status == 404 || status == 429 {
					madeUp404.Add(1)
				}
			}
		})
	}
	// Batch flood: the largest batches, as fast as they come.
	var floodIDs, flood429 atomic.Int64
	floodStart := time.Now()
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				status, body := call("/ids?biz_tag=order&count=1000", flood)
				switch status {
				case 200:
					var r struct{ IDs []string }
					json.Unmarshal(body, &r)
					floodIDs.Add(int64(len(r.IDs)))
				case 429:
					flood429.Add(1)
				}
			}
		})
	}
	during := legitimate(3 * time.Second)
	readsDuring := a.CatalogReads() - readsBefore
	floodElapsed := time.Since(floodStart)
	close(stop)
	wg.Wait()

	t.Logf("legitimate caller: %.0f ids/s alone, %.0f ids/s under abuse (%.0f%%)", alone, during, 100*during/alone)
	t.Logf("made-up tags: %d requests, %d answered 404 or 429, %d catalog reads", madeUp.Load(), madeUp404.Load(), readsDuring)
	t.Logf("flood: %d ids taken, %d requests refused (429) in %v", floodIDs.Load(), flood429.Load(), floodElapsed.Round(time.Millisecond))
	t.Logf("slow bodies: %d of 100 connections closed by the server", slowClosed.Load())

	if dups != 0 {
		t.Fatalf("%d duplicate ids", dups)
	}
	if slowClosed.Load() != 100 {
		t.Errorf("%d of 100 slow connections closed by the server", slowClosed.Load())
	}
	if madeUp.Load() == 0 || madeUp404.Load() != madeUp.Load() {
		t.Errorf("made-up tags: %d of %d answered 404 or 429", madeUp404.Load(), madeUp.Load())
	}
	// The catalog is read at most once per interval (500ms) however many
	// names come; 3 s of flood allows 7, with slack for the edges.
	if max := int64(floodElapsed/(500*time.Millisecond)) + 3; readsDuring > max {
		t.Errorf("made-up tags read the catalog %d times in %v, want at most %d", readsDuring, floodElapsed, max)
	}
	// The flood gets its budget (burst + rate), never more.
	if max := int64(perToken + perToken*floodElapsed.Seconds() + 1000); floodIDs.Load() > max || flood429.Load() == 0 {
		t.Errorf("flood took %d ids (limit %d) with %d refusals", floodIDs.Load(), max, flood429.Load())
	}
	// Four attackers and the caller share two cores in this process, so
	// the caller's fair share of the CPU is a fifth; the limits must keep
	// it near that, not starve it.
	if during < alone/8 {
		t.Errorf("the legitimate caller fell from %.0f to %.0f ids/s under abuse", alone, during)
	}
	s, body := call("/metrics", flood) // monitoring is open in this setup
	if n := metricValue(body, `idmint_http_refused_total{code="rate_limited"}`); s != 200 || n < flood429.Load() {
		t.Errorf("/metrics counts %d refusals, want at least the flood's %d", n, flood429.Load())
	}
}

// metricValue returns the value of the sample named name (labels included)
// in a Prometheus text exposition, -1 if absent.
func metricValue(body []byte, name string) int64 {
	for line := range strings.Lines(string(body)) {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return int64(n)
			}
		}
	}
	return -1
}
