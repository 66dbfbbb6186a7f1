package faults_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/snowtest"
	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/lease"
	"github.com/idmint/idmint/snowflake"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/testutil"
	"github.com/idmint/idmint/testkit/toxic"
	"github.com/idmint/idmint/wire"
)

// oneWorkerBit has worker IDs 0 and 1 only: a worker ID given up is the
// one taken again.
var oneWorkerBit = snowtest.TwoWorkers

// snowflakeAt starts a Snowflake node on the leases of the database at
// dbURL, behind the real HTTP server.
func snowflakeAt(t *testing.T, dbURL, holder string, ttl time.Duration) (*snowflake.Node, *httptest.Server) {
	t.Helper()
	node := snowtest.Start(t, snowflake.Config{Layout: oneWorkerBit, Store: lease.NewPostgres(pgstore.Open(t, dbURL).Pool()),
		Holder: holder, TTL: ttl, RenewEvery: ttl / 10, Margin: 200 * time.Millisecond})
	api := httptest.NewServer(httpapi.NewServer(httpapi.Config{
		Allocator: newInstance(t, memstore.New(), holder, nil), Snowflake: node, Logger: testlog.Discard()}))
	t.Cleanup(api.Close)
	return node, api
}

// snowflakeReply is one answer of /snowflakes: the IDs, or the error code.
type snowflakeReply struct {
	sent, got time.Time
	ids       []int64
	code      string
}

