package httpapi_test

import (
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/pgtest"
)

// TestMain gives the end-to-end tests (health over a real database, the
// browser test) a PostgreSQL server; it starts only if one of them asks.
// Every reply is also checked against the OpenAPI document (see
// validating).
func TestMain(m *testing.M) { os.Exit(reportViolations(pgtest.Main(m))) }

var client = &http.Client{Timeout: 10 * time.Second, Transport: validating{next: http.DefaultTransport}}

// getURL fetches an absolute URL and returns status, header and body.
func getURL(tb testing.TB, url string) (int, http.Header, []byte) {
	tb.Helper()
	resp, err := client.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, resp.Header, body
}
