package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/client"
	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/servetest"
	"github.com/idmint/idmint/testkit/testutil"
)

// The regions of these tests: each its own PostgreSQL database, claimed as
// docs/regions.md says (regions a and b, blocks of bStart IDs: a owns 1 to
// bStart, b the bStart after it), with its own idmint serve processes, so
// that two regions granting the same ID can only be the client's doing.
const (
	regionTag = "order"
	bStart    = 1_000_000_000_000_000 // 10^15
)

// testRegion is one region: a database and its idmint serve processes.
type testRegion struct {
	tb    testing.TB
	name  string
	bin   string
	dbURL string
	store *postgres.Store
	addrs []string
	procs []*exec.Cmd
	runs  int
}

// newRegion makes a database claimed as region name of a and b, with the
// tag starting at start, and n processes serving it.
func newRegion(tb testing.TB, bin, name string, start int64, n int) *testRegion {
	tb.Helper()
	return newClaimedRegion(tb, bin, name, "a,b", start, n)
}

// newClaimedRegion is newRegion with the database claimed as region name
// of regions (in that order), blocks of bStart IDs.
func newClaimedRegion(tb testing.TB, bin, name, regions string, start int64, n int) *testRegion {
	tb.Helper()
	store, dbURL := pgstore.New(tb)
	claim := exec.Command(bin, "region", "claim", "--database-url", dbURL, "--name", name, "--regions", regions,
		"--block", strconv.FormatInt(bStart, 10))
	if out, err := claim.CombinedOutput(); err != nil {
		tb.Fatalf("region claim: %v\n%s", err, out)
	}
	if _, err := store.CreateTag(context.Background(), allocator.TagSpec{Name: regionTag, Step: 100, MaxStep: 100, Start: start}); err != nil {
		tb.Fatal(err)
	}
	r := &testRegion{tb: tb, name: name, bin: bin, dbURL: dbURL, store: store}
	for range n {
		r.addrs = append(r.addrs, testutil.FreeAddr(tb))
	}
	r.start()
	return r
}

// urls are the base URLs of the region's processes.
func (r *testRegion) urls() []string {
	var out []string
	for _, a := range r.addrs {
		out = append(out, "http://"+a)
	}
	return out
}

// start starts the region's processes and waits until they are live.
func (r *testRegion) start() {
	r.tb.Helper()
	r.runs++
	r.procs = nil
	for i, addr := range r.addrs {
		name := fmt.Sprintf("%s-%d-%d", r.name, i, r.runs)
		logf, err := os.Create(filepath.Join(r.tb.TempDir(), name+".log"))
		if err != nil {
			r.tb.Fatal(err)
		}
		cmd := exec.Command(r.bin, "serve", "--database-url", r.dbURL, "--region", r.name, "--listen", addr, "--instance", name,
			"--grpc-listen", "off", "--log-format", "json", "--access-log=false", "--prune-after", "0")
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			r.tb.Fatal(err)
		}
		r.tb.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
			logf.Close()
		})
		r.procs = append(r.procs, cmd)
		testutil.Eventually(r.tb, 30*time.Second, name+" to be live", func() bool {
			resp, err := http.Get("http://" + addr + "/id/live")
			if err == nil {
				resp.Body.Close()
			}
			return err == nil && resp.StatusCode == http.StatusOK
		})
	}
}

// kill SIGKILLs the region's processes.
func (r *testRegion) kill() {
	r.tb.Helper()
	for _, p := range r.procs {
		p.Process.Kill()
		p.Wait()
	}
}

// segmentLog returns the region's segment log: request ID → range.
func (r *testRegion) segmentLog() map[string][2]int64 {
	r.tb.Helper()
	rows, err := r.store.Pool().Query(context.Background(),
		`SELECT request_id::text, first_id, last_id FROM idmint_segments WHERE biz_tag = $1`, regionTag)
	if err != nil {
		r.tb.Fatal(err)
	}
	defer rows.Close()
	out := map[string][2]int64{}
	for rows.Next() {
		var id string
		var f, l int64
		if err := rows.Scan(&id, &f, &l); err != nil {
			r.tb.Fatal(err)
		}
		out[id] = [2]int64{f, l}
	}
	if err := rows.Err(); err != nil {
		r.tb.Fatal(err)
	}
	return out
}

