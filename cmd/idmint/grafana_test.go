package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/testlog"
	"github.com/idmint/idmint/testkit/testutil"
)

// dashboardQuery is one query of a provisioned Grafana panel.
type dashboardQuery struct {
	panel, ref, expr string
}

// dashboardQueries reads every panel query of the provisioned dashboard,
// with its variables set as Grafana's "All" sets them.
func dashboardQueries(tb testing.TB) []dashboardQuery {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "dashboards", "idmint.json"))
	if err != nil {
		tb.Fatal(err)
	}
	type panel struct {
		Title   string
		Type    string
		Targets []struct{ RefID, Expr string }
		Panels  []json.RawMessage
	}
	var d struct{ Panels []json.RawMessage }
	if err := json.Unmarshal(data, &d); err != nil {
		tb.Fatalf("idmint.json: %v", err)
	}
	all := strings.NewReplacer(`"$biz_tag"`, `".+"`, `"$instance"`, `".+"`)
	var out []dashboardQuery
	var walk func([]json.RawMessage)
	walk = func(raw []json.RawMessage) {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				tb.Fatalf("idmint.json panel: %v", err)
			}
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			for _, q := range p.Targets {
				out = append(out, dashboardQuery{panel: p.Title, ref: q.RefID, expr: all.Replace(q.Expr)})
			}
		}
	}
	walk(d.Panels)
	if len(out) == 0 {
		tb.Fatal("idmint.json has no panel queries")
	}
	return out
}

// prometheusBinary finds the prometheus server, or skips the test (fails
// it with IDMINT_TEST_REQUIRE_PROMETHEUS=1, which CI sets).
func prometheusBinary(tb testing.TB) string {
	tb.Helper()
	bin, err := exec.LookPath("prometheus")
	if err == nil {
		return bin
	}
	msg := "no prometheus server on PATH (apt-get install prometheus)"
	if os.Getenv("IDMINT_TEST_REQUIRE_PROMETHEUS") == "1" {
		tb.Fatal(msg + " (IDMINT_TEST_REQUIRE_PROMETHEUS=1: the panel test must run)")
	}
	tb.Skip(msg)
	return ""
}

// startPrometheus runs a real Prometheus that scrapes target (host:port)
// every second, and returns its base URL.
func startPrometheus(tb testing.TB, bin, target string) string {
	tb.Helper()
	dir := tb.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: idmint\n    static_configs:\n      - targets: [%q]\n", target)
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		tb.Fatal(err)
	}
	addr := testutil.FreeAddr(tb)
	logs := &testlog.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	base := "http://" + addr
	testutil.EventuallyOr(tb, 30*time.Second, "prometheus ready", func() bool {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, logs.String)
	return base
}

// promValues runs an instant query and returns the values of its series.
func promValues(tb testing.TB, base, expr string) ([]float64, error) {
	tb.Helper()
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string
		Error  string
		Data   struct {
			Result []struct {
				Value [2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query refused: %s", body.Error)
	}
	var vals []float64
	for _, r := range body.Data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("value %q: %w", s, err)
		}
		vals = append(vals, v)
	}
	return vals, nil
}

// TestServe_GrafanaPanels runs every query of the provisioned Grafana
// dashboard on a real Prometheus that scrapes `idmint serve` started with
// its defaults (the SQLite first start, and PostgreSQL), under light
// traffic: each query must give at least one series with a number, so no
// panel is empty on a default deployment.
func TestServe_GrafanaPanels(t *testing.T) {
	if testing.Short() {
		t.Skip("real Prometheus")
	}
	prom := prometheusBinary(t)
	queries := dashboardQueries(t)

	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) (tag string)
	}{
		{"sqlite first start", func(t *testing.T) string {
			t.Setenv("IDMINT_DATABASE_URL", "")
			t.Setenv("IDMINT_DATA_DIR", t.TempDir())
			return "demo"
		}},
		{"postgres", func(t *testing.T) string {
			t.Setenv("IDMINT_DATABASE_URL", pgtest.Shared(t).NewDatabase(t))
			idmint(t, "migrate")
			idmint(t, "tag", "create", "order", "--step", "100")
			return "order"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tag := tc.setup(t)
			base, _ := startServe(t)

			// Light traffic for as long as the queries are asked: IDs, so
			// rates and segment loads move.
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
					if resp, err := http.Get(base + "/ids?count=20&biz_tag=" + tag); err == nil {
						resp.Body.Close()
					}
				}
			}()
			t.Cleanup(func() { close(stop); wg.Wait() })

			promURL := startPrometheus(t, prom, strings.TrimPrefix(base, "http://"))
			empty := map[int]string{}
			for i := range queries {
				empty[i] = "not asked yet"
			}
			var asked time.Time
			testutil.EventuallyOr(t, 90*time.Second, "every panel query gives a number", func() bool {
				// Scrapes come once a second: asking more often only loads
				// the server.
				if time.Since(asked) < 500*time.Millisecond {
					return false
				}
				asked = time.Now()
				for i := range empty {
					vals, err := promValues(t, promURL, queries[i].expr)
					switch {
					case err != nil:
						empty[i] = err.Error()
					case len(vals) == 0:
						empty[i] = "no series"
					case !hasNumber(vals):
						empty[i] = fmt.Sprintf("no number in %v", vals)
					default:
						delete(empty, i)
					}
				}
				return len(empty) == 0
			}, func() string {
				var b strings.Builder
				for i, why := range empty {
					fmt.Fprintf(&b, "\n  panel %q query %s: %s\n    %s", queries[i].panel, queries[i].ref, why, queries[i].expr)
				}
				return b.String()
			})
			t.Logf("%d panel queries, each with data", len(queries))
		})
	}
}

func hasNumber(vals []float64) bool {
	for _, v := range vals {
		if !math.IsNaN(v) {
			return true
		}
	}
	return false
}
