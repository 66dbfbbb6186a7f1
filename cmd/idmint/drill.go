package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idmint/idmint/internal/checker"
	"github.com/idmint/idmint/wire"
)

// maxDrillReply bounds the reply a drill client reads: /ids at the
// largest counts.
const maxDrillReply = 16 << 20

// stringList is a flag that may be given many times.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// errDrillFailed is returned when the drill found duplicates or order
// violations, or proved nothing.
var errDrillFailed = errors.New("drill failed")

// drillFlags is `idmint drill`: it asks running instances for IDs from many clients for a while,
// checks every acknowledged ID with internal/checker and prints its report.
// Inject faults meanwhile (kill an instance, restart the database); the
// drill fails if any ID came back twice.
func drillFlags(fs *flag.FlagSet) runFunc {
	var targets, tags stringList
	fs.Var(&targets, "target", "base URL of an idmint instance, e.g. http://127.0.0.1:8080 (repeat, or comma-separate)")
	fs.Var(&tags, "biz-tag", "tag to ask for (repeat, or comma-separate; default order)")
	duration := fs.Duration("duration", 30*time.Second, "how long to run")
	progress := fs.Duration("progress", 5*time.Second, "how often to say on stderr how far the drill got (0: never)")
	concurrency := fs.Int("concurrency", 32, "clients asking at once; each talks to one target")
	count := fs.Int("count", 1, "ids per request: 1 uses /id, more uses /ids")
	timeout := fs.Duration("request-timeout", 10*time.Second, "bound on one request")
	snowflakeIDs := fs.Bool("snowflake", false, "ask for Snowflake ids (/snowflake, or /snowflakes with --count) instead of a tag's")
	token := fs.String("token", "", "bearer token with an ID scope, for instances serving with --auth token")
	renameEnv(fs, "token", "IDMINT_DRILL_TOKEN", "IDMINT_TOKEN")
	var tlsFlags tlsClientFlags
	tlsFlags.register(fs)
	return func(ctx context.Context, out output, _ []string) error {
		stdout := out.stdout
		if len(tags) == 0 {
			tags = stringList{"order"}
		}
		if *snowflakeIDs {
			tags = stringList{snowflakeTag}
		}
		switch {
		case len(targets) == 0:
			return usageError{"missing --target"}
		case *concurrency < 1:
			return usageError{fmt.Sprintf("--concurrency %d: want at least 1", *concurrency)}
		case *count < 1:
			return usageError{fmt.Sprintf("--count %d: want at least 1", *count)}
		case *duration <= 0:
			return usageError{fmt.Sprintf("--duration %v: want more than 0", *duration)}
		}
		for _, t := range targets {
			if u, err := url.Parse(t); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("--target %q: want a base URL like http://127.0.0.1:8080", t)
			}
		}

		ctx, cancel := context.WithTimeout(ctx, *duration)
		defer cancel()
		client, err := tlsFlags.httpClient(*timeout)
		if err != nil {
			return err
		}
		if *token != "" {
			client.Transport = bearer{token: *token, next: client.Transport}
		}
		d := newDrillRun(client, *count)
		fmt.Fprintf(stdout, "drill: %d clients against %d targets, biz_tag %s, for %v\n", *concurrency, len(targets), tags.String(), *duration)
		for w := range *concurrency {
			target := strings.TrimRight(targets[w%len(targets)], "/")
			tag := tags[(w/len(targets))%len(tags)]
			d.client(ctx, fmt.Sprintf("client-%d@%s", w, target), target, tag)
		}
		d.progress(ctx, out.stderr, *progress, *duration)
		d.wait()
		r := d.checker.Report()
		fmt.Fprint(stdout, r)
		d.printTargets(stdout)
		if !r.Valid() || r.IDs() == 0 {
			return errDrillFailed
		}
		return nil
	}
}

