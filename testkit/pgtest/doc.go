// Package pgtest gives tests a real PostgreSQL server.
//
// A test package opts in from TestMain; the server starts the first time a
// test asks for it and is stopped when the package's tests are done:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
//	func TestStore(t *testing.T) {
//		url := pgtest.Shared(t).NewDatabase(t) // fresh database, dropped after the test
//		pool, err := pgxpool.New(ctx, url)
//		...
//	}
//
// The server is chosen in this order:
//
//  1. IDMINT_TEST_DATABASE_URL set: that existing server ("external"). Tests
//     create and drop their own databases on it, so the URL's user needs
//     CREATEDB. It cannot be stopped: tests that take the database away
//     ask for Owned (or New), which start a second server from 2 or 3.
//  2. A Docker engine answers: a container from testcontainers-go's
//     modules/postgres ("testcontainers"), image IDMINT_TEST_POSTGRES_IMAGE
//     (default postgres:17-alpine; air-gapped machines build one with
//     .ci/postgres-image.sh). Its port is published on 127.0.0.1 at a host
//     port chosen up front, so Stop/Start keep the URL. When the container
//     cannot start (offline without the image), 3 is tried, and a line on
//     standard error says why.
//  3. PostgreSQL server binaries (initdb, pg_ctl) on this machine: a
//     throwaway cluster in a temporary directory ("local"), on a free
//     127.0.0.1 port, trust authentication, fsync off. As root it runs as the
//     user postgres.
//
// IDMINT_TEST_PG=external|docker|local forces one of them; IDMINT_TEST_PG_BIN
// names the directory of the server binaries for local mode.
//
// pgtest only talks to loopback: when TESTCONTAINERS_HOST_OVERRIDE is unset it
// sets it to 127.0.0.1, and when TESTCONTAINERS_RYUK_DISABLED is unset it sets
// it to true (pgtest removes its own containers; the reaper image is often
// unavailable offline). A run killed before Main returns (a test timeout, a
// signal) leaves its server behind; the next run on the machine removes
// servers whose owning process is gone.
//
// No silent skips: a test whose scenario this machine cannot run (an
// external server it would have to stop, and no Docker or binaries for one
// of its own) fails with the reason, unless IDMINT_TEST_ALLOW_SKIP names it
// (comma-separated top-level test names, or "all"); see Skip. With
// IDMINT_TEST_REPORT set to a file, every test that used a server appends
// "mode, package, test, outcome" to it, and every scenario that did not run
// says why; `make test` prints it.
//
// Restarting a server (for fault injection) disturbs every test using it: do
// it in tests that do not run in parallel with other users of Shared, or on a
// private server from New.
//
// NewReplication starts a private primary and a streaming standby made from
// it with pg_basebackup, in the same two modes (two local servers, or two
// containers on one Docker network), for failover tests:
//
//	r := pgtest.NewReplication(t, pgtest.ReplicationOptions{Synchronous: false})
//	url := r.URL(r.NewDatabase(t)) // multi-host, target_session_attrs=read-write
//	r.StallWAL(t)                  // the standby lags, still listed as streaming
//	r.KillPrimary(t)
//	r.Promote(t)                   // the standby takes writes, without what it missed
package pgtest
