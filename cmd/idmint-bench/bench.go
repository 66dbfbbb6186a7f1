package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

type benchConfig struct {
	idmint     string
	rounds     int
	duration   time.Duration
	threads    int
	conns      int
	memTags    int
	cpuProfile string
	dbURL      string
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c benchConfig
	fs := flag.NewFlagSet("idmint-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.idmint, "idmint", "bin/idmint", "idmint binary to measure")
	fs.IntVar(&c.rounds, "rounds", 3, "alternating rounds per target (the median is reported)")
	fs.DurationVar(&c.duration, "duration", 5*time.Second, "length of one wrk run")
	fs.IntVar(&c.threads, "threads", 2, "wrk threads")
	fs.IntVar(&c.conns, "conns", 64, "wrk connections")
	fs.IntVar(&c.memTags, "memory-tags", 10_000, "warm tags for the memory figure (0 skips it)")
	fs.StringVar(&c.cpuProfile, "cpu-profile", "", "also profile idmint under GET /id load into this file and print its top entries")
	fs.StringVar(&c.dbURL, "database-url", os.Getenv("IDMINT_BENCH_DATABASE_URL"), "PostgreSQL server to use (default: $IDMINT_BENCH_DATABASE_URL, else one from the test harness)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.rounds < 1 || c.duration < time.Second {
		return errors.New("want -rounds ≥ 1 and -duration ≥ 1s")
	}
	b := &bench{cfg: c, out: stdout, logw: stderr, openRates: map[string]float64{}}
	defer b.cleanup()
	return b.run(ctx)
}

// bench is one run: the processes it started and what it measured.
type bench struct {
	cfg  benchConfig
	out  io.Writer
	logw io.Writer
	dir  string
	db   string // URL of the benchmark's database
	load load
	// openRates are the open-loop targets' rates (openLoops).
	openRates map[string]float64

	mu    sync.Mutex
	stops []func() // run in reverse order by cleanup
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.logw, "# "+format+"\n", args...)
}

func (b *bench) printf(format string, args ...any) { fmt.Fprintf(b.out, format, args...) }

func (b *bench) atExit(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stops = append(b.stops, f)
}

func (b *bench) cleanup() {
	b.mu.Lock()
	stops := b.stops
	b.stops = nil
	b.mu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
}

