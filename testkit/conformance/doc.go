// Package conformance is the conformance suite of every idmint client: a
// Go test (TestConformance) that runs each client's conformance program,
// clients/LANG/conformance, against real idmint serve processes on
// PostgreSQL, and checks what they printed against the segment log. It has
// no code outside its tests; it lives in the test wing beside
// testkit/faults, since it needs testkit/pgtest, and outside clients/,
// which holds only what each language ships.
//
// A conformance program takes --url (repeatable or comma-separated),
// --tag, --count, --threads, --token and --ca/--cert/--key; takes --count
// IDs from --threads threads with one client; prints each ID on its own
// line to stdout; closes the client (giving back its unused tail); and
// exits 0 only if every call succeeded. It may end its stderr with
// "conformance: ids=N threads=T seconds=S", the time its threads took,
// which the suite reports as its throughput (else the process's wall time).
// For Go, clients/go/conformance is a directory of package main that the
// suite builds; any other is an executable file that builds what it needs
// itself.
//
// The suite runs when IDMINT_TEST_CLIENTS is set (make test-clients): to
// "all", or to the languages to run, comma-separated (make test-clients
// CLIENTS=python runs one client alone). A client whose program is missing,
// does not build or fails its preflight run is left out with a line in the
// log, unless IDMINT_TEST_REQUIRE_CLIENTS names it (CI:
// go,python,java,ts): then the suite fails. IDMINT_TEST_CLIENTS_COUNT
// (default 100000) is the --count of one run and IDMINT_TEST_CLIENTS_DURATION
// (default 8s) the length of the lossy phase. PostgreSQL comes from
// testkit/pgtest (IDMINT_TEST_PG=local, Docker, or IDMINT_TEST_DATABASE_URL).
package conformance
