package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	idmintv1 "github.com/idmint/idmint/rpcapi/gen/idmint/v1"
	"github.com/idmint/idmint/rpcapi/gen/idmint/v1/idmintv1connect"
)

// Unary gRPC NextID over h2c, measured by a small Go load generator (wrk
// speaks no HTTP/2): `idmint serve` against a bare grpc-go server that
// returns an atomic counter, the ceiling of a gRPC ID server.

// bareGRPC is the reference gRPC server: idmint.v1.IDService/NextID alone,
// registered by hand with the schema's messages.
func bareGRPC() *grpc.Server {
	var n atomic.Int64
	srv := grpc.NewServer()
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: idmintv1connect.IDServiceName,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "NextID",
			Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var req idmintv1.NextIDRequest
				if err := dec(&req); err != nil {
					return nil, err
				}
				if req.GetBizTag() == "" {
					return nil, errors.New("biz_tag is required")
				}
				return &idmintv1.NextIDResponse{BizTag: req.GetBizTag(), Id: n.Add(1)}, nil
			},
		}},
	}, struct{}{})
	return srv
}

// runBareGRPC serves bareGRPC on listen until ctx ends: "serve-bare-grpc".
func runBareGRPC(ctx context.Context, listen string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := bareGRPC()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	srv.GracefulStop()
	return <-errc
}

// grpcLoad drives unary NextID calls: conns connections, each with
// workers/conns goroutines calling back to back.
type grpcLoad struct {
	conns, workers int
	duration       time.Duration
}

// maxSamples bounds the latencies one worker keeps (the first ones of a
// run): enough for p99, bounded memory.
const maxSamples = 1 << 20

// run calls addr for d (the load's duration when 0) and returns the
// figures as a wrk run's: requests, duration, p50, p99, failed calls.
func (l grpcLoad) run(ctx context.Context, addr, tag string, d time.Duration) (result, error) {
	if d == 0 {
		d = l.duration
	}
	conns := make([]*grpc.ClientConn, l.conns)
	for i := range conns {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return result{}, err
		}
		defer cc.Close()
		// One call first, so that the connection is up before the clock.
		if err := callNextID(ctx, cc, tag); err != nil {
			return result{}, fmt.Errorf("grpc %s: %w", addr, err)
		}
		conns[i] = cc
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		samples  []time.Duration
		requests atomic.Int64
		failed   atomic.Int64
	)
	start := time.Now()
	deadline := start.Add(d)
	for w := range l.workers {
		cc := conns[w%len(conns)]
		wg.Go(func() {
			var mine []time.Duration
			for ctx.Err() == nil {
				t0 := time.Now()
				if t0.After(deadline) {
					break
				}
				err := callNextID(ctx, cc, tag)
				if len(mine) < maxSamples {
					mine = append(mine, time.Since(t0))
				}
				requests.Add(1)
				if err != nil {
					failed.Add(1)
				}
			}
			mu.Lock()
			samples = append(samples, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	r := result{requests: requests.Load(), duration: time.Since(start), non2xx: failed.Load()}
	slices.Sort(samples)
	if n := len(samples); n > 0 {
		r.p50, r.p99 = samples[n/2].Round(time.Microsecond), samples[min(n-1, n*99/100)].Round(time.Microsecond)
	}
	return r, nil
}

func callNextID(ctx context.Context, cc *grpc.ClientConn, tag string) error {
	var resp idmintv1.NextIDResponse
	return cc.Invoke(ctx, idmintv1connect.IDServiceNextIDProcedure, &idmintv1.NextIDRequest{BizTag: tag}, &resp)
}

// waitGRPC waits until addr answers NextID, for at most 20s.
func waitGRPC(ctx context.Context, addr string) error {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		err := callNextID(ctx, cc, "warm")
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("grpc %s did not answer: %w", addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
