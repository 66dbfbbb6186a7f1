// Package toxic puts an in-process toxiproxy between a test and a server
// (PostgreSQL, or an idmint instance), so that the test can cut, slow or
// reset the connection at the moment it chooses: a reply lost after the
// server committed, a network partition that leaves connections open.
package toxic

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/collectors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Proxy is a toxiproxy listening on a free 127.0.0.1 port.
type Proxy struct {
	*toxiproxy.Proxy
	// URL is the URL the proxy was made for, with its host replaced by
	// the proxy's: connecting to it goes through the proxy.
	URL string
}

// New starts a proxy to the host of rawURL, stopped when tb ends.
func New(tb testing.TB, rawURL string) *Proxy {
	tb.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		tb.Fatal(err)
	}
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	srv.Metrics.ProxyMetrics = collectors.NewProxyMetricCollectors()
	p := toxiproxy.NewProxy(srv, "target", "127.0.0.1:0", u.Host)
	if err := p.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Stop)
	u.Host = p.Listen
	return &Proxy{Proxy: p, URL: u.String()}
}

// Add adds a toxic of type typ (toxiproxy's: timeout, reset_peer,
// latency, ...) with its attributes as JSON; stream is "upstream" (to the
// server) or "downstream" (its replies).
func (p *Proxy) Add(tb testing.TB, name, typ, stream, attrs string) {
	tb.Helper()
	js := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		tb.Fatalf("add toxic %s: %v", name, err)
	}
}

// Remove removes the toxic called name.
func (p *Proxy) Remove(tb testing.TB, name string) {
	tb.Helper()
	if err := p.Toxics.RemoveToxic(context.Background(), name); err != nil {
		tb.Fatalf("remove toxic %s: %v", name, err)
	}
}

// Cut swallows all traffic both ways and leaves connections open: the
// worst kind of outage, as a partition is. Heal ends it.
func (p *Proxy) Cut(tb testing.TB) {
	tb.Helper()
	for _, stream := range []string{"upstream", "downstream"} {
		p.Add(tb, "cut-"+stream, "timeout", stream, `{"timeout":0}`)
	}
}

// Heal ends Cut.
func (p *Proxy) Heal(tb testing.TB) {
	tb.Helper()
	for _, stream := range []string{"upstream", "downstream"} {
		p.Remove(tb, "cut-"+stream)
	}
}
