package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/wire"
)

// tracerName names the tracer of the standby wait's span.
const tracerName = "github.com/idmint/idmint/allocator/postgres"

// Replicas says which standbys must have a grant's WAL before any of its
// IDs is served (see ReplicationConfig).
type Replicas int

// ReplicasAuto waits for every server that could be promoted (the required
// set, see Standby): the physical standbys connected now, the physical
// slots none of them uses, and the standbys remembered on this timeline.
// None on a single server or a new primary without standbys, so no wait
// there.
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
// store waits until every server that could be promoted has flushed (or
// replayed) its WAL, comparing the commit's position with
// pg_stat_replication and the replication slots, before the segment is
// returned; one that is disconnected holds it back until it is back and
// past it, or proven gone (slot dropped, timeline changed, forgotten). The double buffer fetches segments ahead, so callers
// do not see the wait. It is synchronous replication for idmint's grants
// alone, on a cluster whose other users stay asynchronous.
type ReplicationConfig struct {
	// Required says which standbys must have the grant: ReplicasAuto (every
	// server that could be promoted, the default), 0 (off: no wait), or N:
	// as auto, and at least N real standbys connected and confirmed. With
	// N, a grant fails at once while fewer than N standbys are connected:
	// buffers serve what they hold, then 503.
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

// DefaultReplication is the setting of a new Store.
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
	// Replicas counts the physical standbys connected to the server (R1 of
	// the required set: any state but backup, WAL archivers left out),
	// SyncReplicas those of them PostgreSQL waits for at commit (sync_state
	// sync or quorum), Hidden the WAL senders whose details the role may
	// not read (it needs pg_monitor), and Streamers the WAL senders that
	// are not standbys (pg_receivewal, pg_basebackup).
	Replicas, SyncReplicas, Hidden, Streamers int
	// Standbys is the required set now: every server that could be
	// promoted (streaming standbys, slots no standby uses, standbys
	// remembered on this timeline). A grant is served once all of them
	// have it.
	Standbys []Standby
	// Held are the standbys the last grant waited for in vain, with the
	// time each first held a grant back; empty once a grant is confirmed.
	Held []HeldStandby
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

// HeldStandby is a standby holding grants back, and since when.
type HeldStandby = wire.HeldStandby

// TimelineChanged reports whether the timeline moved since the store
// opened: a standby was promoted.
func (s ReplicationStatus) TimelineChanged() bool {
	return s.InitialTimeline != 0 && s.Timeline != s.InitialTimeline
}

// AtRisk reports whether a failover could lose grants already served: the
// primary has servers that could be promoted, none of them synchronous,
// and idmint does not wait for them.
func (s ReplicationStatus) AtRisk() bool {
	return (s.candidates() > 0 || s.Hidden > 0) && s.SyncReplicas == 0 && s.Required == 0
}

// candidates counts the servers that could be promoted: the required set,
// or the standbys connected when a caller filled only those.
func (s ReplicationStatus) candidates() int { return max(s.Replicas, len(s.Standbys)) }

// Warnings says, one sentence each, what an operator should know: only
// asynchronous standbys, standbys holding grants back, fewer connected
// than required, details hidden from the role. Empty when nothing needs
// attention.
func (s ReplicationStatus) Warnings() []string {
	var w []string
	switch {
	case s.InRecovery:
		w = append(w, "connected to a standby (in recovery): no grants possible; use target_session_attrs=read-write")
	case s.Hidden > 0 && s.Required != 0:
		w = append(w, fmt.Sprintf("the database role may not read pg_stat_replication (%d WAL senders hidden): grants wait for them unless they stream through a slot; grant it pg_monitor", s.Hidden))
	case s.Hidden > 0:
		w = append(w, fmt.Sprintf("the database role may not read pg_stat_replication (%d WAL senders hidden) and replicas_required off: a failover can lose grants already served; grant it pg_monitor", s.Hidden))
	case s.candidates() > 0 && s.SyncReplicas == 0 && s.Required == 0:
		w = append(w, fmt.Sprintf("only asynchronous replicas (%d) and replicas_required off: a failover can lose grants already served and hand them out again", s.candidates()))
	case s.Replicas > 0 && s.SyncReplicas == 0:
		who := "every server that could be promoted has"
		if s.Required > 0 {
			who = fmt.Sprintf("every server that could be promoted, and at least %d standby(s), have", s.Required)
		}
		w = append(w, fmt.Sprintf("only asynchronous replicas (%d): a failover loses the last commits; idmint serves a grant only once %s %sed it",
			s.Replicas, who, s.Ack))
	}
	if s.Required > 0 && s.Replicas < int(s.Required) && !s.InRecovery {
		w = append(w, fmt.Sprintf("replicas_required %d but %d connected: new segments are not served", s.Required, s.Replicas))
	}
	if len(s.Held) > 0 && s.Required != 0 {
		ms := make([]Standby, len(s.Held))
		for i, h := range s.Held {
			ms[i] = h.Standby
		}
		w = append(w, fmt.Sprintf("new segments held back since %s: waiting for %s; the buffers carry callers meanwhile (see seconds_until_dry); a standby that is gone for good is released by dropping its slot or `idmint standby forget NAME`",
			s.Held[0].Since.UTC().Format(time.RFC3339), names(ms)))
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
	// remembered is when this instance last wrote each standby's row (or
	// began refreshing it), by timeline/name (rate bound of rememberEvery);
	// a standby is in it only once its row was written.
	remembered map[string]time.Time
	// held are the standbys the last grant waited for in vain, by name.
	held map[string]HeldStandby
}

func newReplicator(cfg ReplicationConfig) *replicator {
	cfg.setDefaults()
	return &replicator{cfg: cfg, remembered: map[string]time.Time{}, held: map[string]HeldStandby{}}
}

// timelineSQL reads the current timeline from the name of the current WAL
// file (its first 8 hex digits), which any role may call, unlike
// pg_control_checkpoint(), and which follows a promotion at once.
const timelineSQL = `CASE WHEN pg_is_in_recovery() THEN 0
    ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint END`

// positionSQL runs right after the grant committed, on the same connection:
// the WAL written so far includes the commit record (synchronous_commit=on
// flushed it before the commit returned), so it is at or past its end.
const positionSQL = `SELECT pg_current_wal_lsn()::text, ` + timelineSQL

const statusSQL = `SELECT pg_is_in_recovery(), ` + timelineSQL + `,
    current_setting('synchronous_standby_names'), current_setting('synchronous_commit')`

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
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// confirm waits until the grant just committed on conn is on every member
// of the required set (and, with Required N, on N standbys at least). It
// returns an error wrapping ErrNotReplicated when it cannot tell in time,
// and at once when a member cannot get the grant now (disconnected, or
// hidden from the role): the grant committed, but must not be served yet.
func (r *replicator) confirm(ctx context.Context, conn querier) (err error) {
	if r.cfg.Required == 0 {
		return nil
	}
	// The wait is a span of the grant's trace when the grant has one (a
	// tracing store's span gives its provider; none: a no-op). It tells
	// the outcome's class only: the error names standbys.
	ctx, span := trace.SpanFromContext(ctx).TracerProvider().Tracer(tracerName).Start(ctx, "idmint.replication.confirm")
	defer func() {
		if err != nil {
			span.SetStatus(codes.Error, "not_replicated")
		}
		span.End()
	}()
	var (
		lsnText  string
		timeline int64
	)
	if err := conn.QueryRow(ctx, positionSQL).Scan(&lsnText, &timeline); err != nil {
		return r.failed(fmt.Errorf("%w: read the grant's WAL position: %w", allocator.ErrNotReplicated, err), nil)
	}
	lsn, err := parseLSN(lsnText)
	if err != nil {
		return r.failed(fmt.Errorf("%w: %w", allocator.ErrNotReplicated, err), nil)
	}
	r.sawTimeline(timeline)
	start := time.Now()
	pause := r.cfg.PollMin
	var v verdict
	late := func() error {
		return r.failed(fmt.Errorf("%w: WAL %s not %sed by %s after %v: %w",
			allocator.ErrNotReplicated, lsnText, r.cfg.Ack, names(v.behind), time.Since(start).Round(time.Millisecond), ctx.Err()), v.behind)
	}
	for {
		ro, err := readMembers(ctx, conn)
		switch {
		case err != nil && ctx.Err() != nil && len(v.behind) > 0:
			return late()
		case err != nil:
			return r.failed(fmt.Errorf("%w: read the standbys: %w", allocator.ErrNotReplicated, err), nil)
		}
		v = judge(ro, lsn, r.cfg.Ack)
		if err := r.remember(ctx, conn, v, timeline); err != nil {
			return r.failed(fmt.Errorf("%w: %w", allocator.ErrNotReplicated, err), nil)
		}
		need := max(int(r.cfg.Required), 0)
		switch {
		case len(v.absent) > 0:
			hint := ""
			if v.hidden > 0 {
				hint = " (the database role may not read pg_stat_replication: grant it pg_monitor)"
			}
			return r.failed(fmt.Errorf("%w: WAL %s: held for %s, which could be promoted and cannot get it now%s",
				allocator.ErrNotReplicated, lsnText, names(v.absent), hint), append(v.absent, v.behind...))
		case v.standbys < need:
			return r.failed(fmt.Errorf("%w: %d standbys required, %d connected", allocator.ErrNotReplicated, need, v.standbys), v.behind)
		case len(v.behind) == 0 && v.acked >= need:
			r.waited(time.Since(start))
			return nil
		}
		select {
		case <-ctx.Done():
			return late()
		case <-time.After(pause):
		}
		pause = min(pause+pause/2, r.cfg.PollMax)
	}
}

func (r *replicator) waited(d time.Duration) {
	r.mu.Lock()
	r.waits++
	r.waitTime += d
	clear(r.held)
	r.mu.Unlock()
}

// failed counts a grant not confirmed, and records the standbys that held
// it back, keeping the time each first did.
func (r *replicator) failed(err error, held []Standby) error {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures++
	r.lastErr = err.Error()
	if len(held) > 0 {
		next := make(map[string]HeldStandby, len(held))
		for _, m := range held {
			h, ok := r.held[m.Name]
			if !ok {
				h.Since = now
			}
			h.Standby = m
			next[m.Name] = h
		}
		r.held = next
	}
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
		r.cfg.Logger.Warn("FAILOVER seen: the database's timeline changed; standbys of the old timeline no longer hold grants", "from", r.timeline, "to", tl)
		clear(r.held)
	}
	r.timeline = tl
}

// status asks the server about its standbys, with the rule the wait uses.
func (r *replicator) status(ctx context.Context, q querier) (ReplicationStatus, error) {
	var s ReplicationStatus
	err := q.QueryRow(ctx, statusSQL).Scan(&s.InRecovery, &s.Timeline, &s.SynchronousStandbyNames, &s.SynchronousCommit)
	if err != nil {
		return ReplicationStatus{}, fmt.Errorf("replication status: %w", err)
	}
	ro, err := readMembers(ctx, q)
	if err != nil {
		return ReplicationStatus{}, fmt.Errorf("replication status: read the standbys: %w", err)
	}
	v := judge(ro, 0, r.cfg.Ack)
	if err := r.remember(ctx, q, v, s.Timeline); err != nil {
		r.cfg.Logger.Warn("could not record a standby", "err", err)
	}
	s.Replicas, s.SyncReplicas, s.Hidden, s.Streamers, s.Standbys = v.standbys, v.sync, v.hidden, v.streamers, v.required
	r.sawTimeline(s.Timeline)
	r.mu.Lock()
	defer r.mu.Unlock()
	s.InitialTimeline = r.initialTimeline
	if s.Timeline == 0 {
		s.Timeline = r.timeline
	}
	s.Required, s.Ack = r.cfg.Required, r.cfg.Ack
	s.Waits, s.WaitFailures, s.WaitTime, s.LastWaitError = r.waits, r.failures, r.waitTime, r.lastErr
	for _, h := range r.held {
		s.Held = append(s.Held, h)
	}
	sort.Slice(s.Held, func(i, j int) bool { return s.Held[i].Since.Before(s.Held[j].Since) })
	return s, nil
}

// SetReplication replaces the store's ReplicationConfig (DefaultReplication
// until then). Call it before the store is used.
func (p *Store) SetReplication(cfg ReplicationConfig) { p.repl = newReplicator(cfg) }

// ReplicationStatus asks the server about its standbys (see
// ReplicationStatus).
func (p *Store) ReplicationStatus(ctx context.Context) (ReplicationStatus, error) {
	return p.repl.status(ctx, p.pool)
}

// Replication is ReplicationStatus as the API shows it (Report).
func (p *Store) Replication(ctx context.Context) (wire.Replication, error) {
	st, err := p.ReplicationStatus(ctx)
	if err != nil {
		return wire.Replication{}, err
	}
	return st.Report(), nil
}

// Report is s as the API shows it: its fields, and what its methods say.
func (s ReplicationStatus) Report() wire.Replication {
	r := wire.Replication{InRecovery: s.InRecovery, Timeline: s.Timeline, InitialTimeline: s.InitialTimeline,
		TimelineChanged: s.TimelineChanged(), Replicas: s.Replicas, SyncReplicas: s.SyncReplicas, Hidden: s.Hidden,
		Streamers: s.Streamers, SynchronousStandbyNames: s.SynchronousStandbyNames, SynchronousCommit: s.SynchronousCommit,
		Required: int(s.Required), RequiredName: s.Required.String(), Ack: string(s.Ack), AtRisk: s.AtRisk(),
		Waits: s.Waits, WaitFailures: s.WaitFailures, WaitTime: s.WaitTime, LastWaitError: s.LastWaitError,
		Warnings: s.Warnings(), Standbys: s.Standbys, Held: s.Held}
	return r
}
