package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/testkit/pgstore"
	"github.com/idmint/idmint/testkit/storetest"
)

// fillLog grows tag's segment log from have to rows rows, as a long-lived tag's is:
// consecutive ranges of 10 IDs below max_id, in one INSERT … SELECT, then
// ANALYZE, so that the planner knows the table is large. It returns the
// time it took.
func fillLog(tb testing.TB, store *postgres.Store, tag string, have, rows int64) time.Duration {
	tb.Helper()
	ctx := context.Background()
	start := time.Now()
	var maxID int64
	if err := store.Pool().QueryRow(ctx, `SELECT max_id FROM idmint_tags WHERE biz_tag = $1`, tag).Scan(&maxID); err != nil {
		tb.Fatal(err)
	}
	if rows > have {
		// Request IDs that sort in insertion order, as UUIDv7s do, one
		// series per tag.
		if _, err := store.Pool().Exec(ctx, `
INSERT INTO idmint_segments (request_id, biz_tag, first_id, last_id, instance)
SELECT ('00000000-' || left(md5($1), 4) || '-7000-8000-' || lpad(to_hex(i), 12, '0'))::uuid, $1, $2 + (i - $3) * 10 + 1, $2 + (i - $3) * 10 + 10, 'bench'
FROM generate_series($3::bigint, $4::bigint - 1) AS i`, tag, maxID, have, rows); err != nil {
			tb.Fatal(err)
		}
		if _, err := store.Pool().Exec(ctx, `UPDATE idmint_tags SET max_id = $2 WHERE biz_tag = $1`, tag, maxID+(rows-have)*10); err != nil {
			tb.Fatal(err)
		}
	}
	if _, err := store.Pool().Exec(ctx, `ANALYZE idmint_segments`); err != nil {
		tb.Fatal(err)
	}
	return time.Since(start)
}

