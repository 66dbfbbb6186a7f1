package httpapi

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idmint/idmint/internal/redact"
	"github.com/idmint/idmint/segment"
)

// Health statuses.
const (
	StatusOK          = "ok"          // serving, database reachable
	StatusDegraded    = "degraded"    // serving from memory, but something needs attention
	StatusUnavailable = "unavailable" // not serving
)

// HealthVersion is the version of the /id/health document. It changes only
// when a field changes meaning or goes away.
const HealthVersion = 1

// Health is the /id/health document.
type Health struct {
	Version  int       `json:"version"`
	Status   string    `json:"status"`
	Instance string    `json:"instance,omitempty"`
	Time     time.Time `json:"time"`
	// Reasons says, in a few words each, why the status is not ok; empty
	// when it is.
	Reasons  []string       `json:"reasons"`
	Database DatabaseHealth `json:"database"`
	// Replication tells whether the database can lose grants on failover;
	// absent without a ReplicationSource (SQLite) or while the database is
	// unreachable.
	Replication *ReplicationHealth `json:"replication,omitempty"`
	Tags        []TagHealth        `json:"tags"`
	// Snowflake is the Snowflake mode's state; absent when it is off.
	Snowflake *SnowflakeHealth `json:"snowflake,omitempty"`
	// TLS says how the listener is secured (Config.TLS).
	TLS TLSHealth `json:"tls"`
}

// TLSHealth says whether the listener serves TLS and asks for client
// certificates. It never holds key material.
type TLSHealth struct {
	Enabled bool `json:"enabled"`
	// ClientCertificates is "required" (mTLS) or "off".
	ClientCertificates string `json:"client_certificates"`
}

// DatabaseHealth reports whether the store answered a ping, and the round
// trip the fetch and connect timeouts follow.
type DatabaseHealth struct {
	Reachable bool    `json:"reachable"`
	LatencyMS float64 `json:"latency_ms"`
	Error     string  `json:"error,omitempty"`
	// RoundTripMS is the measured round trip to the database (a moving
	// average; 0 when the store does not measure it).
	RoundTripMS float64 `json:"round_trip_ms"`
	// FetchTimeoutMS bounds one store call of a segment fetch:
	// max(floor, 20 × round trip), at most 30 s.
	FetchTimeoutMS float64 `json:"fetch_timeout_ms"`
	// ConnectTimeoutMS bounds one connection attempt per host of a
	// multi-host URL, by the same rule; absent when connects are not
	// bounded so.
	ConnectTimeoutMS float64 `json:"connect_timeout_ms,omitempty"`
}

// RangeJSON is a range of IDs; IDs are strings, as everywhere in the API.
type RangeJSON struct {
	First int64 `json:"first,string"`
	Last  int64 `json:"last,string"`
}

// TagHealth is one tag's buffer.
type TagHealth struct {
	Tag     string `json:"biz_tag"`
	Serving bool   `json:"serving"`
	// Current is the range being served; Next the next ID it will hand out.
	Current        *RangeJSON `json:"current"`
	Next           int64      `json:"next_id,string"`
	Remaining      int64      `json:"remaining"`
	RemainingRatio float64    `json:"remaining_ratio"`
	NextReady      bool       `json:"next_ready"`
	NextRange      *RangeJSON `json:"next_range"`
	// NextLate: the current range is past the prefetch threshold, no next
	// range is ready, and the last load failed.
	NextLate bool `json:"next_late"`
	Loading  bool `json:"loading"`
	// Available is what the tag can hand out without the database: the
	// rest of the current range plus the next range.
	Available int64 `json:"available"`
	// IDsPerSecond is the issue rate averaged since the last load started
	// (over 10 s at least), and SecondsUntilDry how long Available lasts at
	// that rate; null when the rate is zero.
	IDsPerSecond    float64    `json:"ids_per_second"`
	SecondsUntilDry *float64   `json:"seconds_until_dry"`
	Step            int64      `json:"step"`
	MinStep         int64      `json:"min_step"`
	MaxStep         int64      `json:"max_step"`
	SegmentLoads    int64      `json:"segment_loads"`
	LastLoadMS      float64    `json:"last_load_latency_ms"`
	AvgLoadMS       float64    `json:"avg_load_latency_ms"`
	LastLoadAt      *time.Time `json:"last_load_at"`
	LoadFailures    int64      `json:"load_failures"`
	Recovered       int64      `json:"recovered_replies"`
	Refused         int64      `json:"refused_ranges"`
	// Repaired counts rollbacks repaired: the tag's max_id was found below
	// the highest ID this instance was granted and raised to it.
	Repaired  int64  `json:"rollbacks_repaired"`
	Issued    int64  `json:"ids_issued"`
	Abandoned int64  `json:"ids_abandoned"`
	GivenBack int64  `json:"ids_given_back"`
	LastError string `json:"last_error,omitempty"`
	// RunwaySeconds is the tag's runway (0: none); RunwayHeldSeconds how
	// long Available lasts at PeakIDsPerSecond, the recent peak rate (null
	// with no traffic: it lasts). RunwayMet is false when that falls short
	// of the runway, and RunwayShortReason says why: max_step_too_small,
	// store_unavailable or rate_above_held.
	RunwaySeconds     float64  `json:"runway_seconds"`
	RunwayHeldSeconds *float64 `json:"runway_held_seconds"`
	RunwayMet         bool     `json:"runway_met"`
	RunwayShortReason string   `json:"runway_short_reason,omitempty"`
	PeakIDsPerSecond  float64  `json:"peak_ids_per_second"`
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	var stats []segment.Stats
	_, asked := r.URL.Query()["biz_tag"]
	if asked {
		tag, err := parseTag(r.URL.Query())
		if err != nil {
			s.WriteError(w, r, err)
			return
		}
		st, err := s.cfg.Allocator.TagStats(r.Context(), tag)
		if err != nil && st.Tag == "" {
			if lookup(err).status != http.StatusServiceUnavailable {
				s.WriteError(w, r, err)
				return
			}
			// Known or not, it cannot be served now: report it as such.
			st = segment.Stats{Tag: tag, LastError: redact.Error(err)}
		}
		stats = []segment.Stats{st}
	} else {
		stats = withTags(s.cfg.Allocator.Stats(), s.cfg.Tags)
	}
	h := s.health(r.Context(), stats, asked)
	status := http.StatusOK
	if h.Status == StatusUnavailable {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, h)
}

