package httpapi

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/internal/redact"
)

// ReplicationSource reports a database's streaming replication.
type ReplicationSource interface {
	ReplicationStatus(ctx context.Context) (allocator.ReplicationStatus, error)
}

var _ ReplicationSource = (*allocator.Postgres)(nil)

// ReplicationHealth is the replication part of /id/health: whether the
// database can lose grants on failover.
type ReplicationHealth struct {
	// Error is set when the status could not be read; the other fields are
	// then zero.
	Error string `json:"error,omitempty"`
	// InRecovery: connected to a standby, where nothing can be granted.
	InRecovery bool `json:"in_recovery"`
	// ReplicasConnected counts physical standbys streaming from the
	// primary; SyncReplicas those the primary waits for at commit;
	// ReplicasHidden WAL senders the role may not see (it lacks
	// pg_monitor).
	ReplicasConnected       int    `json:"replicas_connected"`
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
	// Warnings: what an operator should look at; each one makes the status
	// degraded.
	Warnings []string `json:"warnings"`
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
		return &ReplicationHealth{Error: "replication status unavailable", Warnings: []string{}}
	}
	h := &ReplicationHealth{
		InRecovery:              st.InRecovery,
		ReplicasConnected:       st.Replicas,
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
	for i, w := range h.Warnings {
		h.Warnings[i] = redact.String(w)
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
		required:     d("idmint_replicas_required", "Standbys that must have a grant before it is served (-1: auto, every streaming standby)."),
		atRisk:       d("idmint_database_grants_at_risk", "1 when a failover could lose grants already served: asynchronous standbys only, and idmint does not or cannot wait for them."),
		waits:        d("idmint_replication_waits_total", "Grants confirmed on the standbys before being served."),
		waitSeconds:  d("idmint_replication_wait_seconds_total", "Time spent waiting for the standbys to confirm grants."),
		waitFailures: d("idmint_replication_wait_failures_total", "Grants not confirmed on the standbys in time (held back, not served)."),
	}
}

// Describe implements prometheus.Collector.
func (c *replicationCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.connected, c.sync, c.hidden, c.timeline, c.changed, c.required, c.atRisk, c.waits, c.waitSeconds, c.waitFailures} {
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
}
