package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"image"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/core"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/region"
	"github.com/idmint/idmint/region/peers"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/testutil"
)

// findChromium returns the headless browser for the dashboard test:
// IDMINT_TEST_CHROMIUM, or chromium on PATH. Without one the test skips,
// unless IDMINT_TEST_REQUIRE_BROWSER=1 (CI sets it) makes it fail.
func findChromium(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("IDMINT_TEST_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no headless browser: install Debian's chromium (apt-get install chromium) or set IDMINT_TEST_CHROMIUM"
	if os.Getenv("IDMINT_TEST_REQUIRE_BROWSER") == "1" {
		tb.Fatal(msg + " (IDMINT_TEST_REQUIRE_BROWSER=1: the browser test must run)")
	}
	pgtest.SkipOptional(tb, msg)
	return ""
}

// runChromium runs one headless Chromium command against url with a fresh
// profile and no network of its own beyond the page's requests, bounded in
// time. virtualMS lets the page's timers run (its 1s refresh) before the
// result is taken.
func runChromium(tb testing.TB, bin, url string, virtualMS int, args ...string) []byte {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	all := append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--force-device-scale-factor=1",
		"--user-data-dir=" + tb.TempDir(),
		"--virtual-time-budget=" + strconv.Itoa(virtualMS),
	}, args...)
	cmd := exec.CommandContext(ctx, bin, append(all, url)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		tb.Fatalf("chromium %v: %v\n%s", args, err, lastLines(stderr.String(), 20))
	}
	tb.Logf("chromium %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	return stdout.Bytes()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// artifactDir is where the screenshot goes: IDMINT_TEST_ARTIFACTS if set
// (CI keeps it), else the test's temporary directory.
func artifactDir(tb testing.TB) string {
	tb.Helper()
	if dir := os.Getenv("IDMINT_TEST_ARTIFACTS"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			tb.Fatal(err)
		}
		return dir
	}
	return tb.TempDir()
}

var (
	rowRE  = regexp.MustCompile(`(?s)<tr data-tag="([^"]+)"(.*?)</tr>`)
	attrRE = regexp.MustCompile(`data-([a-z-]+)="([^"]*)"`)
	barRE  = regexp.MustCompile(`<div class="bar" data-bar="(current|next)" data-(?:ratio|ready)="([^"]*)"><div class="([^"]*)" style="width: ([0-9.]+)%;">`)
)

// domRow is what the dashboard shows for one tag.
type domRow struct {
	attrs map[string]string // data-* of the row and its alarm badges
	bars  map[string]domBar
	html  string
}

type domBar struct {
	value, class string
	width        float64
}

func parseRows(tb testing.TB, dom string) map[string]domRow {
	tb.Helper()
	rows := map[string]domRow{}
	for _, m := range rowRE.FindAllStringSubmatch(dom, -1) {
		r := domRow{attrs: map[string]string{}, bars: map[string]domBar{}, html: m[2]}
		open, _, _ := strings.Cut(m[2], ">")
		for _, a := range attrRE.FindAllStringSubmatch(open, -1) {
			r.attrs[a[1]] = a[2]
		}
		for _, b := range barRE.FindAllStringSubmatch(m[2], -1) {
			w, err := strconv.ParseFloat(b[4], 64)
			if err != nil {
				tb.Fatal(err)
			}
			r.bars[b[1]] = domBar{value: b[2], class: b[3], width: w}
		}
		rows[m[1]] = r
	}
	return rows
}

