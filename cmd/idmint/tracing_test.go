package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/metadata"

	"github.com/idmint/idmint/testkit/otlptest"
	"github.com/idmint/idmint/testkit/servetest"
	"github.com/idmint/idmint/testkit/testutil"
	"github.com/idmint/idmint/wire"
)

// caller is a caller's trace: the traceparent it sends, and its IDs.
type caller struct{ traceID, spanID string }

func newCaller() caller {
	var b [24]byte
	rand.Read(b[:])
	return caller{traceID: hex.EncodeToString(b[:16]), spanID: hex.EncodeToString(b[16:])}
}

func (c caller) traceparent(sampled bool) string {
	flags := "00"
	if sampled {
		flags = "01"
	}
	return "00-" + c.traceID + "-" + c.spanID + "-" + flags
}

// TestServe_Tracing runs a real idmint serve on PostgreSQL with the OTEL_*
// environment set, once per OTLP protocol, against a receiver of the
// test's own, and calls it with a token, a traceparent per call, holder
// keys, request IDs, a retried grant (a lookup), a give-back, gRPC on both
// ports and a token in a query string. Every call's span is in its
// caller's trace under the caller's span, named by route or procedure;
// grants, lookups, give-backs and the standby wait are its children; the
// shutdown's give-back, the lease's renewals and release are spans of
// their own, flushed at exit; and nothing received holds the token, the
// holder key or any part of the database URL.
func TestServe_Tracing(t *testing.T) {
	dir, bin, dbURL := grpcSetup(t)
	tok := strings.TrimSpace(idmint(t, "token", "create", "--name", "app", "--scope", "ids", "--database-url", dbURL))
	// serve connects as a role of its own with a random password, so that
	// the scan below looks for words no span could hold by chance (the
	// harness's "postgres" is in every span's db.system, "postgresql").
	dbURL = tracedRole(t, dbURL)
	for _, protocol := range []string{"http/protobuf", "grpc"} {
		t.Run(strings.ReplaceAll(protocol, "/", "_"), func(t *testing.T) {
			recv := otlptest.NewHTTP(t)
			if protocol == "grpc" {
				recv = otlptest.NewGRPC(t)
			}
			grpcAddr := testutil.FreeAddr(t)
			p := &servetest.Process{Bin: bin, DatabaseURL: dbURL, Instance: "traced",
				LogPath: filepath.Join(dir, "traced-"+strings.ReplaceAll(protocol, "/", "_")+".log"),
				Args: serveArgs("--auth", "token", "--grpc-listen", grpcAddr,
					"--snowflake-lease-ttl", "4s", "--snowflake-renew-every", "500ms"),
				Env: []string{
					"OTEL_TRACES_EXPORTER=otlp",
					"OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol,
					"OTEL_EXPORTER_OTLP_ENDPOINT=" + recv.Endpoint,
					"OTEL_EXPORTER_OTLP_INSECURE=true",
					"OTEL_SERVICE_NAME=idmint-traced",
					"OTEL_RESOURCE_ATTRIBUTES=deployment.environment.name=test",
					// Nothing is sent before the flush at exit.
					"OTEL_BSP_SCHEDULE_DELAY=600000",
				}}
			p.Start(t)
			base := "http://" + p.Addr
			key := "holder-key-" + hex.EncodeToString([]byte(t.Name()))
			rid := uuid.Must(uuid.NewV7()).String()
			calls := map[string]caller{}
			do := func(name, method, path string, body any) []byte {
				t.Helper()
				c := newCaller()
				calls[name] = c
				var rd io.Reader
				if body != nil {
					js, _ := json.Marshal(body)
					rd = bytes.NewReader(js)
				}
				req, _ := http.NewRequest(method, base+path, rd)
				req.Header.Set("Authorization", "Bearer "+tok)
				req.Header.Set("Traceparent", c.traceparent(true))
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				data, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 200 && name != "query" {
					t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, data)
				}
				return data
			}
			do("id", "GET", "/id?biz_tag=order", nil)
			do("query", "GET", "/id?biz_tag=order&access_token="+tok, nil)
			grant := wire.SegmentRequest{Tag: "order", Size: 10, RequestID: rid, HolderKey: key}
			var got wire.SegmentResponse
			json.Unmarshal(do("grant", "POST", wire.PathSegments, grant), &got)
			do("retry", "POST", wire.PathSegments, grant) // granted before: looked up
			do("giveback", "POST", wire.PathGiveBack, wire.GiveBackRequest{Tag: "order", RequestID: rid, HolderKey: key,
				First: got.First + 5, Last: got.Last})
			do("connect", "POST", "/idmint.v1.IDService/NextID", map[string]string{"bizTag": "order"})
			// Not sampled by its caller: the default parent-based sampler
			// records nothing of it.
			unsampled := newCaller()
			req, _ := http.NewRequest("GET", base+"/id?biz_tag=order", nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("Traceparent", unsampled.traceparent(false))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
			// gRPC on the grpc-go listener.
			gc := newCaller()
			calls["grpc"] = gc
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			gctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok, "traceparent", gc.traceparent(true))
			if _, err := nextIDGRPC(gctx, grpcConn(t, grpcAddr), "order"); err != nil {
				t.Fatal(err)
			}
			// Let the lease be renewed, then stop as a container runtime
			// does.
			testutil.Eventually(t, 10*time.Second, "two lease renewals", func() bool {
				var h struct {
					Snowflake struct {
						Renewals int64 `json:"renewals"`
					} `json:"snowflake"`
				}
				testutil.GetJSON(t, base+"/id/health", &h)
				return h.Snowflake.Renewals >= 2
			})
			p.Stop(t, syscall.SIGTERM)
			if len(recv.Spans()) == 0 {
				logs, _ := os.ReadFile(p.LogPath)
				t.Fatalf("no span received by the end of the process (flush at exit?)\n%s", logs)
			}
			checkTrace(t, recv, calls, unsampled)

			u, err := url.Parse(dbURL)
			if err != nil {
				t.Fatal(err)
			}
			pw, _ := u.User.Password()
			secrets := []string{tok, key, dbURL, u.Host, pw, strings.TrimPrefix(u.Path, "/"), u.RawQuery, "Bearer"}
			if leaks := recv.Leaks(secrets...); len(leaks) > 0 {
				t.Errorf("the traces hold secrets: %q", leaks)
			}
		})
	}
}

