package httpapi

import (
	"context"
	"errors"
	"maps"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/segment"
)

// Metrics is idmint's Prometheus instrumentation, in a registry of its own
// so that embedding idmint never touches the program's default registry.
//
// Counters and gauges are read from the allocator's Stats when /metrics is
// scraped, so they cost the hot path nothing. Only two things are observed
// as they happen: HTTP requests (by the server) and segment loads, whose
// latency histogram needs each load: pass ObserveLoad as the OnLoad hook of
// the allocator's segment.Config.
//
// A Metrics serves one Server.
type Metrics struct {
	reg          *prometheus.Registry
	loadDuration *prometheus.HistogramVec
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec

	// routes holds each route's resolved metrics (see route): an immutable
	// map, replaced under routesMu when a route is first seen.
	routes   atomic.Pointer[map[string]*routeMetrics]
	routesMu sync.Mutex

	// known holds the tags that loaded a segment once. Failed loads of other
	// tags are not observed: a flood of requests for made-up tags during a
	// database outage must not make one series each.
	known sync.Map // tag → struct{}

	// refused counts requests refused by access control and limits; see
	// refusedCounter.
	refused     *prometheus.CounterVec
	refusedOnce sync.Once

	// floorLead, floorRaised and floorRefused count what the floors
	// callers claim on POST /v1/segments cost, by tag (observeFloor): a
	// series only for a tag whose row a claimed floor met.
	floorLead, floorRaised, floorRefused *prometheus.CounterVec
}

// NewMetrics returns the metrics, with the Go runtime and process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		loadDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "idmint_segment_load_duration_seconds",
			Help: "Time to fetch one segment from the database, retries included.",
			// 1ms to ~16s: a local database answers in milliseconds, a
			// failing one runs into the load timeout (10s by default).
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"biz_tag"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idmint_http_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idmint_http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route"}),
	}
	tag := []string{"biz_tag"}
	m.floorLead = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idmint_claimed_floor_lead_ids_total",
		Help: "IDs skipped by callers' claimed floors (POST /v1/segments): max_id raised above the tag's for a caller's floor, each charged to that caller's floor-lead and ID limits.",
	}, tag)
	m.floorRaised = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idmint_claimed_floor_raises_total",
		Help: "Range grants whose caller's claimed floor raised max_id (their lead is idmint_claimed_floor_lead_ids_total).",
	}, tag)
	m.floorRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idmint_claimed_floor_refused_total",
		Help: "Range grants refused (429) because the caller's claimed floor was above max_id while its budget for raising it was spent; nothing granted.",
	}, tag)
	m.routes.Store(&map[string]*routeMetrics{})
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.loadDuration, m.requests, m.duration,
		m.floorLead, m.floorRaised, m.floorRefused,
	)
	return m
}

// Registry returns the registry, so that a program can add its own metrics.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ObserveLoad records one segment load. Its signature is segment.Config's
// OnLoad.
func (m *Metrics) ObserveLoad(tag string, latency time.Duration, err error) {
	if err == nil {
		m.known.Store(tag, struct{}{})
	} else if _, ok := m.known.Load(tag); !ok || errors.Is(err, allocator.ErrUnknownTag) {
		return
	}
	m.loadDuration.WithLabelValues(tag).Observe(latency.Seconds())
}

// observeFloor records what a caller's claimed floor cost a grant of tag: a
// lead of lead IDs, or a refusal.
func (m *Metrics) observeFloor(tag string, lead int64, refused bool) {
	if refused {
		m.floorRefused.WithLabelValues(tag).Inc()
		return
	}
	m.floorLead.WithLabelValues(tag).Add(float64(lead))
	m.floorRaised.WithLabelValues(tag).Inc()
}

// unmatchedRoute labels requests that matched no route, so that scanners
// probing random paths make one series, not one per path.
const unmatchedRoute = "unmatched"

// routeMetrics are one route's request counter and latency histogram,
// resolved once, so that observing a request costs no label lookup. Every
// route registered on the server's router gets them by its chi pattern.
type routeMetrics struct {
	name     string
	ok       prometheus.Counter // code 200, the hot one
	duration prometheus.Observer
	m        *Metrics
}

