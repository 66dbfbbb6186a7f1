package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testutil"
)

// TestDrill_Targets runs the drill command against a real instance and an
// address nobody listens on: it passes (no duplicate), and its report says
// per target what came back and for how long the dead one gave no ID.
func TestDrill_Targets(t *testing.T) {
	t.Setenv("IDMINT_DATABASE_URL", "")
	t.Setenv("IDMINT_DATA_DIR", t.TempDir())
	live, _ := startServe(t)
	dead := "http://" + testutil.FreeAddr(t)

	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"drill", "--target", live, "--target", dead,
		"--biz-tag", "demo", "--duration", "500ms", "--concurrency", "4"}, &out, &errOut)
	if err != nil {
		t.Fatalf("drill: %v\n%s%s", err, out.String(), errOut.String())
	}
	report := out.String()
	for _, want := range []string{
		"valid: no duplicates",
		"target " + live + ": ",
		"target " + dead + ": 0 requests acknowledged, ",
		"request failed: connection refused; longest without an ID",
		"still going at the end",
		"all targets: longest without an ID from any",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, "target "+live+": 0 requests") {
		t.Errorf("the live target acknowledged nothing:\n%s", report)
	}
}

// TestDrill_Duplicates checks that the drill command fails when a target
// hands out the same ID twice.
func TestDrill_Duplicates(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"biz_tag":"order","id":"7"}`)
	}))
	defer srv.Close()
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"drill", "--target", srv.URL, "--duration", "200ms", "--concurrency", "2"}, &out, &errOut)
	if !errors.Is(err, errDrillFailed) || !strings.Contains(out.String(), "INVALID") {
		t.Fatalf("drill against a target repeating one ID: %v\n%s", err, out.String())
	}
}

// TestDrillRun_Outage takes a target down while clients ask it for IDs:
// the longest stretch without an ID covers the time it was down, and the
// 503s it answered are counted.
func TestDrillRun_Outage(t *testing.T) {
	var next atomic.Int64
	var down atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"code":"unavailable","message":"down"}}`)
			return
		}
		fmt.Fprintf(w, `{"biz_tag":"order","id":"%d"}`, next.Add(1))
	}))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	load, stop := context.WithCancel(ctx)
	defer stop()
	d := newDrillRun(srv.Client(), 1)
	for i := range 2 {
		d.client(load, fmt.Sprint("c", i), srv.URL, "order")
	}
	tl := func() targetLog {
		d.mu.Lock()
		defer d.mu.Unlock()
		return *d.targets[srv.URL]
	}
	failed := func() int64 {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.targets[srv.URL].failed["status 503 unavailable"]
	}
	if !waitUntil(ctx, 10*time.Second, func() bool { return tl().ok >= 10 }) {
		t.Fatal("no IDs before the outage")
	}
	down.Store(true)
	if !waitUntil(ctx, 10*time.Second, func() bool { return failed() >= 3 }) {
		t.Fatal("no 503s during the outage")
	}
	// Stay down until both clients have had many turns: a reply from
	// before the outage that a descheduled client records late would
	// otherwise land after the target came back.
	if !waitUntil(ctx, 10*time.Second, func() bool { return failed() >= 20 }) {
		t.Fatal("too few 503s during the outage")
	}
	sawDown := time.Now()
	before := tl().ok
	cameBack := time.Now()
	down.Store(false)
	if !waitUntil(ctx, 10*time.Second, func() bool { return tl().ok >= before+10 }) {
		t.Fatal("no IDs after the outage")
	}
	stop()
	d.wait()

	final := tl()
	o := final.outageAt(d.end)
	// The outage runs from the last reply before the target went down (it
	// may arrive just after) to the first one after it came back.
	if o.Open || !o.From.Before(cameBack) || o.To.Before(cameBack) || o.To.Sub(o.From) < cameBack.Sub(sawDown) {
		t.Errorf("longest outage %v to %v (open %v); the target was seen down at %v and came back at %v",
			o.From, o.To, o.Open, sawDown, cameBack)
	}
	if r := d.checker.Report(); !r.Valid() || r.IDs() != int64(len(final.ids)) {
		t.Errorf("report %+v, %d ids recorded for the target", r, len(final.ids))
	}
	var b strings.Builder
	d.printTargets(&b)
	if !strings.Contains(b.String(), "× status 503 unavailable") {
		t.Errorf("report does not count the 503s:\n%s", b.String())
	}
}

// TestDrill_Progress: a running drill says on stderr, every --progress,
// how long it ran and the IDs and errors so far; stdout keeps only the
// report.
func TestDrill_Progress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"biz_tag":"order","id":"7"}`)
	}))
	defer srv.Close()
	var out, errOut bytes.Buffer
	run(context.Background(), []string{"drill", "--target", srv.URL, "--duration", "1s", "--progress", "50ms", "--concurrency", "1"}, &out, &errOut)
	if !regexp.MustCompile(`(?m)^drill: \d+s of 1s: \d+ IDs, \d+ errors so far$`).MatchString(errOut.String()) {
		t.Fatalf("no progress line on stderr:\n%s", errOut.String())
	}
	if strings.Contains(out.String(), "so far") {
		t.Fatalf("progress on stdout:\n%s", out.String())
	}
}
