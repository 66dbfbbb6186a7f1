package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	idmintv1 "github.com/idmint/idmint/rpcapi/gen/idmint/v1"
	"github.com/idmint/idmint/rpcapi/gen/idmint/v1/idmintv1connect"
)

// TestServe_GRPCOverTLS: gRPC on the TLS listener of a real idmint serve
// with client certificates and tokens: grpc-go, a Connect client and
// grpcurl with the CA, a client certificate and a token get IDs; without
// the certificate the handshake is refused, without the token the call is
// Unauthenticated.
func TestServe_GRPCOverTLS(t *testing.T) {
	s := startTLSServe(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dial := func(t *testing.T, certFile, keyFile string) *grpc.ClientConn {
		t.Helper()
		cc, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(credentials.NewTLS(s.tlsConfig(t, certFile, keyFile))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	withToken := func(ctx context.Context, tok string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	}

	t.Run("grpc-go", func(t *testing.T) {
		cc := dial(t, s.clientCert, s.clientKey)
		first, err := nextIDGRPC(withToken(ctx, s.ids), cc, "demo")
		if err != nil || first < 1 {
			t.Fatalf("NextID over TLS: %d, %v", first, err)
		}
		second, err := nextIDGRPC(withToken(ctx, s.ids), cc, "demo")
		if err != nil || second <= first {
			t.Fatalf("second NextID over TLS: %d after %d, %v", second, first, err)
		}
		if _, err := nextIDGRPC(ctx, cc, "demo"); status.Code(err) != codes.Unauthenticated {
			t.Errorf("NextID without a token: %v, want Unauthenticated", err)
		}
	})
	t.Run("grpc-go without a client certificate", func(t *testing.T) {
		cc := dial(t, "", "")
		if _, err := nextIDGRPC(withToken(ctx, s.ids), cc, "demo"); status.Code(err) != codes.Unavailable {
			t.Errorf("NextID without a client certificate: %v, want the handshake refused (Unavailable)", err)
		}
	})
	t.Run("connect", func(t *testing.T) {
		hc := s.httpClient(t, s.clientCert, s.clientKey, nil)
		for name, opts := range map[string][]connect.ClientOption{"grpc": {connect.WithGRPC()}, "connect": nil} {
			c := idmintv1connect.NewIDServiceClient(hc, s.base, opts...)
			req := connect.NewRequest(&idmintv1.NextIDRequest{BizTag: "demo"})
			req.Header().Set("Authorization", "Bearer "+s.ids)
			resp, err := c.NextID(ctx, req)
			if err != nil || resp.Msg.GetId() < 1 {
				t.Errorf("%s NextID over TLS: %v, %v", name, resp, err)
			}
		}
	})
	t.Run("grpcurl", func(t *testing.T) {
		args := []string{"tool", "grpcurl", "-cacert", s.ca.File, "-cert", s.clientCert, "-key", s.clientKey,
			"-H", "authorization: Bearer " + s.ids}
		out, err := exec.CommandContext(ctx, "go", append(args, s.addr, "list")...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "idmint.v1.IDService") {
			t.Fatalf("grpcurl list over TLS: %v\n%s", err, out)
		}
		out, err = exec.CommandContext(ctx, "go", append(args, "-d", `{"biz_tag":"demo"}`, s.addr, "idmint.v1.IDService/NextID")...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"id"`) {
			t.Fatalf("grpcurl NextID over TLS: %v\n%s", err, out)
		}
	})
}
