package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/wire"
)

// The required set: which servers must have a grant before it is served.
//
// A grant may be served only when every server that could be promoted has
// its WAL (design.md, invariant 7). On the current primary and timeline,
// those are the union of:
//
//   - R1, every physical standby connected now: a WAL sender that is not a
//     logical one (no logical slot, no database) and reports a replay
//     position, in any state but 'backup' (startup, catchup, streaming,
//     stopping). pg_receivewal and pg_basebackup -X stream report no replay
//     position: they archive WAL, nobody promotes them, so they do not count.
//     A sender that has sent no feedback yet counts, unknown, until it does.
//   - R2, every physical, non-temporary replication slot not in use by such
//     a standby: its restart_lsn is the flush position its standby last
//     confirmed, so a standby that disconnected with a slot holds grants
//     until it is back and past them, or its slot is dropped (Patroni keeps
//     one slot per member and drops it when the member leaves).
//   - R3, every standby idmint saw streaming without a slot on this
//     timeline (the idmint_standbys table, written by any instance that
//     sees it), not connected now, not forgotten by an operator: it holds
//     grants until it is back and past them. Rows of older timelines do not
//     count: after a failover, the set starts again from the new primary's
//     own standbys.
//
// Health and the wait read the same query (membersSQL) and the same rule
// (judge), so that what /id/health calls a standby is what holds a grant.

// Standby kinds: where a member of the required set comes from.
const (
	KindStreaming  = "streaming"  // R1: a physical standby connected now
	KindSlot       = "slot"       // R2: a physical slot no connected standby uses
	KindRemembered = "remembered" // R3: seen before on this timeline, not connected now
)

// Standby is one server that could be promoted, as the primary sees it:
// its Kind is KindStreaming, KindSlot or KindRemembered; its Position the
// WAL it confirmed (flush, or replay with AckReplay; a slot's restart_lsn;
// a remembered standby's last flush seen), empty when unknown.
type Standby = wire.Standby

// position is m's Position parsed; 0 when unknown.
func position(m Standby) uint64 {
	pos, _ := parseLSN(m.Position)
	return pos
}

// StandbyRecord is a row of idmint_standbys: a standby seen streaming.
type StandbyRecord = wire.StandbyRecord

// membersSQL lists, in one statement, the WAL senders (with their slot and
// whether they are logical), the physical non-temporary slots, and the
// standbys remembered on the current timeline. A sender whose details the
// role may not read (no pg_monitor) has a NULL state; its slot, readable by
// any role, still tells its flush position.
const membersSQL = `WITH tl AS (SELECT ` + timelineSQL + ` AS timeline)
SELECT 'sender', COALESCE(sl.slot_name, COALESCE(r.application_name, '') || '@' || COALESCE(host(r.client_addr), 'local')),
    sl.slot_name IS NOT NULL, COALESCE(r.state, ''), COALESCE(r.sync_state, ''),
    r.write_lsn IS NOT NULL, r.flush_lsn::text, r.replay_lsn::text, sl.restart_lsn::text,
    NULL::timestamptz, COALESCE(sl.slot_type = 'logical', false) OR a.datname IS NOT NULL
FROM pg_stat_replication r
LEFT JOIN pg_replication_slots sl ON sl.active_pid = r.pid
LEFT JOIN pg_stat_activity a ON a.pid = r.pid
UNION ALL
SELECT 'slot', slot_name, true, CASE WHEN active THEN 'active' ELSE 'inactive' END, '',
    false, restart_lsn::text, NULL, restart_lsn::text, NULL, false
FROM pg_replication_slots WHERE slot_type = 'physical' AND NOT temporary
UNION ALL
SELECT 'remembered', s.name, s.slot, 'disconnected', '', false, s.last_flush_lsn::text, NULL, NULL, s.last_seen, false
FROM idmint_standbys s, tl WHERE s.timeline = tl.timeline AND s.forgotten_at IS NULL`

// rememberSQL records a standby seen streaming on a timeline; seeing it
// again undoes a forget.
const rememberSQL = `INSERT INTO idmint_standbys AS s (name, slot, timeline, last_flush_lsn)
VALUES ($1, $2, $3, $4::pg_lsn)
ON CONFLICT (name) DO UPDATE SET slot = EXCLUDED.slot, timeline = EXCLUDED.timeline,
    last_seen = now(), last_flush_lsn = EXCLUDED.last_flush_lsn, forgotten_at = NULL`