// progress says every interval on w how long the drill ran, and the IDs
// and errors so far, until ctx ends: a drill of minutes is not silent.
func (d *drillRun) progress(ctx context.Context, w io.Writer, every, duration time.Duration) {
	if every <= 0 {
		<-ctx.Done()
		return
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			ids, errs := d.totals()
			fmt.Fprintf(w, "drill: %v of %v: %d IDs, %d errors so far\n",
				time.Since(d.begin).Round(time.Second), duration, ids, errs)
		}
	}
}

// totals returns the IDs acknowledged and the requests failed so far.
func (d *drillRun) totals() (ids, errs int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, tl := range d.targets {
		ids += int64(len(tl.ids))
		for _, n := range tl.failed {
			errs += n
		}
	}
	return ids, errs
}

// drillRun drives clients against idmint instances and records every
// acknowledged ID (in a checker, which finds duplicates and per-client order
// violations) and what each instance answered when.
type drillRun struct {
	checker *checker.Checker
	http    *http.Client
	count   int
	begin   time.Time
	end     time.Time // when wait was called: the clients' context ended
	wg      sync.WaitGroup

	mu      sync.Mutex // protects targets and all
	targets map[string]*targetLog
	all     targetLog // every target together: when the service answered
}

// targetLog is what one target answered.
type targetLog struct {
	ok      int64            // acknowledged requests
	failed  map[string]int64 // failed requests by error: "status 503 unavailable", …
	ids     []int64          // every acknowledged ID, in the order the replies came
	first   time.Time        // when its first client started
	lastOK  time.Time        // the last acknowledged reply; zero before
	longest outage           // the longest time between two IDs
}

// outage is a stretch of time in which a target acknowledged no request.
// Open is set when the drill ended inside it.
type outage struct {
	From, To time.Time
	Open     bool
}

func (o outage) duration() time.Duration { return o.To.Sub(o.From) }

// newDrillRun returns a drill asking for count IDs per request.
func newDrillRun(client *http.Client, count int) *drillRun {
	return &drillRun{
		checker: checker.New(),
		http:    client,
		count:   count,
		begin:   time.Now(),
		targets: map[string]*targetLog{},
	}
}

// client starts one client named name that asks target for IDs of tag
// until ctx ends. A client talks to one target, so its IDs must increase.
func (d *drillRun) client(ctx context.Context, name, target, tag string) {
	d.mu.Lock()
	now := time.Now()
	tl := d.targets[target]
	if tl == nil {
		tl = &targetLog{failed: map[string]int64{}, first: now}
		d.targets[target] = tl
	}
	if d.all.first.IsZero() {
		d.all.first = now
	}
	d.mu.Unlock()
	d.wg.Go(func() {
		for ctx.Err() == nil {
			d.checker.Attempt()
			ids, err := fetchIDs(ctx, d.http, target, tag, d.count)
			if err != nil {
				if ctx.Err() != nil {
					d.checker.Fail(fmt.Errorf("cut by the end of the drill"))
					return
				}
				d.checker.Fail(err)
				d.mu.Lock()
				tl.fail(err)
				d.mu.Unlock()
				// A failing target: back off a little, do not spin.
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond):
				}
				continue
			}
			d.checker.Ack(name, tag, ids...)
			now := time.Now()
			d.mu.Lock()
			tl.ack(now, ids)
			d.all.ack(now, nil)
			d.mu.Unlock()
		}
	})
}

// fail counts a failed request by its error; past 100 kinds of error,
// new kinds count as "other errors".
func (tl *targetLog) fail(err error) {
	kind := err.Error()
	if _, seen := tl.failed[kind]; !seen && len(tl.failed) >= 100 {
		kind = "other errors"
	}
	tl.failed[kind]++
}

// ack records a reply at t with ids.
func (tl *targetLog) ack(t time.Time, ids []int64) {
	tl.ok++
	tl.ids = append(tl.ids, ids...)
	since := tl.lastOK
	if since.IsZero() {
		since = tl.first
	}
	if gap := (outage{From: since, To: t}); gap.duration() > tl.longest.duration() {
		tl.longest = gap
	}
	tl.lastOK = t
}

