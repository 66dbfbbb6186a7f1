package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testlog"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/token"
	"github.com/idmint/idmint/wire"
)

// limitedServer serves the API over a memstore.Store with the limits and auth
// given, through HTTPServer, on loopback.
func limitedServer(t *testing.T, auth httpapi.AuthConfig, limits httpapi.Limits) (*httpapi.Server, string, *memstore.Store) {
	t.Helper()
	return limitedServerAt(t, auth, limits, nil)
}

// limitedServerAt is limitedServer on the clock now (nil: time.Now). A
// request's deadline is the server's clock plus its timeout, met by the
// real clock: a clock that stands still (frozenClock) gets a minute.
func limitedServerAt(t *testing.T, auth httpapi.AuthConfig, limits httpapi.Limits, now func() time.Time) (*httpapi.Server, string, *memstore.Store) {
	t.Helper()
	timeout := 5 * time.Second
	if now != nil {
		timeout = time.Minute
	}
	m := memstore.New()
	if _, err := m.CreateTag(context.Background(), allocator.TagSpec{Name: "order", Step: 1000}); err != nil {
		t.Fatal(err)
	}
	a := allocator.New(allocator.Config{Store: m, Logger: testlog.Discard(), Segment: segment.Config{WaitTimeout: 5 * time.Second}})
	t.Cleanup(func() { a.Close(context.Background()) })
	auth.Tokens = m
	api := httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(), MaxCount: 100, Auth: auth, Limits: limits, Admin: m, Now: now, RequestTimeout: timeout})
	srv := api.HTTPServer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return api, "http://" + ln.Addr().String(), m
}

func getWith(t *testing.T, url, bearer string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body
}

// refused reads idmint_http_refused_total{code} from /metrics.
func refused(t *testing.T, base, code string) int {
	t.Helper()
	return refusedAs(t, base, "", code)
}

// refusedAs is refused with a bearer token, for protected monitoring.
func refusedAs(t *testing.T, base, bearer, code string) int {
	t.Helper()
	_, _, body := getWith(t, base+"/metrics", bearer)
	for line := range strings.Lines(string(body)) {
		if rest, ok := strings.CutPrefix(line, `idmint_http_refused_total{code="`+code+`"} `); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(rest))
			return n
		}
	}
	t.Fatalf("no idmint_http_refused_total for %s in /metrics", code)
	return 0
}

// TestLimits_SlowClients: a request whose body or header trickles in is cut
// off by the server's read timeouts instead of holding a connection.
func TestLimits_SlowClients(t *testing.T) {
	_, base, _ := limitedServer(t, httpapi.AuthConfig{}, httpapi.Limits{ReadHeaderTimeout: 300 * time.Millisecond, ReadTimeout: 500 * time.Millisecond})
	addr := strings.TrimPrefix(base, "http://")
	for name, send := range map[string]string{
		"slow body":   "GET /id?biz_tag=order HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\na",
		"slow header": "GET /id?biz_tag=order HTTP/1.1\r\nHost: x\r\nX-Slow: ",
	} {
		t.Run(name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, send); err != nil {
				t.Fatal(err)
			}
			// The client sends nothing more. The server must close the
			// connection; the deadline only bounds a failing test.
			conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			_, err = io.Copy(io.Discard, conn)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the server kept a slow client's connection open for 20s")
			}
		})
	}
}

// TestLimits_Inputs: oversized queries and bodies are refused with JSON
// errors, counted in /metrics, and an invalid input is echoed truncated.
func TestLimits_Inputs(t *testing.T) {
	_, base, _ := limitedServer(t, httpapi.AuthConfig{}, httpapi.Limits{})
	s, _, body := getWith(t, base+"/id?biz_tag="+strings.Repeat("a", 5000), "")
	if s != 414 || errorCode(t, body) != wire.CodeQueryTooLong || len(body) > 200 {
		t.Fatalf("long query: %d %.200s", s, body)
	}
	s, _, body = getWith(t, base+"/id?biz_tag="+strings.Repeat("é", 900), "")
	if s != 400 || errorCode(t, body) != wire.CodeInvalidTag || len(body) > 400 {
		t.Fatalf("long invalid tag: %d, %d bytes: %.300s", s, len(body), body)
	}
	req, _ := http.NewRequest("POST", base+"/v1/tags", strings.NewReader(strings.Repeat(" ", 70<<10)))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 || errorCode(t, body) != wire.CodeBodyTooLarge {
		t.Fatalf("large body: %d %s", resp.StatusCode, body)
	}
	if n := refused(t, base, wire.CodeQueryTooLong); n != 1 {
		t.Fatalf("query_too_long counted %d times, want 1", n)
	}
	if n := refused(t, base, wire.CodeBodyTooLarge); n != 1 {
		t.Fatalf("body_too_large counted %d times, want 1", n)
	}
	// A header past MaxHeaderBytes is cut by net/http itself (431).
	s, _, _ = getWith(t, base+"/id?biz_tag=order&x="+strings.Repeat("a", 1000), "")
	if s != 200 {
		t.Fatalf("a 1 KB query: %d", s)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /id?biz_tag=order HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 1<<20))
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	line, _ := bufio.NewReader(conn).ReadString('\n')
	if !strings.Contains(line, "431") {
		t.Fatalf("1 MB header: %q, want 431", line)
	}
}