// TestDashboard_Browser serves idmint over real PostgreSQL on loopback,
// opens /id/dashboard in headless Chromium, and checks that every tag's row
// and both bars show what /id/health says, alarms included; then it takes a
// screenshot and checks the bars are in it.
func TestDashboard_Browser(t *testing.T) {
	bin := findChromium(t)
	// The last subtest stops the database: a server pgtest owns.
	pg := pgtest.Owned(t)
	p := newPGInstance(t, pg, map[string]int64{"order": 1000, "user": 200, "payment": 50}, nil)

	// order: past the threshold, next range ready. user: a few IDs, no
	// next range yet. payment: the database goes back in time, and its
	// rollback is repaired.
	p.take(t, "order", 350)
	p.take(t, "user", 7)
	p.take(t, "payment", 1)
	p.exec(t, `UPDATE idmint_tags SET max_id = 0 WHERE biz_tag = 'payment'`)
	p.take(t, "payment", 20)
	testutil.Eventually(t, 10*time.Second, "settled buffers", func() bool {
		_, _, order := p.tag(t, "order")
		_, _, payment := p.tag(t, "payment")
		return order.NextReady && payment.Repaired > 0 && !payment.Loading
	})
	_, h := p.health(t, "")
	if h.Status != httpapi.StatusDegraded || len(h.Tags) != 3 || h.Tags[0].Tag != "order" {
		t.Fatalf("health before the browser: %+v", h)
	}

	url := p.srv.URL + "/id/dashboard"
	dom := string(runChromium(t, bin, url, 3000, "--dump-dom"))
	if !strings.Contains(dom, `data-loaded="true"`) {
		t.Fatalf("the page never rendered /id/health:\n%s", dom)
	}
	if !strings.Contains(dom, `id="status" class="pill warn">degraded<`) {
		t.Errorf("status pill does not say degraded")
	}
	if !strings.Contains(dom, `data-up="true"`) {
		t.Errorf("database pill does not say up")
	}
	if !strings.Contains(dom, "the database went back in time") {
		t.Errorf("the repaired rollback is not among the alarms")
	}
	// A single server: no replica, nothing to warn about. On a slow machine
	// the page's own read of the status may time out; it says so then.
	if h.Replication == nil {
		t.Fatal("/id/health has no replication block")
	}
	repl := regexp.MustCompile(`id="repl" class="pill ok" title="">replicas 0 · no replica · wait auto · timeline [1-9][0-9]*<`)
	if !repl.MatchString(dom) && !strings.Contains(dom, `>replication status unavailable<`) {
		i := strings.Index(dom, `id="repl"`)
		t.Errorf("replication pill: want %s, have %q", repl, dom[max(i, 0):min(len(dom), max(i, 0)+200)])
	}

	rows := parseRows(t, dom)
	if len(rows) != len(h.Tags) {
		t.Fatalf("%d rows in the page, %d tags in /id/health", len(rows), len(h.Tags))
	}
	for _, th := range h.Tags {
		r, ok := rows[th.Tag]
		if !ok {
			t.Errorf("no row for %s", th.Tag)
			continue
		}
		for attr, want := range map[string]string{
			"remaining": strconv.FormatInt(th.Remaining, 10),
			"issued":    strconv.FormatInt(th.Issued, 10),
			"step":      strconv.FormatInt(th.Step, 10),
		} {
			if r.attrs[attr] != want {
				t.Errorf("%s: data-%s = %q, /id/health says %s", th.Tag, attr, r.attrs[attr], want)
			}
		}
		cur, next := r.bars["current"], r.bars["next"]
		if cur.value != strconv.FormatFloat(th.RemainingRatio, 'g', -1, 64) ||
			fmt.Sprintf("%.1f", cur.width) != fmt.Sprintf("%.1f", th.RemainingRatio*100) {
			t.Errorf("%s: current bar %+v, remaining_ratio %v", th.Tag, cur, th.RemainingRatio)
		}
		if next.value != strconv.FormatBool(th.NextReady) || (next.width == 100) != (th.NextReady || th.NextLate) {
			t.Errorf("%s: next bar %+v, next_ready %v", th.Tag, next, th.NextReady)
		}
		text := fmt.Sprintf("%s / %s left · %d–%d", group(th.Remaining), group(th.Current.Last-th.Current.First+1), th.Current.First, th.Current.Last)
		if !strings.Contains(r.html, text) {
			t.Errorf("%s: current bar text %q missing", th.Tag, text)
		}
		if refused := strings.Contains(r.html, `data-alarm="refused"`); refused != (th.Refused > 0) {
			t.Errorf("%s: refused badge shown %v, refused_ranges %d", th.Tag, refused, th.Refused)
		}
	}
	if order, next := rows["order"], h.Tags[0].NextRange; !strings.Contains(order.html, fmt.Sprintf("ready · %s ids · %d–%d", group(next.Last-next.First+1), next.First, next.Last)) {
		t.Errorf("order: next bar does not say ready:\n%s", order.html)
	}

	// The screenshot is the artifact, and the bars are in it: the current
	// bars' green and the next bar's violet. Traffic runs meanwhile, so
	// that it shows a live instance.
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for range 2000 { // ~50s at most
			select {
			case <-stop:
				return
			case <-time.After(25 * time.Millisecond):
			}
			for _, q := range []string{"order&count=3", "user&count=1"} {
				if resp, err := client.Get(p.srv.URL + "/ids?biz_tag=" + q); err == nil {
					resp.Body.Close()
				}
			}
		}
	}()
	shot := filepath.Join(artifactDir(t), "dashboard.png")
	runChromium(t, bin, url, 3000, "--screenshot="+shot, "--window-size=1440,600")
	close(stop)
	<-done
	t.Logf("screenshot: %s", shot)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if green, violet := countColor(img, 0x3f, 0xb9, 0x50), countColor(img, 0x8b, 0x7c, 0xf6); green < 500 || violet < 500 {
		t.Errorf("screenshot %s: %d green and %d violet pixels, want the bars", shot, green, violet)
	}

	t.Run("held standby", func(t *testing.T) {
		// A standby that could be promoted went away: the page says which,
		// since when, and how long the buffers carry callers.
		a := memAllocator(t, "order")
		since := time.Now().Add(-90 * time.Second).UTC()
		away := postgres.Standby{Name: "db2", Kind: postgres.KindRemembered, State: "disconnected"}
		src := replicationSource{st: postgres.ReplicationStatus{Timeline: 1, InitialTimeline: 1, Required: postgres.ReplicasAuto, Ack: postgres.AckFlush,
			Standbys: []postgres.Standby{away}, Held: []postgres.HeldStandby{{Standby: away, Since: since}}}}
		srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(), Replication: src})))
		t.Cleanup(srv.Close)
		held := &pgInstance{srv: srv}
		held.take(t, "order", 5)
		if _, h := held.health(t, ""); h.Replication == nil || len(h.Replication.HeldStandbys) != 1 {
			t.Fatalf("/id/health: %+v", h.Replication)
		}

		dom := string(runChromium(t, bin, srv.URL+"/id/dashboard", 2000, "--dump-dom"))
		i := strings.Index(dom, `<section id="held"`)
		if i < 0 || strings.HasPrefix(dom[i:], `<section id="held" hidden`) {
			t.Fatalf("the held standbys are not shown:\n%s", dom)
		}
		section := dom[i:min(len(dom), i+1500)]
		for _, want := range []string{
			`data-standby="db2"`, "standby db2 (remembered, disconnected) since ", "s ago", "the buffers last",
		} {
			if !strings.Contains(section, want) {
				t.Errorf("the held standby section lacks %q:\n%s", want, section)
			}
		}
		// Held since 90 s before the page read /id/health.
		if !regexp.MustCompile(`held for [1-9]m [0-9]+s`).MatchString(section) {
			t.Errorf("the held standby section does not say for how long:\n%s", section)
		}
		if strings.Contains(dom, ">1 loads<") {
			t.Errorf("the page says \"1 loads\"")
		}
		shot := filepath.Join(artifactDir(t), "dashboard-held.png")
		runChromium(t, bin, srv.URL+"/id/dashboard", 2000, "--screenshot="+shot, "--window-size=1440,600")
		t.Logf("screenshot: %s", shot)
	})

	t.Run("listed tag not loaded", func(t *testing.T) {
		// A tag serve --tag names, never asked for: listed, said to be not
		// loaded yet, not alarmed as not serving; the status stays ok.
		a := memAllocator(t, "order", "user")
		srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(), Tags: []string{"order", "user"}})))
		t.Cleanup(srv.Close)
		(&pgInstance{srv: srv}).take(t, "order", 3)
		dom := string(runChromium(t, bin, srv.URL+"/id/dashboard", 2000, "--dump-dom"))
		rows := parseRows(t, dom)
		order, user := rows["order"].html, rows["user"].html
		if user == "" || !strings.Contains(user, `data-alarm="not-loaded"`) || !strings.Contains(user, "not loaded yet") || strings.Contains(user, `data-alarm="not-serving"`) {
			t.Errorf("user, listed and never asked for: want it shown as not loaded yet, not as not serving:\n%s", user)
		}
		if order == "" || strings.Contains(order, `data-alarm="not-loaded"`) || strings.Contains(order, `data-alarm="not-serving"`) {
			t.Errorf("order, loaded: want neither badge:\n%s", order)
		}
		if !strings.Contains(dom, `id="status" class="pill ok">ok<`) {
			t.Errorf("status pill does not say ok")
		}
	})

	t.Run("region", func(t *testing.T) {
		// serve --region: the header says the region, its place among the
		// regions, its block, the IDs left before its fence and which peers
		// answer and agree; one unreachable peer makes it a warning.
		a := memAllocator(t, "order")
		share, err := region.Claim("eu", []string{"eu", "us", "ap"}, 1, 1_000_000, 3)
		if err != nil {
			t.Fatal(err)
		}
		share.Epochs[0].To = 9_000_001 // fenced: blocks 0, 3 and 6 are eu's
		src := staticRegion{st: core.RegionState{Share: share, Peers: []peers.Peer{
			{URL: "http://us.example:8080", Name: "us", Reachable: true, Agrees: true},
			{URL: "http://ap.example:8080", Error: "connection refused"},
		}}}
		srv := validated(httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(), Region: src})))
		t.Cleanup(srv.Close)
		(&pgInstance{srv: srv}).take(t, "order", 5)
		dom := string(runChromium(t, bin, srv.URL+"/id/dashboard", 2000, "--dump-dom"))
		pill := regexp.MustCompile(`<span id="region" class="pill warn"[^>]*data-region="eu" data-peers-agree="1"[^>]*>([^<]*)<`).FindStringSubmatch(dom)
		if pill == nil {
			i := strings.Index(dom, `id="region"`)
			t.Fatalf("no region pill (warn, eu, 1 peer agreeing): %q", dom[max(i, 0):min(len(dom), max(i, 0)+400)])
		}
		// eu's share holds blocks 0, 3 and 6 below the fence: 3,000,000 IDs,
		// of which the first range (1000) is granted.
		want := "region eu · 1 of 3 · block 1,000,000 · fence 9000001 · 2,999,000 ids left (order) · peers us ok, http://ap.example:8080 unreachable"
		if got := html.UnescapeString(pill[1]); got != want {
			t.Errorf("region pill:\n have %q\n want %q", got, want)
		}
	})

	t.Run("runway short", func(t *testing.T) {
		// A tag whose max_step cannot hold its runway: the page warns,
		// with the runway it has, and the tag that holds its runway says so.
		rw := newRunwayInstance(t, 30*time.Second,
			allocator.TagSpec{Name: "tiny", Step: 10, MaxStep: 10, Runway: time.Hour},
			allocator.TagSpec{Name: "roomy", Step: 100_000})
		rw.take(t, "roomy", 3)
		_, th := waitRunwayShort(t, rw, "tiny")
		dom := string(runChromium(t, bin, rw.srv.URL+"/id/dashboard", 2000, "--dump-dom"))
		rows := parseRows(t, dom)
		tiny, roomy := rows["tiny"].html, rows["roomy"].html
		if !strings.Contains(tiny, `data-alarm="runway-short"`) || !strings.Contains(tiny, "runway short: ") ||
			!strings.Contains(tiny, "of 1h") || !strings.Contains(tiny, "max_step is below the runway at the peak rate") ||
			!strings.Contains(tiny, `data-runway-met="false"`) {
			t.Errorf("tiny (runway held %v s of 3600): no runway warning in its row:\n%s", *th.RunwayHeldSeconds, tiny)
		}
		if strings.Contains(roomy, `data-alarm="runway-short"`) || !strings.Contains(roomy, `data-runway-met="true"`) || !strings.Contains(roomy, "of 30s") {
			t.Errorf("roomy: its row should say its 30s runway is met:\n%s", roomy)
		}
		if !strings.Contains(dom, "tiny: runway short (max_step_too_small)") {
			t.Errorf("the runway is not among the alarms")
		}
		shot := filepath.Join(artifactDir(t), "dashboard-runway.png")
		runChromium(t, bin, rw.srv.URL+"/id/dashboard", 2000, "--screenshot="+shot, "--window-size=1440,600")
		t.Logf("screenshot: %s", shot)
	})

	t.Run("labels whole", func(t *testing.T) {
		// At a laptop's 1280 px and narrower, every bar's label and text
		// is whole, and the page does not scroll sideways.
		// The longest text: a segment of the largest default step, with
		// IDs of 19 digits.
		if _, err := p.store.CreateTag(t.Context(), allocator.TagSpec{Name: "invoice", Step: 1_000_000}); err != nil {
			t.Fatal(err)
		}
		p.exec(t, `UPDATE idmint_tags SET max_id = 4611686018427387904 WHERE biz_tag = 'invoice'`)
		p.take(t, "invoice", 3)
		for _, width := range []int{1280, 1024} {
			n, cut := cutLabels(t, bin, p.srv.Config.Handler, width, 800)
			for _, c := range cut {
				t.Errorf("at %d px, cut short: %s", width, c)
			}
			t.Logf("at %d px: %d bar labels and texts, %d cut", width, n, len(cut))
			shot := filepath.Join(artifactDir(t), fmt.Sprintf("dashboard-%d.png", width))
			runChromium(t, bin, url, 2000, "--screenshot="+shot, fmt.Sprintf("--window-size=%d,800", width))
			t.Logf("screenshot: %s", shot)
		}
	})

	t.Run("database down", func(t *testing.T) {
		pg.Stop(t, false)
		defer pg.Start(t)
		dom := string(runChromium(t, bin, url, 2000, "--dump-dom"))
		for _, want := range []string{`data-up="false"`, "database DOWN", "database unreachable", `data-tag="order"`} {
			if !strings.Contains(dom, want) {
				t.Errorf("database down: the page does not show %q", want)
			}
		}
	})
}