func (b *bench) run(ctx context.Context) error {
	var err error
	if b.dir, err = os.MkdirTemp("", "idmint-bench-"); err != nil {
		return err
	}
	b.atExit(func() { os.RemoveAll(b.dir) })
	if _, err := os.Stat(b.cfg.idmint); err != nil {
		return fmt.Errorf("idmint binary: %w (build it: go build -o bin/idmint ./cmd/idmint)", err)
	}
	wrk, err := findWrk(ctx, b.logf)
	if err != nil {
		return err
	}
	if b.load, err = newLoad(wrk, b.dir, b.cfg.threads, b.cfg.conns, b.cfg.duration); err != nil {
		return err
	}
	if err := b.database(ctx); err != nil {
		return err
	}
	switchTags := make([]string, b.cfg.rounds)
	for i := range switchTags {
		switchTags[i] = fmt.Sprintf("switch%d", i+1)
	}
	if err := b.idmintCmd(ctx, "migrate"); err != nil {
		return err
	}
	for _, t := range []string{"bench", "ranges"} {
		if err := b.idmintCmd(ctx, "tag", "create", t, "--step", "1000"); err != nil {
			return err
		}
	}
	for _, t := range switchTags {
		if err := b.idmintCmd(ctx, "tag", "create", t, "--step", "10"); err != nil {
			return err
		}
	}

	listenAddr, err := freeAddr()
	if err != nil {
		return err
	}
	idm, err := b.startIdmint(ctx, "idmint", "--grpc-listen", listenAddr)
	if err != nil {
		return err
	}
	bare, err := b.startSelf(ctx, "serve-bare")
	if err != nil {
		return err
	}
	nextval, err := b.startSelf(ctx, "serve-nextval", "--database-url", withParam(b.db, "pool_max_conns", "32"))
	if err != nil {
		return err
	}
	bareGRPCAddr, err := b.startBareRPC(ctx, "serve-bare-grpc")
	if err != nil {
		return err
	}
	bareConnectAddr, err := b.startBareRPC(ctx, "serve-bare-connect")
	if err != nil {
		return err
	}
	if err := waitGRPC(ctx, listenAddr, "bench"); err != nil {
		return err
	}
	// Unary NextID, closed loop: the same generator, connections and
	// goroutines for each.
	grpcTargets := []struct {
		name string
		dial dialer
	}{
		{"grpc-bare", grpcDialer(bareGRPCAddr, "bench")},
		{"grpc-listen", grpcDialer(listenAddr, "bench")},
		{"grpc-connect-bare", grpcDialer(bareConnectAddr, "bench")},
		{"grpc-idmint", grpcDialer(hostOf(idm.url), "bench")},
		{"connect-bare", connectDialer("http://"+bareConnectAddr, "bench")},
		{"connect-idmint", connectDialer(idm.url, "bench")},
	}
	gload := grpcLoad{conns: b.cfg.threads, workers: b.cfg.conns, duration: b.cfg.duration}
	open := openLoop{conns: b.cfg.threads, workers: b.cfg.conns, duration: b.cfg.duration}

	targets := []struct{ name, url string }{
		{"bare", bare + "/id?biz_tag=bench"},
		{"idmint", idm.url + "/id?biz_tag=bench"},
		{"nextval", nextval + "/id?biz_tag=bench"},
	}
	rangesURL := idm.url + "/ids?biz_tag=ranges&count=1000&format=ranges"
	listURL := idm.url + "/ids?biz_tag=ranges&count=1000"

	b.printf("idmint-bench: wrk -t%d -c%d, %d alternating rounds of %v, median; %d CPUs; load average before: %s\n",
		b.cfg.threads, b.cfg.conns, b.cfg.rounds, b.cfg.duration, runtime.NumCPU(), loadavg())
	b.logf("warming up")
	for _, t := range targets {
		if _, err := b.load.run(ctx, t.url, 2*time.Second); err != nil {
			return err
		}
	}
	if _, err := b.load.run(ctx, rangesURL, 2*time.Second); err != nil {
		return err
	}
	for _, t := range grpcTargets {
		if _, err := gload.run(ctx, t.dial, 2*time.Second); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
	}

	res := map[string]series{}
	for round := range b.cfg.rounds {
		// Rotate the order so that no target always runs first.
		for i := range targets {
			t := targets[(i+round)%len(targets)]
			r, err := b.load.run(ctx, t.url, 0)
			if err != nil {
				return err
			}
			res[t.name] = append(res[t.name], r)
			b.logf("round %d %-8s %9.0f req/s p50 %v p99 %v non-2xx %d", round+1, t.name, r.rate(), r.p50, r.p99, r.non2xx)
		}
		// A fresh tag with step 10: its first segments last microseconds
		// under this load, so every switch happens under fire.
		r, err := b.load.run(ctx, idm.url+"/id?biz_tag="+switchTags[round], 0)
		if err != nil {
			return err
		}
		res["switch"] = append(res["switch"], r)
		b.logf("round %d switch   %9.0f req/s p50 %v p99 %v non-2xx %d", round+1, r.rate(), r.p50, r.p99, r.non2xx)
		for _, x := range []struct{ name, url string }{{"ranges", rangesURL}, {"list", listURL}} {
			r, err := b.load.run(ctx, x.url, 0)
			if err != nil {
				return err
			}
			res[x.name] = append(res[x.name], r)
			b.logf("round %d %-8s %9.0f IDs/s p99 %v non-2xx %d", round+1, x.name, 1000*r.rate(), r.p99, r.non2xx)
		}
		// After the HTTP runs, so that their figures are measured as
		// before; the two gRPC servers alternate too.
		for i := range grpcTargets {
			t := grpcTargets[(i+round)%len(grpcTargets)]
			r, err := gload.run(ctx, t.dial, 0)
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			res[t.name] = append(res[t.name], r)
			b.logf("round %d %-17s %9.0f req/s p50 %v p99 %v failed %d", round+1, t.name, r.rate(), r.p50, r.p99, r.non2xx)
		}
	}
	if err := b.openLoops(ctx, open, res, bareGRPCAddr, listenAddr, bare+"/id?biz_tag=bench", idm.url+"/id?biz_tag=bench"); err != nil {
		return err
	}
	b.report(res)
	if err := b.roundTrips(ctx, idm.url, append([]string{"bench", "ranges"}, switchTags...)); err != nil {
		return err
	}
	b.printf("load average after: %s\n", loadavg())
	idm.stop()

	if b.cfg.memTags > 0 {
		if err := b.memory(ctx); err != nil {
			return err
		}
	}
	if b.cfg.cpuProfile != "" {
		return b.profile(ctx)
	}
	return nil
}