// checkTrace checks the spans of each call of calls, and the background
// ones.
func checkTrace(t *testing.T, recv *otlptest.Receiver, calls map[string]caller, unsampled caller) {
	t.Helper()
	spans := recv.Spans()
	// server is the span of call's request, named name, under the
	// caller's span.
	server := func(call, name string) otlptest.Span {
		t.Helper()
		c := calls[call]
		for _, s := range spans {
			if s.TraceID == c.traceID && s.ParentSpanID == c.spanID {
				if s.Name != name || s.Kind != "SPAN_KIND_SERVER" || s.Service != "idmint-traced" {
					t.Errorf("%s: span %q kind %s service %q, want %q SERVER of idmint-traced", call, s.Name, s.Kind, s.Service, name)
				}
				return s
			}
		}
		t.Fatalf("%s: no span in the caller's trace %s under its span; received: %s", call, c.traceID, recv.Names())
		return otlptest.Span{}
	}
	// child is the span named name under parent.
	child := func(parent otlptest.Span, name string) otlptest.Span {
		t.Helper()
		for _, s := range spans {
			if s.Name == name && s.ParentSpanID == parent.SpanID && s.TraceID == parent.TraceID {
				return s
			}
		}
		t.Fatalf("no %s span under %s (%s); received: %s", name, parent.Name, parent.SpanID, recv.Names())
		return otlptest.Span{}
	}
	id := server("id", "GET /id")
	if id.Attrs["http.route"] != "/id" || id.Attrs["http.response.status_code"] != "200" || id.Attrs["http.request.method"] != "GET" {
		t.Errorf("GET /id attributes: %v", id.Attrs)
	}
	// The cold tag's first load is the request's child.
	alloc := child(id, "idmint.store.allocate")
	if alloc.Attrs["idmint.biz_tag"] != "order" || alloc.Attrs["idmint.held_by"] != "instance" || alloc.Attrs["idmint.outcome"] != "ok" {
		t.Errorf("allocate attributes: %v", alloc.Attrs)
	}
	child(alloc, "idmint.replication.confirm")
	server("query", "GET /id")

	grant := server("grant", "POST /v1/segments")
	ga := child(grant, "idmint.store.allocate")
	if ga.Attrs["idmint.held_by"] != "caller" || ga.Attrs["idmint.request_id"] == "" {
		t.Errorf("a caller's grant: %v", ga.Attrs)
	}
	child(ga, "idmint.replication.confirm")
	retry := server("retry", "POST /v1/segments")
	if ra := child(retry, "idmint.store.allocate"); ra.Attrs["idmint.outcome"] != "already_granted" || ra.Status != "STATUS_CODE_ERROR" {
		t.Errorf("retried grant: %v %s", ra.Attrs, ra.Status)
	}
	child(retry, "idmint.store.lookup")
	gb := child(server("giveback", "POST /v1/segments/giveback"), "idmint.store.give_back_range")
	if gb.Attrs["idmint.given_back"] != "true" {
		t.Errorf("give-back: %v", gb.Attrs)
	}
	if s := server("connect", "idmint.v1.IDService/NextID"); s.Attrs["rpc.method"] != "NextID" || s.Attrs["rpc.system"] != "connect_rpc" {
		t.Errorf("Connect call: %v", s.Attrs)
	}
	if s := server("grpc", "idmint.v1.IDService/NextID"); s.Attrs["rpc.system"] != "grpc" || s.Attrs["rpc.grpc.status_code"] != "0" {
		t.Errorf("gRPC call: %v", s.Attrs)
	}
	for _, s := range spans {
		if s.TraceID == unsampled.traceID {
			t.Errorf("span %s of a caller that did not sample", s.Name)
		}
	}
	// Background work: roots of their own.
	for _, name := range []string{"idmint.store.give_back", "idmint.lease.renew", "idmint.lease.acquire", "idmint.lease.release"} {
		found := recv.Named(name)
		if len(found) == 0 {
			t.Errorf("no %s span; received: %s", name, recv.Names())
		}
		for _, s := range found {
			if s.ParentSpanID != "" {
				t.Errorf("%s under %s: want a root", name, s.ParentSpanID)
			}
		}
	}
	// The instance's give-back at exit says whether it could (not here:
	// a caller was granted a range after its segment).
	if gb := recv.Named("idmint.store.give_back"); len(gb) > 0 && gb[0].Attrs["idmint.given_back"] != "false" {
		t.Errorf("the shutdown's give-back: %v", gb[0].Attrs)
	}
}

// tracedRole makes a login role with a random name and password, allowed
// every table and sequence of the database at dbURL, and returns dbURL as
// that role.
func tracedRole(t *testing.T, dbURL string) string {
	t.Helper()
	var b [12]byte
	rand.Read(b[:])
	role, pass := "traced_"+hex.EncodeToString(b[:4]), hex.EncodeToString(b[4:])+"Zq"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	id := pgx.Identifier{role}.Sanitize()
	for _, sql := range []string{
		"CREATE ROLE " + id + " LOGIN PASSWORD '" + pass + "'",
		"GRANT ALL ON ALL TABLES IN SCHEMA public TO " + id,
		"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO " + id,
		"GRANT USAGE, CREATE ON SCHEMA public TO " + id,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			t.Errorf("drop role %s: %v", role, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP OWNED BY "+id); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
		if _, err := conn.Exec(ctx, "DROP ROLE "+id); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, pass)
	return u.String()
}