// maxID returns the tag's max_id in the region's database.
func (r *testRegion) maxID() int64 {
	r.tb.Helper()
	var m int64
	if err := r.store.Pool().QueryRow(context.Background(), `SELECT max_id FROM idmint_tags WHERE biz_tag = $1`, regionTag).Scan(&m); err != nil {
		r.tb.Fatal(err)
	}
	return m
}

// regionOf names the region whose share holds id.
func regionOf(id int64) string {
	if id > bStart {
		return "b"
	}
	return "a"
}

// regionLoad is workers taking IDs from one client, each acknowledged
// with the time it was handed out.
type regionLoad struct {
	check *checker.Checker
	stop  context.CancelFunc
	wg    sync.WaitGroup

	mu  sync.Mutex
	ids []int64
	at  []time.Time
}

func startRegionLoad(c *client.Client, workers int) *regionLoad {
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	l := &regionLoad{check: checker.New(), stop: stop}
	for w := range workers {
		l.wg.Go(func() {
			for ctx.Err() == nil {
				l.check.Attempt()
				id, err := c.Next(ctx, regionTag)
				if err != nil {
					if ctx.Err() == nil {
						l.check.Fail(err)
					}
					continue
				}
				// Each region's IDs increase for a worker; the two
				// regions' are not in order.
				l.check.Ack(fmt.Sprintf("worker-%d@%s", w, regionOf(id)), regionTag, id)
				l.mu.Lock()
				l.ids = append(l.ids, id)
				l.at = append(l.at, time.Now())
				l.mu.Unlock()
				time.Sleep(200 * time.Microsecond)
			}
		})
	}
	return l
}

func (l *regionLoad) halt() {
	l.stop()
	l.wg.Wait()
}

// firstFrom returns when the first ID of region name was handed out at
// or after since (zero when none).
func (l *regionLoad) firstFrom(name string, since time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, id := range l.ids {
		if !l.at[i].Before(since) && regionOf(id) == name {
			return l.at[i]
		}
	}
	return time.Time{}
}

// handedOut returns the IDs handed out, sorted.
func (l *regionLoad) handedOut() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]int64(nil), l.ids...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// requireNoCrossing fails tb unless every ID handed out lies in a range
// of the segment log of the region whose share holds it, and no request ID
// is in both regions' logs: no grant, lookup or resend crossed a region.
func requireNoCrossing(tb testing.TB, ids []int64, a, b *testRegion) {
	tb.Helper()
	logs := map[string]map[string][2]int64{"a": a.segmentLog(), "b": b.segmentLog()}
	for id := range logs["a"] {
		if _, ok := logs["b"][id]; ok {
			tb.Fatalf("request %s is in both regions' segment logs: a request crossed a region", id)
		}
	}
	for name, log := range logs {
		var ranges [][2]int64
		for _, r := range log {
			ranges = append(ranges, r)
		}
		sort.Slice(ranges, func(i, j int) bool { return ranges[i][0] < ranges[j][0] })
		for _, id := range ids {
			if regionOf(id) != name {
				continue
			}
			i := sort.Search(len(ranges), func(i int) bool { return ranges[i][1] >= id })
			if i == len(ranges) || ranges[i][0] > id {
				tb.Fatalf("id %d (region %s's share) is in no range of region %s's segment log", id, name, name)
			}
		}
	}
}

// requireNoLeap fails tb unless r's ranges follow one another from its
// tag's start: none starts past the end of those before it, as one would
// if a floor claimed from another region's share had raised r's max_id.
func requireNoLeap(tb testing.TB, r *testRegion, start int64) {
	tb.Helper()
	var ranges [][2]int64
	for _, rg := range r.segmentLog() {
		ranges = append(ranges, rg)
	}
	sort.Slice(ranges, func(i, j int) bool { return ranges[i][0] < ranges[j][0] })
	end := start - 1
	for _, rg := range ranges {
		if rg[0] > end+1 {
			tb.Fatalf("region %s: range [%d, %d] starts past %d, the end of its ranges before it: its max_id leapt", r.name, rg[0], rg[1], end)
		}
		end = max(end, rg[1])
	}
}

