package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idmint/idmint/internal/checker"
	idmintv1 "github.com/idmint/idmint/rpcapi/gen/idmint/v1"
	"github.com/idmint/idmint/rpcapi/gen/idmint/v1/idmintv1connect"
	"github.com/idmint/idmint/testkit/servetest"
	"github.com/idmint/idmint/testkit/testutil"
)

// The tests of serve --grpc-listen: grpc-go clients (the generated stubs),
// grpcurl, and the HTTP port's clients beside them, against real `idmint
// serve` processes.

func bearerMD(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// TestServe_GRPCListen: two token-protected instances on one PostgreSQL,
// each with its grpc-go listener. On the listener: refusals with the HTTP
// port's codes and details (Unauthenticated, PermissionDenied, NotFound,
// InvalidArgument, ResourceExhausted with RetryInfo), each with the call's
// request ID; health and reflection (grpcurl); and IDs taken at once over
// HTTP/JSON, Connect and gRPC on the HTTP port and gRPC on the listener,
// from both instances: every call answered, no duplicate, each client's
// IDs increasing.
func TestServe_GRPCListen(t *testing.T) {
	dir, bin, url := grpcSetup(t)
	idmint(t, "tag", "create", "other", "--database-url", url)
	app := strings.TrimSpace(idmint(t, "token", "create", "--name", "app", "--scope", "ids", "--database-url", url))
	slow := strings.TrimSpace(idmint(t, "token", "create", "--name", "slow", "--scope", "ids:order", "--rate", "1", "--database-url", url))
	ops := strings.TrimSpace(idmint(t, "token", "create", "--name", "ops", "--scope", "admin", "--database-url", url))
	procs := make([]*servetest.Process, 2)
	grpcAddrs := make([]string, len(procs))
	for i := range procs {
		grpcAddrs[i] = testutil.FreeAddr(t)
		procs[i] = &servetest.Process{Bin: bin, DatabaseURL: url, Instance: fmt.Sprint("n", i),
			LogPath: filepath.Join(dir, fmt.Sprint("n", i, ".log")), Args: serveArgs("--auth", "token", "--grpc-listen", grpcAddrs[i])}
		procs[i].Start(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cc := grpcConn(t, grpcAddrs[0])

	t.Run("refusals", func(t *testing.T) {
		ids := idmintv1.NewIDServiceClient(cc)
		tests := []struct {
			name   string
			call   func() error
			code   codes.Code
			reason string
			retry  bool
		}{
			{"no token", func() error {
				_, err := ids.NextID(ctx, &idmintv1.NextIDRequest{BizTag: "order"})
				return err
			}, codes.Unauthenticated, "unauthorized", false},
			{"bad token", func() error {
				_, err := ids.NextID(bearerMD(ctx, "idm_nope"), &idmintv1.NextIDRequest{BizTag: "order"})
				return err
			}, codes.Unauthenticated, "unauthorized", false},
			{"tag outside the scope", func() error {
				_, err := ids.NextID(bearerMD(ctx, slow), &idmintv1.NextIDRequest{BizTag: "other"})
				return err
			}, codes.PermissionDenied, "forbidden", false},
			{"ids token on the admin service", func() error {
				_, err := idmintv1.NewAdminServiceClient(cc).ListTags(bearerMD(ctx, app), &idmintv1.ListTagsRequest{})
				return err
			}, codes.PermissionDenied, "forbidden", false},
			{"unknown tag", func() error {
				_, err := ids.NextID(bearerMD(ctx, app), &idmintv1.NextIDRequest{BizTag: "nosuch"})
				return err
			}, codes.NotFound, "unknown_tag", false},
			{"unknown tag, admin", func() error {
				_, err := idmintv1.NewAdminServiceClient(cc).GetTag(bearerMD(ctx, ops), &idmintv1.GetTagRequest{BizTag: "nosuch"})
				return err
			}, codes.NotFound, "unknown_tag", false},
			{"bad count", func() error {
				_, err := ids.NextIDs(bearerMD(ctx, slow), &idmintv1.NextIDsRequest{BizTag: "order", Count: 0})
				return err
			}, codes.InvalidArgument, "invalid_count", false},
			// The token's burst is one request of the largest count
			// (1000), of which the bad count took one.
			{"the burst", func() error {
				resp, err := ids.NextIDs(bearerMD(ctx, slow), &idmintv1.NextIDsRequest{BizTag: "order", Count: 990})
				if err == nil && len(resp.GetIds()) != 990 {
					return fmt.Errorf("%d ids, want 990", len(resp.GetIds()))
				}
				return err
			}, codes.OK, "", false},
			{"past the rate", func() error {
				_, err := ids.NextIDs(bearerMD(ctx, slow), &idmintv1.NextIDsRequest{BizTag: "order", Count: 1000})
				return err
			}, codes.ResourceExhausted, "rate_limited", true},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				err := tt.call()
				if got := status.Code(err); got != tt.code {
					t.Fatalf("code %v (%v), want %v", got, err, tt.code)
				}
				if tt.code == codes.OK {
					return
				}
				info, retry := errorDetails(err)
				if info.GetReason() != tt.reason || info.GetDomain() != "idmint" || info.GetMetadata()["request_id"] == "" {
					t.Errorf("ErrorInfo %v, want reason %q in domain idmint, with a request_id", info, tt.reason)
				}
				if tt.retry != (retry != nil) || tt.retry && retry.GetRetryDelay().AsDuration() < time.Second {
					t.Errorf("RetryInfo %v, want one (of at least 1s): %v", retry, tt.retry)
				}
			})
		}
	})

	t.Run("health and reflection", func(t *testing.T) {
		hc := healthpb.NewHealthClient(cc)
		for _, svc := range []string{"", idmintv1connect.IDServiceName, idmintv1connect.SegmentServiceName} {
			resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("Check(%q) = %v, %v; want SERVING", svc, resp.GetStatus(), err)
			}
		}
		grpcurl := func(args ...string) string {
			t.Helper()
			out, err := exec.CommandContext(ctx, "go", append([]string{"tool", "grpcurl", "-plaintext"}, args...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("grpcurl %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			return string(out)
		}
		list := grpcurl(grpcAddrs[1], "list")
		for _, svc := range []string{"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", idmintv1connect.IDServiceName,
			idmintv1connect.SegmentServiceName, idmintv1connect.SnowflakeServiceName, idmintv1connect.AdminServiceName} {
			if !strings.Contains(list, svc+"\n") {
				t.Errorf("grpcurl list lacks %s:\n%s", svc, list)
			}
		}
		out := grpcurl("-H", "authorization: Bearer "+app, "-d", `{"biz_tag":"order"}`, grpcAddrs[1], "idmint.v1.IDService/NextID")
		if !strings.Contains(out, `"bizTag": "order"`) || !strings.Contains(out, `"id": "`) {
			t.Errorf("grpcurl NextID:\n%s", out)
		}
	})

	t.Run("no duplicates across transports", func(t *testing.T) {
		const calls = 200
		c := checker.New()
		var wg sync.WaitGroup
		client := func(name string, next func() ([]int64, error)) {
			wg.Go(func() {
				for range calls {
					c.Attempt()
					ids, err := next()
					if err != nil {
						c.Fail(fmt.Errorf("%s: %w", name, err))
						continue
					}
					c.Ack(name, "order", ids...)
				}
			})
		}
		authed := bearerMD(ctx, app)
		hc := &http.Client{Transport: bearerTransport{app}}
		for i, p := range procs {
			base := "http://" + p.Addr
			listener := idmintv1.NewIDServiceClient(grpcConn(t, grpcAddrs[i]))
			port := idmintv1.NewIDServiceClient(grpcConn(t, p.Addr))
			connectIDs := idmintv1connect.NewIDServiceClient(hc, base)
			client(fmt.Sprint("grpc-listen", i), func() ([]int64, error) {
				resp, err := listener.NextID(authed, &idmintv1.NextIDRequest{BizTag: "order"})
				return []int64{resp.GetId()}, err
			})
			client(fmt.Sprint("grpc-listen-ids", i), func() ([]int64, error) {
				resp, err := listener.NextIDs(authed, &idmintv1.NextIDsRequest{BizTag: "order", Count: 7})
				return resp.GetIds(), err
			})
			client(fmt.Sprint("grpc-http-port", i), func() ([]int64, error) {
				resp, err := port.NextID(authed, &idmintv1.NextIDRequest{BizTag: "order"})
				return []int64{resp.GetId()}, err
			})
			client(fmt.Sprint("connect", i), func() ([]int64, error) {
				resp, err := connectIDs.NextID(ctx, connect.NewRequest(&idmintv1.NextIDRequest{BizTag: "order"}))
				if err != nil {
					return nil, err
				}
				return []int64{resp.Msg.GetId()}, nil
			})
			client(fmt.Sprint("http", i), func() ([]int64, error) {
				id, _, err := servetest.FetchID(ctx, hc, base+"/id?biz_tag=order")
				return []int64{id}, err
			})
		}
		wg.Wait()
		r := c.Report()
		t.Log(r)
		if !r.Valid() || r.IDs() != int64(len(procs))*calls*(1+7+1+1+1) {
			t.Fatalf("want every call answered, no duplicate, each client's IDs increasing:\n%s", r)
		}
	})
}

// bearerTransport sends token on every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestServe_GRPCListenOverTLS: the grpc-go listener serves the HTTP
// listener's TLS and client certificates (the same files, from the
// environment): a grpc-go client and grpcurl with the CA, a client
// certificate and a token get IDs; without the certificate the handshake
// is refused, without the token the call is Unauthenticated; a cleartext
// client gets no answer.
func TestServe_GRPCListenOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	grpcAddr := testutil.FreeAddr(t)
	t.Setenv("IDMINT_GRPC_LISTEN", grpcAddr)
	s := startTLSServe(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dial := func(t *testing.T, creds credentials.TransportCredentials) idmintv1.IDServiceClient {
		t.Helper()
		cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return idmintv1.NewIDServiceClient(cc)
	}
	t.Run("client certificate and token", func(t *testing.T) {
		ids := dial(t, credentials.NewTLS(s.tlsConfig(t, s.clientCert, s.clientKey)))
		first, err := ids.NextID(bearerMD(ctx, s.ids), &idmintv1.NextIDRequest{BizTag: "demo"})
		if err != nil || first.GetId() < 1 {
			t.Fatalf("NextID over TLS: %v, %v", first, err)
		}
		second, err := ids.NextID(bearerMD(ctx, s.ids), &idmintv1.NextIDRequest{BizTag: "demo"})
		if err != nil || second.GetId() <= first.GetId() {
			t.Fatalf("second NextID over TLS: %v after %v, %v", second, first, err)
		}
		if _, err := ids.NextID(ctx, &idmintv1.NextIDRequest{BizTag: "demo"}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("NextID without a token: %v, want Unauthenticated", err)
		}
	})
	t.Run("no client certificate", func(t *testing.T) {
		ids := dial(t, credentials.NewTLS(s.tlsConfig(t, "", "")))
		if _, err := ids.NextID(bearerMD(ctx, s.ids), &idmintv1.NextIDRequest{BizTag: "demo"}); status.Code(err) != codes.Unavailable {
			t.Errorf("NextID without a client certificate: %v, want the handshake refused (Unavailable)", err)
		}
	})
	t.Run("a stranger's certificate", func(t *testing.T) {
		ids := dial(t, credentials.NewTLS(s.tlsConfig(t, s.strangerCert, s.strangerKey)))
		if _, err := ids.NextID(bearerMD(ctx, s.ids), &idmintv1.NextIDRequest{BizTag: "demo"}); status.Code(err) != codes.Unavailable {
			t.Errorf("NextID with another CA's client certificate: %v, want the handshake refused (Unavailable)", err)
		}
	})
	t.Run("cleartext", func(t *testing.T) {
		ids := dial(t, insecure.NewCredentials())
		if _, err := ids.NextID(bearerMD(ctx, s.ids), &idmintv1.NextIDRequest{BizTag: "demo"}); status.Code(err) != codes.Unavailable {
			t.Errorf("NextID in cleartext to the TLS listener: %v, want Unavailable", err)
		}
	})
	t.Run("grpcurl", func(t *testing.T) {
		args := []string{"tool", "grpcurl", "-cacert", s.ca.File, "-cert", s.clientCert, "-key", s.clientKey,
			"-H", "authorization: Bearer " + s.ids}
		out, err := exec.CommandContext(ctx, "go", append(args, grpcAddr, "list")...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "idmint.v1.IDService") {
			t.Fatalf("grpcurl list over TLS: %v\n%s", err, out)
		}
		out, err = exec.CommandContext(ctx, "go", append(args, "-d", `{"biz_tag":"demo"}`, grpcAddr, "idmint.v1.IDService/NextID")...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"id"`) {
			t.Fatalf("grpcurl NextID over TLS: %v\n%s", err, out)
		}
	})
}

// TestServe_GRPCListenInUse: a --grpc-listen port in use fails serve at
// once, naming the flag, before the store is opened.
func TestServe_GRPCListenInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	t.Setenv("IDMINT_DATABASE_URL", "")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err = run(ctx, []string{"serve", "--data-dir", dir, "--listen", testutil.FreeAddr(t), "--grpc-listen", ln.Addr().String()}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--grpc-listen") {
		t.Fatalf("serve with --grpc-listen on a port in use: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, sqliteFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the SQLite file was made before the port was found in use: %v", err)
	}
}

// TestServe_GRPCListenStops: serve (on SQLite, in-process) answers on its
// grpc-go listener, and once stopped, as by SIGTERM, returns without error
// and the listener is closed.
func TestServe_GRPCListenStops(t *testing.T) {
	grpcAddr := testutil.FreeAddr(t)
	t.Setenv("IDMINT_DATABASE_URL", "")
	_, stop := startServe(t, "--data-dir", t.TempDir(), "--tag", "order", "--grpc-listen", grpcAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ids := idmintv1.NewIDServiceClient(grpcConn(t, grpcAddr))
	if resp, err := ids.NextID(ctx, &idmintv1.NextIDRequest{BizTag: "order"}); err != nil || resp.GetId() < 1 {
		t.Fatalf("NextID on --grpc-listen: %v, %v", resp, err)
	}
	stop() // fails the test if serve returns an error
	if c, err := net.DialTimeout("tcp", grpcAddr, time.Second); err == nil {
		c.Close()
		t.Fatal("the grpc-go listener still accepts connections after serve returned")
	}
}
