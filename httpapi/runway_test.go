package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/testkit/testutil"
	"github.com/idmint/idmint/wire"
)

// newRunwayInstance serves tags on a MemStore with an instance runway.
func newRunwayInstance(tb testing.TB, runway time.Duration, specs ...allocator.TagSpec) *pgInstance {
	tb.Helper()
	store := memstore.New()
	for _, spec := range specs {
		if _, err := store.CreateTag(context.Background(), spec); err != nil {
			tb.Fatal(err)
		}
	}
	a := allocator.New(allocator.Config{Store: store, Logger: testlog.Discard(), Segment: segment.Config{Runway: runway}})
	tb.Cleanup(func() { a.Close(context.Background()) })
	srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Admin: store, Logger: testlog.Discard(), Metrics: httpapi.NewMetrics()})))
	tb.Cleanup(srv.Close)
	return &pgInstance{srv: srv}
}

// waitRunwayShort takes IDs of tag until its health says the runway is
// short, and returns that health.
func waitRunwayShort(tb testing.TB, p *pgInstance, tag string) (httpapi.Health, httpapi.TagHealth) {
	tb.Helper()
	var (
		h  httpapi.Health
		th httpapi.TagHealth
	)
	testutil.Eventually(tb, 15*time.Second, tag+"'s runway reported short", func() bool {
		p.take(tb, tag, 5)
		_, h, th = p.tag(tb, tag)
		return !th.RunwayMet
	})
	return h, th
}

// TestHealth_Runway: a tag whose max_step cannot hold its runway at its
// rate says so on /id/health (per tag and in the reasons, degraded) and in
// /metrics; a tag with a runway it holds says it is met.
func TestHealth_Runway(t *testing.T) {
	p := newRunwayInstance(t, 30*time.Second,
		allocator.TagSpec{Name: "tiny", Step: 10, MaxStep: 10, Runway: time.Hour},
		allocator.TagSpec{Name: "roomy", Step: 100_000})
	p.take(t, "roomy", 3)
	h, th := waitRunwayShort(t, p, "tiny")
	if th.RunwaySeconds != 3600 || th.RunwayShortReason != segment.RunwayShortMaxStep || th.RunwayHeldSeconds == nil ||
		*th.RunwayHeldSeconds >= 3600 || th.PeakIDsPerSecond <= 0 {
		t.Fatalf("tiny: %+v", th)
	}
	if h.Status != httpapi.StatusDegraded || !hasReason(h, "tiny: runway short (max_step_too_small)") {
		t.Fatalf("health: status %s, reasons %q", h.Status, h.Reasons)
	}
	_, _, roomy := p.tag(t, "roomy")
	if !roomy.RunwayMet || roomy.RunwaySeconds != 30 || roomy.RunwayShortReason != "" {
		t.Fatalf("roomy: %+v", roomy)
	}

	resp, err := client.Get(p.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`idmint_runway_met{biz_tag="tiny"} 0`, `idmint_runway_met{biz_tag="roomy"} 1`,
		`idmint_runway_seconds{biz_tag="tiny"} 3600`, `idmint_runway_seconds{biz_tag="roomy"} 30`,
		`idmint_runway_held_seconds{biz_tag="tiny"} `, `idmint_peak_ids_per_second{biz_tag="tiny"} `,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestAdmin_TagRunway: the admin API creates and changes a tag's runway in
// seconds, and refuses one out of bounds with a 400 that changes nothing.
func TestAdmin_TagRunway(t *testing.T) {
	store := memstore.New()
	a := newTokenInstance(t, store, httpapi.AuthConfig{}, httpapi.Limits{})
	_, admin := newToken(t, store, "ops", "admin")
	runwayOf := func(body []byte) float64 {
		t.Helper()
		var tj wire.Tag
		if err := json.Unmarshal(body, &tj); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		return tj.RunwaySeconds
	}
	if s, _, body := do(t, a.srv, "POST", "/v1/tags", admin, map[string]any{"biz_tag": "order", "runway_seconds": 8.5}); s != 201 || runwayOf(body) != 8.5 {
		t.Fatalf("create with a runway: %d %s", s, body)
	}
	if s, _, body := do(t, a.srv, "PATCH", "/v1/tags/order", admin, map[string]any{"runway_seconds": 1800}); s != 200 || runwayOf(body) != 1800 {
		t.Fatalf("patch the runway: %d %s", s, body)
	}
	for _, bad := range []any{-1, 86400.001, 1e300} {
		if s, _, body := do(t, a.srv, "PATCH", "/v1/tags/order", admin, map[string]any{"runway_seconds": bad}); s != 400 || errorCode(t, body) != wire.CodeInvalidSpec {
			t.Errorf("runway %v: %d %s", bad, s, body)
		}
		if s, _, body := do(t, a.srv, "POST", "/v1/tags", admin, map[string]any{"biz_tag": "other", "runway_seconds": bad}); s != 400 || errorCode(t, body) != wire.CodeInvalidSpec {
			t.Errorf("create with runway %v: %d %s", bad, s, body)
		}
	}
	if tags, err := store.Tags(t.Context()); err != nil || len(tags) != 1 || tags[0].Runway != 30*time.Minute {
		t.Fatalf("after the refused changes: %+v, %v", tags, err)
	}
}