// report prints the medians and idmint's ratios.
func (b *bench) report(res map[string]series) {
	bare, idm, nv, sw := res["bare"].median(), res["idmint"].median(), res["nextval"].median(), res["switch"].median()
	b.printf("\nGET /id                  req/s      p50       p99   non-2xx  socket errors\n")
	for _, row := range []struct {
		name string
		m    result
	}{{"bare net/http", bare}, {"idmint serve", idm}, {"nextval() per request", nv}, {"idmint, step-10 tag", sw}} {
		b.printf("%-22s %8.0f %8v %9v %9d %14d\n", row.name, row.m.rate(), row.m.p50, row.m.p99, row.m.non2xx, row.m.socket)
	}
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	b.printf("\nidmint / bare: throughput %.2f× (target ≥ 0.9), p99 %.2f×\n",
		ratio(idm.rate(), bare.rate()), ratio(float64(idm.p99), float64(bare.p99)))
	// The same, round by round: each round runs the two back to back, so
	// the median of their ratios resists a machine whose load drifts.
	tr, pr := pairedRatios(res["idmint"], res["bare"])
	b.printf("idmint / bare, median of per-round ratios: throughput %.2f×, p99 %.2f×\n", tr, pr)
	b.printf("nextval / bare: throughput %.2f×; idmint / nextval: %.2f×\n",
		ratio(nv.rate(), bare.rate()), ratio(idm.rate(), nv.rate()))
	b.printf("segment switches (fresh step-10 tag): %d non-2xx, %d socket errors; p99 %.2f× the steady p99 (target 0 and ≤ 1.1)\n",
		sw.non2xx, sw.socket, ratio(float64(sw.p99), float64(idm.p99)))
	_, swp := pairedRatios(res["switch"], res["idmint"])
	b.printf("segment switches, median of per-round ratios: p99 %.2f× the steady p99\n", swp)
	rg, ls := res["ranges"].median(), res["list"].median()
	b.printf("GET /ids count=1000: format=ranges %.1f M IDs/s (target ≥ 20), list %.1f M IDs/s; non-2xx %d\n",
		rg.rate()*1000/1e6, ls.rate()*1000/1e6, rg.non2xx+ls.non2xx)

	b.reportRPC(res, idm)
}

// startBareRPC starts a reference RPC server (serve-bare-grpc or
// serve-bare-connect) and returns its address once it answers NextID.
func (b *bench) startBareRPC(ctx context.Context, kind string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	addr, err := freeAddr()
	if err != nil {
		return "", err
	}
	if _, err := b.start(ctx, kind, self, kind, "--listen", addr); err != nil {
		return "", err
	}
	return addr, waitGRPC(ctx, addr, "warm")
}

// roundTrips prints, per tag, the segment loads per million IDs issued: each
// load is one allocation statement, counted from the segment log.
func (b *bench) roundTrips(ctx context.Context, base string, tags []string) error {
	conn, err := pgx.Connect(ctx, b.db)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	b.printf("\ndatabase round trips per million IDs (segment-log rows / IDs issued; nextval() spends 1,000,000):\n")
	for _, tag := range tags {
		var rows int64
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM idmint_segments WHERE biz_tag = $1", tag).Scan(&rows); err != nil {
			return err
		}
		issued, err := idsIssued(ctx, base, tag)
		if err != nil {
			return err
		}
		per := 0.0
		if issued > 0 {
			per = float64(rows) / float64(issued) * 1e6
		}
		b.printf("  %-8s %12d IDs %6d loads  %10.2f per million\n", tag, issued, rows, per)
	}
	return nil
}

func idsIssued(ctx context.Context, base, tag string) (int64, error) {
	var h struct {
		Tags []struct {
			Issued int64 `json:"ids_issued"`
		} `json:"tags"`
	}
	if err := getJSON(ctx, base+"/id/health?biz_tag="+tag, &h); err != nil {
		return 0, err
	}
	if len(h.Tags) != 1 {
		return 0, fmt.Errorf("health of %s: %d tags", tag, len(h.Tags))
	}
	return h.Tags[0].Issued, nil
}

// memory prints the RSS of a fresh idmint with 1 warm tag and with
// memTags warm tags.
func (b *bench) memory(ctx context.Context) error {
	idm, err := b.startIdmint(ctx, "memory")
	if err != nil {
		return err
	}
	defer idm.stop()
	if err := getJSON(ctx, idm.url+"/id?biz_tag=bench", nil); err != nil {
		return err
	}
	one, err := rss(idm.pid)
	if err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, b.db)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `INSERT INTO idmint_tags (biz_tag, step)
		SELECT 'mem' || g, 1000 FROM generate_series(1, $1::int) g ON CONFLICT DO NOTHING`, b.cfg.memTags-1); err != nil {
		return err
	}
	// Tags created behind a running instance's back are served within a
	// second (its catalog rereads the tag names): wait for the first one.
	for deadline := time.Now().Add(5 * time.Second); ; {
		err := getJSON(ctx, idm.url+"/id?biz_tag=mem1", nil)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.logf("warming %d tags", b.cfg.memTags-1)
	work := make(chan int)
	errc := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				if err := getJSON(ctx, fmt.Sprintf("%s/id?biz_tag=mem%d", idm.url, i), nil); err != nil {
					errc <- err
					return
				}
			}
		})
	}
