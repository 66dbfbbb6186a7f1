// Package hacluster runs a throwaway PostgreSQL cluster with automatic
// failover for drills: one etcd and N Patroni nodes, all on 127.0.0.1 ports
// chosen at start, under one temporary directory. Their configuration is
// the HA deployment's (package deploy/ha: patroni.yml, etcd.yml,
// post-bootstrap.sh) with the drill's values filled in, so a drill tests
// what a deployment runs.
//
//	c, err := hacluster.Start(ctx, hacluster.Config{Nodes: 2, Synchronous: true})
//	defer c.Close()
//	err = c.WaitReplicating(ctx)          // a leader, every replica streaming
//	old, _ := c.Leader(ctx)
//	c.Disconnect(replica)                 // or cut a replica off…
//	c.Reconnect(replica)                  // …and let it come back
//	c.Crash(old)                          // SIGKILL its Patroni and PostgreSQL
//	now, _ := c.WaitLeader(ctx, old)      // Patroni promoted another node
//	db := c.URL()                         // role idmint, every node, target_session_attrs=read-write
//
// It needs Patroni (with its etcd client), etcd and the PostgreSQL server
// binaries (Debian: patroni, python3-etcd, python3-psycopg2, etcd-server,
// postgresql). As root, every process runs as the user postgres.
//
// Crash is a node crash, not a clean stop: Patroni is killed first, so that
// it cannot restart the server or hand its leadership over, then the
// postmaster and every server process, so that no WAL leaves the node after
// the crash. The other nodes' Patroni promote one of them once the leader key
// expires in etcd (after TTL).
//
// Close kills what Start started and removes the directory. Child processes
// die with the calling process (parent-death signal); PostgreSQL servers left
// by a run that was killed before Close are stopped by the next Start.
package hacluster
