package faults_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/testlog"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/testkit/pgtest"
)

// serveWaitTimeout and serveRequestTimeout are idmint serve's
// --wait-timeout and --request-timeout.
const (
	serveWaitTimeout    = 2 * time.Second
	serveRequestTimeout = 5 * time.Second
)

// TestFarDatabase_ColdTagFirstRequest: with 400 ms each way and serve's
// timeouts (3 s attempts, 2 s --wait-timeout, 5 s --request-timeout), the
// first HTTP request for a tag this instance has never loaded reads the tag
// catalog and waits for the tag's first fetch, on the one warm connection a
// started instance has. That takes more than --wait-timeout and
// --request-timeout; it succeeds because a cold tag's first wait, the
// catalog read and the request's bound follow the round trip. A second
// tag, known to the catalog by then, succeeds the same way.
func TestFarDatabase_ColdTagFirstRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("far database: slow round trips")
	}
	const oneWay = 400 * time.Millisecond
	dbURL := pgstore.NewDatabase(t, pgtest.Shared(t))
	direct := pgstore.Open(t, dbURL)
	tags := []string{"cold", "colder"}
	for _, tag := range tags {
		createTag(t, direct, tag, 1000, 1000)
	}
	px := far(t, dbURL, oneWay)
	store := pgstore.Open(t, px.URL)
	rt := store.RoundTrip()
	pingAsServe(t, store)
	a := newInstance(t, store, "far", func(c *allocator.Config) {
		c.AttemptTimeout, c.RetryMin, c.RetryMax = serveAttemptTimeout, 0, 0
		c.Segment = segment.Config{WaitTimeout: serveWaitTimeout}
		c.RoundTrip = rt
	})
	api := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Logger: testlog.Discard(), RequestTimeout: serveRequestTimeout}))
	defer api.Close()
	httpc := &http.Client{Timeout: time.Minute}
	for _, tag := range tags {
		start := time.Now()
		resp, err := httpc.Get(api.URL + "/id?biz_tag=" + tag)
		if err != nil {
			t.Fatal(err)
		}
		var reply struct {
			ID    string `json:"id"`
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		err = json.NewDecoder(resp.Body).Decode(&reply)
		resp.Body.Close()
		took := time.Since(start)
		t.Logf("%s: first request %v (round trip %v, fetch timeout %v): %d, id %q, err %v %s",
			tag, took.Round(time.Millisecond), rt.Estimate().Round(time.Millisecond), a.RoundTrip().FetchTimeout,
			resp.StatusCode, reply.ID, err, reply.Error.Message)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("first request for cold tag %q at %v each way: %d %s", tag, oneWay, resp.StatusCode, reply.Error.Message)
		}
		if id, _ := strconv.ParseInt(reply.ID, 10, 64); id != 1 {
			t.Fatalf("first id of %q: %q, want 1", tag, reply.ID)
		}
	}
}
