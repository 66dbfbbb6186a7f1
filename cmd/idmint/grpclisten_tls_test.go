package main

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/memstore"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/rpcapi"
	idmintv1 "github.com/idmint/idmint/rpcapi/gen/idmint/v1"
	"github.com/idmint/idmint/testkit/testutil"
)

// TestGRPCListener_TLSReload: the grpc-go listener serves the TLS
// reloader's configuration, so a renewed key pair is served on it from the
// next check on, without a restart, as on the HTTP listener.
func TestGRPCListener_TLSReload(t *testing.T) {
	dir := t.TempDir()
	ca := testutil.NewCA(t, dir, "idmint")
	certFile, keyFile := ca.Issue(t, dir, "server", 1, true)
	clock := newReloadClock()
	quiet := slog.New(slog.DiscardHandler)
	r, err := newTLSReloader(certFile, keyFile, "", quiet, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := memstore.New()
	if _, err := m.CreateTag(ctx, allocator.TagSpec{Name: "order", Step: 100}); err != nil {
		t.Fatal(err)
	}
	alloc := allocator.New(allocator.Config{Store: m, Logger: quiet, Instance: "test"})
	t.Cleanup(func() { alloc.Close(context.Background()) })
	svc := rpcapi.New()
	api := httpapi.NewServer(httpapi.Config{Allocator: alloc, Logger: quiet, RPC: svc})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := newGRPCListener(ln, svc, r.serverConfig(), api.HTTPServer(), false, nil, quiet)
	g.start()
	t.Cleanup(func() {
		if err := g.stop(context.Background()); err != nil {
			t.Error(err)
		}
	})

	// served dials anew and returns the serial of the certificate served.
	served := func() int64 {
		t.Helper()
		cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(
			&tls.Config{RootCAs: poolOf(t, ca), ServerName: "localhost"})))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		var p peer.Peer
		if _, err := idmintv1.NewIDServiceClient(cc).NextID(ctx, &idmintv1.NextIDRequest{BizTag: "order"}, grpc.Peer(&p)); err != nil {
			t.Fatal(err)
		}
		info, ok := p.AuthInfo.(credentials.TLSInfo)
		if !ok || len(info.State.PeerCertificates) == 0 {
			t.Fatalf("no TLS peer: %+v", p.AuthInfo)
		}
		return info.State.PeerCertificates[0].SerialNumber.Int64()
	}
	if got := served(); got != 1 {
		t.Fatalf("serial %d, want 1", got)
	}
	ca.Issue(t, dir, "server", 2, true)
	stampFiles(t, time.Now().Add(time.Hour).Truncate(time.Second), certFile, keyFile)
	clock.next()
	if got := served(); got != 2 {
		t.Fatalf("serial %d after the renewal and a check, want 2", got)
	}
}
