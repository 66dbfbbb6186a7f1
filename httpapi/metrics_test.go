package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/testkit/testutil"
)

// exportedMetrics are the idmint metric families /metrics must carry once a
// tag has loaded.
var exportedMetrics = []string{
	"idmint_ids_issued_total",
	"idmint_ids_abandoned_total",
	"idmint_ids_given_back_total",
	"idmint_segment_loads_total",
	"idmint_segment_load_failures_total",
	"idmint_segment_load_duration_seconds",
	"idmint_segment_recovered_total",
	"idmint_segment_refused_total",
	"idmint_rollbacks_repaired_total",
	"idmint_segment_step",
	"idmint_buffer_remaining_ids",
	"idmint_buffer_remaining_ratio",
	"idmint_buffer_available_ids",
	"idmint_buffer_next_ready",
	"idmint_buffer_serving",
	"idmint_database_up",
	"idmint_http_requests_total",
	"idmint_http_request_duration_seconds",
}

// newMetricsServer is an API over a memstore.Store with the load hook wired as
// cmd/idmint wires it.
func newMetricsServer(tb testing.TB) (*httptest.Server, *switchableStore) {
	tb.Helper()
	m := memstore.New()
	if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 10}); err != nil {
		tb.Fatal(err)
	}
	store := &switchableStore{Store: m}
	metrics := httpapi.NewMetrics()
	a := allocator.New(allocator.Config{
		Store: store, Logger: testlog.Discard(), RetryMin: time.Millisecond, RetryMax: time.Millisecond,
		Segment: segment.Config{Period: time.Nanosecond, LoadTimeout: 50 * time.Millisecond,
			WaitTimeout: 200 * time.Millisecond, MinBackoff: time.Hour, OnLoad: metrics.ObserveLoad},
	})
	tb.Cleanup(func() { a.Close(context.Background()) })
	// A primary with one asynchronous standby, for the replication series.
	repl := replicationSource{st: postgres.ReplicationStatus{Replicas: 1, Timeline: 1, InitialTimeline: 1, Required: postgres.ReplicasAuto, Ack: postgres.AckFlush}}
	srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(), Metrics: metrics, Replication: repl})))
	tb.Cleanup(srv.Close)
	return srv, store
}

// scrape reads /metrics in the Prometheus text format.
func scrape(tb testing.TB, base string) (map[string]*dto.MetricFamily, int) {
	tb.Helper()
	status, hdr, body := getURL(tb, base+"/metrics")
	if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
		tb.Fatalf("/metrics: %d %s", status, hdr.Get("Content-Type"))
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		tb.Fatalf("parse /metrics: %v", err)
	}
	return families, len(body)
}

