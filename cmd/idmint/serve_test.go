package main

import (
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/testutil"
)

// TestServe_SlowHeaders: the real server (serve's http.Server) closes a
// connection whose request headers never finish, as a slowloris client's
// would not, instead of holding it (and a goroutine) for long: by its header
// timeout (5s), before the read timeout (10s) would.
func TestServe_SlowHeaders(t *testing.T) {
	t.Setenv("IDMINT_DATABASE_URL", "")
	t.Setenv("IDMINT_DATA_DIR", t.TempDir())
	base, _ := startServe(t)
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}

	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A request line and one header, and never the blank line that ends
	// the headers.
	if _, err := io.WriteString(conn, "GET /id?biz_tag=demo HTTP/1.1\r\nHost: idmint\r\n"); err != nil {
		t.Fatal(err)
	}
	// The server's header timeout is 5s; its read timeout, 10s, would end
	// the read too, but only later: 8s tells the two apart.
	const limit = 8 * time.Second
	if err := conn.SetReadDeadline(time.Now().Add(limit)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	reply, err := io.ReadAll(conn)
	var nerr net.Error
	if errors.As(err, &nerr) && nerr.Timeout() {
		t.Fatalf("the server held a connection with unfinished headers for %v: no header timeout", limit)
	}
	// Closed (EOF or reset), with nothing or a 408 said first.
	if len(reply) > 0 && !strings.HasPrefix(string(reply), "HTTP/1.1 408") {
		t.Fatalf("unfinished headers answered with %q", reply)
	}
	t.Logf("connection with unfinished headers closed after %v (%v)", time.Since(start).Round(time.Millisecond), err)

	// The server itself is fine.
	var one struct{ ID string }
	if status := testutil.GetJSON(t, base+"/id?biz_tag=demo", &one); status != 200 || one.ID == "" {
		t.Fatalf("/id after the slow client: %d %+v", status, one)
	}
}
