package faults_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/servetest"
	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/client"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/storetest"
	"github.com/idmint/idmint/testkit/testutil"
	"github.com/idmint/idmint/testkit/toxic"
)

// grantReply is a range reply as it crossed one hop.
type grantReply struct {
	Host      string // the instance (or proxy) it came from
	RequestID string `json:"request_id"`
	First     int64  `json:"first,string"`
	Last      int64  `json:"last,string"`
	Recovered bool   `json:"recovered"`
}

// replyLog records range replies, by request ID, in the order seen.
type replyLog struct {
	mu      sync.Mutex // protects replies
	replies map[string][]grantReply
}

func newReplyLog() *replyLog { return &replyLog{replies: map[string][]grantReply{}} }

func (l *replyLog) add(host string, body []byte) {
	r := grantReply{Host: host}
	if json.Unmarshal(body, &r) != nil {
		return
	}
	l.mu.Lock()
	l.replies[r.RequestID] = append(l.replies[r.RequestID], r)
	l.mu.Unlock()
}

func (l *replyLog) snapshot() map[string][]grantReply {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string][]grantReply, len(l.replies))
	for id, rs := range l.replies {
		out[id] = slices.Clone(rs)
	}
	return out
}

// delivered is an http.RoundTripper that records every range reply that
// reached the client in full: what the client was told, not what the
// instance sent.
type delivered struct {
	base http.RoundTripper
	logs []*replyLog
}

func (d *delivered) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := d.base.RoundTrip(req)
	if err != nil || req.URL.Path != "/v1/segments" || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err // cut mid-body: not delivered
	}
	for _, l := range d.logs {
		l.add(req.URL.Host, body)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// answered wraps an instance's handler and records every range it
// answered: what the instance sent, whether or not it arrived.
func answered(name string, log *replyLog, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/segments" {
			next.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		if rec.Code == http.StatusOK {
			log.add(name, rec.Body.Bytes())
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	})
}

// instance is an idmint instance on a real listener.
type instance struct {
	name  string
	alloc *allocator.Allocator
	srv   *http.Server
	addr  string
	// kill, when set, makes the next range request commit its grant and
	// then takes the whole server down before the reply is written.
	kill   atomic.Bool
	killed chan string // the request ID whose reply died with the server
}

func startInstance(t *testing.T, dbURL, name string, sent *replyLog) *instance {
	t.Helper()
	in := &instance{name: name, killed: make(chan string, 1)}
	in.alloc = newInstance(t, pgstore.Open(t, dbURL), name, nil)
	api := answered(name, sent, httpapi.NewServer(httpapi.Config{Allocator: in.alloc, Instance: name, Logger: testlog.Discard()}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	in.addr = ln.Addr().String()
	in.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/segments" || !in.kill.CompareAndSwap(true, false) {
			api.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, r)
		var g grantReply
		json.Unmarshal(rec.Body.Bytes(), &g)
		in.srv.Close() // listeners and connections, this one too
		in.killed <- g.RequestID
		panic(http.ErrAbortHandler)
	})}
	go in.srv.Serve(ln)
	t.Cleanup(func() { in.srv.Close() })
	return in
}

// clientRun is clients of a set of instances, their workers, and what the
// clients received.
type clientRun struct {
	t     *testing.T
	tag   string
	urls  []string
	check *checker.Checker
	got   *replyLog   // every range reply a client received
	own   []*replyLog // each client's
	// attempt bounds one range request of the clients (default 1s).
	attempt time.Duration

	clients []*client.Client
	mu      sync.Mutex // protects served
	served  [][]int64  // each client's IDs
	stop    context.CancelFunc
	workers sync.WaitGroup
}

func newClientRun(t *testing.T, tag string, urls []string, check *checker.Checker) *clientRun {
	return &clientRun{t: t, tag: tag, urls: urls, check: check, got: newReplyLog(), attempt: time.Second}
}

