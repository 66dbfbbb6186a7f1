package httpapi_test

import (
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"github.com/idmint/idmint/testkit/testutil"
)

// The deploy files live at the repository root; tests run in httpapi/.
const deployDir = "../deploy"

type grafanaPanel struct {
	Title      string
	Type       string
	Datasource struct{ UID string }
	Targets    []struct{ Expr string }
	Panels     []grafanaPanel // a collapsed row's panels
}

type grafanaDashboard struct {
	UID, Title string
	Panels     []grafanaPanel
	Templating struct {
		List []struct {
			Name       string
			Definition string
		}
	}
}

var (
	metricRE   = regexp.MustCompile(`\b(idmint_[a-z0-9_]+)\b`)
	selectorRE = regexp.MustCompile(`\b(idmint_[a-z0-9_]+)\{([^}]*)\}`)
	matcherRE  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
)

// exportedLabels maps every series name a scrape holds (histograms with
// their _bucket, _sum and _count) to its label names.
func exportedLabels(families map[string]*dto.MetricFamily) map[string][]string {
	out := map[string][]string{}
	for name, f := range families {
		var labels []string
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		out[name] = labels
		if f.GetType() == dto.MetricType_HISTOGRAM {
			out[name+"_bucket"] = append(slices.Clone(labels), "le")
			out[name+"_sum"] = labels
			out[name+"_count"] = labels
		}
	}
	return out
}

// checkQuery reports what is wrong with one PromQL query: metrics idmint
// does not export, label matchers on labels the metric does not have, and
// unbalanced brackets.
func checkQuery(expr string, exported map[string][]string) []string {
	var problems []string
	names := metricRE.FindAllStringSubmatch(expr, -1)
	if len(names) == 0 {
		problems = append(problems, "names no idmint metric")
	}
	for _, n := range names {
		if _, ok := exported[n[1]]; !ok {
			problems = append(problems, "unknown metric "+n[1])
		}
	}
	for _, sel := range selectorRE.FindAllStringSubmatch(expr, -1) {
		labels, ok := exported[sel[1]]
		if !ok {
			continue
		}
		for _, m := range matcherRE.FindAllStringSubmatch(sel[2], -1) {
			// Prometheus adds instance and job to every scraped series.
			if l := m[1]; l != "instance" && l != "job" && !slices.Contains(labels, l) {
				problems = append(problems, sel[1]+" has no label "+l)
			}
		}
	}
	for _, pair := range []string{"()", "{}", "[]"} {
		if strings.Count(expr, pair[:1]) != strings.Count(expr, pair[1:]) {
			problems = append(problems, "unbalanced "+pair)
		}
	}
	return problems
}

func readYAML(tb testing.TB, file string, v any) {
	tb.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		tb.Fatalf("%s: %v", file, err)
	}
}

