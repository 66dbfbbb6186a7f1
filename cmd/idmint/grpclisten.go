package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"

	"google.golang.org/grpc"

	"github.com/idmint/idmint/internal/tracing"
	"github.com/idmint/idmint/rpcapi"
)

// defaultGRPCListen is where serve answers gRPC with grpc-go unless told
// otherwise: 50051, the port gRPC's own examples and most gRPC tooling
// reach for, and not 9090, which Prometheus takes (docker compose
// publishes it on the host).
const defaultGRPCListen = ":50051"

// grpcListenConfig is serve's --grpc-listen.
type grpcListenConfig struct {
	addr string
}

func (g *grpcListenConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&g.addr, "grpc-listen", defaultGRPCListen,
		"gRPC listen address, served by grpc-go (the same services, tokens and limits as gRPC on --listen, with --tls-cert and --tls-client-ca alike); off (or empty) serves gRPC on --listen only")
}

// enabled says whether serve opens the gRPC listener.
func (g *grpcListenConfig) enabled() bool { return g.addr != "" && g.addr != "off" }

// listen opens the listener, or returns nil when it is off.
func (g *grpcListenConfig) listen() (net.Listener, error) {
	if !g.enabled() {
		return nil, nil
	}
	ln, err := net.Listen("tcp", g.addr)
	if err != nil {
		return nil, fmt.Errorf("--grpc-listen %s: %w", g.addr, err)
	}
	return ln, nil
}

// grpcListener is the grpc-go server on its listener, started by start and
// stopped by stop.
type grpcListener struct {
	ln      net.Listener
	srv     *grpc.Server
	done    chan struct{} // closed when Serve returned
	err     error         // Serve's return, set before done is closed
	once    sync.Once     // stop's
	stopErr error
}

// newGRPCListener serves svc's procedures on ln with tlsConfig (nil:
// cleartext): the HTTP listener's reloading configuration, so that a
// renewed certificate or client CA applies to both. It follows httpSrv's
// bounds on headers and idle connections, and its access log; with tr
// (nil: off) each call is a span.
func newGRPCListener(ln net.Listener, svc *rpcapi.Service, tlsConfig *tls.Config, httpSrv *http.Server, accessLog bool, tr *tracing.Tracing, logger *slog.Logger) *grpcListener {
	cfg := rpcapi.GRPCConfig{TLS: tlsConfig, Logger: logger, AccessLog: accessLog,
		MaxHeaderBytes: httpSrv.MaxHeaderBytes, ReadHeaderTimeout: httpSrv.ReadHeaderTimeout, IdleTimeout: httpSrv.IdleTimeout}
	if tr != nil {
		cfg.Trace = tr.GRPC
	}
	return &grpcListener{ln: ln, srv: rpcapi.NewGRPCServer(svc, cfg), done: make(chan struct{})}
}

// start serves in a goroutine that stop waits for.
func (g *grpcListener) start() {
	go func() {
		defer close(g.done)
		g.err = g.srv.Serve(g.ln)
	}()
}

// failed is closed when Serve returned before stop: the listener failed.
func (g *grpcListener) failed() <-chan struct{} { return g.done }

// stop ends the calls in flight and the server gracefully, or at once
// when ctx ends first, and waits for Serve to return. It runs once; a
// second call returns the first one's error.
func (g *grpcListener) stop(ctx context.Context) error {
	g.once.Do(func() {
		graceful := make(chan struct{})
		go func() {
			g.srv.GracefulStop()
			close(graceful)
		}()
		select {
		case <-graceful:
		case <-ctx.Done():
			g.srv.Stop()
			<-graceful
			g.stopErr = errors.New("graceful stop cut short: the calls in flight were ended")
		}
		<-g.done
		if g.err != nil && !errors.Is(g.err, grpc.ErrServerStopped) {
			g.stopErr = g.err
		}
	})
	return g.stopErr
}