// group writes n with thousands separators, as the page does.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// countColor counts the pixels within a small distance of one RGB colour.
func countColor(img image.Image, r, g, b uint8) int {
	n := 0
	bounds := img.Bounds()
	near := func(a uint32, want uint8) bool { d := int(a>>8) - int(want); return d > -12 && d < 12 }
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			pr, pg, pb, _ := img.At(x, y).RGBA()
			if near(pr, r) && near(pg, g) && near(pb, b) {
				n++
			}
		}
	}
	return n
}

// probePage opens the dashboard in an iframe of the given size, on the
// dashboard's own origin so that its script may read the frame, waits for
// the frame to render /id/health, then writes into #out, as JSON, the bar
// labels and texts cut short (scrollWidth > clientWidth) and whether the
// page scrolls sideways.
const probePage = `<!doctype html><html><head><meta charset="utf-8"><style>body{margin:0}iframe{border:0;display:block}</style></head>
<body><iframe id="f" src="/id/dashboard" width="%d" height="%d"></iframe><pre id="out"></pre>
<script>
"use strict";
const f = document.getElementById("f");
function check() {
  const d = f.contentDocument;
  if (!d || !d.body || d.body.dataset.loaded !== "true") { setTimeout(check, 50); return; }
  const labels = d.querySelectorAll(".bar-label, .bar-text");
  const cut = [];
  for (const e of labels)
    if (e.scrollWidth > e.clientWidth) cut.push(e.textContent + " (" + e.scrollWidth + " px in " + e.clientWidth + ")");
  const page = d.documentElement;
  if (page.scrollWidth > page.clientWidth) cut.push("the page (" + page.scrollWidth + " px in " + page.clientWidth + ")");
  document.getElementById("out").textContent = JSON.stringify({labels: labels.length, cut: cut});
}
check();
</script></body></html>`