func getSnowflakes(client *http.Client, url string) (snowflakeReply, error) {
	r := snowflakeReply{sent: time.Now()}
	resp, err := client.Get(url + "/snowflakes?count=10")
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	r.got = time.Now()
	var body struct {
		IDs   []string `json:"ids"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return r, fmt.Errorf("status %d: %w", resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK {
		r.code = body.Error.Code
		if resp.StatusCode != http.StatusServiceUnavailable || r.code == "" {
			return r, fmt.Errorf("status %d, code %q", resp.StatusCode, r.code)
		}
		return r, nil
	}
	for _, s := range body.IDs {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return r, err
		}
		r.ids = append(r.ids, id)
	}
	return r, nil
}

func snowflakeHealth(tb testing.TB, client *http.Client, url string) httpapi.SnowflakeHealth {
	tb.Helper()
	resp, err := client.Get(url + "/id/health")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var h httpapi.Health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		tb.Fatal(err)
	}
	if h.Snowflake == nil {
		tb.Fatal("no snowflake in /id/health")
	}
	return *h.Snowflake
}

// TestSnowflake_OutagePastLeaseWindow: the database goes away from an
// instance (blackholed) for longer than its worker lease. It serves until
// the lease window ends while /id/health counts down the time left, then
// refuses with 503 snowflake_lease_expired and no ID past the window's end;
// when the database is back it serves again under a new lease of the same
// worker ID (a new epoch) whose IDs all come after the old lease's. No ID
// twice.
func TestSnowflake_OutagePastLeaseWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("outage")
	}
	const ttl = 3 * time.Second
	dbURL := pgstore.NewDatabase(t, pgtest.Shared(t))
	px := toxic.New(t, dbURL)
	node, api := snowflakeAt(t, px.URL, "cut", ttl)
	// Another instance holds the other worker ID: back online, the cut
	// one can only lease its own again, once it expired.
	other, _ := snowflakeAt(t, dbURL, "other", ttl)
	if node.Stats().Worker != 0 || other.Stats().Worker != 1 {
		t.Fatalf("workers: cut %d, other %d", node.Stats().Worker, other.Stats().Worker)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	c := checker.New()

	var (
		mu      sync.Mutex
		replies []snowflakeReply
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	for w := range 2 {
		wg.Go(func() {
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				c.Attempt()
				r, err := getSnowflakes(client, api.URL)
				switch {
				case err != nil:
					c.Fail(err)
					t.Error(err)
					return
				case r.code != "":
					c.Fail(fmt.Errorf("%s", r.code))
				default:
					c.Ack(fmt.Sprint("client-", w), "snowflake", r.ids...)
				}
				mu.Lock()
				replies = append(replies, r)
				mu.Unlock()
			}
		})
	}
	halt := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	defer halt()

	renewed := node.Stats().Renewals
	testutil.Eventually(t, 10*time.Second, "a renewal before the outage", func() bool { return node.Stats().Renewals > renewed })
	before := snowflakeHealth(t, client, api.URL)
	px.Cut(t)
	cutAt := time.Now()

	// The time left counts down, live, while the lease cannot be renewed.
	first := snowflakeHealth(t, client, api.URL)
	if !first.Serving || first.WindowRemainingMS <= 0 || first.WindowRemainingMS > float64(ttl.Milliseconds()) {
		t.Fatalf("/id/health right after the cut: %+v", first)
	}
	testutil.Eventually(t, ttl, "window_remaining_ms to count down", func() bool {
		h := snowflakeHealth(t, client, api.URL)
		return h.Serving && h.WindowRemainingMS < first.WindowRemainingMS
	})
	testutil.Eventually(t, 2*ttl, "the window to end", func() bool {
		return snowflakeHealth(t, client, api.URL).State == wire.CodeSnowflakeLeaseExpired
	})
	ended := snowflakeHealth(t, client, api.URL)
	if ended.Serving || ended.WindowRemainingMS != 0 || ended.WindowEnd == nil || ended.Epoch != before.Epoch {
		t.Fatalf("/id/health once the window ended: %+v", ended)
	}
	windowEnd := ended.WindowEnd.UnixMilli()
	// Past the lease's expiry in the database too: the worker ID can be
	// leased again.
	testutil.Eventually(t, 3*ttl, "the lease to expire", func() bool { return time.Since(cutAt) > ttl+500*time.Millisecond })
	px.Heal(t)
	healAt := time.Now()
	testutil.Eventually(t, 4*ttl, "a new lease", func() bool {
		h := snowflakeHealth(t, client, api.URL)
		return h.Serving && h.Epoch > before.Epoch
	})
	testutil.Eventually(t, 10*time.Second, "ids under the new lease", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(replies) > 0 && replies[len(replies)-1].code == "" && replies[len(replies)-1].sent.After(healAt)
	})
	halt()
	after := snowflakeHealth(t, client, api.URL)

	r := c.Report()
	requireValid(t, r)
	if after.WorkerID == nil || *after.WorkerID != 0 || after.Epoch != before.Epoch+1 {
		t.Fatalf("back online: worker %v epoch %d, want worker 0 under epoch %d (fenced)", after.WorkerID, after.Epoch, before.Epoch+1)
	}
	var servedInOutage, refused int
	var lastOld int64 // the last millisecond of the old lease's ids
	for _, rep := range replies {
		for _, id := range rep.ids {
			if p, err := oneWorkerBit.Parse(id); err == nil && rep.got.Before(healAt) {
				lastOld = max(lastOld, p.UnixMilli)
			}
		}
	}
	codes := map[string]int{}
	for _, rep := range replies {
		if rep.code != "" {
			codes[rep.code]++
			refused++
			if rep.sent.Before(cutAt) {
				t.Errorf("refused before the outage: %s", rep.code)
			}
			continue
		}
		if rep.sent.After(cutAt) && rep.got.Before(healAt) {
			servedInOutage++
		}
		for _, id := range rep.ids {
			p, err := oneWorkerBit.Parse(id)
			if err != nil {
				t.Fatal(err)
			}
			if p.UnixMilli > windowEnd && rep.got.Before(healAt) {
				t.Fatalf("id %d at %d ms, past the window's end %d, before the database came back", id, p.UnixMilli, windowEnd)
			}
			if rep.sent.After(healAt) && p.UnixMilli <= lastOld {
				t.Fatalf("id %d of the new lease at %d ms, not after the old lease's last %d", id, p.UnixMilli, lastOld)
			}
		}
	}
	if codes[wire.CodeSnowflakeLeaseExpired] == 0 || len(codes) != 1 {
		t.Fatalf("refusals during the outage: %v, want %s only", codes, wire.CodeSnowflakeLeaseExpired)
	}
	if servedInOutage == 0 {
		t.Fatal("nothing served after the cut: the window did not carry the outage's start")
	}
	t.Logf("outage of %v (lease %v): %d replies served from the window after the cut, then %d refusals %v; back %v after the database returned, worker 0 epoch %d -> %d",
		healAt.Sub(cutAt).Round(time.Millisecond), ttl, servedInOutage, refused, codes, time.Since(healAt).Round(time.Millisecond), before.Epoch, after.Epoch)
}
