package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/internal/storetest"
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
	store, _ := openPostgres(t)
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
			rows, err := store.Pool().Query(t.Context(), "EXPLAIN "+sql, a...)
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
			text := strings.Join(plan, "\n")
			if strings.Contains(text, "Seq Scan on idmint_segments") {
				t.Fatalf("%s reads the whole segment log:\n%s", name, text)
			}
			t.Logf("%s:\n%s", name, text)
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
	store, _ := openPostgres(b)
	const tag = "order"
	createTag(b, store, allocator.TagSpec{Name: tag, Step: 10})
	holder := allocator.NewHolder("anonymous", "bench key")
	ctx := context.Background()
	var have int64
	for _, rows := range storetest.BenchLogRows(b) {
		took := fillLog(b, store, tag, have, rows)
		have = max(have, rows)
		b.Logf("segment log of %d rows (filled in %v)", have, took.Round(time.Millisecond))
		b.Run(fmt.Sprintf("caller/rows=%d", rows), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				req := storetest.NewRequest(tag, 10)
				req.Holder = holder
				seg, err := store.Allocate(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if ok, err := store.GiveBackRange(ctx, req.ID, holder, tag, seg.First+5, seg.Last); err != nil || !ok {
					b.Fatalf("GiveBackRange = %v, %v", ok, err)
				}
			}
		})
		b.Run(fmt.Sprintf("instance/rows=%d", rows), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				seg, err := store.Allocate(ctx, storetest.NewRequest(tag, 10))
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if ok, err := store.GiveBack(ctx, tag, seg.First+5, seg.Last); err != nil || !ok {
					b.Fatalf("GiveBack = %v, %v", ok, err)
				}
			}
		})
	}
}
