package faults_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/client"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/pgtest"
	"github.com/idmint/idmint/testkit/testlog"
	"github.com/idmint/idmint/token"
	"github.com/idmint/idmint/wire"
)

// logTap keeps what an instance logs, as an operator's log pipeline would:
// the request IDs in it are anyone's to read.
type logTap struct{ testlog.Buffer }

// requestIDs returns the request_id of every line logged with message msg.
func (l *logTap) requestIDs(msg string) []string {
	var ids []string
	sc := bufio.NewScanner(strings.NewReader(l.String()))
	for sc.Scan() {
		var line struct {
			Msg       string `json:"msg"`
			RequestID string `json:"request_id"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == msg {
			ids = append(ids, line.RequestID)
		}
	}
	return ids
}

func (l *logTap) contains(s string) bool { return strings.Contains(l.String(), s) }

// trustInstance is an idmint instance over dbURL on a real listener, its
// log tapped.
type trustInstance struct {
	alloc *allocator.Allocator
	url   string
	log   *logTap
}

func startTrustInstance(t *testing.T, store *postgres.Store, name string, auth httpapi.AuthConfig) *trustInstance {
	t.Helper()
	tap := &logTap{}
	logger := slog.New(slog.NewJSONHandler(tap, &slog.HandlerOptions{Level: slog.LevelInfo}))
	a := newInstance(t, store, name, func(c *allocator.Config) { c.Logger = logger })
	srv := httptest.NewServer(httpapi.NewServer(httpapi.Config{Allocator: a, Instance: name, Logger: logger, Auth: auth}))
	t.Cleanup(srv.Close)
	return &trustInstance{alloc: a, url: srv.URL, log: tap}
}

// call posts body as JSON to url with an optional bearer token.
func call(t *testing.T, url, bearer string, body any) (int, []byte) {
	t.Helper()
	js, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func errCode(body []byte) string {
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	json.Unmarshal(body, &e)
	return e.Error.Code
}

// codeNotHolder is wire.CodeNotHolder, spelled out so that the test also
// builds, and fails, against a server without holders.
const codeNotHolder = "not_holder"

// strangerKey is a holder key nobody but the stranger has.
const strangerKey = "the-strangers-own-guessed-holder-key"

// requireRefused asserts that a stranger's grant and give-back under
// request id, sent to url as bearer, are refused as another caller's
// (409 not_holder), and that neither changed the tag's max_id.
func requireRefused(t *testing.T, store *postgres.Store, url, bearer, id, key string, first, last int64) {
	t.Helper()
	before := maxID(t, store, "order")
	for _, k := range []string{"", key} {
		back := map[string]string{"biz_tag": "order", "request_id": id, "first": jsonInt(first), "last": jsonInt(last)}
		if k != "" {
			back["holder_key"] = k
		}
		code, body := call(t, url+"/v1/segments/giveback", bearer, back)
		if code == http.StatusOK || strings.Contains(string(body), `"given_back":true`) {
			t.Fatalf("a stranger's give-back of [%d, %d] under request %s (holder key %q): %d %s", first, last, id, k, code, body)
		}
		if k != "" && (code != http.StatusConflict || errCode(body) != codeNotHolder) {
			t.Fatalf("a stranger's give-back: %d %s; want 409 %s", code, body, codeNotHolder)
		}
	}
	code, body := call(t, url+"/v1/segments", bearer, map[string]any{"biz_tag": "order", "request_id": id, "holder_key": key, "size": 100})
	if code != http.StatusConflict || errCode(body) != codeNotHolder {
		t.Fatalf("a stranger's grant under request %s: %d %s; want 409 %s, never the range", id, code, body, codeNotHolder)
	}
	if got := maxID(t, store, "order"); got != before {
		t.Fatalf("max_id moved from %d to %d: a stranger changed the tag", before, got)
	}
}

func jsonInt(n int64) string {
	js, _ := json.Marshal(n)
	return string(js)
}

// countDuplicates returns how many IDs of a were also handed out in b.
func countDuplicates(a, b []int64) int {
	seen := make(map[int64]bool, len(a))
	for _, id := range a {
		seen[id] = true
	}
	n := 0
	for _, id := range b {
		if seen[id] {
			n++
		}
	}
	return n
}

func take(t *testing.T, a *allocator.Allocator, n int) []int64 {
	t.Helper()
	ids, err := a.NextN(context.Background(), "order", n)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestStrangerCannotMakeDuplicates: a request ID is its caller's
// idempotency key, not a capability. Request IDs are easy to get (instances
// log them, clients send them as Idempotency-Key), so a stranger holding
// one, over real HTTP on real PostgreSQL, can neither give the range's tail
// back (which would let the tag grant the IDs again while their holder
// still serves them) nor be granted the range (which would hand the same
// IDs to two callers).
func TestStrangerCannotMakeDuplicates(t *testing.T) {
	srv := pgtest.Shared(t)

	t.Run("an instance's own segment, its request id read from the log", func(t *testing.T) {
		store := pgstore.Open(t, pgstore.NewDatabase(t, srv))
		createTag(t, store, "order", 100, 100)
		a := startTrustInstance(t, store, "a", httpapi.AuthConfig{})
		b := startTrustInstance(t, store, "b", httpapi.AuthConfig{})
		fromA := take(t, a.alloc, 1) // A serves [1, 100]
		ids := a.log.requestIDs("segment loaded")
		if len(ids) != 1 || fromA[0] != 1 {
			t.Fatalf("A logged %v loading its first segment, served %v", ids, fromA)
		}
		requireRefused(t, store, b.url, "", ids[0], strangerKey, 2, 100)
		requireRefused(t, store, a.url, "", ids[0], strangerKey, 2, 100)
		fromB := take(t, b.alloc, 100)
		fromA = append(fromA, take(t, a.alloc, 50)...)
		if n := countDuplicates(fromA, fromB); n != 0 {
			t.Fatalf("%d ids served by both A and B", n)
		}
	})

	t.Run("a client's range, its request id used by another token", func(t *testing.T) {
		store := pgstore.Open(t, pgstore.NewDatabase(t, srv))
		createTag(t, store, "order", 100, 100)
		bearer := func(name string) string {
			tok, secret, err := token.New(name, []string{"ids:order"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.CreateToken(context.Background(), tok); err != nil {
				t.Fatal(err)
			}
			return secret
		}
		owner, other := bearer("owner"), bearer("other")
		in := startTrustInstance(t, store, "a", httpapi.AuthConfig{Tokens: store, IDs: httpapi.AuthToken})
		id, key := uuid.Must(uuid.NewV7()).String(), "the-owners-holder-key-0123456789"
		grant := map[string]any{"biz_tag": "order", "request_id": id, "holder_key": key, "size": 100}
		if code, body := call(t, in.url+"/v1/segments", owner, grant); code != http.StatusOK {
			t.Fatalf("the owner's grant: %d %s", code, body)
		}
		// The other token has the request ID and even the holder key
		// (leaked with it): the request is still the owner's.
		requireRefused(t, store, in.url, other, id, key, 51, 100)
		requireRefused(t, store, in.url, other, id, strangerKey, 51, 100)
		if code, body := call(t, in.url+"/v1/segments", owner, grant); code != http.StatusOK || !strings.Contains(string(body), `"recovered":true`) {
			t.Fatalf("the owner's retry: %d %s; want its range, recovered", code, body)
		}
		if in.log.contains(key) {
			t.Fatal("the instance logged the holder key")
		}
	})

	t.Run("a client's range in the open mode, to a caller without its holder key", func(t *testing.T) {
		store := pgstore.Open(t, pgstore.NewDatabase(t, srv))
		createTag(t, store, "order", 100, 100)
		in := startTrustInstance(t, store, "a", httpapi.AuthConfig{})
		newClient := func() *client.Client {
			c, err := client.New(context.Background(), client.Config{URLs: []string{in.url}, Logger: testlog.Discard()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close(context.Background()) })
			return c
		}
		takeFrom := func(c *client.Client, n int) []int64 {
			t.Helper()
			out := make([]int64, 0, n)
			for range n {
				id, err := c.Next(context.Background(), "order")
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, id)
			}
			return out
		}
		first := newClient()
		fromFirst := takeFrom(first, 1) // the client holds [1, 100]
		ids := in.log.requestIDs("range granted to a client")
		if len(ids) != 1 || fromFirst[0] != 1 {
			t.Fatalf("the instance logged %v granting the client's range, the client served %v", ids, fromFirst)
		}
		requireRefused(t, store, in.url, "", ids[0], strangerKey, 2, 100)
		fromSecond := takeFrom(newClient(), 100)
		fromFirst = append(fromFirst, takeFrom(first, 50)...)
		if n := countDuplicates(fromFirst, fromSecond); n != 0 {
			t.Fatalf("%d ids served by both clients", n)
		}
	})

	t.Run("a retried grant after a give-back gets only what was kept", func(t *testing.T) {
		store := pgstore.Open(t, pgstore.NewDatabase(t, srv))
		createTag(t, store, "order", 100, 100)
		in := startTrustInstance(t, store, "a", httpapi.AuthConfig{})
		id, key := uuid.Must(uuid.NewV7()).String(), "the-holders-key-0123456789abcdef"
		grant := map[string]any{"biz_tag": "order", "request_id": id, "holder_key": key, "size": 100}
		var r wire.SegmentResponse
		if code, body := call(t, in.url+"/v1/segments", "", grant); code != http.StatusOK || json.Unmarshal(body, &r) != nil || r.First != 1 || r.Last != 100 {
			t.Fatalf("grant: %d %s; want [1, 100]", code, body)
		}
		back := map[string]string{"biz_tag": "order", "request_id": id, "holder_key": key, "first": "51", "last": "100"}
		if code, body := call(t, in.url+"/v1/segments/giveback", "", back); code != http.StatusOK || !strings.Contains(string(body), `"given_back":true`) {
			t.Fatalf("give back [51, 100]: %d %s", code, body)
		}
		var next wire.SegmentResponse
		other := map[string]any{"biz_tag": "order", "request_id": uuid.Must(uuid.NewV7()).String(), "holder_key": "another-callers-key-0123456789", "size": 100}
		if code, body := call(t, in.url+"/v1/segments", "", other); code != http.StatusOK || json.Unmarshal(body, &next) != nil || next.First != 51 {
			t.Fatalf("another caller's grant: %d %s; want it to start at 51", code, body)
		}
		var again wire.SegmentResponse
		code, body := call(t, in.url+"/v1/segments", "", grant)
		if code != http.StatusOK || json.Unmarshal(body, &again) != nil {
			t.Fatalf("the retry: %d %s", code, body)
		}
		if again.First != 1 || again.Last != 50 || !again.Recovered {
			t.Fatalf("the retry got [%d, %d] (recovered %v), want [1, 50]: [51, %d] are the other caller's", again.First, again.Last, again.Recovered, next.Last)
		}
	})
}
