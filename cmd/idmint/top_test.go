package main

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/testkit/servetest"
)

// TestServe_TopOfInt64 drives a real idmint process on SQLite with tags
// started at the top of int64: `tag create --start` and `tag bump` refuse
// values that leave no room for one segment; /ids hands out the last IDs in
// both formats, then a clean tag_exhausted error; the process stays alive
// and serves its other tags. The list format once looped forever on the
// segment that ends at 2^63-1 (one request took 1.37 GiB in 3 s, and the
// instance died with every tag).
func TestServe_TopOfInt64(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	const step = 10
	dir := t.TempDir()
	bin := servetest.Build(t)
	url := "sqlite://" + filepath.Join(dir, "idmint.db")
	t.Setenv("IDMINT_DATABASE_URL", url)
	idmint(t, "migrate")

	top := strconv.FormatInt(math.MaxInt64-step+1, 10)
	for _, args := range [][]string{
		{"tag", "create", "late", "--step", "10", "--start", strconv.FormatInt(math.MaxInt64-step+2, 10)},
		{"tag", "create", "late", "--step", "10", "--start", "9223372036854775807"},
	} {
		if _, _, err := runErr(args...); err == nil || !strings.Contains(err.Error(), "no room for one segment") {
			t.Fatalf("idmint %s: %v, want a refusal saying why", strings.Join(args, " "), err)
		}
	}
	idmint(t, "tag", "create", "order", "--step", "10")
	for _, args := range [][]string{
		{"tag", "bump", "order", "--to", top},
		{"tag", "bump", "order", "--by", "9223372036854775807"},
	} {
		if _, _, err := runErr(args...); err == nil || !strings.Contains(err.Error(), "no room for one segment") {
			t.Fatalf("idmint %s: %v, want a refusal saying why", strings.Join(args, " "), err)
		}
	}
	for _, tag := range []string{"top-list", "top-ranges"} {
		idmint(t, "tag", "create", tag, "--step", "10", "--max-step", "10", "--start", top)
	}

	p := &servetest.Process{Bin: bin, DatabaseURL: url, Instance: "top", LogPath: filepath.Join(dir, "top.log"), Args: serveArgs()}
	p.Start(t)
	base := "http://" + p.Addr
	// A handler that loops fails the test in 10 s instead of hanging it.
	c := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) (int, []byte) {
		t.Helper()
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return resp.StatusCode, body
	}
	for _, format := range []string{"list", "ranges"} {
		path := "/ids?biz_tag=top-" + format + "&format=" + format + "&count="
		var got []int64
		for _, count := range []string{"4", "100"} { // 100: only the last 6 are left
			status, body := get(path + count)
			if status != 200 {
				t.Fatalf("%s%s: status %d: %.300s", path, count, status, body)
			}
			got = append(got, replyIDs(t, body)...)
		}
		if len(got) != step || got[0] != math.MaxInt64-step+1 || got[step-1] != math.MaxInt64 {
			t.Fatalf("format %s: %v, want the last %d ids up to 2^63-1", format, got, step)
		}
		status, body := get(path + "3")
		var e struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal(body, &e); err != nil || status != 503 || e.Error.Code != "tag_exhausted" {
			t.Fatalf("format %s past 2^63-1: %d %s, want 503 tag_exhausted", format, status, body)
		}
	}
	if status, body := get("/ids?biz_tag=order&count=3"); status != 200 || len(replyIDs(t, body)) != 3 {
		t.Fatalf("another tag after the top: %d %s", status, body)
	}
	if p.Cmd.ProcessState != nil {
		t.Fatalf("the process ended: %v", p.Cmd.ProcessState)
	}
}

// replyIDs reads the IDs of an /ids reply in either format.
func replyIDs(tb testing.TB, body []byte) []int64 {
	tb.Helper()
	var r struct {
		IDs    []string    `json:"ids"`
		Ranges [][2]string `json:"ranges"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		tb.Fatalf("%v: %.300s", err, body)
	}
	var ids []int64
	for _, s := range r.IDs {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			tb.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, rg := range r.Ranges {
		first, err1 := strconv.ParseInt(rg[0], 10, 64)
		last, err2 := strconv.ParseInt(rg[1], 10, 64)
		if err1 != nil || err2 != nil || last < first || last-first >= allocator.MaxN {
			tb.Fatalf("range %v", rg)
		}
		for id := first; ; id++ {
			ids = append(ids, id)
			if id == last {
				break
			}
		}
	}
	return ids
}