// route returns the metrics of a route pattern ("" for no route).
func (m *Metrics) route(pattern string) *routeMetrics {
	if pattern == "" {
		pattern = unmatchedRoute
	}
	if rm, ok := (*m.routes.Load())[pattern]; ok {
		return rm
	}
	m.routesMu.Lock()
	defer m.routesMu.Unlock()
	routes := *m.routes.Load()
	if rm, ok := routes[pattern]; ok {
		return rm
	}
	rm := &routeMetrics{
		name:     pattern,
		ok:       m.requests.WithLabelValues(pattern, "200"),
		duration: m.duration.WithLabelValues(pattern),
		m:        m,
	}
	next := make(map[string]*routeMetrics, len(routes)+1)
	maps.Copy(next, routes)
	next[pattern] = rm
	m.routes.Store(&next)
	return rm
}

// observe records one request.
func (rm *routeMetrics) observe(status int, d time.Duration) {
	if status == http.StatusOK {
		rm.ok.Inc()
	} else {
		rm.m.requests.WithLabelValues(rm.name, strconv.Itoa(status)).Inc()
	}
	rm.duration.Observe(d.Seconds())
}

// attach registers the collector that reads a's Stats at scrape time, and
// the one that reads repl's status if there is one.
func (m *Metrics) attach(a Allocator, pingTimeout time.Duration, repl ReplicationSource) {
	m.reg.MustRegister(newStatsCollector(a, pingTimeout))
	if repl != nil {
		m.reg.MustRegister(newReplicationCollector(repl, pingTimeout))
	}
}

func (m *Metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// statsCollector turns allocator Stats into metrics when scraped.
type statsCollector struct {
	alloc       Allocator
	pingTimeout time.Duration
	perTag      []tagMetric
	dbUp        *prometheus.Desc
	// roundTrip, fetchTimeout and connectTimeout: the measured round trip
	// and the timeouts that follow it.
	roundTrip, fetchTimeout, connectTimeout *prometheus.Desc
}

// tagMetric is one per-tag metric and how to read it from Stats.
type tagMetric struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(st segment.Stats) float64
}