// value returns the value of the one series of family name whose labels
// include want (name, value pairs); ok is false when there is none.
func value(families map[string]*dto.MetricFamily, name string, want ...string) (v float64, ok bool) {
	f := families[name]
	if f == nil {
		return 0, false
	}
series:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(want); i += 2 {
			if labels[want[i]] != want[i+1] {
				continue series
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func TestServer_Metrics(t *testing.T) {
	srv, store := newMetricsServer(t)
	get(t, srv, "/ids?biz_tag=order&count=25")
	for range 5 {
		get(t, srv, "/id?biz_tag=order")
	}
	get(t, srv, "/id?biz_tag=made-up")
	get(t, srv, "/no/such/path")
	get(t, srv, "/another/one")
	// The load-latency hook runs just after a load is installed: let every
	// load's observation land before comparing counts.
	settled := func() bool {
		f, _ := scrape(t, srv.URL)
		loads, _ := value(f, "idmint_segment_loads_total", "biz_tag", "order")
		failures, _ := value(f, "idmint_segment_load_failures_total", "biz_tag", "order")
		observed, _ := value(f, "idmint_segment_load_duration_seconds", "biz_tag", "order")
		return loads > 0 && observed == loads+failures
	}
	testutil.Eventually(t, 10*time.Second, "load observations", settled)

	start := time.Now()
	families, size := scrape(t, srv.URL)
	t.Logf("scrape: %d bytes, %d families, %v", size, len(families), time.Since(start))
	// The figure of docs/operations.md: a scrape with one tag stays small (series per
	// tag and route, never per ID or per request).
	if limit := 24 << 10; size > limit {
		t.Fatalf("a scrape with one tag is %d bytes, more than %d", size, limit)
	}
	var missing []string
	for _, name := range exportedMetrics {
		if families[name] == nil {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("missing from /metrics: %v", missing)
	}
	if families["go_goroutines"] == nil || families["process_cpu_seconds_total"] == nil {
		t.Error("no Go runtime or process metrics")
	}

	// The numbers agree with /id/health.
	_, _, body := get(t, srv, "/id/health?biz_tag=order")
	var h httpapi.Health
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatal(err)
	}
	th := h.Tags[0]
	families, _ = scrape(t, srv.URL)
	for _, c := range []struct {
		name string
		want float64
	}{
		{"idmint_ids_issued_total", 30},
		{"idmint_segment_loads_total", float64(th.SegmentLoads)},
		{"idmint_segment_load_duration_seconds", float64(th.SegmentLoads)}, // one observation per load
		{"idmint_segment_step", float64(th.Step)},
		{"idmint_buffer_remaining_ids", float64(th.Remaining)},
		{"idmint_buffer_remaining_ratio", th.RemainingRatio},
		{"idmint_buffer_available_ids", float64(th.Available)},
		{"idmint_buffer_next_ready", boolValue(th.NextReady)},
		{"idmint_buffer_serving", 1},
		{"idmint_segment_refused_total", 0},
		{"idmint_rollbacks_repaired_total", 0},
	} {
		if got, ok := value(families, c.name, "biz_tag", "order"); !ok || got != c.want {
			t.Errorf("%s{biz_tag=order} = %v (%v), want %v", c.name, got, ok, c.want)
		}
	}
	if th.Issued != 30 || th.SegmentLoads < 3 {
		t.Errorf("health: issued %d, loads %d", th.Issued, th.SegmentLoads)
	}

	// HTTP by route pattern: unknown paths collapse into one label, made-up
	// tags make no series.
	for _, c := range []struct {
		route, code string
		want        float64
	}{
		{"/id", "200", 5},
		{"/id", "404", 1},
		{"/ids", "200", 1},
		{"unmatched", "404", 2},
	} {
		if got, _ := value(families, "idmint_http_requests_total", "route", c.route, "code", c.code); got != c.want {
			t.Errorf("requests{route=%q,code=%q} = %v, want %v", c.route, c.code, got, c.want)
		}
	}
	var routes []string
	for _, m := range families["idmint_http_requests_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "route" {
				routes = append(routes, l.GetValue())
			}
		}
	}
	sort.Strings(routes)
	for _, r := range routes {
		if strings.Contains(r, "such") || strings.Contains(r, "another") {
			t.Errorf("route label %q: unknown paths must collapse", r)
		}
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == "made-up" {
					t.Errorf("%s has a series for a made-up tag", name)
				}
			}
		}
	}
	if up, _ := value(families, "idmint_database_up"); up != 1 {
		t.Errorf("database_up = %v, want 1", up)
	}

	// The database goes away: database_up drops, and failed loads are
	// counted and timed.
	store.down.Store(true)
	for range 10 { // the rest of the buffers, then a failed load
		get(t, srv, "/ids?biz_tag=order&count=5")
	}
	testutil.Eventually(t, 10*time.Second, "load observations", settled)
	families, _ = scrape(t, srv.URL)
	if up, _ := value(families, "idmint_database_up"); up != 0 {
		t.Errorf("database down: database_up = %v, want 0", up)
	}
	failures, _ := value(families, "idmint_segment_load_failures_total", "biz_tag", "order")
	loads, _ := value(families, "idmint_segment_loads_total", "biz_tag", "order")
	observed, _ := value(families, "idmint_segment_load_duration_seconds", "biz_tag", "order")
	if failures < 1 || observed != loads+failures {
		t.Errorf("after a failed load: failures %v, loads %v, histogram count %v (want loads+failures)", failures, loads, observed)
	}
	if got, _ := value(families, "idmint_http_requests_total", "route", "/ids", "code", "503"); got < 1 {
		t.Errorf("no 503 counted on /ids: %v", got)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// TestServer_CoreObserve: a call another transport records through the
// core (core.Core.Observe, as a grpc-go listener does) lands in the series
// of the HTTP API's routes, under the procedure's name.
func TestServer_CoreObserve(t *testing.T) {
	a := allocator.New(allocator.Config{Store: memstore.New(), Logger: testlog.Discard()})
	t.Cleanup(func() { a.Close(context.Background()) })
	s := httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard()})
	s.Core().Observe("/idmint.v1.IDService/NextID", 200, time.Millisecond)
	srv := validated(httptest.NewServer(s))
	defer srv.Close()
	_, _, body := get(t, srv, "/metrics")
	if !strings.Contains(string(body), `idmint_http_requests_total{code="200",route="/idmint.v1.IDService/NextID"} 1`) {
		t.Fatal("the observed call is not in idmint_http_requests_total")
	}
}
