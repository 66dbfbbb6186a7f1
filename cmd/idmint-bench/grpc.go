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

// Unary NextID over h2c, measured by a small Go load generator (wrk speaks
// no HTTP/2): `idmint serve` (gRPC on --grpc-listen, gRPC and Connect on
// its HTTP port) against a bare grpc-go server and a bare connect-go
// handler that return an atomic counter, the ceilings of each transport.

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

// run calls the target for d (the load's duration when 0), over l.conns
// connections of dial, each shared by its share of l.workers goroutines
// calling back to back, and returns the figures as a wrk run's: requests,
// duration, p50, p99, failed calls.
func (l grpcLoad) run(ctx context.Context, dial dialer, d time.Duration) (result, error) {
	if d == 0 {
		d = l.duration
	}
	calls, closeAll, err := openConns(ctx, dial, l.conns)
	if err != nil {
		return result{}, err
	}
	defer closeAll()
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
		call := calls[w%len(calls)]
		wg.Go(func() {
			var mine []time.Duration
			for ctx.Err() == nil {
				t0 := time.Now()
				if t0.After(deadline) {
					break
				}
				err := call(ctx)
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
	r.p50, r.p99 = percentiles(samples)
	return r, nil
}

// openConns opens n connections of dial and makes one call on each, so
// that they are up before the clock; closeAll closes them.
func openConns(ctx context.Context, dial dialer, n int) (calls []func(context.Context) error, closeAll func(), err error) {
	var closers []func()
	closeAll = func() {
		for _, c := range closers {
			c()
		}
	}
	for range n {
		call, closeConn, err := dial(ctx)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		closers = append(closers, closeConn)
		if err := call(ctx); err != nil {
			closeAll()
			return nil, nil, err
		}
		calls = append(calls, call)
	}
	return calls, closeAll, nil
}

// percentiles sorts samples and returns their p50 and p99.
func percentiles(samples []time.Duration) (p50, p99 time.Duration) {
	slices.Sort(samples)
	n := len(samples)
	if n == 0 {
		return 0, 0
	}
	return samples[n/2].Round(time.Microsecond), samples[min(n-1, n*99/100)].Round(time.Microsecond)
}

func callNextID(ctx context.Context, cc *grpc.ClientConn, tag string) error {
	var resp idmintv1.NextIDResponse
	return cc.Invoke(ctx, idmintv1connect.IDServiceNextIDProcedure, &idmintv1.NextIDRequest{BizTag: tag}, &resp)
}

// waitGRPC waits until addr answers NextID of tag, for at most 20s.
func waitGRPC(ctx context.Context, addr, tag string) error {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		err := callNextID(ctx, cc, tag)
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
