package httpapi

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/internal/redact"
	"github.com/idmint/idmint/wire"
)

// ReplicationSource reports a database's streaming replication, and
// manages the standbys idmint remembers (StandbyAdmin): a postgres.Store.
type ReplicationSource interface {
	ReplicationStatus(ctx context.Context) (postgres.ReplicationStatus, error)
	StandbyAdmin
}

var _ ReplicationSource = (*postgres.Store)(nil)

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
	Standbys []postgres.Standby `json:"standbys"`
	// HeldStandbys are those the last grant waited for in vain, each with
	// the time it first held one back; HeldSeconds how long the oldest has;
	// BuffersLastSeconds the smallest seconds_until_dry among the tags: how
	// long callers are still served while grants are held (null when no
	// tag has a rate).
	HeldStandbys       []postgres.HeldStandby `json:"held_standbys"`
	HeldSeconds        float64                `json:"held_seconds"`
	BuffersLastSeconds *float64               `json:"buffers_last_seconds,omitempty"`
	// Warnings: what an operator should look at; each one makes the status
	// degraded.
	Warnings []string `json:"warnings"`
}

// heldSeconds is how long the oldest of held has held grants back.
func heldSeconds(held []postgres.HeldStandby, now time.Time) float64 {
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
func (s *Server) replicationHealth(ctx context.Context) *ReplicationHealth {
	if s.cfg.Replication == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.PingTimeout)
	defer cancel()
	st, err := s.cfg.Replication.ReplicationStatus(ctx)
	if err != nil {
		return &ReplicationHealth{Error: "replication status unavailable", Warnings: []string{},
			Standbys: []postgres.Standby{}, HeldStandbys: []postgres.HeldStandby{}}
	}
	h := &ReplicationHealth{
		InRecovery:              st.InRecovery,
		ReplicasConnected:       st.Replicas,
		WALStreamers:            st.Streamers,
		Standbys:                slices.Clone(st.Standbys),
		HeldStandbys:            slices.Clone(st.Held),
		HeldSeconds:             heldSeconds(st.Held, time.Now()),
		SyncReplicas:            st.SyncReplicas,
		ReplicasHidden:          st.Hidden,
		SynchronousStandbyNames: st.SynchronousStandbyNames,
		SynchronousCommit:       st.SynchronousCommit,
		Timeline:                st.Timeline,
		InitialTimeline:         st.InitialTimeline,
		TimelineChanged:         st.TimelineChanged(),
		ReplicasRequired:        st.Required.String(),
		ReplicaAck:              string(st.Ack),
		GrantsAtRisk:            st.AtRisk(),
		GrantWaits:              st.Waits,
		GrantWaitFailures:       st.WaitFailures,
		LastWaitError:           redact.String(st.LastWaitError),
		Warnings:                st.Warnings(),
	}
	if st.Waits > 0 {
		h.AvgGrantWaitMS = ms(st.WaitTime / time.Duration(st.Waits))
	}
	if h.Warnings == nil {
		h.Warnings = []string{}
	}
	if h.Standbys == nil {
		h.Standbys = []postgres.Standby{}
	}
	if h.HeldStandbys == nil {
		h.HeldStandbys = []postgres.HeldStandby{}
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

// replicationCollector turns the replication status into metrics when
// scraped.
type replicationCollector struct {
	src         ReplicationSource
	pingTimeout time.Duration

	connected, sync, hidden, timeline, changed, required, atRisk *prometheus.Desc
	waits, waitSeconds, waitFailures                             *prometheus.Desc
	streamers, requiredSet, held, heldSeconds                    *prometheus.Desc
}

func newReplicationCollector(src ReplicationSource, pingTimeout time.Duration) *replicationCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &replicationCollector{
		src:          src,
		pingTimeout:  pingTimeout,
		connected:    d("idmint_database_replicas_connected", "Physical standbys streaming from the primary."),
		sync:         d("idmint_database_sync_replicas", "Standbys the primary waits for at commit (sync_state sync or quorum)."),
		hidden:       d("idmint_database_replicas_hidden", "WAL senders whose details the database role may not read (it lacks pg_monitor)."),
		timeline:     d("idmint_database_timeline", "The database's current WAL timeline."),
		changed:      d("idmint_database_timeline_changed", "1 when the timeline changed since the instance started: a standby was promoted."),
		required:     d("idmint_replicas_required", "Standbys that must have a grant before it is served (-1: auto, every server that could be promoted; N: that and at least N standbys)."),
		atRisk:       d("idmint_database_grants_at_risk", "1 when a failover could lose grants already served: asynchronous standbys only, and idmint does not or cannot wait for them."),
		waits:        d("idmint_replication_waits_total", "Grants confirmed on the standbys before being served."),
		waitSeconds:  d("idmint_replication_wait_seconds_total", "Time spent waiting for the standbys to confirm grants."),
		waitFailures: d("idmint_replication_wait_failures_total", "Grants not confirmed on the standbys in time (held back, not served)."),
		streamers:    d("idmint_database_wal_streamers", "WAL senders that are not standbys (pg_receivewal, pg_basebackup): not waited for."),
		requiredSet:  d("idmint_replication_required_standbys", "Servers that could be promoted and must have a grant before it is served: streaming standbys, slots no standby uses, standbys remembered on this timeline."),
		held:         d("idmint_replication_held_standbys", "Standbys the last grant waited for in vain: new segments are held back while it is above 0."),
		heldSeconds:  d("idmint_replication_held_seconds", "How long the oldest held standby has held grants back (0 when none)."),
	}
}

// Describe implements prometheus.Collector.
func (c *replicationCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.connected, c.sync, c.hidden, c.timeline, c.changed, c.required, c.atRisk, c.waits, c.waitSeconds, c.waitFailures,
		c.streamers, c.requiredSet, c.held, c.heldSeconds} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. Nothing is reported when the
// status cannot be read (idmint_database_up says why).
func (c *replicationCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.pingTimeout)
	defer cancel()
	st, err := c.src.ReplicationStatus(ctx)
	if err != nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(c.connected, float64(st.Replicas))
	gauge(c.sync, float64(st.SyncReplicas))
	gauge(c.hidden, float64(st.Hidden))
	gauge(c.timeline, float64(st.Timeline))
	gauge(c.changed, boolFloat(st.TimelineChanged()))
	gauge(c.required, float64(st.Required))
	gauge(c.atRisk, boolFloat(st.AtRisk()))
	counter(c.waits, float64(st.Waits))
	counter(c.waitSeconds, st.WaitTime.Seconds())
	counter(c.waitFailures, float64(st.WaitFailures))
	gauge(c.streamers, float64(st.Streamers))
	gauge(c.requiredSet, float64(len(st.Standbys)))
	gauge(c.held, float64(len(st.Held)))
	gauge(c.heldSeconds, heldSeconds(st.Held, time.Now()))
}

