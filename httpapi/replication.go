package httpapi

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idmint/idmint/core"
)

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
	st, err := c.src.Replication(ctx)
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
	gauge(c.changed, boolFloat(st.TimelineChanged))
	gauge(c.required, float64(st.Required))
	gauge(c.atRisk, boolFloat(st.AtRisk))
	counter(c.waits, float64(st.Waits))
	counter(c.waitSeconds, st.WaitTime.Seconds())
	counter(c.waitFailures, float64(st.WaitFailures))
	gauge(c.streamers, float64(st.Streamers))
	gauge(c.requiredSet, float64(len(st.Standbys)))
	gauge(c.held, float64(len(st.Held)))
	gauge(c.heldSeconds, core.HeldSeconds(st.Held, time.Now()))
}