// newClient returns a client whose received replies are recorded.
func (r *clientRun) newClient() *client.Client {
	r.t.Helper()
	mine := newReplyLog()
	r.own = append(r.own, mine)
	cl, err := client.New(r.t.Context(), client.Config{
		URLs:           r.urls,
		HTTPClient:     &http.Client{Transport: &delivered{base: &http.Transport{}, logs: []*replyLog{r.got, mine}}},
		AttemptTimeout: r.attempt,
		RetryMin:       5 * time.Millisecond,
		RetryMax:       100 * time.Millisecond,
		Logger:         testlog.Discard(),
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return cl
}

// start makes n clients with two workers each. A worker takes a few IDs at
// a time, paced so that memory stays bounded while small ranges still turn
// over every few milliseconds.
func (r *clientRun) start(n int) {
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	r.stop = stop
	for ci := range n {
		cl := r.newClient()
		r.clients = append(r.clients, cl)
		r.served = append(r.served, nil)
		for w := range 2 {
			r.workers.Go(func() {
				name := fmt.Sprintf("client-%d/%d", ci, w)
				for range maxRequests {
					if ctx.Err() != nil {
						return
					}
					r.check.Attempt()
					ids, err := cl.NextN(ctx, r.tag, 10)
					if err != nil {
						r.check.Fail(err)
						continue
					}
					r.check.Ack(name, r.tag, ids...)
					r.mu.Lock()
					r.served[ci] = append(r.served[ci], ids...)
					r.mu.Unlock()
					time.Sleep(100 * time.Microsecond)
				}
			})
		}
	}
	r.t.Cleanup(r.halt)
}

// loads counts the ranges the clients loaded.
func (r *clientRun) loads() int64 {
	var n int64
	for _, cl := range r.clients {
		for _, st := range cl.Stats().Tags {
			n += st.Loads
		}
	}
	return n
}

// halt stops the workers and closes the clients, which give back their
// tails.
func (r *clientRun) halt() {
	if r.stop == nil {
		return
	}
	r.stop()
	r.stop = nil
	r.workers.Wait()
	for _, cl := range r.clients {
		if err := cl.Close(context.Background()); err != nil {
			r.t.Errorf("close: %v", err)
		}
	}
}

// requireExactlyOnce checks, after halt, that every range the segment log
// holds for a client request reached a client once, as granted; that
// nothing else reached a client; and that each client served only from
// its ranges. It returns the ranges logged and those received after a lost
// reply.
func (r *clientRun) requireExactlyOnce(admin *postgres.Store) (logged map[string][2]int64, recovered int) {
	t := r.t
	t.Helper()
	rows, err := admin.Pool().Query(context.Background(),
		`SELECT request_id::text, first_id, last_id FROM idmint_segments WHERE biz_tag = $1 AND instance LIKE '%/client'`, r.tag)
	if err != nil {
		t.Fatal(err)
	}
	logged = map[string][2]int64{}
	for rows.Next() {
		var id string
		var f, l int64
		if err := rows.Scan(&id, &f, &l); err != nil {
			t.Fatal(err)
		}
		logged[id] = [2]int64{f, l}
	}
	rows.Close()
	if len(logged) == 0 {
		t.Fatal("no client range in the segment log: the test proved nothing")
	}
	recv := r.got.snapshot()
	for id, rg := range logged {
		rs := recv[id]
		if len(rs) != 1 || rs[0].First != rg[0] || rs[0].Last != rg[1] {
			t.Errorf("request %s granted [%d, %d]; clients received %+v", id, rg[0], rg[1], rs)
		}
		for _, x := range rs {
			if x.Recovered {
				recovered++
			}
		}
	}
	for id := range recv {
		if _, ok := logged[id]; !ok {
			t.Errorf("clients received request %s, not in the segment log", id)
		}
	}
	for ci, ids := range r.served {
		if n := outside(ids, r.own[ci].snapshot()); n > 0 {
			t.Errorf("client %d served %d ids outside its ranges", ci, n)
		}
	}
	return logged, recovered
}

// TestClientExactlyOnce runs two clients of three instances on real
// PostgreSQL, beside plain GET /id callers of two of them, and injects:
//   - a TCP proxy that resets the connection when the instance answers a
//     range request: the range is granted and the reply lost;
//   - an instance whose server dies after granting a range, mid-request.
//
// Each lost range must reach its client through another instance (the same
// request ID, the same range), and in the end every range the segment log
// holds for a client request reached that client exactly once, every ID the
// clients served lies in their ranges, and no ID was handed out twice,
// counting a third client started after the first two gave back their tails.
func TestClientExactlyOnce(t *testing.T) {
	const tag = "order"
	dbURL := pgstore.NewDatabase(t, pgtest.Shared(t))
	admin := pgstore.Open(t, dbURL)
	createTag(t, admin, tag, 100, 500)

	sent := newReplyLog() // what instances answered
	a := startInstance(t, dbURL, "inst-a", sent)
	b := startInstance(t, dbURL, "inst-b", sent)
	c := startInstance(t, dbURL, "inst-c", sent)
	px := toxic.New(t, "http://"+a.addr)
	check := checker.New()
	run := newClientRun(t, tag, []string{px.URL, "http://" + c.addr, "http://" + b.addr}, check)
	run.start(2)

	// Plain callers of instances a and b, straight to them.
	httpc := &http.Client{Timeout: 5 * time.Second}
	plain := startLoad(check, 4, func(ctx context.Context, w int) (string, string, int64, error) {
		in := []*instance{a, b}[w%2]
		resp, err := httpc.Get("http://" + in.addr + "/id?biz_tag=" + tag)
		if err != nil {
			return "", "", 0, err
		}
		defer resp.Body.Close()
		var body struct {
			ID string `json:"id"`
		}
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&body) != nil {
			return "", "", 0, fmt.Errorf("GET /id: status %d", resp.StatusCode)
		}
		id, err := strconv.ParseInt(body.ID, 10, 64)
		return fmt.Sprintf("plain-%d@%s", w, in.name), tag, id, err
	})
	defer plain.stop()
	testutil.Eventually(t, 30*time.Second, "clients to load ranges", func() bool { return run.loads() >= 10 })

	// Fault 1: replies of instance a lost after it granted.
	px.Add(t, "lose-reply", "reset_peer", "downstream", `{"timeout":0}`)
	var lostAtA []string
	testutil.Eventually(t, 30*time.Second, "a range reply lost between instance a and a client, then received through another instance (same request ID)", func() bool {
		lostAtA = lostAndRecovered(sent.snapshot(), run.got.snapshot(), "inst-a", px.Listen)
		return len(lostAtA) > 0
	})
	px.Remove(t, "lose-reply")
	t.Logf("lost replies of inst-a recovered through another instance: %v", lostAtA)

	// Fault 2: instance c dies mid-request, after granting.
	before := run.loads()
	c.kill.Store(true)
	var killedID string
	testutil.Eventually(t, 30*time.Second, "instance c to die mid-request", func() bool {
		select {
		case killedID = <-c.killed:
			return true
		default:
			return false
		}
	})
	testutil.Eventually(t, 30*time.Second, "the range of the killed request to reach its client", func() bool {
		return len(run.got.snapshot()[killedID]) > 0
	})
	testutil.Eventually(t, 30*time.Second, "clients to load more ranges", func() bool { return run.loads() >= before+10 })
	t.Logf("inst-c died after granting request %s; its client got %+v", killedID, run.got.snapshot()[killedID])

	plain.stop()
	run.halt()
	// A client after the give-backs: its IDs join the check.
	late := run.newClient()
	ids, err := late.NextN(context.Background(), tag, 1000)
	if err != nil {
		t.Fatal(err)
	}
	check.Attempt()
	check.Ack("late-client", tag, ids...)
	if err := late.Close(context.Background()); err != nil {
		t.Errorf("close: %v", err)
	}

	r := check.Report()
	requireValid(t, r)
	for _, in := range []*instance{a, b} {
		if st := tagStats(in.alloc, tag); st.Refused != 0 {
			t.Errorf("%s refused %d ranges: client ranges confused its floor", in.name, st.Refused)
		}
	}
	// Close the instances (they give back too), then audit the log: no
	// two rows' kept IDs overlap, whoever gave back what.
	for _, in := range []*instance{a, b, c} {
		in.alloc.Close(context.Background())
	}
	audit, err := admin.Pool().Query(context.Background(), storetest.AuditSQL)
	if err != nil {
		t.Fatal(err)
	}
	for audit.Next() {
		var tg string
		var first, kept, prev int64
		audit.Scan(&tg, &first, &kept, &prev)
		t.Errorf("segment log: %s row [%d, %d] overlaps an earlier row's kept ids (up to %d)", tg, first, kept, prev)
	}
	audit.Close()
	logged, recovered := run.requireExactlyOnce(admin)
	if recovered < len(lostAtA)+1 {
		t.Errorf("%d ranges reached clients as recovered; want the %d lost at inst-a and the one of inst-c", recovered, len(lostAtA))
	}
	t.Logf("%d client ranges in the log, each received once (%d after a lost reply); %d ids, 0 duplicates",
		len(logged), recovered, r.IDs())
}

// TestClientProcessesKilled runs a client of two real idmint processes on
// PostgreSQL and SIGKILLs the one it is using in the middle of a range
// request, then restarts it, a few times. To kill it mid-request for sure,
// the test holds the tag's row lock, so that the process's grant statement
// waits in PostgreSQL; then the lock goes. The orphaned statement may commit
// (and the client's retry through the other process, with the same request
// ID, must get that range) or may not (PostgreSQL aborts it when it cannot
// send the result before the Sync that commits): either way every range the
// log holds for the client reached it exactly once.
func TestClientProcessesKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs idmint processes")
	}
	const tag, kills = "order", 3
	bin := servetest.Build(t)
	dbURL := pgstore.NewDatabase(t, pgtest.Shared(t))
	admin := pgstore.Open(t, dbURL)
	createTag(t, admin, tag, 100, 500)
	addrs := []string{testutil.FreeAddr(t), testutil.FreeAddr(t)}
	ps := []*servetest.Process{startProcess(t, bin, dbURL, addrs[0], "proc-0"), startProcess(t, bin, dbURL, addrs[1], "proc-1")}

	check := checker.New()
	run := newClientRun(t, tag, []string{"http://" + addrs[0], "http://" + addrs[1]}, check)
	// Long attempts: the client must not give up on the process while its
	// statement waits for the lock (giving up cancels the statement).
	run.attempt = 20 * time.Second
	run.start(1)
	ctx := context.Background()
	for k := range kills {
		before := run.loads()
		testutil.Eventually(t, 30*time.Second, "the client to load ranges", func() bool { return run.loads() >= before+10 })
		lock, err := admin.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// A failure below must not leave the lock held: the pool's Close
		// in cleanup would wait for it forever.
		t.Cleanup(func() { lock.Rollback(context.Background()) })
		if _, err := lock.Exec(ctx, `SELECT 1 FROM idmint_tags WHERE biz_tag = $1 FOR UPDATE`, tag); err != nil {
			t.Fatal(err)
		}
		// pg_stat_activity keeps only the head of a statement (1 kB,
		// track_activity_query_size): the grant is told by its first lines.
		testutil.Eventually(t, 30*time.Second, "a grant statement waiting on the tag's lock", func() bool {
			var n int
			admin.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%FROM idmint_tags t, durable WHERE t.biz_tag%'`).Scan(&n)
			return n > 0
		})
		// The client sticks to the instance that answered last: first
		// proc-0, then each time the other one, which the kill sent it to.
		slot := k % 2
		ps[slot].Stop(t, syscall.SIGKILL)
		if err := lock.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		ps[slot] = startProcess(t, bin, dbURL, addrs[slot], fmt.Sprintf("proc-%d-%d", slot, k+1))
	}
	before := run.loads()
	testutil.Eventually(t, 30*time.Second, "the client to load ranges", func() bool { return run.loads() >= before+10 })
	run.halt()

	r := check.Report()
	requireValid(t, r)
	logged, recovered := run.requireExactlyOnce(admin)
	t.Logf("%d SIGKILLs mid-request: %d client ranges in the log, each received once (%d after a lost reply); %d ids, %d failed requests, 0 duplicates",
		kills, len(logged), recovered, r.IDs(), r.Failed)
}

