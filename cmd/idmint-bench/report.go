package main

import (
	"context"
	"fmt"
)

// openLoops measures, in alternating rounds, open-loop latency at half the
// bare server's ceiling: NextID on the bare grpc-go server and on idmint's
// --grpc-listen at half the bare server's closed-loop rate of the rounds
// before; GET /id on the bare net/http server and on idmint at half what
// the same Go generator reaches on the bare server (measured here: wrk
// reaches more than a Go client, whose ceiling is the one that counts).
func (b *bench) openLoops(ctx context.Context, open openLoop, res map[string]series, bareGRPC, listen, bareURL, idmintURL string) error {
	gload := grpcLoad(open)
	httpCeiling, err := gload.run(ctx, httpDialer(bareURL), 0)
	if err != nil {
		return fmt.Errorf("GET /id with the Go generator: %w", err)
	}
	res["http-go-bare"] = series{httpCeiling}
	grpcRate := res["grpc-bare"].median().rate() / 2
	httpRate := httpCeiling.rate() / 2
	b.logf("open loop: gRPC at %.0f/s, GET /id at %.0f/s (half of %.0f/s, the Go generator's closed loop on bare net/http)",
		grpcRate, httpRate, httpCeiling.rate())
	targets := []struct {
		name string
		dial dialer
		rate float64
	}{
		{"open-grpc-bare", grpcDialer(bareGRPC, "bench"), grpcRate},
		{"open-grpc-listen", grpcDialer(listen, "bench"), grpcRate},
		{"open-http-bare", httpDialer(bareURL), httpRate},
		{"open-http-idmint", httpDialer(idmintURL), httpRate},
	}
	for round := range b.cfg.rounds {
		for i := range 2 {
			for _, pair := range [][2]int{{0, 1}, {2, 3}} {
				t := targets[pair[(i+round)%2]]
				r, err := open.run(ctx, t.dial, t.rate, 0)
				if err != nil {
					return fmt.Errorf("%s: %w", t.name, err)
				}
				res[t.name] = append(res[t.name], r)
				b.openRates[t.name] = t.rate
				b.logf("round %d %-17s %9.0f req/s (due %.0f) p50 %v p99 %v failed %d", round+1, t.name, r.rate(), t.rate, r.p50, r.p99, r.non2xx)
			}
		}
	}
	return nil
}

// reportRPC prints the unary NextID figures and the ratios issue 25 names:
// --grpc-listen ≥ 0.85× bare grpc-go's throughput and open-loop p99 ≤
// 1.2×; gRPC and Connect on the HTTP port ≥ 0.9× bare connect-go; GET /id
// open-loop p99 ≤ 1.1× bare net/http's. None is asserted: they are
// figures of one machine's run.
func (b *bench) reportRPC(res map[string]series, idm result) {
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	b.printf("\nunary NextID, h2c, closed loop     req/s      p50       p99    failed\n")
	for _, row := range []struct{ name, key string }{
		{"bare grpc-go", "grpc-bare"},
		{"idmint --grpc-listen (grpc-go)", "grpc-listen"},
		{"bare connect-go, gRPC", "grpc-connect-bare"},
		{"idmint HTTP port, gRPC", "grpc-idmint"},
		{"bare connect-go, Connect", "connect-bare"},
		{"idmint HTTP port, Connect", "connect-idmint"},
	} {
		m := res[row.key].median()
		b.printf("%-32s %8.0f %8v %9v %9d\n", row.name, m.rate(), m.p50, m.p99, m.non2xx)
	}
	closed := func(name, a, bare, target string) {
		ma, mb := res[a].median(), res[bare].median()
		tr, _ := pairedRatios(res[a], res[bare])
		b.printf("%s: throughput %.2f× (target %s; median of per-round ratios %.2f×)\n", name, ratio(ma.rate(), mb.rate()), target, tr)
	}
	closed("idmint --grpc-listen / bare grpc-go", "grpc-listen", "grpc-bare", "≥ 0.85")
	closed("idmint HTTP-port gRPC / bare connect-go gRPC", "grpc-idmint", "grpc-connect-bare", "≥ 0.9")
	closed("idmint HTTP-port Connect / bare connect-go Connect", "connect-idmint", "connect-bare", "≥ 0.9")
	closed("idmint HTTP-port gRPC / idmint --grpc-listen", "grpc-idmint", "grpc-listen", "none")
	gi := res["grpc-listen"].median()
	b.printf("idmint --grpc-listen / idmint GET /id (wrk): throughput %.2f×\n", ratio(gi.rate(), idm.rate()))

	b.printf("\nopen loop (latency from when each call was due)   due/s   req/s      p50       p99    failed\n")
	for _, row := range []struct{ name, key string }{
		{"bare grpc-go", "open-grpc-bare"},
		{"idmint --grpc-listen", "open-grpc-listen"},
		{"GET /id, bare net/http", "open-http-bare"},
		{"GET /id, idmint", "open-http-idmint"},
	} {
		m := res[row.key].median()
		b.printf("%-46s %8.0f %8.0f %8v %9v %9d\n", row.name, b.openRates[row.key], m.rate(), m.p50, m.p99, m.non2xx)
	}
	open := func(name, a, bare, target string) {
		ma, mb := res[a].median(), res[bare].median()
		_, pr := pairedRatios(res[a], res[bare])
		b.printf("%s: p99 %.2f× (target %s; median of per-round ratios %.2f×), p50 %.2f×\n", name,
			ratio(float64(ma.p99), float64(mb.p99)), target, pr, ratio(float64(ma.p50), float64(mb.p50)))
	}
	open("idmint --grpc-listen / bare grpc-go, open loop", "open-grpc-listen", "open-grpc-bare", "≤ 1.2")
	open("idmint GET /id / bare net/http, open loop", "open-http-idmint", "open-http-bare", "≤ 1.1")
}
