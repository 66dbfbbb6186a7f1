package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/snowtest"
	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/lease"
	"github.com/idmint/idmint/snowflake"
	"github.com/idmint/idmint/wire"
)

// startNode starts a node of snowtest.TwoWorkers on store as holder.
func startNode(tb testing.TB, store snowflake.LeaseStore, holder string) *snowflake.Node {
	tb.Helper()
	return snowtest.Start(tb, snowflake.Config{Layout: snowtest.TwoWorkers, Store: store, Holder: holder})
}

// newSnowflakeServer serves segment IDs from memory and Snowflake IDs from
// node.
func newSnowflakeServer(tb testing.TB, node httpapi.Snowflake) *httptest.Server {
	tb.Helper()
	m := memstore.New()
	if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 10}); err != nil {
		tb.Fatal(err)
	}
	a := allocator.New(allocator.Config{Store: m, Logger: testlog.Discard()})
	tb.Cleanup(func() { a.Close(context.Background()) })
	srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(), MaxCount: 100, Snowflake: node})))
	tb.Cleanup(srv.Close)
	return srv
}

func TestServer_Snowflake(t *testing.T) {
	node := startNode(t, lease.NewMemory(nil), "a")
	srv := newSnowflakeServer(t, node)

	status, _, body := get(t, srv, "/snowflake")
	var one struct{ ID string }
	if status != http.StatusOK || json.Unmarshal(body, &one) != nil {
		t.Fatalf("/snowflake: %d %s", status, body)
	}
	id, err := strconv.ParseInt(one.ID, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := snowtest.TwoWorkers.Parse(id); p.Worker != 0 || time.Since(p.Time).Abs() > time.Minute {
		t.Fatalf("id %d decodes to %+v", id, p)
	}

	status, _, body = get(t, srv, "/snowflake", "Accept", "text/plain")
	text, err := strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64)
	if status != http.StatusOK || err != nil || text <= id {
		t.Fatalf("/snowflake as text: %d %q after %d", status, body, id)
	}

	status, _, body = get(t, srv, "/snowflakes?count=100")
	var many struct{ IDs []string }
	if status != http.StatusOK || json.Unmarshal(body, &many) != nil || len(many.IDs) != 100 {
		t.Fatalf("/snowflakes?count=100: %d %s", status, body)
	}
	prev := text
	for _, s := range many.IDs {
		v, _ := strconv.ParseInt(s, 10, 64)
		if v <= prev {
			t.Fatalf("/snowflakes: %d after %d", v, prev)
		}
		prev = v
	}

	status, _, body = get(t, srv, "/snowflake/parse?id="+one.ID)
	var parsed wire.ParsedSnowflake
	if status != http.StatusOK || json.Unmarshal(body, &parsed) != nil {
		t.Fatalf("/snowflake/parse: %d %s", status, body)
	}
	if want, _ := snowtest.TwoWorkers.Parse(id); parsed.ID != id || parsed.WorkerID != want.Worker || parsed.Sequence != want.Sequence ||
		!parsed.Time.Equal(want.Time) || parsed.UnixMS != want.UnixMilli || parsed.Layout != "50/1/12" {
		t.Fatalf("/snowflake/parse = %+v, want %+v", parsed, want)
	}

	for _, c := range []struct{ path, code string }{
		{"/snowflakes", wire.CodeInvalidCount},
		{"/snowflakes?count=0", wire.CodeInvalidCount},
		{"/snowflakes?count=101", wire.CodeInvalidCount},
		{"/snowflake/parse", wire.CodeInvalidID},
		{"/snowflake/parse?id=1&id=2", wire.CodeInvalidID},
		{"/snowflake/parse?id=abc", wire.CodeInvalidID},
		{"/snowflake/parse?id=-4", wire.CodeInvalidID},
		{"/snowflake/parse?id=99999999999999999999", wire.CodeInvalidID},
		{"/snowflake/parse?id=9223372036854775807", wire.CodeInvalidID}, // after year 9999 in 50/1/12
	} {
		status, _, body := get(t, srv, c.path)
		if status != http.StatusBadRequest || errorCode(t, body) != c.code {
			t.Errorf("%s: %d %s, want 400 %s", c.path, status, body, c.code)
		}
	}

	// /id/health and /metrics show the lease and the counts.
	status, _, body = get(t, srv, "/id/health")
	var h httpapi.Health
	if status != http.StatusOK || json.Unmarshal(body, &h) != nil || h.Snowflake == nil {
		t.Fatalf("/id/health: %d %s", status, body)
	}
	sf := h.Snowflake
	if !sf.Serving || sf.State != "serving" || sf.WorkerID == nil || *sf.WorkerID != 0 || sf.Epoch != 1 || sf.Issued != 102 ||
		sf.LeaseRemainingMS <= 0 || sf.WindowEnd == nil || sf.Holder != "a" {
		t.Fatalf("/id/health snowflake: %s", body)
	}
	_, _, body = get(t, srv, "/metrics")
	for _, want := range []string{"idmint_snowflake_worker_id 0", "idmint_snowflake_ids_issued_total 102", "idmint_snowflake_lease_epoch 1",
		"idmint_snowflake_serving 1", `idmint_snowflake_refused_total{reason="no_worker"} 0`, "idmint_snowflake_clock_offset_seconds"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestServer_SnowflakeNoWorker: an instance holding no worker ID answers
// 503 with a clear code, keeps serving segment IDs and reports itself
// degraded, not unavailable.
func TestServer_SnowflakeNoWorker(t *testing.T) {
	store := lease.NewMemory(nil)
	startNode(t, store, "a")
	startNode(t, store, "b")
	srv := newSnowflakeServer(t, startNode(t, store, "c"))
	for _, path := range []string{"/snowflake", "/snowflakes?count=3"} {
		status, header, body := get(t, srv, path)
		if status != http.StatusServiceUnavailable || errorCode(t, body) != wire.CodeSnowflakeNoWorker || header.Get("Retry-After") == "" {
			t.Fatalf("%s with every worker id held: %d %v %s", path, status, header, body)
		}
	}
	if status, _, body := get(t, srv, "/id?biz_tag=order"); status != http.StatusOK {
		t.Fatalf("/id: %d %s", status, body)
	}
	status, _, body := get(t, srv, "/id/health")
	var h httpapi.Health
	if status != http.StatusOK || json.Unmarshal(body, &h) != nil || h.Status != httpapi.StatusDegraded || h.Snowflake == nil ||
		h.Snowflake.Serving || h.Snowflake.State != wire.CodeSnowflakeNoWorker || h.Snowflake.WorkerID != nil || h.Snowflake.RefusedBy.NoWorker != 2 {
		t.Fatalf("/id/health: %d %s", status, body)
	}
	_, _, body = get(t, srv, "/metrics")
	for _, want := range []string{"idmint_snowflake_worker_id -1", `idmint_snowflake_refused_total{reason="no_worker"} 2`, "idmint_snowflake_serving 0"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestServer_SnowflakeOff(t *testing.T) {
	srv := newSnowflakeServer(t, nil)
	if status, _, body := get(t, srv, "/snowflake"); status != http.StatusNotFound {
		t.Fatalf("/snowflake with the mode off: %d %s", status, body)
	}
	_, _, body := get(t, srv, "/id/health")
	if strings.Contains(string(body), "snowflake") {
		t.Fatalf("/id/health mentions snowflake with the mode off: %s", body)
	}
}

// TestDashboard_SnowflakeBrowser opens /id/dashboard in headless Chromium
// and checks the Snowflake pill says what /id/health says: the worker ID and
// epoch of an instance that holds a lease, the refusal of one that holds
// none.
func TestDashboard_SnowflakeBrowser(t *testing.T) {
	bin := findChromium(t)
	store := lease.NewMemory(nil)
	holding := newSnowflakeServer(t, startNode(t, store, "a"))
	startNode(t, store, "b")
	none := newSnowflakeServer(t, startNode(t, store, "c"))
	for range 3 {
		get(t, holding, "/snowflake")
		get(t, none, "/snowflake")
	}
	dom := string(runChromium(t, bin, holding.URL+"/id/dashboard", 3000, "--dump-dom"))
	for _, want := range []string{`data-loaded="true"`, `id="snowflake" class="pill ok"`, `data-worker="0"`, `data-state="serving"`,
		"snowflake worker 0 · epoch 1 · lease ", " · 3 ids<"} {
		if !strings.Contains(dom, want) {
			t.Errorf("dashboard of the lease holder lacks %q", want)
		}
	}
	dom = string(runChromium(t, bin, none.URL+"/id/dashboard", 3000, "--dump-dom"))
	for _, want := range []string{`id="snowflake" class="pill bad"`, `data-worker=""`, `data-state="snowflake_no_worker"`, "no worker id", "3 refused"} {
		if !strings.Contains(dom, want) {
			t.Errorf("dashboard of the instance without a worker id lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("DOM:\n%s", dom)
	}
}