// outageAt returns the longest outage of tl, counting one still going on
// at end (when the drill stopped).
func (tl *targetLog) outageAt(end time.Time) outage {
	since := tl.lastOK
	if since.IsZero() {
		since = tl.first
	}
	if open := (outage{From: since, To: end, Open: true}); open.duration() > tl.longest.duration() {
		return open
	}
	return tl.longest
}

// wait waits for every client to stop; call it once their context ended.
func (d *drillRun) wait() {
	d.mu.Lock()
	d.end = time.Now()
	d.mu.Unlock()
	d.wg.Wait()
}

// printTargets writes one line per target: acknowledged and failed
// requests, and the longest time it handed out no ID.
func (d *drillRun) printTargets(w io.Writer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	end := d.end
	names := make([]string, 0, len(d.targets))
	for t := range d.targets {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		tl := d.targets[t]
		kinds := make([]string, 0, len(tl.failed))
		for k := range tl.failed {
			kinds = append(kinds, k)
		}
		sort.Slice(kinds, func(i, j int) bool { return tl.failed[kinds[i]] > tl.failed[kinds[j]] })
		var failed strings.Builder
		for _, k := range kinds {
			fmt.Fprintf(&failed, ", %d× %s", tl.failed[k], k)
		}
		fmt.Fprintf(w, "target %s: %d requests acknowledged%s; longest without an ID %s\n",
			t, tl.ok, failed.String(), d.describe(tl.outageAt(end)))
	}
	fmt.Fprintf(w, "all targets: longest without an ID from any %s\n", d.describe(d.all.outageAt(end)))
}

// describe formats an outage with times since the drill began.
func (d *drillRun) describe(o outage) string {
	s := fmt.Sprintf("%v (from +%v to +%v", o.duration().Round(time.Millisecond),
		o.From.Sub(d.begin).Round(time.Millisecond), o.To.Sub(d.begin).Round(time.Millisecond))
	if o.Open {
		s += ", still going at the end"
	}
	return s + ")"
}

// fetchIDs asks target for n IDs of tag.
func fetchIDs(ctx context.Context, client *http.Client, target, tag string, n int) ([]int64, error) {
	u := target + "/id?biz_tag=" + url.QueryEscape(tag)
	if n > 1 {
		u = target + "/ids?biz_tag=" + url.QueryEscape(tag) + "&count=" + strconv.Itoa(n)
	}
	if tag == snowflakeTag {
		u = target + "/snowflake"
		if n > 1 {
			u = target + "/snowflakes?count=" + strconv.Itoa(n)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, errors.New("request failed: " + errKind(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxDrillReply))
	if err != nil {
		return nil, errors.New("request failed: " + errKind(err))
	}
	if resp.StatusCode != http.StatusOK {
		err := wire.DecodeError(resp.StatusCode, resp.Header.Get("Retry-After"), data)
		return nil, fmt.Errorf("status %d %s", resp.StatusCode, wire.CodeOf(err))
	}
	var body struct {
		ID  string   `json:"id"`
		IDs []string `json:"ids"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		return nil, fmt.Errorf("status %d, unreadable body", resp.StatusCode)
	}
	if n == 1 {
		body.IDs = []string{body.ID}
	}
	ids := make([]int64, 0, len(body.IDs))
	for _, s := range body.IDs {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad id %q", s)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// snowflakeTag names the Snowflake IDs in a drill: not a valid biz_tag, so
// it cannot be mistaken for one.
const snowflakeTag = "(snowflake)"

// errKind shortens a transport error so that the report groups alike ones.
func errKind(err error) string {
	msg := err.Error()
	for _, k := range []string{"connection refused", "connection reset", "timeout", "EOF"} {
		if strings.Contains(msg, k) {
			return k
		}
	}
	return msg
}

var _ flag.Value = (*stringList)(nil)

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(req)
}