// regionsClient returns a client of regions a (home) and b.
func regionsClient(tb testing.TB, a, b []string) *client.Client {
	tb.Helper()
	return newClient(tb, client.Config{
		Regions:        []client.Region{{Name: "a", URLs: a}, {Name: "b", URLs: b}},
		AttemptTimeout: 300 * time.Millisecond,
		Segment:        segment.Config{WaitTimeout: time.Second},
		ProbeMin:       50 * time.Millisecond,
		ProbeMax:       500 * time.Millisecond,
	})
}

// waitServing waits until the client serves from region name and has
// handed out an ID of it since since, and returns how long after since.
func waitServing(tb testing.TB, c *client.Client, l *regionLoad, name string, since time.Time) time.Duration {
	tb.Helper()
	var at time.Time
	testutil.EventuallyOr(tb, 30*time.Second, "the client to serve from region "+name, func() bool {
		at = l.firstFrom(name, since)
		return c.Stats().Region == name && !at.IsZero()
	}, func() string { return fmt.Sprintf("%+v", c.Stats()) })
	return at.Sub(since)
}

// TestClient_RegionsFailover runs a client of two regions under load:
// home's processes SIGKILLed, then started again. The client serves from
// b within its wait, returns home once home grants, and hands out no ID
// twice; every ID it handed out is in its region's segment log, and no
// request is in both.
func TestClient_RegionsFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs idmint processes")
	}
	bin := servetest.Build(t)
	a := newRegion(t, bin, "a", 1, 2)
	b := newRegion(t, bin, "b", bStart+1, 1)
	c := regionsClient(t, a.urls(), b.urls())
	l := startRegionLoad(c, 4)
	defer l.halt()

	waitServing(t, c, l, "a", time.Time{})
	testutil.Eventually(t, 30*time.Second, "ranges from a", func() bool { return len(l.handedOut()) > 1000 })
	killed := time.Now()
	a.kill()
	failover := waitServing(t, c, l, "b", killed)
	if got := c.Stats().LastRangeFrom[regionTag]; got != "b" {
		t.Errorf("last range from %q while serving from b", got)
	}

	restored := time.Now()
	a.start()
	back := waitServing(t, c, l, "a", restored)
	testutil.Eventually(t, 30*time.Second, "a range from a again", func() bool { return c.Stats().LastRangeFrom[regionTag] == "a" })
	time.Sleep(200 * time.Millisecond)
	l.halt()
	st := c.Stats()
	if err := c.Close(context.Background()); err != nil {
		t.Logf("close: %v", err)
	}

	r := l.check.Report()
	t.Logf("checker report:\n%s", r)
	if r.Duplicates() != 0 {
		t.Fatalf("%d DUPLICATE ids", r.Duplicates())
	}
	if r.Failed != 0 {
		t.Errorf("%d calls failed: the client should have served them from b within their wait", r.Failed)
	}
	if st.Failovers < 1 || st.Returns < 1 {
		t.Errorf("failovers %d, returns %d: want at least 1 each", st.Failovers, st.Returns)
	}
	ids := l.handedOut()
	requireNoCrossing(t, ids, a, b)
	requireNoLeap(t, a, 1)
	requireNoLeap(t, b, bStart+1)
	t.Logf("%d ids, 0 duplicates, %d failed calls; first id from b %v after the kill (wait 1s); first id from a again %v after its processes were started (start took part of it; probing %v→%v); regions %+v",
		len(ids), r.Failed, failover.Round(time.Millisecond), back.Round(time.Millisecond), 50*time.Millisecond, 500*time.Millisecond, st.Regions)
}