// StandbyAdmin lists and forgets the standbys idmint remembers (part of
// ReplicationSource): the admin routes GET /v1/standbys and DELETE
// /v1/standbys/{name}.
type StandbyAdmin interface {
	Standbys(ctx context.Context) ([]postgres.StandbyRecord, error)
	ForgetStandby(ctx context.Context, name string) error
}

var _ StandbyAdmin = (*postgres.Store)(nil)

// mountStandbys adds the standby routes when there is a replication
// source and the admin API is on; they need an admin token.
func (s *Server) mountStandbys(r chi.Router) {
	sa := s.cfg.Replication
	if sa == nil || s.cfg.Admin == nil {
		return
	}
	admin := r.With(s.requireScope("admin", func(p *principal) bool { return p.admin }))
	admin.Get("/v1/standbys", func(w http.ResponseWriter, r *http.Request) {
		recs, err := sa.Standbys(r.Context())
		if err != nil {
			s.WriteError(w, r, err)
			return
		}
		if recs == nil {
			recs = []postgres.StandbyRecord{}
		}
		writeJSON(w, http.StatusOK, struct {
			Standbys []postgres.StandbyRecord `json:"standbys"`
		}{recs})
	})
	admin.Delete("/v1/standbys/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := chi.URLParam(r, "name")
		if name == "" || len(name) > 200 {
			s.WriteError(w, r, requestError(wire.CodeBadRequest, "standby name: 1 to 200 characters"))
			return
		}
		err := sa.ForgetStandby(r.Context(), name)
		if errors.Is(err, allocator.ErrNotFound) {
			err = requestError(wire.CodeNotFound, "no standby of that name is remembered (or it is forgotten already)")
		}
		if err != nil {
			s.WriteError(w, r, err)
			return
		}
		s.cfg.Logger.Warn("standby forgotten over the admin API: it no longer holds grants back until it is seen streaming again",
			"standby", truncate(name, maxLogged), "token", tokenName(r))
		w.WriteHeader(http.StatusNoContent)
	})
}
