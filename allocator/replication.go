package allocator

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Replicas is how many standbys must have a grant's WAL before any of its
// IDs is served (see ReplicationConfig).
type Replicas int

// ReplicasAuto waits for every standby streaming from the primary when the
// grant commits: none on a single server, so no wait there.
const ReplicasAuto Replicas = -1

// ParseReplicas reads a Replicas setting: "auto", "off" (0), or a count.
func ParseReplicas(s string) (Replicas, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "auto":
		return ReplicasAuto, nil
	case "off":
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 || n > 100 {
		return 0, fmt.Errorf("replicas %q: want auto, off or a count from 0 to 100", s)
	}
	return Replicas(n), nil
}

// String returns "auto", "off" or the count.
func (r Replicas) String() string {
	switch {
	case r == ReplicasAuto:
		return "auto"
	case r == 0:
		return "off"
	}
	return strconv.Itoa(int(r))
}

// ReplicaAck says how far a standby must have a grant's WAL.
type ReplicaAck string

// ReplicaAck values: flushed to the standby's disk (survives a failover to
// it), or also replayed (visible in queries on it).
const (
	AckFlush  ReplicaAck = "flush"
	AckReplay ReplicaAck = "replay"
)

// ParseReplicaAck reads a ReplicaAck setting.
func ParseReplicaAck(s string) (ReplicaAck, error) {
	switch a := ReplicaAck(strings.ToLower(strings.TrimSpace(s))); a {
	case AckFlush, AckReplay:
		return a, nil
	}
	return "", fmt.Errorf("replica ack %q: want flush or replay", s)
}

// ReplicationConfig says when a granted segment is safe to serve on a
// primary with streaming standbys.
//
// With asynchronous replication, PostgreSQL confirms a commit before any
// standby has it; a failover then promotes a standby without the last
// grants, and the promoted database grants the same IDs again, possibly to
// another instance, which no floor can stop. So after a grant commits, the
// store waits until Required standbys have flushed (or replayed) its WAL,
// comparing the commit's position with pg_stat_replication, before the
// segment is returned. The double buffer fetches segments ahead, so callers
// do not see the wait. It is synchronous replication for idmint's grants
// alone, on a cluster whose other users stay asynchronous.
type ReplicationConfig struct {
	// Required is how many standbys must have the grant: ReplicasAuto (every
	// standby streaming at the time, the default), 0 (off: no wait), or N.
	// With N, a grant fails at once while fewer than N standbys are
	// connected: buffers serve what they hold, then 503.
	Required Replicas
	// Ack is how far: AckFlush (default) or AckReplay.
	Ack ReplicaAck
	// PollMin and PollMax bound the pause between two looks at
	// pg_stat_replication (defaults 500µs and 20ms, growing by half each
	// time). The wait as a whole is bounded by the allocation's context.
	PollMin, PollMax time.Duration
	// Logger gets the warnings (default slog.Default()).
	Logger *slog.Logger
}

// DefaultReplication is the setting of a new Postgres store.
var DefaultReplication = ReplicationConfig{Required: ReplicasAuto, Ack: AckFlush}

