// Command idmint-bench measures idmint's GET /id side by side with two
// reference servers, in one run, on real PostgreSQL:
//
//   - bare: net/http returning an atomic counter as JSON (the ceiling);
//   - idmint: `idmint serve` with its default configuration;
//   - nextval: net/http calling PostgreSQL nextval() once per ID;
//   - and for unary NextID over h2c, driven by a small Go load generator
//     (grpc.go): idmint's --grpc-listen (grpc-go) against a bare grpc-go
//     server, and gRPC and Connect on idmint's HTTP port against a bare
//     connect-go handler on net/http, each returning an atomic counter;
//   - then open loop (openloop.go: calls on a fixed schedule at half the
//     bare server's measured ceiling, latency counted from when each call
//     was due): grpc-go bare against --grpc-listen, and GET /id bare
//     net/http against idmint.
//
// wrk drives each in alternating rounds; the command prints the median
// rate and latency of each, idmint's ratios to the bare server, database
// round trips per million IDs, the segment-switch scenario (a fresh tag with
// step 10 under the same load), /ids throughput in IDs/s, and idmint's RSS
// with 1 and with many warm tags. `make bench-http` runs it.
//
// PostgreSQL comes from -database-url or IDMINT_BENCH_DATABASE_URL: the
// command links no test harness. `make bench-http` starts one for it with
// testkit/cmd/withpostgres (Docker or local server binaries, see
// IDMINT_TEST_PG) when IDMINT_BENCH_DATABASE_URL is unset.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "idmint-bench:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "serve-bare", "serve-nextval", "serve-bare-grpc", "serve-bare-connect":
			return runReference(ctx, args[0], args[1:], stderr)
		}
	}
	return runBench(ctx, args, stdout, stderr)
}