// health builds the document; asked is true for ?biz_tag=T. The status is:
//   - unavailable when the database is unreachable and a tag cannot serve,
//     counting only tags that loaded once or the one asked for (so that
//     requests for made-up tags during an outage cannot take the instance
//     out of a load balancer), or when no tag ever loaded;
//   - degraded when every tag serves but the database is unreachable, a
//     tag's next range is late, a load failed since the last success, a
//     range was refused or a rollback repaired since the instance started
//     (the database went back in time: an operator must look, so it
//     sticks), Snowflake mode is on and cannot issue IDs, or the
//     replication has a warning (asynchronous standbys only, fewer standbys
//     than required, standbys hidden from the role);
//   - ok otherwise.
//
// Reasons lists every cause, so that a dashboard can say what is wrong.
func (s *Server) health(ctx context.Context, stats []segment.Stats, asked bool) Health {
	h := Health{Version: HealthVersion, Instance: s.cfg.Instance, Time: s.cfg.Now().UTC(), Tags: make([]TagHealth, 0, len(stats)), TLS: s.cfg.TLS}
	if h.TLS.ClientCertificates == "" {
		h.TLS.ClientCertificates = "off"
	}
	// A ping that needs a new connection takes several round trips: a
	// timeout fit for a nearby database would call a far one unreachable.
	pingCtx, cancel := context.WithTimeout(ctx, s.cfg.Allocator.Timeout(s.cfg.PingTimeout))
	start := s.cfg.Now()
	err := s.cfg.Allocator.Ping(pingCtx)
	cancel()
	h.Database.LatencyMS = ms(s.cfg.Now().Sub(start))
	h.Database.Reachable = err == nil
	if err != nil {
		h.Database.Error = "database unreachable"
	}
	rt := s.cfg.Allocator.RoundTrip()
	h.Database.RoundTripMS, h.Database.FetchTimeoutMS, h.Database.ConnectTimeoutMS = ms(rt.RTT), ms(rt.FetchTimeout), ms(rt.ConnectTimeout)

	h.Reasons = []string{}
	reason := func(format string, args ...any) { h.Reasons = append(h.Reasons, fmt.Sprintf(format, args...)) }
	serving, troubled := true, !h.Database.Reachable
	if !h.Database.Reachable {
		reason("database unreachable")
	} else if h.Replication = s.replicationHealth(ctx); h.Replication != nil {
		for _, w := range h.Replication.Warnings {
			troubled = true
			reason("replication: %s", w)
		}
	}
	loaded := 0
	for _, st := range stats {
		h.Tags = append(h.Tags, tagHealth(st))
		if st.Loads > 0 {
			loaded++
		}
		// A tag that cannot serve is only fatal when the database is gone
		// too; otherwise its next request loads it.
		if !st.Serving && !h.Database.Reachable && (asked || st.Loads > 0) {
			serving = false
			reason("%s: buffers empty and the database unreachable", st.Tag)
		}
		switch {
		case st.NextLate:
			troubled = true
			reason("%s: next range late: %d ids left and the load is failing", st.Tag, st.Available())
		case st.LastError != "":
			troubled = true
			reason("%s: last load failed", st.Tag)
		}
		if !st.RunwayMet && st.Runway > 0 && st.Loads > 0 {
			troubled = true
			reason("%s: runway short (%s): holds %.1fs of %.1fs at %.0f ids/s", st.Tag, st.RunwayShort, st.RunwayHeld.Seconds(), st.Runway.Seconds(), st.Peak)
		}
		if st.Refused > 0 {
			troubled = true
			reason("%s: %d range(s) refused since start: the database went back in time", st.Tag, st.Refused)
		}
		if st.Repaired > 0 {
			troubled = true
			reason("%s: %d rollback(s) repaired since start: the database went back in time; ids other instances were granted may repeat until the tag is bumped", st.Tag, st.Repaired)
		}
	}
	if h.Replication != nil && len(h.Replication.HeldStandbys) > 0 {
		h.Replication.BuffersLastSeconds = buffersLast(h.Tags)
	}
	if !asked && loaded == 0 && !h.Database.Reachable {
		serving = false
	}
	// Snowflake IDs that cannot be issued degrade the instance: segment IDs
	// are still served.
	if s.cfg.Snowflake != nil {
		sh := snowflakeHealth(s.cfg.Snowflake.Stats())
		h.Snowflake = &sh
		if !sh.Serving {
			troubled = true
			reason("snowflake: not serving (%s)", sh.State)
		}
	}
	switch {
	case !serving:
		h.Status = StatusUnavailable
	case troubled:
		h.Status = StatusDegraded
	default:
		h.Status = StatusOK
	}
	return h
}

