package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestReplication drives the pair through a lossy failover: a row written
// while the standby streams reaches it; one written while its WAL is
// stalled does not, although the primary still lists it as streaming; the
// primary dies, the standby is promoted without that row, and the
// multi-host URL now writes to it.
func TestReplication(t *testing.T) {
	for _, tt := range []struct {
		name string
		sync bool
	}{
		{name: "async"},
		{name: "sync", sync: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReplication(t, ReplicationOptions{Synchronous: tt.sync})
			t.Logf("%s pair: primary %s, standby %s", r.Primary.Kind(), r.Primary.URL(), r.Standby.URL())
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			db := r.NewDatabase(t)

			primary := connect(t, r.PrimaryURL(db))
			var syncState string
			if err := primary.QueryRow(ctx, "SELECT sync_state FROM pg_stat_replication").Scan(&syncState); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]string{false: "async", true: "sync"}[tt.sync]; syncState != want {
				t.Fatalf("sync_state %q; want %q", syncState, want)
			}
			if _, err := primary.Exec(ctx, "CREATE TABLE t (n int); INSERT INTO t VALUES (1)"); err != nil {
				t.Fatal(err)
			}
			r.WaitReplayed(t)
			standby := connect(t, r.StandbyURL(db))
			if n := count(t, standby); n != 1 {
				t.Fatalf("standby has %d rows; want 1", n)
			}

			// Row 2 is committed on the primary just before it dies: a
			// synchronous standby has it, a stalled asynchronous one not.
			want := int64(3)
			if !tt.sync {
				r.StallWAL(t)
				want = 2
			}
			if _, err := primary.Exec(ctx, "INSERT INTO t VALUES (2)"); err != nil {
				t.Fatal(err)
			}
			var state string
			if err := primary.QueryRow(ctx, "SELECT state FROM pg_stat_replication").Scan(&state); err != nil || state != "streaming" {
				t.Fatalf("standby listed as %q, %v; want streaming", state, err)
			}
			r.KillPrimary(t)
			r.Promote(t)

			after := connect(t, r.URL(db))
			if _, err := after.Exec(ctx, "INSERT INTO t VALUES (3)"); err != nil {
				t.Fatalf("write through the multi-host URL after the promotion: %v", err)
			}
			if n := count(t, after); n != want {
				t.Fatalf("promoted standby has %d rows; want %d", n, want)
			}
		})
	}
}

func count(t *testing.T, conn *pgx.Conn) int64 {
	t.Helper()
	var n int64
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
