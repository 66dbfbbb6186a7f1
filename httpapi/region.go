package httpapi

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idmint/idmint/core"
)

// regionCollector turns the region's state into metrics when scraped:
// idmint_region_info (its name, index and region count), the IDs its
// share holds above each tag's highest range, and whether each peer
// agrees.
type regionCollector struct {
	src              core.RegionSource
	alloc            Allocator
	info, runway     *prometheus.Desc
	peerUp, conflict *prometheus.Desc
}

func newRegionCollector(src core.RegionSource, alloc Allocator) *regionCollector {
	return &regionCollector{
		src: src, alloc: alloc,
		info: prometheus.NewDesc("idmint_region_info", "1, labelled with this instance's region, its index in the current epoch (-1: share spent) and the epoch's region count and regions.",
			[]string{"region", "index", "regions", "region_list"}, nil),
		runway: prometheus.NewDesc("idmint_region_share_runway_ids", "IDs the region's share holds above the tag's highest range, before the fence (absent while the last epoch is open: unbounded).",
			[]string{"biz_tag"}, nil),
		peerUp: prometheus.NewDesc("idmint_region_peer_agrees", "1 when the peer answered and its share agrees with this region's, 0 otherwise.",
			[]string{"peer"}, nil),
		conflict: prometheus.NewDesc("idmint_region_conflict", "1 when a peer's share disagrees with this region's: grants are refused.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *regionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.info
	ch <- c.runway
	ch <- c.peerUp
	ch <- c.conflict
}

// Collect implements prometheus.Collector.
func (c *regionCollector) Collect(ch chan<- prometheus.Metric) {
	h := core.RegionHealthOf(c.src.Region(), c.alloc.Stats())
	ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, h.Name, strconv.Itoa(h.Index), strconv.Itoa(len(h.Regions)), strings.Join(h.Regions, ","))
	for _, r := range h.Runway {
		if r.IDsLeft != nil {
			ch <- prometheus.MustNewConstMetric(c.runway, prometheus.GaugeValue, float64(*r.IDsLeft), r.Tag)
		}
	}
	for _, p := range h.Peers {
		ch <- prometheus.MustNewConstMetric(c.peerUp, prometheus.GaugeValue, boolFloat(p.Reachable && p.Agrees), p.URL)
	}
	ch <- prometheus.MustNewConstMetric(c.conflict, prometheus.GaugeValue, boolFloat(h.Conflict != ""))
}
