package conformance_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/servetest"
	"github.com/idmint/idmint/testkit/testutil"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// Languages the suite knows, in the order it reports them. Another
// directory clients/LANG with a conformance program is run too.
var knownLangs = []string{"go", "python", "java", "ts"}

const (
	tag = "conformance"
	// speedTag is the tag of the speed runs: the default max_step, so that
	// a run measures the client, not the round trips of small ranges.
	speedTag = "conformance-speed"
	// The tag's step and max_step: small enough that every run takes many
	// ranges, so that lost replies and the kill land on grants.
	step, maxStep = 100, 2000
	// lossShare is the share of replies the proxies reset after the
	// server committed.
	lossShare = 0.05
	// threads is each conformance program's --threads.
	threads = 4
	// loopsPerLang is how many runs of each client go at once.
	loopsPerLang = 2
	// runsPerLoop bounds the runs of one loop (each run has its token).
	runsPerLoop = 40
	// aloneCount is the --count of each client's run alone at the end,
	// which checks the give-back.
	aloneCount = 1000
	// Each language's first tokens: preflight, alone and speed runs; the
	// lossy runs take the others.
	tokPreflight, tokAlone, tokSpeed, tokTLS, tokLossy = 0, 1, 2, 3, 4
)

// settings are the suite's environment (see doc.go).
type settings struct {
	only     map[string]bool // IDMINT_TEST_CLIENTS: the languages to run (nil: all)
	required map[string]bool // IDMINT_TEST_REQUIRE_CLIENTS
	count    int             // IDMINT_TEST_CLIENTS_COUNT: --count of one run
	speed    int             // IDMINT_TEST_CLIENTS_SPEED_COUNT: --count of a speed run
	duration time.Duration   // IDMINT_TEST_CLIENTS_DURATION: the lossy phase
}

func readSettings(t *testing.T) settings {
	v := os.Getenv("IDMINT_TEST_CLIENTS")
	if v == "" {
		t.Skip("the conformance suite of the clients runs with make test-clients (IDMINT_TEST_CLIENTS=all, or a comma-separated list of languages)")
	}
	s := settings{count: 100_000, speed: 2_000_000, duration: 8 * time.Second, required: langSet(os.Getenv("IDMINT_TEST_REQUIRE_CLIENTS"))}
	if v != "all" && v != "1" {
		s.only = langSet(v)
	}
	if c := os.Getenv("IDMINT_TEST_CLIENTS_COUNT"); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 {
			t.Fatalf("IDMINT_TEST_CLIENTS_COUNT=%q: want a count of at least 1", c)
		}
		s.count = n
	}
	if c := os.Getenv("IDMINT_TEST_CLIENTS_SPEED_COUNT"); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 {
			t.Fatalf("IDMINT_TEST_CLIENTS_SPEED_COUNT=%q: want a count of at least 1", c)
		}
		s.speed = n
	}
	if d := os.Getenv("IDMINT_TEST_CLIENTS_DURATION"); d != "" {
		dur, err := time.ParseDuration(d)
		if err != nil || dur <= 0 {
			t.Fatalf("IDMINT_TEST_CLIENTS_DURATION=%q: want a duration", d)
		}
		s.duration = dur
	}
	for lang := range s.required {
		if s.only != nil && !s.only[lang] {
			t.Fatalf("IDMINT_TEST_REQUIRE_CLIENTS names %s, which IDMINT_TEST_CLIENTS=%s leaves out", lang, v)
		}
	}
	return s
}

func langSet(v string) map[string]bool {
	m := map[string]bool{}
	for _, l := range strings.Split(v, ",") {
		if l = strings.TrimSpace(l); l != "" {
			m[l] = true
		}
	}
	return m
}