feed:
	for i := 1; i < b.cfg.memTags; i++ {
		select {
		case work <- i:
		case err = <-errc:
			break feed
		}
	}
	close(work)
	wg.Wait()
	if err != nil {
		return err
	}
	many, err := rss(idm.pid)
	if err != nil {
		return err
	}
	b.printf("\nidmint RSS: %.1f MiB with 1 warm tag, %.1f MiB with %d warm tags: %.0f bytes per warm tag\n",
		float64(one)/(1<<20), float64(many)/(1<<20), b.cfg.memTags, float64(many-one)/float64(b.cfg.memTags-1))
	return nil
}

// profile runs idmint with --cpu-profile under GET /id load and prints the
// profile's top entries.
func (b *bench) profile(ctx context.Context) error {
	idm, err := b.startIdmint(ctx, "profile", "--cpu-profile", b.cfg.cpuProfile)
	if err != nil {
		return err
	}
	if _, err := b.load.run(ctx, idm.url+"/id?biz_tag=bench", 2*b.cfg.duration); err != nil {
		idm.stop()
		return err
	}
	idm.stop()
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=30", b.cfg.idmint, b.cfg.cpuProfile).CombinedOutput()
	b.printf("\nCPU profile of idmint under GET /id (%s):\n%s", b.cfg.cpuProfile, out)
	return err
}

// database makes the benchmark's database and sets b.db.
func (b *bench) database(ctx context.Context) error {
	admin := b.cfg.dbURL
	if admin == "" {
		return errors.New("no PostgreSQL: set -database-url or IDMINT_BENCH_DATABASE_URL (make bench-http starts one through testkit/cmd/withpostgres)")
	}
	var suffix [4]byte
	rand.Read(suffix[:])
	name := "idmint_bench_" + hex.EncodeToString(suffix[:])
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return err
	}
	b.atExit(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if c, err := pgx.Connect(ctx, admin); err == nil {
			c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(ctx)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		return err
	}
	u.Path = "/" + name
	b.db = u.String()
	return nil
}

// idmintCmd runs one idmint command against the benchmark's database.
func (b *bench) idmintCmd(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, b.cfg.idmint, args...)
	cmd.Env = append(os.Environ(), "IDMINT_DATABASE_URL="+b.db)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("idmint %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// process is a server this run started.
type process struct {
	url  string
	pid  int
	stop func()
}

// startIdmint starts `idmint serve` with its defaults (its grpc-go listener
// off, unless extra sets --grpc-listen; and extra flags) on a
// free port, logging to a file, and waits until it answers.
func (b *bench) startIdmint(ctx context.Context, name string, extra ...string) (*process, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := append([]string{"serve", "--database-url", b.db, "--listen", addr, "--instance", "bench-" + name, "--grpc-listen", "off"}, extra...)
	p, err := b.start(ctx, name, b.cfg.idmint, args...)
	if err != nil {
		return nil, err
	}
	p.url = "http://" + addr
	return p, waitHTTP(ctx, p.url+"/id/health")
}

// startSelf starts a reference server (this binary, re-executed) and
// returns its base URL.
func (b *bench) startSelf(ctx context.Context, kind string, extra ...string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	addr, err := freeAddr()
	if err != nil {
		return "", err
	}
	if _, err := b.start(ctx, kind, self, append([]string{kind, "--listen", addr}, extra...)...); err != nil {
		return "", err
	}
	u := "http://" + addr
	return u, waitHTTP(ctx, u+"/id?biz_tag=warm")
}

// start starts a server process with its output in a log file; stop (also
// run at exit) sends SIGTERM and waits, at most 20s, then kills it.
func (b *bench) start(ctx context.Context, name, path string, args ...string) (*process, error) {
	logf, err := os.Create(filepath.Join(b.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				cmd.Process.Kill()
				<-done
			}
		})
	}
	b.atExit(stop)
	return &process{pid: cmd.Process.Pid, stop: stop}, nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitHTTP waits, at most 30s, until url answers 200.
func waitHTTP(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		err := getJSON(ctx, url, nil)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not come up: %w", url, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// getJSON GETs url, wants 200, and decodes the body into v unless v is nil.
func getJSON(ctx context.Context, url string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	if v == nil {
		return nil
	}
	return json.Unmarshal(body, v)
}

// rss returns the resident set size of process pid.
func rss(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}

func loadavg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// withParam adds a query parameter to a database URL.
func withParam(raw, key, value string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}
