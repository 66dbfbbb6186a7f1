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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idmint/idmint/internal/checker"
)

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

// runDrill asks running instances for IDs from many clients for a while,
// checks every acknowledged ID with internal/checker and prints its report.
// Inject faults meanwhile (kill an instance, restart the database); the
// drill fails if any ID came back twice.
func runDrill(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var targets, tags stringList
	fs := newFlagSet("drill", "idmint drill --target URL [--target URL …] [flags]", stderr)
	fs.Var(&targets, "target", "base URL of an idmint instance, e.g. http://127.0.0.1:8080 (repeat, or comma-separate)")
	fs.Var(&tags, "biz-tag", "tag to ask for (repeat, or comma-separate; default order)")
	duration := fs.Duration("duration", 30*time.Second, "how long to run")
	concurrency := fs.Int("concurrency", 32, "clients asking at once; each talks to one target")
	count := fs.Int("count", 1, "ids per request: 1 uses /id, more uses /ids")
	timeout := fs.Duration("request-timeout", 10*time.Second, "bound on one request")
	snowflakeIDs := fs.Bool("snowflake", false, "ask for Snowflake ids (/snowflake, or /snowflakes with --count) instead of a tag's")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	if len(tags) == 0 {
		tags = stringList{"order"}
	}
	if *snowflakeIDs {
		tags = stringList{snowflakeTag}
	}
	if len(targets) == 0 || *concurrency < 1 || *count < 1 || *duration <= 0 {
		fs.Usage()
		return errUsage
	}
	for _, t := range targets {
		if u, err := url.Parse(t); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--target %q: want a base URL like http://127.0.0.1:8080", t)
		}
	}

	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	client := &http.Client{Timeout: *timeout}
	c := checker.New()
	fmt.Fprintf(stdout, "drill: %d clients against %d targets, biz_tag %s, for %v\n", *concurrency, len(targets), tags.String(), *duration)
	var wg sync.WaitGroup
	for w := range *concurrency {
		target := strings.TrimRight(targets[w%len(targets)], "/")
		tag := tags[(w/len(targets))%len(tags)]
		name := fmt.Sprintf("client-%d@%s", w, target)
		wg.Go(func() {
			for ctx.Err() == nil {
				c.Attempt()
				ids, err := fetchIDs(ctx, client, target, tag, *count)
				if err != nil {
					if ctx.Err() != nil {
						c.Fail(fmt.Errorf("cut by the end of the drill"))
						return
					}
					c.Fail(err)
					// A failing target: back off a little, do not spin.
					select {
					case <-ctx.Done():
					case <-time.After(50 * time.Millisecond):
					}
					continue
				}
				c.Ack(name, tag, ids...)
			}
		})
	}
	wg.Wait()
	r := c.Report()
	fmt.Fprint(stdout, r)
	if !r.Valid() || r.IDs() == 0 {
		return errDrillFailed
	}
	return nil
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
	var body struct {
		ID    string   `json:"id"`
		IDs   []string `json:"ids"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("status %d, unreadable body", resp.StatusCode)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d %s", resp.StatusCode, body.Error.Code)
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