// TestDeploy_GrafanaDashboard checks the provisioned Grafana dashboard
// against a real scrape: it parses, has the panels docs/operations.md promises, and
// every query names only metrics and labels idmint exports.
func TestDeploy_GrafanaDashboard(t *testing.T) {
	srv, _ := newMetricsServer(t)
	get(t, srv, "/ids?biz_tag=order&count=25")
	// The load-latency hook runs just after the load is installed: wait
	// for its first observation, or the histogram is not exported yet.
	var families map[string]*dto.MetricFamily
	testutil.Eventually(t, 10*time.Second, "the first load-latency observation", func() bool {
		families, _ = scrape(t, srv.URL)
		return families["idmint_segment_load_duration_seconds"] != nil
	})
	exported := exportedLabels(families)

	data, err := os.ReadFile(filepath.Join(deployDir, "grafana/dashboards/idmint.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("idmint.json: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Fatalf("dashboard without uid or title: %q %q", d.UID, d.Title)
	}
	var datasources struct {
		Datasources []struct{ UID, Type, URL string }
	}
	readYAML(t, filepath.Join(deployDir, "grafana/provisioning/datasources/prometheus.yml"), &datasources)
	if len(datasources.Datasources) != 1 || datasources.Datasources[0].Type != "prometheus" {
		t.Fatalf("datasource provisioning: %+v", datasources)
	}
	dsUID := datasources.Datasources[0].UID

	var titles []string
	queries := 0
	var walk func([]grafanaPanel)
	walk = func(panels []grafanaPanel) {
		for _, p := range panels {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			titles = append(titles, p.Title)
			if p.Datasource.UID != dsUID {
				t.Errorf("panel %q: datasource %q, provisioned %q", p.Title, p.Datasource.UID, dsUID)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, q := range p.Targets {
				queries++
				for _, problem := range checkQuery(q.Expr, exported) {
					t.Errorf("panel %q: %s: %s", p.Title, problem, q.Expr)
				}
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		for _, problem := range checkQuery(v.Definition, exported) {
			t.Errorf("variable %s: %s: %s", v.Name, problem, v.Definition)
		}
	}
	for _, want := range []string{"IDs/s per tag", "Buffer fill", "p50 / p99", "failures", "Database up"} {
		if !slices.ContainsFunc(titles, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("no panel titled like %q in %q", want, titles)
		}
	}
	t.Logf("%d panels, %d queries, checked against %d exported series names", len(titles), queries, len(exported))

	// The checker itself catches what it is for.
	for _, bad := range []string{`rate(idmint_nope_total[1m])`, `idmint_ids_issued_total{route="/id"}`, `sum(rate(idmint_ids_issued_total[1m])`, `up`} {
		if len(checkQuery(bad, exported)) == 0 {
			t.Errorf("checkQuery passed %q", bad)
		}
	}
}

// TestDeploy_Compose checks that docker compose wires Prometheus to idmint
// and Grafana to both, with files that exist.
func TestDeploy_Compose(t *testing.T) {
	var prom struct {
		ScrapeConfigs []struct {
			JobName       string                       `yaml:"job_name"`
			MetricsPath   string                       `yaml:"metrics_path"`
			StaticConfigs []struct{ Targets []string } `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, filepath.Join(deployDir, "prometheus/prometheus.yml"), &prom)
	var target string
	for _, sc := range prom.ScrapeConfigs {
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			continue
		}
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				if strings.HasPrefix(tg, "idmint:") {
					target = tg
				}
			}
		}
	}
	if target == "" {
		t.Fatalf("prometheus.yml scrapes no idmint:PORT at /metrics: %+v", prom)
	}

	type service struct {
		Image       string
		Ports       []string
		Environment map[string]string
		Volumes     []string
	}
	var compose struct{ Services map[string]service }
	readYAML(t, "../docker-compose.yml", &compose)
	idmint, ok := compose.Services["idmint"]
	if !ok || !strings.HasSuffix(idmint.Environment["IDMINT_LISTEN"], ":"+strings.TrimPrefix(target, "idmint:")) {
		t.Errorf("prometheus scrapes %s, idmint listens on %q", target, idmint.Environment["IDMINT_LISTEN"])
	}
	// mounts returns a service's bind mounts, container path → host path.
	mounts := func(name string) map[string]string {
		s, ok := compose.Services[name]
		if !ok {
			t.Fatalf("no %s service in docker-compose.yml", name)
		}
		out := map[string]string{}
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) < 2 || !strings.HasPrefix(parts[0], "./") {
				continue
			}
			if _, err := os.Stat(filepath.Join("..", parts[0])); err != nil {
				t.Errorf("%s mounts %s: %v", name, parts[0], err)
			}
			out[parts[1]] = parts[0]
		}
		return out
	}
	// Pinned: an untagged image is whatever "latest" is on the day of the
	// pull, and a new major version can break the provisioned dashboard.
	for name, repo := range map[string]string{"prometheus": "prom/prometheus", "grafana": "grafana/grafana"} {
		img := compose.Services[name].Image
		tag, ok := strings.CutPrefix(img, repo+":")
		if !ok || tag == "" || tag == "latest" || !strings.ContainsAny(tag, "0123456789") {
			t.Errorf("%s image %q: want %s:VERSION", name, img, repo)
		}
	}
	if got := mounts("prometheus")["/etc/prometheus/prometheus.yml"]; got != "./deploy/prometheus/prometheus.yml" {
		t.Errorf("prometheus config mounted from %q", got)
	}
	grafana := mounts("grafana")
	if grafana["/etc/grafana/provisioning"] != "./deploy/grafana/provisioning" {
		t.Errorf("grafana provisioning mounted from %q", grafana["/etc/grafana/provisioning"])
	}
	var providers struct {
		Providers []struct {
			Type    string
			Options struct{ Path string }
		}
	}
	readYAML(t, filepath.Join(deployDir, "grafana/provisioning/dashboards/idmint.yml"), &providers)
	if len(providers.Providers) != 1 || providers.Providers[0].Type != "file" {
		t.Fatalf("dashboard provisioning: %+v", providers)
	}
	dir := providers.Providers[0].Options.Path
	if grafana[dir] != "./deploy/grafana/dashboards" {
		t.Errorf("grafana loads dashboards from %s, which mounts %q", dir, grafana[dir])
	}
	home := compose.Services["grafana"].Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
	if path.Dir(home) != dir {
		t.Errorf("home dashboard %s is not in %s", home, dir)
	} else if _, err := os.Stat(filepath.Join("..", grafana[dir], path.Base(home))); err != nil {
		t.Errorf("home dashboard: %v", err)
	}
}

// composeVar matches docker compose's ${NAME}, ${NAME:-default} and
// ${NAME:?error} interpolation.
var composeVar = regexp.MustCompile(`\$\{(\w+)(?::?[-?][^}]*)?\}`)

// TestDeploy_ComposePassword interpolates idmint's environment in
// docker-compose.yml as compose does, with a database password holding
// every character that has a meaning in a URL, and checks that the
// PostgreSQL driver connects with that password, as user idmint, to host
// postgres: the password must not be pasted into the URL.
func TestDeploy_ComposePassword(t *testing.T) {
	const password = "p@ss/w:rd#1?%2"
	var compose struct {
		Services map[string]struct{ Environment map[string]string }
	}
	readYAML(t, "../docker-compose.yml", &compose)
	env := compose.Services["idmint"].Environment
	vars := map[string]string{"POSTGRES_PASSWORD": password}
	for name, v := range env {
		v = composeVar.ReplaceAllStringFunc(v, func(ref string) string {
			return vars[composeVar.FindStringSubmatch(ref)[1]]
		})
		if strings.HasPrefix(name, "PG") {
			t.Setenv(name, v)
		}
		env[name] = v
	}
	cfg, err := pgconn.ParseConfig(env["IDMINT_DATABASE_URL"])
	if err != nil {
		t.Fatalf("IDMINT_DATABASE_URL with password %q: %v", password, err)
	}
	if cfg.Password != password || cfg.User != "idmint" || cfg.Host != "postgres" || cfg.Database != "idmint" {
		t.Fatalf("connects as %q password %q to %s/%s; want idmint, %q, postgres/idmint", cfg.User, cfg.Password, cfg.Host, cfg.Database, password)
	}
}
