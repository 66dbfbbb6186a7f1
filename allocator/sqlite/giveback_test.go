package sqlite_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/sqlite"
	"github.com/idmint/idmint/testkit/storetest"
)

// fillLog grows tag's segment log from have to rows rows, as a long-lived
// tag's is: consecutive ranges of 10 IDs below max_id, in one INSERT …
// SELECT, then ANALYZE. It returns the time it took.
func fillLog(tb testing.TB, store *sqlite.Store, tag string, have, rows int64) time.Duration {
	tb.Helper()
	ctx := context.Background()
	start := time.Now()
	var maxID int64
	if err := store.DB().QueryRowContext(ctx, `SELECT max_id FROM idmint_tags WHERE biz_tag = ?`, tag).Scan(&maxID); err != nil {
		tb.Fatal(err)
	}
	if rows > have {
		// Request IDs that sort in insertion order, as UUIDv7s do, one
		// series per tag.
		if _, err := store.DB().ExecContext(ctx, `
WITH RECURSIVE n(i) AS (SELECT ?3 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?4)
INSERT INTO idmint_segments (request_id, biz_tag, first_id, last_id, instance, granted_at)
SELECT printf('00000000-%s-7000-8000-%012x', substr(hex(?1), 1, 4), i), ?1, ?2 + (i - ?3) * 10 + 1, ?2 + (i - ?3) * 10 + 10,
       'bench', strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
FROM n`, tag, maxID, have, rows); err != nil {
			tb.Fatal(err)
		}
		if _, err := store.DB().ExecContext(ctx, `UPDATE idmint_tags SET max_id = ? WHERE biz_tag = ?`, maxID+(rows-have)*10, tag); err != nil {
			tb.Fatal(err)
		}
	}
	if _, err := store.DB().ExecContext(ctx, `ANALYZE`); err != nil {
		tb.Fatal(err)
	}
	return time.Since(start)
}

// TestSQLite_SegmentLogPlans: every statement on the segment log that a
// caller can cause searches an index, never scans the table, on a log
// large enough (and analyzed): the give-backs hold SQLite's one write
// lock, and a scan of a long log there holds every write of the file.
func TestSQLite_SegmentLogPlans(t *testing.T) {
	store := openSQLite(t, tempDB(t))
	const tag, rows = "order", 100_000
	for _, name := range []string{tag, "user"} {
		if _, err := store.CreateTag(t.Context(), allocator.TagSpec{Name: name, Step: 10}); err != nil {
			t.Fatal(err)
		}
	}
	fillLog(t, store, tag, 0, rows)
	fillLog(t, store, "user", 0, 1000)
	req := storetest.NewRequest(tag, 10)
	req.Holder = allocator.NewHolder("anonymous", "key")
	seg, err := store.Allocate(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	principal, hash := req.Holder.Principal, req.Holder.KeyHash[:]
	id := req.ID.String()
	args := map[string][]any{
		"allocate":                     {uuid.Must(uuid.NewV7()).String(), tag, seg.Last + 1, seg.Last + 10, "instance", nil, nil},
		"lookup":                       {id},
		"give back a caller's tail":    {id, tag, seg.First + 5, seg.Last, principal, hash},
		"record a caller's give-back":  {seg.First + 5, id},
		"read a request's holder":      {id},
		"give back an instance's tail": {tag, seg.First + 5, seg.Last},
	}
	for name, sql := range sqlite.SegmentLogStatements {
		t.Run(name, func(t *testing.T) {
			a, ok := args[name]
			if !ok {
				t.Fatalf("no parameters for %q: add them to this test", name)
			}
			rows, err := store.DB().QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+sql, a...)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var plan []string
			for rows.Next() {
				var id, parent, unused int
				var detail string
				if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, detail)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			text := strings.Join(plan, "\n")
			// SEARCH reads an index range; SCAN reads a whole table (or
			// a whole index, as bad). The lookup names the log s.
			for _, line := range plan {
				if f := strings.Fields(line); len(f) > 1 && f[0] == "SCAN" && (f[1] == "idmint_segments" || f[1] == "s") {
					t.Fatalf("%s scans the segment log (%q):\n%s", name, line, text)
				}
			}
			// A give-back's guard reads what rows keep, not every row that
			// ended above the tail.
			if strings.HasPrefix(name, "give back") && !strings.Contains(text, "idmint_segments_kept") {
				t.Fatalf("%s does not read the index of what rows keep:\n%s", name, text)
			}
			if name != "allocate" && !strings.Contains(text, "USING INDEX") && !strings.Contains(text, "USING PRIMARY KEY") {
				t.Fatalf("%s uses no index:\n%s", name, text)
			}
			t.Logf("%s:\n%s", name, text)
		})
	}
}

// BenchmarkSQLite_GiveBack is BenchmarkPostgres_GiveBack on SQLite: one
// give-back, a caller's and an instance's, on a tag whose segment log holds
// 0, 1 M and 10 M rows (IDMINT_BENCH_LOG_ROWS for others). It fills up to
// 10 M rows (a minute or so, a gigabyte of file): run it alone.
func BenchmarkSQLite_GiveBack(b *testing.B) {
	store := openSQLite(b, tempDB(b))
	const tag = "order"
	if _, err := store.CreateTag(context.Background(), allocator.TagSpec{Name: tag, Step: 10}); err != nil {
		b.Fatal(err)
	}
	storetest.BenchGiveBack(b, store, tag, func(b *testing.B, have, rows int64) time.Duration {
		return fillLog(b, store, tag, have, rows)
	})
}