// withTags is stats, sorted by tag, with an entry (only Tag set: not loaded
// here yet) for each of tags it lacks.
func withTags(stats []segment.Stats, tags []string) []segment.Stats {
	added := false
	for _, tag := range tags {
		if !slices.ContainsFunc(stats, func(st segment.Stats) bool { return st.Tag == tag }) {
			stats = append(stats, segment.Stats{Tag: tag})
			added = true
		}
	}
	if added {
		slices.SortFunc(stats, func(a, b segment.Stats) int { return strings.Compare(a.Tag, b.Tag) })
	}
	return stats
}

func tagHealth(st segment.Stats) TagHealth {
	th := TagHealth{
		Tag:               st.Tag,
		Serving:           st.Serving,
		Next:              st.Next,
		Remaining:         st.Remaining,
		RemainingRatio:    st.RemainingRatio,
		NextReady:         st.NextRange != nil,
		NextLate:          st.NextLate,
		Loading:           st.Loading,
		Available:         st.Available(),
		IDsPerSecond:      round3(st.Rate),
		Step:              st.Step,
		MinStep:           st.MinStep,
		MaxStep:           st.MaxStep,
		SegmentLoads:      st.Loads,
		LastLoadMS:        ms(st.LastLoadLatency),
		AvgLoadMS:         ms(st.AvgLoadLatency),
		LoadFailures:      st.LoadFailures,
		Recovered:         st.Recovered,
		Refused:           st.Refused,
		Repaired:          st.Repaired,
		Issued:            st.Issued,
		Abandoned:         st.Abandoned,
		GivenBack:         st.GivenBack,
		LastError:         redact.String(st.LastError),
		RunwaySeconds:     round3(st.Runway.Seconds()),
		RunwayMet:         st.RunwayMet || st.Runway <= 0,
		RunwayShortReason: st.RunwayShort,
		PeakIDsPerSecond:  round3(st.Peak),
	}
	if st.RunwayHeld != time.Duration(math.MaxInt64) {
		secs := round3(st.RunwayHeld.Seconds())
		th.RunwayHeldSeconds = &secs
	}
	if th.MaxStep == 0 && st.Loads > 0 {
		th.MaxStep = segment.DefaultMaxStep
	}
	if st.Current != nil {
		th.Current = &RangeJSON{First: st.Current.First, Last: st.Current.Last}
	}
	if st.NextRange != nil {
		th.NextRange = &RangeJSON{First: st.NextRange.First, Last: st.NextRange.Last}
	}
	if d, ok := st.UntilDry(); ok {
		secs := round3(d.Seconds())
		th.SecondsUntilDry = &secs
	}
	if !st.LastLoadAt.IsZero() {
		t := st.LastLoadAt.UTC()
		th.LastLoadAt = &t
	}
	return th
}

func ms(d time.Duration) float64 { return round3(float64(d) / float64(time.Millisecond)) }

// round3 keeps three decimals: enough for a dashboard, short in JSON.
func round3(f float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'f', 3, 64), 64)
	return v
}

// buffersLast is the smallest seconds_until_dry among tags: how long
// callers are served without a new segment. Nil when no tag has a rate.
func buffersLast(tags []TagHealth) *float64 {
	var least *float64
	for _, t := range tags {
		if t.SecondsUntilDry != nil && (least == nil || *t.SecondsUntilDry < *least) {
			least = t.SecondsUntilDry
		}
	}
	return least
}
