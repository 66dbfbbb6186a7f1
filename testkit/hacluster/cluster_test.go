package hacluster_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idmint/idmint/testkit/hacluster"
)

// TestCluster_Failover starts two nodes in synchronous mode from
// deploy/ha's files, checks that idmint's role has pg_monitor, commits a
// row as that role, crashes the leader and reads the row back from the
// promoted node through the multi-host URL. It needs Patroni and etcd: it runs with
// IDMINT_DRILL_HA=1 (make drill-ha).
func TestCluster_Failover(t *testing.T) {
	if os.Getenv("IDMINT_DRILL_HA") == "" {
		t.Skip("set IDMINT_DRILL_HA=1 to run (needs patroni, etcd and the PostgreSQL server binaries)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := hacluster.Start(ctx, hacluster.Config{Nodes: 2, Synchronous: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	fail := func(err error) {
		t.Helper()
		t.Fatalf("%v\n%s", err, c.Logs(3000))
	}
	old, err := c.WaitReplicating(ctx)
	if err != nil {
		fail(err)
	}
	exec := func(sql string) {
		conn, err := pgx.Connect(ctx, c.URL())
		if err != nil {
			fail(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			fail(err)
		}
	}
	exec(`CREATE TABLE drill (n int); INSERT INTO drill VALUES (42)`)
	var monitor bool
	if conn, err := pgx.Connect(ctx, c.URL()); err != nil {
		fail(err)
	} else {
		err := conn.QueryRow(ctx, `SELECT current_user = 'idmint' AND pg_has_role('pg_monitor', 'member')`).Scan(&monitor)
		conn.Close(ctx)
		if err != nil || !monitor {
			t.Fatalf("the URL's role is not idmint with pg_monitor (%v)", err)
		}
	}

	if err := c.Crash(old); err != nil {
		fail(err)
	}
	promoted, err := c.WaitLeader(ctx, old)
	if err != nil {
		fail(err)
	}
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		fail(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT n FROM drill`).Scan(&n); err != nil || n != 42 {
		fail(err)
	}
	var recovering bool
	if err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&recovering); err != nil || recovering {
		t.Fatalf("the URL reached a server in recovery (%v)", err)
	}
	t.Logf("%s crashed, %s promoted; the committed row survived", old, promoted)
}