// repoRoot is the repository's root, two levels above this package.
func repoRoot(t *testing.T) string {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// program is one client's conformance program.
type program struct {
	lang string
	path string // an executable
}

// findPrograms returns the conformance program of every client present:
// clients/LANG/conformance, an executable file, or for Go a directory of
// package main, built here.
func findPrograms(t *testing.T, root string, s settings) []program {
	dirs, err := os.ReadDir(filepath.Join(root, "clients"))
	if err != nil {
		t.Fatal(err)
	}
	var out []program
	seen := map[string]bool{}
	for _, d := range dirs {
		lang := d.Name()
		if !d.IsDir() || (s.only != nil && !s.only[lang]) {
			continue
		}
		path := filepath.Join(root, "clients", lang, "conformance")
		fi, err := os.Stat(path)
		switch {
		case err != nil:
			continue
		case fi.IsDir() && lang != "go":
			notBuilt(t, s, lang, path+" is a directory: only Go's conformance program is built by the suite, the others are executable files")
			continue
		case fi.IsDir():
			bin := filepath.Join(t.TempDir(), lang+"-conformance")
			build := exec.Command("go", "build", "-o", bin, "./"+filepath.Join("clients", lang, "conformance"))
			build.Dir = root
			if out, err := build.CombinedOutput(); err != nil {
				notBuilt(t, s, lang, fmt.Sprintf("go build: %v\n%s", err, out))
				continue
			}
			path = bin
		case fi.Mode()&0o111 == 0:
			notBuilt(t, s, lang, path+" is not executable")
			continue
		}
		seen[lang] = true
		out = append(out, program{lang: lang, path: path})
	}
	for lang := range s.required {
		if !seen[lang] {
			t.Errorf("IDMINT_TEST_REQUIRE_CLIENTS names %s, and clients/%s/conformance is missing or did not build", lang, lang)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	rank := func(l string) int {
		if i := slices.Index(knownLangs, l); i >= 0 {
			return i
		}
		return len(knownLangs)
	}
	sort.SliceStable(out, func(i, j int) bool { return rank(out[i].lang) < rank(out[j].lang) })
	return out
}

// notBuilt reports a client that cannot run: a failure when it is
// required, else a line in the log.
func notBuilt(t *testing.T, s settings, lang, why string) {
	if s.required[lang] {
		t.Errorf("client %s is required (IDMINT_TEST_REQUIRE_CLIENTS) and cannot run: %s", lang, why)
		return
	}
	t.Logf("client %s left out: %s", lang, why)
}

// startInstance starts idmint serve on a free port, with more flags in
// extra (TLS: then it is probed with a TCP connection).
func startInstance(t *testing.T, bin, dbURL, name string, extra ...string) *servetest.Process {
	t.Helper()
	in := &servetest.Process{Bin: bin, DatabaseURL: dbURL, Instance: name, Ready: "/id/live",
		Args: append([]string{"--auth", "token", "--range-grants-per-second", "0",
			"--prune-after", "0", "--snowflake=false", "--grpc-listen", "off"}, extra...)}
	if len(extra) > 0 {
		in.Ready = "tcp"
	}
	in.Start(t)
	return in
}

// idmint runs the idmint binary on the database and returns its stdout.
func idmint(t *testing.T, bin string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("idmint %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// tokenPrincipal is the segment log's principal of a bearer token
// (idm_ID_SECRET): "token:ID".
func tokenPrincipal(t *testing.T, secret string) string {
	parts := strings.SplitN(secret, "_", 3)
	if len(parts) != 3 || parts[0] != "idm" || parts[1] == "" {
		t.Fatalf("token %q…: not idm_ID_SECRET", secret[:min(len(secret), 8)])
	}
	return "token:" + parts[1]
}

// newTokens makes n tokens of scope ids:TAG through the admin API of base.
func newTokens(t *testing.T, base, admin, name string, n int) []string {
	t.Helper()
	out := make([]string, n)
	for i := range out {
		body := fmt.Sprintf(`{"name":"%s-%d","scopes":["ids:%s*"]}`, name, i, tag)
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/tokens", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+admin)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var reply struct {
			Secret string `json:"secret"`
		}
		err = json.NewDecoder(resp.Body).Decode(&reply)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusCreated || reply.Secret == "" {
			t.Fatalf("POST /v1/tokens: %d %v", resp.StatusCode, err)
		}
		out[i] = reply.Secret
	}
	return out
}

// knownOn waits until token is accepted by the instance at base (a token
// made on one instance reaches the others within a second).
func knownOn(t *testing.T, base, token string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "the tokens to reach "+base, func() bool {
		req, _ := http.NewRequest(http.MethodGet, base+"/id?biz_tag="+tag, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// run is one execution of a conformance program.
type run struct {
	lang      string
	tag       string
	name      string // lang/phase/n, for messages
	principal string
	count     int
	ids       []int64
	seconds   float64 // the program's own measure, else wall time
	err       error
	stderr    string
	started   atomic.Bool // set when the process started
	finished  atomic.Bool
}

var summaryRE = regexp.MustCompile(`(?m)^conformance: ids=(\d+) threads=(\d+) seconds=([0-9.]+)\s*$`)

// runTimeout bounds one run of a program; preflightTimeout the first,
// which may build the client.
const runTimeout, preflightTimeout = 2 * time.Minute, 10 * time.Minute

// execute runs p against urls with token, and more flags in extra, and
// reads what it printed.
func (r *run) execute(p program, urls []string, token string, extra ...string) {
	limit := runTimeout
	if strings.Contains(r.name, "/preflight/") {
		limit = preflightTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.path, "--url", strings.Join(urls, ","), "--tag", r.tag,
		"--count", strconv.Itoa(r.count), "--threads", strconv.Itoa(threads), "--token", token)
	cmd.Args = append(cmd.Args, extra...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		r.err = err
		r.finished.Store(true)
		return
	}
	r.started.Store(true)
	err := cmd.Wait()
	wall := time.Since(start).Seconds()
	r.finished.Store(true)
	r.stderr = stderr.String()
	switch {
	case ctx.Err() != nil:
		r.err = fmt.Errorf("%s did not finish within %v: killed", r.name, limit)
	case err != nil:
		r.err = fmt.Errorf("%s exited: %v", r.name, err)
	}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		id, perr := strconv.ParseInt(strings.TrimSpace(sc.Text()), 10, 64)
		if perr != nil || id < 1 {
			r.err = fmt.Errorf("%s printed %q: not an ID", r.name, sc.Text())
			return
		}
		r.ids = append(r.ids, id)
	}
	if r.err == nil && len(r.ids) != r.count {
		r.err = fmt.Errorf("%s printed %d IDs, want %d", r.name, len(r.ids), r.count)
	}
	r.seconds = wall
	if m := summaryRE.FindAllStringSubmatch(r.stderr, -1); m != nil {
		if s, perr := strconv.ParseFloat(m[len(m)-1][3], 64); perr == nil && s > 0 {
			r.seconds = s
		}
	}
}

func (r *run) failure() string {
	return fmt.Sprintf("%v\nstderr (tail):\n%s", r.err, tail(r.stderr, 2000))
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// TestConformance runs every client's conformance program against two real
// idmint serve processes on PostgreSQL, through proxies that reset 5% of
// replies after the server committed, beside plain GET /id callers, and
// SIGKILLs one instance mid-run. It then checks, from what the programs
// printed and from the segment log: no ID handed out twice across all
// clients and HTTP; no range granted twice; every ID a run printed lies in a
// range granted to that run's token and not given back; every ID of every
// range granted to a run was printed by it exactly once, but for the unused
// tails of its last two ranges left at close (when the give-back was
// refused because someone was granted since); and, each client run alone,
// that close gave back every unused ID. It prints each client's throughput
// (IDs per second from 4 threads).
func TestConformance(t *testing.T) {
	s := readSettings(t)
	root := repoRoot(t)
	progs := findPrograms(t, root, s)
	if len(progs) == 0 {
		t.Fatal("no client's conformance program found under clients/ (clients/LANG/conformance)")
	}
	su := newSuite(t, s, root, progs)
	ready := su.preflight(progs)
	su.tls(ready)
	su.lossy(ready)
	su.aloneRuns(ready)

	rows := segmentLog(t, su.pool)
	rep := check(t, rows, su.runs, su.alone, su.httpIDs)
	t.Logf("lossy phase: %d replies through the proxies, %d reset after the server answered; %d GET /id answered, %d failed",
		su.replies, su.resets, len(su.httpIDs), su.httpFailed)
	if su.resets == 0 {
		t.Errorf("the proxies reset no reply: the run proved nothing about lost replies")
	}
	t.Logf("%d IDs in all (%d from GET /id), 0 duplicates; %d ranges in the segment log, none overlapping; %d granted to %d client runs, checked for being received exactly once (%d given back at close, %d unused tails left as gaps)",
		rep.ids, len(su.httpIDs), len(rows), rep.clientRanges, rep.runs, rep.givenBack, rep.gaps)
	su.speed(ready)
}

// suite is one run of the conformance suite: its instances, proxies and
// tokens, and every run of a program.
type suite struct {
	t         *testing.T
	s         settings
	bin       string
	dbURL     string
	pool      *pgxpool.Pool
	insts     []*servetest.Process
	proxies   []*lossyProxy
	proxyURLs []string // the instances through their proxies
	direct    []string // the instances
	httpToken string
	// tokens holds each language's tokens: tokPreflight, tokAlone,
	// tokSpeed, tokTLS, then the lossy runs'.
	tokens map[string][]string

	mu    sync.Mutex // guards runs while the lossy phase runs
	runs  []*run     // every checked run
	alone map[*run]bool

	// What the lossy phase saw.
	httpIDs         []int64
	httpFailed      int64
	resets, replies int64
}

// newSuite builds idmint, makes a database with the suite's tags and
// tokens, and starts two instances, each behind a proxy that loses nothing
// yet.
func newSuite(t *testing.T, s settings, root string, progs []program) *suite {
	su := &suite{t: t, s: s, alone: map[*run]bool{}, tokens: map[string][]string{}}
	su.bin = servetest.Build(t)
	su.dbURL = pgtest.Shared(t).NewDatabase(t)
	db := []string{"--database-url", su.dbURL}
	idmint(t, su.bin, append([]string{"migrate"}, db...)...)
	idmint(t, su.bin, append([]string{"tag", "create", tag, "--step", strconv.Itoa(step), "--max-step", strconv.Itoa(maxStep)}, db...)...)
	idmint(t, su.bin, append([]string{"tag", "create", speedTag}, db...)...)
	admin := idmint(t, su.bin, append([]string{"token", "create", "--name", "conformance-admin", "--scope", "admin"}, db...)...)
	su.httpToken = idmint(t, su.bin, append([]string{"token", "create", "--name", "conformance-http", "--scope", "ids:" + tag}, db...)...)
	pool, err := pgxpool.New(context.Background(), su.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	su.pool = pool

	su.insts = []*servetest.Process{startInstance(t, su.bin, su.dbURL, "inst-0"), startInstance(t, su.bin, su.dbURL, "inst-1")}
	for _, in := range su.insts {
		p := newLossyProxy(t, in.Addr, 0)
		su.proxies = append(su.proxies, p)
		su.proxyURLs = append(su.proxyURLs, "http://"+p.addr())
		su.direct = append(su.direct, "http://"+in.Addr)
	}
	// Every run has a token of its own, so that the segment log's
	// principal tells its ranges from every other run's.
	for _, p := range progs {
		su.tokens[p.lang] = newTokens(t, su.direct[0], admin, "conformance-"+p.lang, tokLossy+loopsPerLang*runsPerLoop)
	}
	for _, p := range progs {
		knownOn(t, su.direct[1], su.tokens[p.lang][len(su.tokens[p.lang])-1])
	}
	return su
}

// newRun records a run of p on the suite's tag with token; the caller
// holds mu when other runs may be recorded at once.
func (su *suite) newRun(p program, phase string, n, count int, token string) *run {
	r := &run{lang: p.lang, tag: tag, name: fmt.Sprintf("%s/%s/%d", p.lang, phase, n), principal: tokenPrincipal(su.t, token), count: count}
	su.runs = append(su.runs, r)
	return r
}

// preflight has each program take a few IDs straight from the instances,
// which also tells whether it can run here at all; it returns those that
// can.
func (su *suite) preflight(progs []program) []program {
	t := su.t
	var ready []program
	for _, p := range progs {
		tok := su.tokens[p.lang][tokPreflight]
		r := su.newRun(p, "preflight", 0, 10, tok)
		r.execute(p, su.direct, tok)
		if r.err != nil {
			notBuilt(t, su.s, p.lang, "its preflight run failed: "+r.failure())
			su.runs = su.runs[:len(su.runs)-1]
			continue
		}
		ready = append(ready, p)
	}
	if t.Failed() {
		t.FailNow()
	}
	if len(ready) == 0 {
		t.Fatal("no client's conformance program could run")
	}
	return ready
}

// tls runs each program alone against an instance serving HTTPS that asks
// for a client certificate (idmint dev-certs), with --ca, --cert and --key.
func (su *suite) tls(ready []program) {
	t := su.t
	certs := filepath.Join(t.TempDir(), "certs")
	idmint(t, su.bin, "dev-certs", "--dir", certs)
	pem := func(name string) string { return filepath.Join(certs, name) }
	in := startInstance(t, su.bin, su.dbURL, "inst-tls", "--tls-cert", pem("server.pem"), "--tls-key", pem("server-key.pem"), "--tls-client-ca", pem("ca.pem"))
	for _, p := range ready {
		tok := su.tokens[p.lang][tokTLS]
		r := su.newRun(p, "tls", 0, aloneCount, tok)
		r.execute(p, []string{"https://" + in.Addr}, tok, "--ca", pem("ca.pem"), "--cert", pem("client.pem"), "--key", pem("client-key.pem"))
		if r.err != nil {
			t.Fatalf("%s", r.failure())
		}
		su.alone[r] = true
	}
	in.Stop(t, syscall.SIGTERM)
}

// lossy runs loopsPerLang runs of every program at once, one after another
// with new tokens, through both proxies losing lossShare of the replies,
// beside GET /id callers, for the phase's duration; it SIGKILLs the first
// instance once every loop has a run under way that was granted a range
// (or half the phase went by).
func (su *suite) lossy(ready []program) {
	t := su.t
	for _, p := range su.proxies {
		p.setShare(lossShare)
	}
	ctx, stop := context.WithTimeout(context.Background(), su.s.duration)
	defer stop()
	var wg sync.WaitGroup
	inFlight := make([]atomic.Pointer[run], len(ready)*loopsPerLang)
	for pi, p := range ready {
		for loop := range loopsPerLang {
			slot := pi*loopsPerLang + loop
			wg.Go(func() {
				for n := range runsPerLoop {
					if ctx.Err() != nil {
						return
					}
					tok := su.tokens[p.lang][tokLossy+loop*runsPerLoop+n]
					su.mu.Lock()
					r := su.newRun(p, fmt.Sprintf("lossy%d", loop), n, su.s.count, tok)
					su.mu.Unlock()
					inFlight[slot].Store(r)
					urls := slices.Clone(su.proxyURLs)
					if rand.IntN(2) == 1 {
						slices.Reverse(urls)
					}
					r.execute(p, urls, tok)
					if r.err != nil {
						return
					}
				}
			})
		}
	}
	var killed atomic.Bool
	stopHTTP := su.httpCallers(&killed)

	underWay := func() bool {
		var principals []string
		for i := range inFlight {
			r := inFlight[i].Load()
			if r == nil || !r.started.Load() || r.finished.Load() {
				return false
			}
			principals = append(principals, r.principal)
		}
		var n int
		su.pool.QueryRow(context.Background(), `SELECT count(DISTINCT principal) FROM idmint_segments WHERE principal = ANY($1)`, principals).Scan(&n)
		return n == len(principals)
	}
	killDeadline := time.Now().Add(su.s.duration / 2)
	for time.Now().Before(killDeadline) && !underWay() {
		time.Sleep(2 * time.Millisecond)
	}
	var caught []string
	for i := range inFlight {
		if r := inFlight[i].Load(); r != nil && r.started.Load() && !r.finished.Load() {
			caught = append(caught, r.name)
		}
	}
	victim := su.insts[0]
	victim.Stop(t, syscall.SIGKILL)
	killed.Store(true)
	t.Logf("SIGKILLed %s with these runs under way: %s", victim.Instance, strings.Join(caught, ", "))
	wg.Wait()
	stopHTTP()
	for _, r := range su.runs {
		if r.err != nil {
			t.Errorf("%s", r.failure())
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	for _, p := range su.proxies {
		su.resets += p.resets.Load()
		su.replies += p.replies.Load()
		p.setShare(0)
	}
}

// httpCallers starts four plain GET /id callers, straight to the
// instances (only the second once killed is set); the function returned
// stops them and keeps what they got.
func (su *suite) httpCallers(killed *atomic.Bool) func() {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex // guards su.httpIDs and su.httpFailed until wg is done
	hc := &http.Client{Timeout: 5 * time.Second}
	for w := range 4 {
		wg.Go(func() {
			var mine []int64
			var failed int64
			for i := w; ctx.Err() == nil; i++ {
				base := su.direct[i%2]
				if killed.Load() {
					base = su.direct[1]
				}
				id, err := getID(hc, base, su.httpToken)
				if err != nil {
					failed++
					continue
				}
				mine = append(mine, id)
			}
			mu.Lock()
			su.httpIDs = append(su.httpIDs, mine...)
			su.httpFailed += failed
			mu.Unlock()
		})
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

// aloneRuns runs each program with nothing else asking, through the
// proxies without losses: close must give back every ID it did not print,
// so the tag's max_id is the last ID it printed.
func (su *suite) aloneRuns(ready []program) {
	t := su.t
	for _, p := range ready {
		tok := su.tokens[p.lang][tokAlone]
		r := su.newRun(p, "alone", 0, aloneCount, tok)
		r.execute(p, slices.Clone(su.proxyURLs), tok)
		if r.err != nil {
			t.Fatalf("%s", r.failure())
		}
		su.alone[r] = true
		var maxID int64
		if err := su.pool.QueryRow(context.Background(), `SELECT max_id FROM idmint_tags WHERE biz_tag = $1`, tag).Scan(&maxID); err != nil {
			t.Fatal(err)
		}
		if top := slices.Max(r.ids); maxID != top {
			t.Errorf("%s alone: max_id %d after close, the last ID it printed %d: its unused tail was not given back", r.name, maxID, top)
		}
	}
}

// speed runs each program alone on the surviving instance, on a tag of the
// default max_step, so that the figure is the client's and not that of the
// round trips of the lossy phase's small ranges, and prints each client's
// throughput in both.
func (su *suite) speed(ready []program) {
	t := su.t
	for _, p := range ready {
		r := &run{lang: p.lang, tag: speedTag, name: p.lang + "/speed/0", count: su.s.speed}
		r.execute(p, su.direct[1:], su.tokens[p.lang][tokSpeed])
		if r.err != nil {
			t.Fatalf("%s", r.failure())
		}
		ids := slices.Sorted(slices.Values(r.ids))
		for i := 1; i < len(ids); i++ {
			if ids[i] == ids[i-1] {
				t.Fatalf("%s: ID %d printed twice", r.name, ids[i])
			}
		}
		var lossyIDs int
		var lossySecs float64
		var n int
		for _, l := range su.runs {
			if l.lang == p.lang && strings.Contains(l.name, "/lossy") {
				lossyIDs += len(l.ids)
				lossySecs += l.seconds
				n++
			}
		}
		fmt.Printf("conformance: %-7s %10.0f IDs/s from %d threads alone (%d IDs); %9.0f IDs/s in %d lossy runs of %d IDs (max_step %d, 5%% of replies reset, an instance killed)\n",
			p.lang, float64(len(r.ids))/r.seconds, threads, len(r.ids), float64(lossyIDs)/lossySecs, n, su.s.count, maxStep)
	}
}

// getID takes one ID with GET /id.
func getID(hc *http.Client, base, token string) (int64, error) {
	req, _ := http.NewRequest(http.MethodGet, base+"/id?biz_tag="+tag, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	var reply struct {
		ID int64 `json:"id,string"`
	}
	if err := json.Unmarshal(body, &reply); err != nil {
		return 0, err
	}
	return reply.ID, nil
}

// segment is a row of the segment log.
type segment struct {
	requestID     string
	first, last   int64
	returnedFrom  int64 // 0: nothing given back
	principal     string
	instance      string
	grantedAt     time.Time
	servedInRange int64 // IDs of [first, kept] printed by the run holding it
}

func (s *segment) String() string {
	return fmt.Sprintf("[%d, %d] (request %s of %s via %s, returned from %d, granted %s)",
		s.first, s.last, s.requestID, cmp.Or(s.principal, "the instance"), s.instance, s.returnedFrom, s.grantedAt.Format("15:04:05.000000"))
}

// kept is the last ID the holder kept: the range's end, or before the tail
// it gave back.
func (s segment) kept() int64 {
	if s.returnedFrom > 0 {
		return s.returnedFrom - 1
	}
	return s.last
}

func segmentLog(t *testing.T, pool *pgxpool.Pool) []*segment {
	t.Helper()
	rs, err := pool.Query(context.Background(),
		`SELECT request_id::text, first_id, last_id, COALESCE(returned_from, 0), COALESCE(principal, ''), instance, granted_at
		   FROM idmint_segments WHERE biz_tag = $1 ORDER BY first_id`, tag)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []*segment
	for rs.Next() {
		s := &segment{}
		if err := rs.Scan(&s.requestID, &s.first, &s.last, &s.returnedFrom, &s.principal, &s.instance, &s.grantedAt); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

type report struct {
	ids, runs, clientRanges, givenBack, gaps int
}

// check holds the suite's verdicts; see TestConformance.
func check(t *testing.T, rows []*segment, runs []*run, alone map[*run]bool, httpIDs []int64) report {
	t.Helper()
	var rep report
	// No ID granted twice: the kept parts of the ranges, sorted by first,
	// never overlap. (The part of a range given back is granted again; a
	// range given back in full keeps nothing.)
	var top *segment // the range with the highest kept ID so far
	for _, s := range rows {
		if s.kept() < s.first {
			continue
		}
		if top != nil && s.first <= top.kept() {
			t.Errorf("IDs granted twice: %v and %v", top, s)
		}
		if top == nil || s.kept() > top.kept() {
			top = s
		}
	}
	// No ID handed out twice, across every run and GET /id.
	all := slices.Clone(httpIDs)
	for _, r := range runs {
		all = append(all, r.ids...)
	}
	slices.Sort(all)
	dups := 0
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			if dups < 10 {
				t.Errorf("ID %d handed out twice", all[i])
			}
			dups++
		}
	}
	if dups > 0 {
		t.Errorf("%d duplicate IDs", dups)
	}
	rep.ids = len(all)

	byPrincipal := map[string][]*segment{}
	var instanceRows []*segment
	for _, s := range rows {
		if s.principal == "" {
			instanceRows = append(instanceRows, s)
		} else {
			byPrincipal[s.principal] = append(byPrincipal[s.principal], s)
		}
	}
	// GET /id is served from the instances' own segments only.
	if n := outside(slices.Sorted(slices.Values(httpIDs)), instanceRows); n > 0 {
		t.Errorf("%d IDs of GET /id outside every instance segment", n)
	}
	for _, r := range runs {
		mine := byPrincipal[r.principal]
		if len(mine) == 0 {
			t.Errorf("%s: no range in the segment log for its token (%s)", r.name, r.principal)
			continue
		}
		rep.runs++
		rep.clientRanges += len(mine)
		ids := slices.Sorted(slices.Values(r.ids))
		if n := outside(ids, mine); n > 0 {
			t.Errorf("%s printed %d IDs outside the ranges granted to it and kept", r.name, n)
		}
		// Every kept ID of every range was printed: counted per range.
		j := 0
		for _, s := range mine {
			for j < len(ids) && ids[j] < s.first {
				j++
			}
			for j < len(ids) && ids[j] <= s.kept() {
				s.servedInRange++
				j++
			}
		}
		for i, s := range mine {
			size := s.kept() - s.first + 1
			if s.returnedFrom > 0 {
				rep.givenBack++
			}
			switch {
			case s.servedInRange == size:
			case alone[r]:
				t.Errorf("%s (alone): range [%d, %d] of request %s: %d of its %d kept IDs printed, the rest neither printed nor given back",
					r.name, s.first, s.last, s.requestID, s.servedInRange, size)
			case s.returnedFrom == 0 && i >= len(mine)-2:
				// An unused tail at close whose give-back was refused
				// (someone was granted since): a gap.
				rep.gaps++
			default:
				t.Errorf("%s: range [%d, %d] of request %s (returned from %d): %d of its %d kept IDs printed: received never, or only in part",
					r.name, s.first, s.last, s.requestID, s.returnedFrom, s.servedInRange, size)
			}
		}
	}
	return rep
}

// outside counts the IDs of sorted ids outside every kept part of rows
// (sorted by first).
func outside(ids []int64, rows []*segment) int {
	n, j := 0, 0
	for _, id := range ids {
		for j < len(rows) && rows[j].kept() < id {
			j++
		}
		if j == len(rows) || id < rows[j].first {
			n++
		}
	}
	return n
}