// rememberEvery bounds how often an instance refreshes the row of a
// standby it keeps seeing: a new one is written at once, a known one at
// most this often, not on every grant.
const rememberEvery = 30 * time.Second

// roster is one reading of membersSQL: every WAL sender, slot and
// remembered standby, before the rule sorts them out.
type roster struct {
	senders, slots, remembered []memberRow
}

type memberRow struct {
	Standby
	wrote   bool   // a sender that reported a write position
	flush   string // a sender's flush_lsn
	replay  string // a sender's replay_lsn
	slotPos string // restart_lsn of its slot
	logical bool
}

// readMembers runs membersSQL on q.
func readMembers(ctx context.Context, q querier) (roster, error) {
	rows, err := q.Query(ctx, membersSQL)
	if err != nil {
		return roster{}, err
	}
	defer rows.Close()
	var ro roster
	for rows.Next() {
		var (
			m                      memberRow
			kind                   string
			flush, replay, slotPos *string
			lastSeen               *time.Time
		)
		if err := rows.Scan(&kind, &m.Name, &m.Slot, &m.State, &m.SyncState, &m.wrote, &flush, &replay, &slotPos, &lastSeen, &m.logical); err != nil {
			return roster{}, err
		}
		m.flush, m.replay, m.slotPos, m.LastSeen = deref(flush), deref(replay), deref(slotPos), lastSeen
		switch kind {
		case "sender":
			ro.senders = append(ro.senders, m)
		case "slot":
			m.Kind, m.Position = KindSlot, m.slotPos
			ro.slots = append(ro.slots, m)
		default:
			m.Kind, m.Position = KindRemembered, m.flush
			ro.remembered = append(ro.remembered, m)
		}
	}
	return ro, rows.Err()
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// verdict is the rule applied to a roster for one WAL position.
type verdict struct {
	required []Standby // the required set
	behind   []Standby // connected members of it that do not have the position yet
	absent   []Standby // members that cannot get it now: disconnected, or unreadable
	// standbys counts the real standbys connected (R1), acked those of them
	// with the position, sync those PostgreSQL waits for at commit, hidden
	// the senders whose details the role may not read.
	standbys, acked, sync, hidden int
	// streamers are the senders that are not standbys: WAL archivers
	// (pg_receivewal, pg_basebackup -X stream) and base backups.
	streamers int
}

// judge applies the rule to ro: which members must have the WAL position
// lsn (0: none, for health), and which of them do not.
func judge(ro roster, lsn uint64, ack ReplicaAck) verdict {
	var v verdict
	usedSlots := map[string]bool{}
	connected := map[string]bool{}
	for _, m := range ro.senders {
		switch {
		case m.logical:
			continue
		case m.State == "":
			// Hidden from the role: its slot, if any, tells its flush
			// position; without one it is a sender nobody can judge, so
			// it holds grants (grant the role pg_monitor).
			v.hidden++
			m.State = "hidden"
		case m.State == "backup":
			v.streamers++
			continue
		case m.replay == "" && m.wrote:
			// Reported a write position but never a replay one: a WAL
			// archiver, not a server that could be promoted.
			v.streamers++
			continue
		}
		m.Kind = KindStreaming
		switch {
		case m.State == "hidden":
			m.Position = m.slotPos
		case ack == AckReplay:
			m.Position = m.replay
		default:
			m.Position = m.flush
		}
		if m.Slot {
			usedSlots[m.Name] = true
		}
		connected[m.Name] = true
		v.standbys++
		if m.SyncState == "sync" || m.SyncState == "quorum" {
			v.sync++
		}
		v.add(m.Standby, lsn, m.State != "hidden" || m.Slot)
	}
	for _, m := range ro.slots {
		if !usedSlots[m.Name] {
			v.add(m.Standby, lsn, false)
		}
	}
	for _, m := range ro.remembered {
		// A slot, not its row, says whether a standby with one is still a
		// candidate: R2 holds it while the slot exists.
		if !m.Slot && !connected[m.Name] {
			v.add(m.Standby, lsn, false)
		}
	}
	for _, m := range v.required {
		if pos := position(m); m.Kind == KindStreaming && pos >= lsn && pos != 0 {
			v.acked++
		}
	}
	return v
}

// add puts m in the required set; live says it may still get new WAL
// (connected and readable): behind, rather than absent, when it lacks lsn.
func (v *verdict) add(m Standby, lsn uint64, live bool) {
	v.required = append(v.required, m)
	switch pos := position(m); {
	case pos != 0 && pos >= lsn:
	case live:
		v.behind = append(v.behind, m)
	default:
		v.absent = append(v.absent, m)
	}
}

// names lists ms as "name (kind, state)".
func names(ms []Standby) string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = fmt.Sprintf("%s (%s, %s)", m.Name, m.Kind, m.State)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// parseLSN reads a pg_lsn's text form, "X/Y" in hex.
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("lsn %q: want X/Y", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("lsn %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("lsn %q: %w", s, err)
	}
	return h<<32 | l, nil
}

// remember records the connected standbys of v's roster in idmint_standbys:
// a new one (or one not written for rememberEvery) at once. It fails, naming
// the standby, when one not recorded before cannot be written: until it is,
// an instance started after it disconnects would not know it, and a
// failover to it could grant again what was served. A standby counts as
// recorded only once its row is written, not while a write is in flight:
// every grant until then writes it itself, and fails with it.
func (r *replicator) remember(ctx context.Context, q querier, v verdict, timeline int64) error {
	if timeline == 0 {
		return nil
	}
	now := time.Now()
	var errs []error
	for _, m := range v.required {
		if m.Kind != KindStreaming || m.State == "hidden" {
			continue
		}
		key := fmt.Sprintf("%d/%s", timeline, m.Name)
		r.mu.Lock()
		last, recorded := r.remembered[key]
		due := !recorded || now.Sub(last) >= rememberEvery
		if recorded && due {
			// One refresh at a time: the others go on while it runs.
			r.remembered[key] = now
		}
		r.mu.Unlock()
		if !due {
			continue
		}
		var flush any
		if m.Position != "" {
			flush = m.Position
		}
		_, err := q.Exec(ctx, rememberSQL, m.Name, m.Slot, timeline, flush)
		r.mu.Lock()
		switch {
		case err == nil:
			r.remembered[key] = now
		case recorded:
			// The row exists; the next grant writes it again, as a
			// first record, and fails until it can.
			delete(r.remembered, key)
		}
		r.mu.Unlock()
		switch {
		case err != nil && !recorded:
			errs = append(errs, fmt.Errorf("record standby %s (first seen streaming, not recorded in idmint_standbys): %w", m.Name, err))
		case err != nil:
			r.cfg.Logger.Warn("could not refresh a standby's record", "standby", m.Name, "err", err)
		}
	}
	return errors.Join(errs...)
}

// Standbys lists the standbys recorded in idmint_standbys, newest first.
func (p *Store) Standbys(ctx context.Context) ([]StandbyRecord, error) {
	rows, err := p.pool.Query(ctx, `SELECT name, slot, timeline, first_seen, last_seen, COALESCE(last_flush_lsn::text, ''), forgotten_at
FROM idmint_standbys ORDER BY last_seen DESC, name`)
	if err != nil {
		return nil, fmt.Errorf("list standbys: %w", err)
	}
	recs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (StandbyRecord, error) {
		var s StandbyRecord
		err := row.Scan(&s.Name, &s.Slot, &s.Timeline, &s.FirstSeen, &s.LastSeen, &s.LastFlushLSN, &s.ForgottenAt)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("list standbys: %w", err)
	}
	return recs, nil
}

// ForgetStandby marks a recorded standby forgotten: it no longer holds
// grants back until it is seen streaming again. It returns ErrNotFound when
// no standby of that name is recorded (or it is forgotten already). A
// standby that streams through a slot is released by dropping the slot
// instead; forgetting its row changes nothing.
func (p *Store) ForgetStandby(ctx context.Context, name string) error {
	tag, err := p.pool.Exec(ctx, `UPDATE idmint_standbys SET forgotten_at = now() WHERE name = $1 AND forgotten_at IS NULL`, name)
	if err != nil {
		return fmt.Errorf("forget standby %q: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("forget standby %q: %w", name, allocator.ErrNotFound)
	}
	return nil
}
