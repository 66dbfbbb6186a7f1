// Package faults holds idmint's fault-injection suite: each test injects a
// real fault (a TCP proxy that loses replies after the commit, PostgreSQL
// crashed and restarted, an outage longer than the buffers, a SIGKILLed
// instance, a database rolled back, a rolling restart, clients of the range
// endpoint losing replies and instances, a failover to a streaming standby,
// lagging or synchronous, Snowflake processes paused past their lease and
// killed, a lease store cut off) and checks with
// internal/checker that no ID was handed out twice, plus the behaviour the
// fault calls for. The package has no code of its own; run it with
//
//	go test -race ./testkit/faults
//
// It needs PostgreSQL as testkit/pgtest finds it; the crash tests need a
// server pgtest owns (not IDMINT_TEST_DATABASE_URL).
package faults