// TestLimits_RateByIDs: per-token and per-address limits count IDs, not
// requests; a refused request gets 429 with Retry-After, shows in
// /metrics, and costs the other tokens nothing.
func TestLimits_RateByIDs(t *testing.T) {
	t.Run("per token", func(t *testing.T) {
		_, base, m := limitedServer(t, httpapi.AuthConfig{IDs: httpapi.AuthToken}, httpapi.Limits{IDsPerSecondPerToken: 10})
		_, greedy := newToken(t, m, "greedy", "ids")
		_, modest := newToken(t, m, "modest", "ids")
		// The burst admits one request of the largest count (100).
		if s, _, body := getWith(t, base+"/ids?biz_tag=order&count=100", greedy); s != 200 {
			t.Fatalf("first batch: %d %s", s, body)
		}
		s, hdr, body := getWith(t, base+"/ids?biz_tag=order&count=100", greedy)
		if s != 429 || errorCode(t, body) != wire.CodeRateLimited {
			t.Fatalf("second batch: %d %s", s, body)
		}
		if ra, err := strconv.Atoi(hdr.Get("Retry-After")); err != nil || ra < 1 || ra > 11 {
			t.Fatalf("Retry-After %q: want the seconds until 100 ids at 10/s", hdr.Get("Retry-After"))
		}
		if s, _, _ := getWith(t, base+"/id?biz_tag=order", greedy); s != 429 {
			t.Fatalf("single id after the budget is spent: %d", s)
		}
		if s, _, body := getWith(t, base+"/ids?biz_tag=order&count=100", modest); s != 200 {
			t.Fatalf("another token: %d %s", s, body)
		}
		if n := refused(t, base, wire.CodeRateLimited); n != 2 {
			t.Fatalf("rate_limited counted %d, want 2", n)
		}
	})
	t.Run("a token's own rate", func(t *testing.T) {
		// The instance bounds tokens at 10 IDs/s; one token is made with
		// room for a busy service, one with less than the instance's.
		_, base, m := limitedServer(t, httpapi.AuthConfig{IDs: httpapi.AuthToken}, httpapi.Limits{IDsPerSecondPerToken: 10})
		bulk := rateToken(t, m, "bulk", 1e6)
		trickle := rateToken(t, m, "trickle", 0.01) // one ID per 100 s: no stall of a busy machine refills it
		_, plain := newToken(t, m, "plain", "ids")
		for i := range 20 { // 2,000 IDs at once: far past the instance's 10/s
			if s, _, body := getWith(t, base+"/ids?biz_tag=order&count=100", bulk); s != 200 {
				t.Fatalf("bulk batch %d: %d %s", i, s, body)
			}
		}
		for name, bearer := range map[string]string{"trickle": trickle, "plain": plain} {
			if s, _, body := getWith(t, base+"/ids?biz_tag=order&count=100", bearer); s != 200 {
				t.Fatalf("%s, first batch (the burst): %d %s", name, s, body)
			}
		}
		// After the burst, trickle waits 100 s for one ID, plain 0.1 s.
		_, hdr, _ := getWith(t, base+"/id?biz_tag=order", trickle)
		if ra, err := strconv.Atoi(hdr.Get("Retry-After")); err != nil || ra < 90 {
			t.Fatalf("trickle's Retry-After %q: want about 100 s (0.01 IDs/s)", hdr.Get("Retry-After"))
		}
		time.Sleep(300 * time.Millisecond)
		if s, _, body := getWith(t, base+"/id?biz_tag=order", plain); s != 200 {
			t.Fatalf("plain after 0.3 s at 10/s: %d %s", s, body)
		}
		if s, _, _ := getWith(t, base+"/id?biz_tag=order", trickle); s != 429 {
			t.Fatalf("trickle after 0.3 s at 0.01/s: %d, want 429", s)
		}
	})
	t.Run("per address in the open mode", func(t *testing.T) {
		_, base, _ := limitedServer(t, httpapi.AuthConfig{}, httpapi.Limits{IDsPerSecondPerAddress: 10})
		if s, _, _ := getWith(t, base+"/ids?biz_tag=order&count=100", ""); s != 200 {
			t.Fatalf("first batch: %d", s)
		}
		if s, hdr, _ := getWith(t, base+"/ids?biz_tag=order&count=50", ""); s != 429 || hdr.Get("Retry-After") == "" {
			t.Fatalf("second batch: %d", s)
		}
	})
}