// cutLabels opens dashboard (an idmint handler) at width×height in
// Chromium and returns how many bar labels and texts the page has, and
// those cut short.
func cutLabels(tb testing.TB, bin string, dashboard http.Handler, width, height int) (int, []string) {
	tb.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /probe", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, probePage, width, height)
	})
	mux.Handle("/", dashboard)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	dom := string(runChromium(tb, bin, srv.URL+"/probe", 3000, "--dump-dom", fmt.Sprintf("--window-size=%d,%d", width+40, height+200)))
	m := regexp.MustCompile(`(?s)<pre id="out">(.*?)</pre>`).FindStringSubmatch(dom)
	var out struct {
		Labels int
		Cut    []string
	}
	if m == nil || json.Unmarshal([]byte(html.UnescapeString(m[1])), &out) != nil || out.Labels == 0 {
		tb.Fatalf("the probe page did not measure the dashboard:\n%s", dom)
	}
	return out.Labels, out.Cut
}

// staticRegion is a region that never changes: the share, workers and
// peers of st.
type staticRegion struct{ st core.RegionState }

func (r staticRegion) Region() core.RegionState { return r.st }

func (r staticRegion) Holding(context.Context, int64, int64) region.Share { return r.st.Share }

// memAllocator is an allocator on a memory store with tags of step 1000.
func memAllocator(t *testing.T, tags ...string) *allocator.Allocator {
	t.Helper()
	store := memstore.New()
	for _, name := range tags {
		if _, err := store.CreateTag(t.Context(), allocator.TagSpec{Name: name, Step: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	a := allocator.New(allocator.Config{Store: store, Logger: testlog.Discard()})
	t.Cleanup(func() { a.Close(context.Background()) })
	return a
}