// TestClient_RegionsLostReply: a grant commits in home, its reply is lost
// (the instance's proxy drops every reply), and then home's process dies.
// The client serves from b; the request whose reply was lost is given up,
// never looked up nor sent in b: after home is restored, its range, in
// home's segment log, holds no ID the client handed out, and it is counted.
func TestClient_RegionsLostReply(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs idmint processes")
	}
	bin := servetest.Build(t)
	a := newRegion(t, bin, "a", 1, 1)
	b := newRegion(t, bin, "b", bStart+1, 1)
	target, err := url.Parse(a.urls()[0])
	if err != nil {
		t.Fatal(err)
	}
	// Home's probe fails while its replies are lost, so that every reply
	// lost is one of the stint the client leaves: a probe's stint at home
	// may look its own lost reply up there, once home answers again.
	proxy := &losing{api: httputil.NewSingleHostReverseProxy(target), deadWhileLosing: true}
	front := httptest.NewServer(proxy)
	t.Cleanup(front.Close)
	c := regionsClient(t, []string{front.URL}, b.urls())
	l := startRegionLoad(c, 2)
	defer l.halt()

	waitServing(t, c, l, "a", time.Time{})
	testutil.Eventually(t, 30*time.Second, "ranges from a", func() bool { return len(l.handedOut()) > 500 })
	proxy.lose.Store(1 << 40) // every reply from now on
	cut := time.Now()
	failover := waitServing(t, c, l, "b", cut)
	lost := map[string]bool{}
	for _, id := range proxy.lostIDs() {
		lost[id] = true // a lookup is the same request sent again
	}
	a.kill()

	restored := time.Now()
	a.start()
	proxy.lose.Store(0)
	back := waitServing(t, c, l, "a", restored)
	l.halt()
	st := c.Stats()
	c.Close(context.Background())

	r := l.check.Report()
	t.Logf("checker report:\n%s", r)
	if r.Duplicates() != 0 {
		t.Fatalf("%d DUPLICATE ids", r.Duplicates())
	}
	ids := l.handedOut()
	requireNoCrossing(t, ids, a, b)
	log := a.segmentLog()
	committed := 0
	for id := range lost {
		rg, ok := log[id]
		if !ok {
			continue
		}
		committed++
		i := sort.Search(len(ids), func(i int) bool { return ids[i] >= rg[0] })
		if i < len(ids) && ids[i] <= rg[1] {
			t.Fatalf("request %s: its reply was lost in a, which was then left; yet id %d of its range [%d, %d] was handed out", id, ids[i], rg[0], rg[1])
		}
	}
	if committed == 0 {
		t.Fatalf("none of the %d requests whose reply was lost committed in a: the test proved nothing", len(lost))
	}
	if got := st.Regions[0].Abandoned; got < 1 {
		t.Errorf("region a: %d requests abandoned, want at least 1 (%+v)", got, st.Regions)
	}
	t.Logf("%d ids, 0 duplicates; %d requests lost their reply in a (%d committed there, none served); first id from b %v after the replies were cut; home again %v after its restart; regions %+v",
		len(ids), len(lost), committed, failover.Round(time.Millisecond), back.Round(time.Millisecond), st.Regions)
}

// TestClient_RegionsGiveBack: each range goes back to the region that
// granted it. The client moves to b (home killed), returns home (b's
// tails go back to b), and closes (home's go back home); the tails of the
// stint in home that was left as down are a counted gap, never sent to b.
func TestClient_RegionsGiveBack(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs idmint processes")
	}
	bin := servetest.Build(t)
	a := newRegion(t, bin, "a", 1, 1)
	b := newRegion(t, bin, "b", bStart+1, 1)
	// A second tag, served once from home: its range is in home's buffer
	// when the client leaves home, a gap that cannot go back.
	if _, err := a.store.CreateTag(context.Background(), allocator.TagSpec{Name: "user", Step: 100, MaxStep: 100}); err != nil {
		t.Fatal(err)
	}
	c := regionsClient(t, a.urls(), b.urls())
	if _, err := c.Next(context.Background(), "user"); err != nil {
		t.Fatal(err)
	}
	l := startRegionLoad(c, 1)
	defer l.halt()
	waitServing(t, c, l, "a", time.Time{})
	a.kill()
	waitServing(t, c, l, "b", time.Now())
	a.start()
	waitServing(t, c, l, "a", time.Now())
	l.halt()
	if err := c.Close(context.Background()); err != nil {
		t.Fatalf("close: %v", err)
	}
	st := c.Stats()

	highest := map[string]int64{}
	for _, id := range l.handedOut() {
		highest[regionOf(id)] = max(highest[regionOf(id)], id)
	}
	for _, r := range []*testRegion{a, b} {
		if got, want := r.maxID(), highest[r.name]; got != want {
			t.Errorf("region %s: max_id %d, want %d, the highest id handed out from it: its tails did not all go back to it", r.name, got, want)
		}
	}
	if got := st.Regions[0].Gap; got < 99 {
		t.Errorf("region a: gap %d, want at least the 99 ids of tag user left in its buffer when the client left a (%+v)", got, st.Regions)
	}
	t.Logf("max_id a %d, b %d; highest handed out a %d, b %d; regions %+v", a.maxID(), b.maxID(), highest["a"], highest["b"], st.Regions)
}