func (c *ReplicationConfig) setDefaults() {
	if c.Ack == "" {
		c.Ack = AckFlush
	}
	if c.PollMin <= 0 {
		c.PollMin = 500 * time.Microsecond
	}
	if c.PollMax < c.PollMin {
		c.PollMax = max(20*time.Millisecond, c.PollMin)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// ReplicationStatus is what the primary says about its standbys, and what
// the store has seen of them since it opened.
type ReplicationStatus struct {
	// InRecovery: the server is a standby (idmint cannot grant there).
	InRecovery bool
	// Timeline is the server's current WAL timeline; InitialTimeline the
	// first one the store saw. A promotion starts a new timeline, so a
	// change means a failover happened since the store opened.
	Timeline, InitialTimeline int64
	// Replicas counts physical standbys streaming from the server,
	// SyncReplicas those of them PostgreSQL waits for at commit
	// (sync_state sync or quorum), and Hidden the WAL senders whose details
	// the role may not read (it needs pg_monitor or pg_read_all_stats).
	Replicas, SyncReplicas, Hidden int
	// SynchronousStandbyNames and SynchronousCommit are the server's
	// settings as the store's sessions see them.
	SynchronousStandbyNames, SynchronousCommit string
	// Required and Ack are the store's setting (see ReplicationConfig).
	Required Replicas
	Ack      ReplicaAck
	// Waits counts grants confirmed on the standbys, WaitTime the time
	// spent waiting for them, WaitFailures the grants that could not be
	// confirmed in time (not served until they are), LastWaitError the
	// last such failure.
	Waits, WaitFailures int64
	WaitTime            time.Duration
	LastWaitError       string
}

// TimelineChanged reports whether the timeline moved since the store
// opened: a standby was promoted.
func (s ReplicationStatus) TimelineChanged() bool {
	return s.InitialTimeline != 0 && s.Timeline != s.InitialTimeline
}

// AtRisk reports whether a failover could lose grants already served: the
// primary has standbys, none of them synchronous, and idmint does not (or
// cannot) wait for them.
func (s ReplicationStatus) AtRisk() bool {
	async := (s.Replicas > 0 || s.Hidden > 0) && s.SyncReplicas == 0
	return async && (s.Required == 0 || s.Hidden > 0 && s.Required == ReplicasAuto)
}

// Warnings says, one sentence each, what an operator should know: only
// asynchronous standbys, fewer connected than required, details hidden from
// the role. Empty when nothing needs attention.
func (s ReplicationStatus) Warnings() []string {
	var w []string
	switch {
	case s.InRecovery:
		w = append(w, "connected to a standby (in recovery): no grants possible; use target_session_attrs=read-write")
	case s.Hidden > 0:
		w = append(w, fmt.Sprintf("the database role may not read pg_stat_replication (%d WAL senders hidden): cannot confirm grants reached the standbys; grant it pg_monitor", s.Hidden))
	case s.Replicas > 0 && s.SyncReplicas == 0 && s.Required == 0:
		w = append(w, fmt.Sprintf("only asynchronous replicas (%d) and replicas_required off: a failover can lose grants already served and hand them out again", s.Replicas))
	case s.Replicas > 0 && s.SyncReplicas == 0:
		who := "every streaming standby has"
		if s.Required != ReplicasAuto {
			who = fmt.Sprintf("%d standby(s) have", s.Required)
		}
		w = append(w, fmt.Sprintf("only asynchronous replicas (%d): a failover loses the last commits; idmint serves a grant only once %s %sed it",
			s.Replicas, who, s.Ack))
	}
	if s.Required > 0 && s.Replicas < int(s.Required) && !s.InRecovery {
		w = append(w, fmt.Sprintf("replicas_required %d but %d connected: new segments are not served", s.Required, s.Replicas))
	}
	return w
}

// replicator confirms grants on the standbys and keeps what it has seen.
type replicator struct {
	cfg ReplicationConfig

	mu              sync.Mutex // protects every field below
	initialTimeline int64
	timeline        int64
	waits, failures int64
	waitTime        time.Duration
	lastErr         string
	hiddenWarned    bool
}

func newReplicator(cfg ReplicationConfig) *replicator {
	cfg.setDefaults()
	return &replicator{cfg: cfg}
}

// standbys are the physical WAL senders: logical replication (a
// subscription, a change-data-capture tool) streams from a logical slot and
// neither takes over on failover nor counts here.
const standbys = `pg_stat_replication r WHERE NOT EXISTS (
    SELECT 1 FROM pg_replication_slots s WHERE s.slot_type = 'logical' AND s.active_pid = r.pid)`

// timelineSQL reads the current timeline from the name of the current WAL
// file (its first 8 hex digits), which any role may call, unlike
// pg_control_checkpoint(), and which follows a promotion at once.
const timelineSQL = `CASE WHEN pg_is_in_recovery() THEN 0
    ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint END`

// positionSQL runs right after the grant committed, on the same connection:
// the WAL written so far includes the commit record (synchronous_commit=on
// flushed it before the commit returned), so it is at or past its end.
const positionSQL = `SELECT pg_current_wal_lsn()::text, ` + timelineSQL

// ackedSQL counts, among the standbys, those that have the position $1
// (flushed or replayed), those connected, and those whose details are
// hidden from the role.
func ackedSQL(ack ReplicaAck) string {
	col := "flush_lsn"
	if ack == AckReplay {
		col = "replay_lsn"
	}
	return `SELECT count(*) FILTER (WHERE ` + col + ` >= $1::pg_lsn),
    count(*) FILTER (WHERE state IN ('streaming', 'catchup')),
    count(*) FILTER (WHERE state IS NULL)
FROM ` + standbys
}

const statusSQL = `SELECT pg_is_in_recovery(), ` + timelineSQL + `,
    current_setting('synchronous_standby_names'), current_setting('synchronous_commit'),
    (SELECT count(*) FROM ` + standbys + ` AND state = 'streaming'),
    (SELECT count(*) FROM ` + standbys + ` AND sync_state IN ('sync', 'quorum')),
    (SELECT count(*) FROM ` + standbys + ` AND state IS NULL)`

// MultiHostConnectTimeout bounds the connection to each host of a
// multi-host URL that sets no connect_timeout. pgx tries the hosts in
// order; without a bound per host, a first host that does not answer at
// all (a dead machine, a network partition: no reset, no refusal) would use
// up each attempt, and the promoted server behind it would never be tried.
const MultiHostConnectTimeout = time.Second

// followFailover prepares a pool for a multi-host URL: each host gets
// MultiHostConnectTimeout unless the URL sets connect_timeout. A pool
// follows a promotion by itself: pgx destroys a connection that failed when
// it is released, pings one idle for over a second before handing it out,
// and new connections go to whichever host passes target_session_attrs.
func followFailover(cfg *pgxpool.Config) {
	cc := cfg.ConnConfig
	if cc.ConnectTimeout != 0 {
		return
	}
	for _, fb := range cc.Fallbacks {
		if fb.Host != cc.Host || fb.Port != cc.Port {
			cc.ConnectTimeout = MultiHostConnectTimeout
			return
		}
	}
}

// querier is a connection or a pool.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// confirm waits until the grant just committed on conn is on the required
// standbys. It returns an error wrapping ErrNotReplicated when it cannot
// tell in time: the grant committed, but must not be served yet.
func (r *replicator) confirm(ctx context.Context, conn querier) error {
	if r.cfg.Required == 0 {
		return nil
	}
	var (
		lsn      string
		timeline int64
	)
	if err := conn.QueryRow(ctx, positionSQL).Scan(&lsn, &timeline); err != nil {
		return r.failed(fmt.Errorf("%w: read the grant's WAL position: %w", ErrNotReplicated, err))
	}
	r.sawTimeline(timeline)
	start := time.Now()
	pause := r.cfg.PollMin
	query := ackedSQL(r.cfg.Ack)
	for {
		var acked, connected, hidden int
		if err := conn.QueryRow(ctx, query, lsn).Scan(&acked, &connected, &hidden); err != nil {
			return r.failed(fmt.Errorf("%w: read pg_stat_replication: %w", ErrNotReplicated, err))
		}
		need := int(r.cfg.Required)
		if r.cfg.Required == ReplicasAuto {
			need = connected
		}
		switch {
		case hidden > 0 && acked+connected == 0 && r.cfg.Required == ReplicasAuto:
			r.warnHidden(hidden)
			return nil
		case hidden > 0 && acked+connected == 0:
			return r.failed(fmt.Errorf("%w: %d standbys required, but the database role may not read pg_stat_replication (grant it pg_monitor)",
				ErrNotReplicated, need))
		case acked >= need:
			r.waited(time.Since(start))
			return nil
		case connected < need:
			return r.failed(fmt.Errorf("%w: %d standbys required, %d connected", ErrNotReplicated, need, connected))
		}
		select {
		case <-ctx.Done():
			return r.failed(fmt.Errorf("%w: %d of %d standbys have %sed WAL %s after %v: %w",
				ErrNotReplicated, acked, need, r.cfg.Ack, lsn, time.Since(start).Round(time.Millisecond), ctx.Err()))
		case <-time.After(pause):
		}
		pause = min(pause+pause/2, r.cfg.PollMax)
	}
}

func (r *replicator) warnHidden(hidden int) {
	r.mu.Lock()
	warned := r.hiddenWarned
	r.hiddenWarned = true
	r.mu.Unlock()
	if !warned {
		r.cfg.Logger.Warn("cannot confirm grants reached the standbys: the database role may not read pg_stat_replication; serving without waiting (grant it pg_monitor)",
			"wal_senders", hidden)
	}
}

func (r *replicator) waited(d time.Duration) {
	r.mu.Lock()
	r.waits++
	r.waitTime += d
	r.mu.Unlock()
}

func (r *replicator) failed(err error) error {
	r.mu.Lock()
	r.failures++
	r.lastErr = err.Error()
	r.mu.Unlock()
	return err
}

// sawTimeline records the server's timeline; 0 means unknown (a standby).
func (r *replicator) sawTimeline(tl int64) {
	if tl == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.initialTimeline == 0 {
		r.initialTimeline = tl
	}
	if tl != r.timeline && r.timeline != 0 {
		r.cfg.Logger.Warn("FAILOVER seen: the database's timeline changed", "from", r.timeline, "to", tl)
	}
	r.timeline = tl
}

// status asks the server about its standbys.
func (r *replicator) status(ctx context.Context, q querier) (ReplicationStatus, error) {
	var s ReplicationStatus
	err := q.QueryRow(ctx, statusSQL).Scan(&s.InRecovery, &s.Timeline, &s.SynchronousStandbyNames, &s.SynchronousCommit,
		&s.Replicas, &s.SyncReplicas, &s.Hidden)
	if err != nil {
		return ReplicationStatus{}, fmt.Errorf("replication status: %w", err)
	}
	r.sawTimeline(s.Timeline)
	r.mu.Lock()
	defer r.mu.Unlock()
	s.InitialTimeline = r.initialTimeline
	if s.Timeline == 0 {
		s.Timeline = r.timeline
	}
	s.Required, s.Ack = r.cfg.Required, r.cfg.Ack
	s.Waits, s.WaitFailures, s.WaitTime, s.LastWaitError = r.waits, r.failures, r.waitTime, r.lastErr
	return s, nil
}