// TestPostgres_SegmentLogPlans: every statement on the segment log that a
// caller can cause reads an index range, never the table, on a log large
// enough (and analyzed) for the planner to scan it if the statement let
// it: the give-backs run under the tag's row lock, and a scan of a long
// log there holds every grant of the tag.
func TestPostgres_SegmentLogPlans(t *testing.T) {
	store, _ := pgstore.New(t)
	const tag, rows = "order", 200_000
	createTag(t, store, allocator.TagSpec{Name: tag, Step: 10})
	createTag(t, store, allocator.TagSpec{Name: "user", Step: 10})
	fillLog(t, store, tag, 0, rows)
	fillLog(t, store, "user", 0, 1000)
	// A caller's range at the top of the tag, as a give-back finds it.
	req := storetest.NewRequest(tag, 10)
	req.Holder = allocator.NewHolder("anonymous", "key")
	seg, err := store.Allocate(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	fillLog(t, store, tag, rows, rows) // ANALYZE again
	principal, hash := req.Holder.Principal, req.Holder.KeyHash[:]
	args := map[string][]any{
		"allocate": {tag, int64(10), uuid.Must(uuid.NewV7()), "instance", int64(1_000_000), int64(0), int64(0),
			int64(allocator.MaxClaimedLead), principal, hash},
		"lookup":                       {req.ID},
		"give back a caller's tail":    {req.ID, tag, seg.First + 5, seg.Last, principal, hash},
		"record a caller's give-back":  {req.ID, seg.First + 5},
		"read a request's holder":      {req.ID},
		"give back an instance's tail": {tag, seg.First + 5, seg.Last},
	}
	for name, sql := range postgres.SegmentLogStatements {
		t.Run(name, func(t *testing.T) {
			a, ok := args[name]
			if !ok {
				t.Fatalf("no parameters for %q: add them to this test", name)
			}
			plans := map[string]string{"custom": explain(t, store, sql, a, false)}
			// A prepared statement may get a generic plan after five runs,
			// unless its transaction forces plans for its parameters.
			if !postgres.CustomPlanned[name] {
				plans["generic"] = explain(t, store, sql, a, true)
			}
			for kind, plan := range plans {
				if strings.Contains(plan, "Seq Scan on idmint_segments") {
					t.Fatalf("%s: its %s plan reads the whole segment log:\n%s", name, kind, plan)
				}
				// A give-back's guard reads what rows keep, not every row
				// that ended above the tail (TestPostgres_GiveBackReadsOnlyKeptRows).
				if strings.HasPrefix(name, "give back") && !strings.Contains(plan, "idmint_segments_kept") {
					t.Fatalf("%s: its %s plan does not read the index of what rows keep:\n%s", name, kind, plan)
				}
				t.Logf("%s, %s plan:\n%s", name, kind, plan)
			}
		})
	}
}

// explain returns the plan of sql with args: the one made for these
// values, or with generic the one a prepared statement may be given for
// any values.
func explain(t *testing.T, store *postgres.Store, sql string, args []any, generic bool) string {
	t.Helper()
	ctx := t.Context()
	tx, err := store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	query := "EXPLAIN " + sql
	if generic {
		if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "PREPARE explained AS "+sql); err != nil {
			t.Fatal(err)
		}
		// Prepared statements outlive transactions.
		defer func() {
			if _, err := tx.Exec(ctx, "DEALLOCATE explained"); err != nil {
				t.Error(err)
			}
		}()
		// EXECUTE takes values, not parameters: literals.
		lits := make([]string, len(args))
		for i, a := range args {
			switch v := a.(type) {
			case nil:
				lits[i] = "NULL"
			case int64:
				lits[i] = strconv.FormatInt(v, 10)
			case []byte:
				lits[i] = fmt.Sprintf(`'\x%x'`, v)
			case string, uuid.UUID:
				lits[i] = "'" + strings.ReplaceAll(fmt.Sprint(v), "'", "''") + "'"
			default:
				t.Fatalf("no literal for %T", a)
			}
		}
		query, args = "EXPLAIN EXECUTE explained("+strings.Join(lits, ", ")+")", nil
	}
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

// TestPostgres_GiveBacksScanNoTable: give-backs run as the store runs
// them, on one connection whose prepared statements PostgreSQL plans
// generically after five runs, read the segment log by its indexes only:
// the table's sequential-scan counter does not move over many of them, on
// a log large enough to make a scan the generic plan's choice.
func TestPostgres_GiveBacksScanNoTable(t *testing.T) {
	ctx := t.Context()
	_, dbURL := pgstore.New(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "1")
	u.RawQuery = q.Encode()
	store := pgstore.Open(t, u.String())
	var version int
	if err := store.Pool().QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version < 150000 {
		t.Skipf("server version %d: pg_stat_force_next_flush needs PostgreSQL 15", version)
	}
	const tag, rows, runs = "order", 200_000, 12
	createTag(t, store, allocator.TagSpec{Name: tag, Step: 10})
	fillLog(t, store, tag, 0, rows)
	// scans reads the log's scan counters, once this backend has flushed
	// its own.
	scans := func() (seq, idx int64) {
		t.Helper()
		if _, err := store.Pool().Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		if err := store.Pool().QueryRow(ctx, `SELECT seq_scan, COALESCE(idx_scan, 0) FROM pg_stat_user_tables WHERE relname = 'idmint_segments'`).
			Scan(&seq, &idx); err != nil {
			t.Fatal(err)
		}
		return seq, idx
	}
	holder := allocator.NewHolder("anonymous", "key")
	for _, c := range []struct {
		name     string
		giveBack func(t *testing.T)
	}{
		{"a caller's", func(t *testing.T) {
			req := storetest.NewRequest(tag, 10)
			req.Holder = holder
			seg, err := store.Allocate(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := store.GiveBackRange(ctx, req.ID, holder, tag, seg.First+5, seg.Last); err != nil || !ok {
				t.Fatalf("GiveBackRange = %v, %v", ok, err)
			}
		}},
		{"an instance's", func(t *testing.T) {
			seg, err := store.Allocate(ctx, storetest.NewRequest(tag, 10))
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := store.GiveBack(ctx, tag, seg.First+5, seg.Last); err != nil || !ok {
				t.Fatalf("GiveBack = %v, %v", ok, err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			seq, idx := scans()
			for range runs {
				c.giveBack(t)
			}
			seqAfter, idxAfter := scans()
			if seqAfter != seq {
				t.Fatalf("%d give-backs scanned the segment log %d times", runs, seqAfter-seq)
			}
			if idxAfter == idx {
				t.Fatalf("%d give-backs read no index of the segment log: the counters prove nothing", runs)
			}
			t.Logf("%d give-backs: %d index scans of the segment log, 0 sequential", runs, idxAfter-idx)
		})
	}
}

// BenchmarkPostgres_GiveBack times one give-back (a caller's range tail,
// GiveBackRange, and an instance's at shutdown, GiveBack) on a tag whose
// segment log holds 0, 1 M and 10 M rows: the time must stay flat, since
// the give-back holds the tag's row lock and every grant of the tag waits
// behind it. Each op grants a range (not timed) and gives its tail back.
// It fills up to 10 M rows (some minutes, a gigabyte or so): run it alone,
// e.g. go test -run '^$' -bench GiveBack -benchtime 200x ./allocator/postgres/
// (IDMINT_BENCH_LOG_ROWS=0,100000 for other sizes).
func BenchmarkPostgres_GiveBack(b *testing.B) {
	store, _ := pgstore.New(b)
	const tag = "order"
	createTag(b, store, allocator.TagSpec{Name: tag, Step: 10})
	storetest.BenchGiveBack(b, store, tag, func(b *testing.B, have, rows int64) time.Duration {
		return fillLog(b, store, tag, have, rows)
	})
}

// TestPostgres_GiveBackReadsOnlyKeptRows: a caller who grants a range and
// gives it back in full, over and over, leaves a log row at the same spot
// each time; a give-back there must not read them. Both give-backs are run
// under EXPLAIN ANALYZE (in a transaction rolled back) on a log with
// thousands of such rows, and the rows they read of the log are counted:
// a handful, not one per row given back before.
func TestPostgres_GiveBackReadsOnlyKeptRows(t *testing.T) {
	store, _ := pgstore.New(t)
	ctx := t.Context()
	const tag, given = "order", 5000
	createTag(t, store, allocator.TagSpec{Name: tag, Step: 10})
	// [11, 20] granted and given back in full `given` times: max_id went
	// back to 10 each time, and each row keeps nothing.
	if _, err := store.Pool().Exec(ctx, `UPDATE idmint_tags SET max_id = 10 WHERE biz_tag = $1`, tag); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Pool().Exec(ctx, `
INSERT INTO idmint_segments (request_id, biz_tag, first_id, last_id, returned_from, instance, principal, holder_hash)
SELECT gen_random_uuid(), $1, 11, 20, 11, '', 'anonymous', sha256(i::text::bytea)
FROM generate_series(1, $2::int) AS i`, tag, given); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Pool().Exec(ctx, `ANALYZE idmint_segments`); err != nil {
		t.Fatal(err)
	}

	req := storetest.NewRequest(tag, 10)
	req.Holder = allocator.NewHolder("anonymous", "key")
	seg, err := store.Allocate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if seg.First != 11 || seg.Last != 20 {
		t.Fatalf("granted [%d, %d], want [11, 20]", seg.First, seg.Last)
	}
	principal, hash := req.Holder.Principal, req.Holder.KeyHash[:]
	for _, c := range []struct {
		name string
		sql  string
		args []any
	}{
		{"a caller's", postgres.SegmentLogStatements["give back a caller's tail"], []any{req.ID, tag, seg.First + 5, seg.Last, principal, hash}},
		{"an instance's", postgres.SegmentLogStatements["give back an instance's tail"], []any{tag, seg.First + 5, seg.Last}},
	} {
		t.Run(c.name, func(t *testing.T) {
			read, plan := rowsRead(t, store, c.sql, c.args)
			if read > 10 {
				t.Fatalf("the give-back read %.0f rows of the segment log, with %d rows given back in full below its tail:\n%s", read, given, plan)
			}
			t.Logf("the give-back read %.0f rows of the segment log (%d given back in full there)", read, given)
		})
	}
}

// rowsRead runs sql under EXPLAIN ANALYZE in a transaction it rolls back,
// and returns how many rows of idmint_segments its plan nodes read: those
// they returned and those their filters removed, over all their loops.
func rowsRead(t *testing.T, store *postgres.Store, sql string, args []any) (float64, string) {
	t.Helper()
	ctx := t.Context()
	tx, err := store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var out []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&out); err != nil {
		t.Fatal(err)
	}
	var plans []struct{ Plan planNode }
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN output %s: %v", out, err)
	}
	var read float64
	var walk func(n planNode)
	walk = func(n planNode) {
		if n.Relation == "idmint_segments" {
			read += (n.Rows + n.RemovedByFilter + n.RemovedByRecheck) * n.Loops
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(plans[0].Plan)
	return read, string(out)
}

// planNode is one node of EXPLAIN (ANALYZE, FORMAT JSON).
type planNode struct {
	Relation         string     `json:"Relation Name"`
	Rows             float64    `json:"Actual Rows"`
	Loops            float64    `json:"Actual Loops"`
	RemovedByFilter  float64    `json:"Rows Removed by Filter"`
	RemovedByRecheck float64    `json:"Rows Removed by Index Recheck"`
	Plans            []planNode `json:"Plans"`
}