// TestClient_RegionsOverlap: region b's database was claimed with the
// regions in another order (b,a), so that it owns the same blocks as a.
// The client serves from a; a's process dies, and the client's first range
// from b is refused: no ID of b is handed out, every later call fails
// with ErrSharesOverlap at once (never ErrUnavailable, worth no retry),
// and the client does not return home when a is back. The negative
// control is b's segment log: the refused range holds IDs the client
// handed out from a, which served would have been duplicates.
func TestClient_RegionsOverlap(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs idmint processes")
	}
	bin := servetest.Build(t)
	a := newRegion(t, bin, "a", 1, 1)
	b := newClaimedRegion(t, bin, "b", "b,a", 1, 1)
	c := regionsClient(t, a.urls(), b.urls())
	ctx := context.Background()
	seen := map[int64]bool{}
	take := func() error {
		id, err := c.Next(ctx, regionTag)
		if err == nil {
			if seen[id] {
				t.Fatalf("DUPLICATE id %d", id)
			}
			seen[id] = true
		}
		return err
	}
	for range 250 {
		if err := take(); err != nil {
			t.Fatal(err)
		}
	}
	a.kill()
	var err error
	deadline := time.Now().Add(20 * time.Second)
	for err == nil && time.Now().Before(deadline) {
		err = take()
	}
	if !errors.Is(err, client.ErrSharesOverlap) || errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("after a's death, Next: %v; want ErrSharesOverlap alone", err)
	}
	t.Logf("refused: %v", err)
	a.start()
	time.Sleep(time.Second) // several probes' worth (50 to 500 ms)
	begin := time.Now()
	if err := take(); !errors.Is(err, client.ErrSharesOverlap) {
		t.Fatalf("with a back, Next: %v; want ErrSharesOverlap still", err)
	}
	if d := time.Since(begin); d > 100*time.Millisecond {
		t.Errorf("a refusal took %v: it is known, it needs no request", d)
	}
	if st := c.Stats(); !errors.Is(st.Conflict, client.ErrSharesOverlap) || st.Returns != 0 {
		t.Errorf("Stats: conflict %v, returns %d; want the conflict, no return home", st.Conflict, st.Returns)
	}

	logA, logB := a.segmentLog(), b.segmentLog()
	inA := func(id int64) bool {
		for _, r := range logA {
			if r[0] <= id && id <= r[1] {
				return true
			}
		}
		return false
	}
	overlapping := 0
	for id := range seen {
		if !inA(id) {
			t.Errorf("id %d handed out is in none of a's ranges", id)
		}
		for _, r := range logB {
			if r[0] <= id && id <= r[1] {
				overlapping++
			}
		}
	}
	if len(logB) == 0 || overlapping == 0 {
		t.Fatalf("negative control: b granted %v, holding %d of the %d ids handed out from a; want b's refused range to hold some", logB, overlapping, len(seen))
	}
	t.Logf("%d ids handed out, all a's, 0 duplicates; b's refused ranges %v hold %d of them", len(seen), logB, overlapping)
}

// TestClient_RegionsConfig: URLs and Regions are one or the other, and
// every region is named, once, with URLs.
func TestClient_RegionsConfig(t *testing.T) {
	a := client.Region{Name: "a", URLs: []string{"http://127.0.0.1:1"}}
	for _, tc := range []struct {
		name string
		cfg  client.Config
		want string
	}{
		{"both", client.Config{URLs: a.URLs, Regions: []client.Region{a}}, "URLs and Regions are both set"},
		{"unnamed", client.Config{Regions: []client.Region{a, {URLs: a.URLs}}}, "region 1 has no name"},
		{"twice", client.Config{Regions: []client.Region{a, a}}, `region "a" is named twice`},
		{"no urls", client.Config{Regions: []client.Region{a, {Name: "b"}}}, `region "b" has no URLs`},
		{"bad url", client.Config{Regions: []client.Region{a, {Name: "b", URLs: []string{"ftp://x"}}}}, `URL "ftp://x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.New(context.Background(), tc.cfg)
			if err == nil {
				c.Close(context.Background())
				t.Fatalf("New accepted %+v", tc.cfg)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to say %q", err, tc.want)
			}
		})
	}
}