// lostAndRecovered returns the request IDs that instance answered but
// whose reply never arrived from it (through via), and that arrived from
// another instance instead.
func lostAndRecovered(sent, got map[string][]grantReply, instance, via string) []string {
	var out []string
	for id, rs := range sent {
		if !slices.ContainsFunc(rs, func(r grantReply) bool { return r.Host == instance }) {
			continue
		}
		recv := got[id]
		if len(recv) > 0 && !slices.ContainsFunc(recv, func(r grantReply) bool { return r.Host == via }) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// outside counts the ids not inside a range of recv, a client's received
// replies (disjoint ranges: a client refuses a range below one it had).
func outside(ids []int64, recv map[string][]grantReply) int {
	var ranges [][2]int64
	for _, rs := range recv {
		for _, r := range rs {
			ranges = append(ranges, [2]int64{r.First, r.Last})
		}
	}
	slices.SortFunc(ranges, func(x, y [2]int64) int { return cmp.Compare(x[0], y[0]) })
	n := 0
	for _, id := range ids {
		i, found := slices.BinarySearchFunc(ranges, id, func(r [2]int64, id int64) int {
			switch {
			case r[1] < id:
				return -1
			case r[0] > id:
				return 1
			}
			return 0
		})
		if !found || i >= len(ranges) {
			n++
		}
	}
	return n
}