func postWith(t *testing.T, url, bearer, body string) (int, http.Header, []byte) {
	t.Helper()
	return postFrom(t, client, url, bearer, body)
}

// postFrom is postWith through the client c.
func postFrom(t *testing.T, c *http.Client, url, bearer, body string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data
}

// TestLimits_SegmentsByIDs: POST /v1/segments is charged the IDs it grants
// (the tag's step for size 0, past the burst if the step is larger), not 1
// per request; a grant that fails costs nothing.
func TestLimits_SegmentsByIDs(t *testing.T) {
	grant := func(t *testing.T, base, bearer, tag string, size int64) (int, http.Header, []byte) {
		t.Helper()
		return postWith(t, base+"/v1/segments", bearer, grantBody(tag, size, uuid.Must(uuid.NewV7())))
	}
	t.Run("per token", func(t *testing.T) {
		_, base, m := limitedServer(t, httpapi.AuthConfig{IDs: httpapi.AuthToken}, httpapi.Limits{IDsPerSecondPerToken: 10})
		if _, err := m.CreateTag(t.Context(), allocator.TagSpec{Name: "range", Step: 10, MaxStep: 100}); err != nil {
			t.Fatal(err)
		}
		_, greedy := newToken(t, m, "greedy", "ids")
		_, modest := newToken(t, m, "modest", "ids")
		// The burst is 100 IDs (MaxCount): one range of 100 spends it.
		if s, _, body := grant(t, base, greedy, "range", 100); s != 200 {
			t.Fatalf("first range: %d %s", s, body)
		}
		s, hdr, body := grant(t, base, greedy, "range", 50)
		if s != 429 || errorCode(t, body) != wire.CodeRateLimited || hdr.Get("Retry-After") == "" {
			t.Fatalf("second range after 100 ids: %d %s", s, body)
		}
		if s, _, body := grant(t, base, modest, "range", 100); s != 200 {
			t.Fatalf("another token: %d %s", s, body)
		}
	})
	t.Run("per address in the open mode", func(t *testing.T) {
		_, base, _ := limitedServer(t, httpapi.AuthConfig{}, httpapi.Limits{IDsPerSecondPerAddress: 10})
		for range 5 {
			if s, _, body := grant(t, base, "", "nope", 100); s != 404 {
				t.Fatalf("unknown tag: %d %s", s, body)
			}
		}
		// Size 0 grants the tag's step, 1000 IDs: ten times the burst,
		// owed by the requests that follow.
		s, _, body := grant(t, base, "", "order", 0)
		var r wire.SegmentResponse
		if s != 200 || json.Unmarshal(body, &r) != nil || r.Last-r.First+1 != 1000 {
			t.Fatalf("range of the step after failed grants: %d %s", s, body)
		}
		s, hdr, body := getWith(t, base+"/id?biz_tag=order", "")
		if s != 429 || errorCode(t, body) != wire.CodeRateLimited {
			t.Fatalf("one id after a range of 1000: %d %s", s, body)
		}
		if ra, err := strconv.Atoi(hdr.Get("Retry-After")); err != nil || ra < 60 {
			t.Fatalf("Retry-After %q: want the ~90 s that 900 ids owed take at 10/s", hdr.Get("Retry-After"))
		}
	})
}

// rateToken creates a token for every tag's IDs with its own rate and
// returns its bearer string.
func rateToken(t *testing.T, store token.Store, name string, perSecond float64) string {
	t.Helper()
	tok, bearer, err := token.New(name, []string{"ids"})
	if err != nil {
		t.Fatal(err)
	}
	tok.IDsPerSecond = perSecond
	if _, err := store.CreateToken(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
	return bearer
}
