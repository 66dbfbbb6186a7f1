package core

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idmint/idmint/internal/redact"
	"github.com/idmint/idmint/segment"
	"github.com/idmint/idmint/snowflake"
	"github.com/idmint/idmint/wire"
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
	// Region is this instance's region and its share (docs/regions.md);
	// absent for a single-region database.
	Region *RegionHealth `json:"region,omitempty"`
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
func (c *Core) health(ctx context.Context, stats []segment.Stats, asked bool) Health {
	h := Health{Version: HealthVersion, Instance: c.cfg.Instance, Time: c.cfg.Now().UTC(), Tags: make([]TagHealth, 0, len(stats)), TLS: c.cfg.TLS}
	if h.TLS.ClientCertificates == "" {
		h.TLS.ClientCertificates = "off"
	}
	// A ping that needs a new connection takes several round trips: a
	// timeout fit for a nearby database would call a far one unreachable.
	pingCtx, cancel := context.WithTimeout(ctx, c.cfg.Allocator.Timeout(c.cfg.PingTimeout))
	start := c.cfg.Now()
	err := c.cfg.Allocator.Ping(pingCtx)
	cancel()
	h.Database.LatencyMS = ms(c.cfg.Now().Sub(start))
	h.Database.Reachable = err == nil
	if err != nil {
		h.Database.Error = "database unreachable"
	}
	rt := c.cfg.Allocator.RoundTrip()
	h.Database.RoundTripMS, h.Database.FetchTimeoutMS, h.Database.ConnectTimeoutMS = ms(rt.RTT), ms(rt.FetchTimeout), ms(rt.ConnectTimeout)

	h.Reasons = []string{}
	reason := func(format string, args ...any) { h.Reasons = append(h.Reasons, fmt.Sprintf(format, args...)) }
	serving, troubled := true, !h.Database.Reachable
	if !h.Database.Reachable {
		reason("database unreachable")
	} else if h.Replication = c.replicationHealth(ctx); h.Replication != nil {
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
	if c.cfg.Snowflake != nil {
		sh := snowflakeHealth(c.cfg.Snowflake.Stats())
		h.Snowflake = &sh
		if !sh.Serving {
			troubled = true
			reason("snowflake: not serving (%s)", sh.State)
		}
	}
	if c.cfg.Region != nil {
		st := c.cfg.Region.Region()
		rh := regionHealth(st, stats)
		h.Region = &rh
		if st.Conflict != nil {
			serving = false
			reason("region: %s", rh.Conflict)
		}
		for _, p := range rh.Peers {
			if !p.Reachable && p.CheckedAt != nil {
				troubled = true
				reason("region: peer %s unreachable", p.URL)
			}
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

// ReplicationSource reports a database's streaming replication, and
// manages the standbys idmint remembers (StandbyAdmin): a postgres.Store.
type ReplicationSource interface {
	Replication(ctx context.Context) (wire.Replication, error)
	StandbyAdmin
}

// ReplicationHealth is the replication part of /id/health: whether the
// database can lose grants on failover.
type ReplicationHealth struct {
	// Error is set when the status could not be read; the other fields are
	// then zero.
	Error string `json:"error,omitempty"`
	// InRecovery: connected to a standby, where nothing can be granted.
	InRecovery bool `json:"in_recovery"`
	// ReplicasConnected counts physical standbys connected to the primary
	// (any state but backup; WAL archivers left out); SyncReplicas those the
	// primary waits for at commit; ReplicasHidden WAL senders the role may
	// not see (it lacks pg_monitor); WALStreamers the senders that are not
	// standbys (pg_receivewal, pg_basebackup).
	ReplicasConnected       int    `json:"replicas_connected"`
	WALStreamers            int    `json:"wal_streamers"`
	SyncReplicas            int    `json:"sync_replicas"`
	ReplicasHidden          int    `json:"replicas_hidden"`
	SynchronousStandbyNames string `json:"synchronous_standby_names"`
	SynchronousCommit       string `json:"synchronous_commit"`
	// Timeline is the database's WAL timeline, InitialTimeline the first
	// one this instance saw; TimelineChanged: a standby was promoted since.
	Timeline        int64 `json:"timeline"`
	InitialTimeline int64 `json:"initial_timeline"`
	TimelineChanged bool  `json:"timeline_changed"`
	// ReplicasRequired ("auto", "off" or a count) and ReplicaAck ("flush"
	// or "replay") are this instance's setting: how many standbys must have
	// a grant before it is served.
	ReplicasRequired string `json:"replicas_required"`
	ReplicaAck       string `json:"replica_ack"`
	// GrantsAtRisk: a failover could lose grants already served
	// (asynchronous standbys only, and idmint does not or cannot wait for
	// them).
	GrantsAtRisk bool `json:"grants_at_risk"`
	// GrantWaits counts grants confirmed on the standbys, AvgGrantWaitMS
	// the average wait, GrantWaitFailures grants not confirmed in time
	// (held back, not served).
	GrantWaits        int64   `json:"grant_waits"`
	AvgGrantWaitMS    float64 `json:"avg_grant_wait_ms"`
	GrantWaitFailures int64   `json:"grant_wait_failures"`
	LastWaitError     string  `json:"last_wait_error,omitempty"`
	// Standbys is the required set: every server that could be promoted
	// (kind streaming, slot or remembered), each of which must have a grant
	// before it is served.
	Standbys []wire.Standby `json:"standbys"`
	// HeldStandbys are those the last grant waited for in vain, each with
	// the time it first held one back; HeldSeconds how long the oldest has;
	// BuffersLastSeconds the smallest seconds_until_dry among the tags: how
	// long callers are still served while grants are held (null when no
	// tag has a rate).
	HeldStandbys       []wire.HeldStandby `json:"held_standbys"`
	HeldSeconds        float64            `json:"held_seconds"`
	BuffersLastSeconds *float64           `json:"buffers_last_seconds,omitempty"`
	// Warnings: what an operator should look at; each one makes the status
	// degraded.
	Warnings []string `json:"warnings"`
}

// HeldSeconds is how long the oldest of held has held grants back.
func HeldSeconds(held []wire.HeldStandby, now time.Time) float64 {
	if len(held) == 0 {
		return 0
	}
	oldest := held[0].Since
	for _, h := range held {
		if h.Since.Before(oldest) {
			oldest = h.Since
		}
	}
	return now.Sub(oldest).Seconds()
}

// replicationHealth reads the replication status, bounded by the ping
// timeout; nil when the server has no ReplicationSource.
func (c *Core) replicationHealth(ctx context.Context) *ReplicationHealth {
	if c.cfg.Replication == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.PingTimeout)
	defer cancel()
	st, err := c.cfg.Replication.Replication(ctx)
	if err != nil {
		return &ReplicationHealth{Error: "replication status unavailable", Warnings: []string{},
			Standbys: []wire.Standby{}, HeldStandbys: []wire.HeldStandby{}}
	}
	h := &ReplicationHealth{
		InRecovery:              st.InRecovery,
		ReplicasConnected:       st.Replicas,
		WALStreamers:            st.Streamers,
		Standbys:                slices.Clone(st.Standbys),
		HeldStandbys:            slices.Clone(st.Held),
		HeldSeconds:             HeldSeconds(st.Held, time.Now()),
		SyncReplicas:            st.SyncReplicas,
		ReplicasHidden:          st.Hidden,
		SynchronousStandbyNames: st.SynchronousStandbyNames,
		SynchronousCommit:       st.SynchronousCommit,
		Timeline:                st.Timeline,
		InitialTimeline:         st.InitialTimeline,
		TimelineChanged:         st.TimelineChanged,
		ReplicasRequired:        st.RequiredName,
		ReplicaAck:              st.Ack,
		GrantsAtRisk:            st.AtRisk,
		GrantWaits:              st.Waits,
		GrantWaitFailures:       st.WaitFailures,
		LastWaitError:           redact.String(st.LastWaitError),
		Warnings:                st.Warnings,
	}
	if st.Waits > 0 {
		h.AvgGrantWaitMS = ms(st.WaitTime / time.Duration(st.Waits))
	}
	if h.Warnings == nil {
		h.Warnings = []string{}
	}
	if h.Standbys == nil {
		h.Standbys = []wire.Standby{}
	}
	if h.HeldStandbys == nil {
		h.HeldStandbys = []wire.HeldStandby{}
	}
	// A standby without a slot is named by its client address: health is
	// readable by anyone unless monitoring is protected, so names go
	// through the redactor too (GET /v1/standbys, an admin route, shows them
	// whole).
	for i, w := range h.Warnings {
		h.Warnings[i] = redact.String(w)
	}
	for i := range h.Standbys {
		h.Standbys[i].Name = redact.String(h.Standbys[i].Name)
	}
	for i := range h.HeldStandbys {
		h.HeldStandbys[i].Name = redact.String(h.HeldStandbys[i].Name)
	}
	return h
}

// StandbyAdmin lists and forgets the standbys idmint remembers (part of
// ReplicationSource): the admin routes GET /v1/standbys and DELETE
// /v1/standbys/{name}.
type StandbyAdmin interface {
	Standbys(ctx context.Context) ([]wire.StandbyRecord, error)
	ForgetStandby(ctx context.Context, name string) error
}

// Snowflake is what the API needs from a snowflake.Node.
type Snowflake interface {
	Next(ctx context.Context) (int64, error)
	NextN(ctx context.Context, n int) ([]int64, error)
	Layout() snowflake.Layout
	Stats() snowflake.Stats
}

var _ Snowflake = (*snowflake.Node)(nil)

// SnowflakeHealth is the snowflake part of /id/health.
type SnowflakeHealth struct {
	Serving bool `json:"serving"`
	// State is "serving", or the error code a request would get now.
	State  string `json:"state"`
	Layout string `json:"layout"`
	Holder string `json:"holder"`
	// WorkerID is null while no worker ID is held.
	WorkerID         *int64     `json:"worker_id"`
	Epoch            int64      `json:"epoch"`
	LeaseRemainingMS float64    `json:"lease_remaining_ms"`
	WindowEnd        *time.Time `json:"window_end"`
	// WindowRemainingMS is how long Snowflake IDs can still be issued
	// without a renewal (0 when no window is held): during a database
	// outage, the time left before requests get snowflake_lease_expired.
	WindowRemainingMS float64  `json:"window_remaining_ms"`
	ClockOffsetMS     float64  `json:"clock_offset_ms"`
	Issued            int64    `json:"ids_issued"`
	SequenceWaits     int64    `json:"sequence_waits"`
	ClockWaits        int64    `json:"clock_waits"`
	Refused           int64    `json:"refused"`
	RefusedBy         Refusals `json:"refused_by"`
	Acquisitions      int64    `json:"acquisitions"`
	Renewals          int64    `json:"renewals"`
	RenewFailures     int64    `json:"renew_failures"`
	LeasesLost        int64    `json:"leases_lost"`
	LastError         string   `json:"last_error,omitempty"`
}

// Refusals counts refused snowflake requests by reason.
type Refusals struct {
	NoWorker      int64 `json:"no_worker"`
	LeaseExpired  int64 `json:"lease_expired"`
	ClockSkew     int64 `json:"clock_skew"`
	ClockBackward int64 `json:"clock_backwards"`
	TimeExhausted int64 `json:"time_exhausted"`
}

func snowflakeHealth(st snowflake.Stats) SnowflakeHealth {
	h := SnowflakeHealth{
		Serving:           st.Serving == nil,
		State:             "serving",
		Layout:            st.Layout.String(),
		Holder:            st.Holder,
		Epoch:             st.Epoch,
		LeaseRemainingMS:  ms(st.LeaseRemaining),
		WindowRemainingMS: ms(st.WindowRemaining),
		ClockOffsetMS:     ms(st.ClockOffset),
		Issued:            st.Issued,
		SequenceWaits:     st.SequenceWaits,
		ClockWaits:        st.ClockWaits,
		Refused:           st.Refused(),
		RefusedBy: Refusals{NoWorker: st.RefusedNoWorker, LeaseExpired: st.RefusedExpired, ClockSkew: st.RefusedSkew,
			ClockBackward: st.RefusedBackwards, TimeExhausted: st.RefusedExhausted},
		Acquisitions:  st.Acquisitions,
		Renewals:      st.Renewals,
		RenewFailures: st.RenewFailures,
		LeasesLost:    st.Losses,
	}
	if st.Serving != nil {
		h.State = Lookup(st.Serving).Code
	}
	if st.Worker >= 0 {
		w := st.Worker
		h.WorkerID = &w
		end := time.UnixMilli(st.Window.End).UTC()
		h.WindowEnd = &end
	}
	if st.LastError != nil {
		h.LastError = redact.Error(st.LastError)
	}
	return h
}

// Health returns the health document, of every tag or, with asked, of tag
// alone, and whether the instance serves (its status is not unavailable).
// Access is the adapter's to check (Authorize with AccessMonitoring; over
// HTTP a browser's login session stands in for the token).
func (c *Core) Health(ctx context.Context, tag string, asked bool) (Health, error) {
	var stats []segment.Stats
	if asked {
		if err := segment.ValidateTag(tag); err != nil {
			return Health{}, NewError(wire.CodeInvalidTag, err.Error())
		}
		st, err := c.cfg.Allocator.TagStats(ctx, tag)
		if err != nil && st.Tag == "" {
			if !temporary(err) {
				return Health{}, err
			}
			// Known or not, it cannot be served now: report it as such.
			st = segment.Stats{Tag: tag, LastError: redact.Error(err)}
		}
		stats = []segment.Stats{st}
	} else {
		stats = withTags(c.cfg.Allocator.Stats(), c.cfg.Tags)
	}
	return c.health(ctx, stats, asked), nil
}