func newStatsCollector(a Allocator, pingTimeout time.Duration) *statsCollector {
	tag := []string{"biz_tag"}
	counter := func(name, help string, v func(segment.Stats) float64) tagMetric {
		return tagMetric{prometheus.NewDesc(name, help, tag, nil), prometheus.CounterValue, v}
	}
	gauge := func(name, help string, v func(segment.Stats) float64) tagMetric {
		return tagMetric{prometheus.NewDesc(name, help, tag, nil), prometheus.GaugeValue, v}
	}
	return &statsCollector{
		alloc:       a,
		pingTimeout: pingTimeout,
		dbUp:        prometheus.NewDesc("idmint_database_up", "1 when the database answered a ping at scrape time, 0 when not.", nil, nil),
		roundTrip:   prometheus.NewDesc("idmint_database_round_trip_seconds", "Measured round trip to the database (the least exchange of the last 10 s; 0 when not measured).", nil, nil),
		fetchTimeout: prometheus.NewDesc("idmint_fetch_timeout_seconds",
			"Timeout of one store call of a segment fetch: max(floor, 20 x round trip), bounded above.", nil, nil),
		connectTimeout: prometheus.NewDesc("idmint_connect_timeout_seconds",
			"Timeout of one connection attempt per host of a multi-host URL, by the same rule (0: connects not bounded so).", nil, nil),
		perTag: []tagMetric{
			counter("idmint_ids_issued_total", "IDs handed out.", func(s segment.Stats) float64 { return float64(s.Issued) }),
			counter("idmint_ids_abandoned_total", "IDs granted but never handed out (a gap).", func(s segment.Stats) float64 { return float64(s.Abandoned) }),
			counter("idmint_ids_given_back_total", "Unused IDs returned to the database at shutdown (no gap).", func(s segment.Stats) float64 { return float64(s.GivenBack) }),
			counter("idmint_segment_loads_total", "Segments fetched from the database.", func(s segment.Stats) float64 { return float64(s.Loads) }),
			counter("idmint_segment_load_failures_total", "Segment fetches that failed (refused ones included).", func(s segment.Stats) float64 { return float64(s.LoadFailures) }),
			counter("idmint_segment_recovered_total", "Segments whose reply was lost and which were found again by request ID.", func(s segment.Stats) float64 { return float64(s.Recovered) }),
			counter("idmint_rollbacks_repaired_total", "Rollbacks repaired: max_id found below the highest ID this instance was granted, and raised to it.", func(s segment.Stats) float64 { return float64(s.Repaired) }),
			counter("idmint_segment_refused_total", "Segments refused because they started at or below an ID already granted (database rolled back).", func(s segment.Stats) float64 { return float64(s.Refused) }),
			gauge("idmint_segment_step", "Size of the last segment fetched.", func(s segment.Stats) float64 { return float64(s.Step) }),
			gauge("idmint_buffer_remaining_ids", "IDs left in the current segment.", func(s segment.Stats) float64 { return float64(s.Remaining) }),
			gauge("idmint_buffer_remaining_ratio", "IDs left in the current segment over its size.", func(s segment.Stats) float64 { return s.RemainingRatio }),
			gauge("idmint_buffer_available_ids", "IDs that can be handed out without the database: current rest plus next segment.", func(s segment.Stats) float64 { return float64(s.Available()) }),
			gauge("idmint_buffer_next_ready", "1 when the next segment is fetched and waiting.", func(s segment.Stats) float64 { return boolFloat(s.NextRange != nil) }),
			gauge("idmint_buffer_serving", "1 when an ID can be handed out without waiting.", func(s segment.Stats) float64 { return boolFloat(s.Serving) }),
			gauge("idmint_runway_seconds", "The tag's runway target: how long its buffers must carry callers without the database at the peak rate (0: none).", func(s segment.Stats) float64 { return s.Runway.Seconds() }),
			gauge("idmint_runway_held_seconds", "How long the IDs held in memory last at the tag's recent peak rate (+Inf with no traffic).", runwayHeldSeconds),
			gauge("idmint_runway_met", "1 when the IDs held last the tag's runway at its peak rate (or it has none), 0 when short.", func(s segment.Stats) float64 { return boolFloat(s.RunwayMet) }),
			gauge("idmint_peak_ids_per_second", "The tag's recent peak issue rate, decaying slowly, that the runway is measured at.", func(s segment.Stats) float64 { return s.Peak }),
		},
	}
}

// Describe implements prometheus.Collector.
func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.perTag {
		ch <- m.desc
	}
	ch <- c.dbUp
	ch <- c.roundTrip
	ch <- c.fetchTimeout
	ch <- c.connectTimeout
}

// Collect implements prometheus.Collector. Tags that never loaded a segment
// are left out: they may be made-up names whose first load has not failed
// yet.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.alloc.Stats() {
		if st.Loads == 0 {
			continue
		}
		for _, m := range c.perTag {
			ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.value(st), st.Tag)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.alloc.Timeout(c.pingTimeout))
	defer cancel()
	ch <- prometheus.MustNewConstMetric(c.dbUp, prometheus.GaugeValue, boolFloat(c.alloc.Ping(ctx) == nil))
	rt := c.alloc.RoundTrip()
	ch <- prometheus.MustNewConstMetric(c.roundTrip, prometheus.GaugeValue, rt.RTT.Seconds())
	ch <- prometheus.MustNewConstMetric(c.fetchTimeout, prometheus.GaugeValue, rt.FetchTimeout.Seconds())
	ch <- prometheus.MustNewConstMetric(c.connectTimeout, prometheus.GaugeValue, rt.ConnectTimeout.Seconds())
}

// runwayHeldSeconds is Stats.RunwayHeld in seconds, +Inf for no rate.
func runwayHeldSeconds(s segment.Stats) float64 {
	if s.RunwayHeld == time.Duration(math.MaxInt64) {
		return math.Inf(1)
	}
	return s.RunwayHeld.Seconds()
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
