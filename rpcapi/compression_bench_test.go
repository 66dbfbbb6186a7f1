//go:build unix

package rpcapi

import (
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/idmint/idmint/rpcapi/gen/idmint/v1/idmintv1connect"
)

// cpuTime is the CPU time the process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkService_RefusedBody is what a refused call costs the process
// (server and client, one call at a time): the gzip bomb of
// TestService_GzipBomb with a token and without, beside a plain message one
// byte over the limit (sent without a length, so that it is read up to the
// limit as the bomb is inflated up to it). It reports the CPU time and the
// bytes inflated per call.
func BenchmarkService_RefusedBody(b *testing.B) {
	s := newRPCServer(b)
	bomb, plain := gzipBomb(), make([]byte, maxMessageBytes+1)
	for _, protocol := range []string{"connect", "grpc"} {
		for _, tc := range []struct {
			name string
			call rpcCall
			want connect.Code
		}{
			{"gzip bomb", rpcCall{body: bomb, gzip: true, token: s.ids}, connect.CodeResourceExhausted},
			{"gzip bomb, no token", rpcCall{body: bomb, gzip: true}, connect.CodeUnauthenticated},
			{"plain, over the limit", rpcCall{body: plain, token: s.ids, hideSize: true}, connect.CodeResourceExhausted},
		} {
			b.Run(protocol+"/"+tc.name, func(b *testing.B) {
				call := tc.call
				call.protocol, call.procedure = protocol, idmintv1connect.IDServiceNextIDProcedure
				s.inflated.Store(0)
				start := cpuTime(b)
				n := 0
				for b.Loop() {
					if got := s.do(b, call); got.code != tc.want {
						b.Fatalf("%v, want %v", got.code, tc.want)
					}
					n++
				}
				b.ReportMetric(float64(cpuTime(b)-start)/float64(n), "cpu-ns/op")
				b.ReportMetric(float64(s.inflated.Load())/float64(n), "inflated-B/op")
			})
		}
	}
}
