# The few targets people type. CI (.ci/run) runs `make test` too, so a green
# `make test` here means a green CI, given the same environment.
#
# Tests need PostgreSQL (see testkit/pgtest): IDMINT_TEST_DATABASE_URL, a
# Docker engine, or the server binaries (apt-get install postgresql).

GO    ?= go
IMAGE ?= idmint:dev
BIN   ?= bin/idmint

.PHONY: run dev-certs tools test test-helm test-clients test-java test-ts bench bench-http lint generate proto-baseline build image drill drill-ha drill-far drill-regions drill-failover drill-runway fuzz mutate

# run builds the binary and execs it rather than `go run`: go run exits 1
# after an interrupt whatever its child answered, so a clean Ctrl-C ended in
# "make: *** [run] Error 1". Exec'd, idmint's own exit status is make's.
run: build
	exec $(BIN) serve

# tools builds once each tool pinned in go.mod's tool block (grpcurl, buf,
# staticcheck, the protoc plugins): the first `go tool NAME` compiles it, in
# silence, up to a minute; after `make tools` it starts at once.
tools:
	@for p in $$($(GO) list tool); do t=$${p##*/}; echo "building go tool $$t ($$p)"; \
	out=$$($(GO) tool "$$t" --version 2>&1) || { echo "$$out"; exit 1; }; done

# dev-certs writes a CA, a server and a client certificate into dev-certs/
# (ignored by git) to try TLS and mTLS here, and prints the flags to use.
dev-certs:
	$(GO) run ./cmd/idmint dev-certs --dir dev-certs

# test runs the module's tests, then the Helm chart's (test-helm, a module
# of its own). The first ends with the scenario report of testkit/pgtest: every test that ran
# on PostgreSQL, in which mode (external, testcontainers, local), and every
# scenario that did not run, with the reason. A scenario this machine cannot
# run fails the test unless IDMINT_TEST_ALLOW_SKIP names it; an optional one
# (a browser, a built image) says "SKIPPED (optional)".
#
# REPORT_AWK folds the report's lines (mode, package, test, outcome) into one
# line per test: its modes, and one outcome, the worst it had: NOT RUN, then
# a skip beside a run ("ran, in part SKIPPED: …"), then ran or skipped.
export REPORT_AWK := { k = $$2 FS $$3; if (!(k in seen)) { seen[k] = 1; keys[++n] = k } \
	if ($$1 != "-" && index("," mode[k] ",", "," $$1 ",") == 0) mode[k] = mode[k] (mode[k] == "" ? "" : ",") $$1; \
	if ($$4 == "ran") ran[k] = 1; else if ($$4 ~ /^NOT RUN/) notrun[k] = $$4; else if (!(k in skip)) skip[k] = $$4 } \
	END { for (i = 1; i <= n; i++) { k = keys[i]; split(k, p, FS); \
	out = (k in notrun) ? notrun[k] : (k in ran) ? ((k in skip) ? "ran, in part " skip[k] : "ran") : skip[k]; \
	printf "  %-20s %-10s %-38s %s\n", (mode[k] == "" ? "-" : mode[k]), p[1], p[2], out } }

# PKGS is every package of the workspace (go.work): the main module and the
# client's lean modules (wire, segment, client), which ./... alone leaves out.
PKGS := ./... ./wire/... ./segment/... ./client/...

test:
	$(GO) vet $(PKGS)
	@report=$$(mktemp); \
	IDMINT_TEST_REPORT=$$report $(GO) test -race -count=1 -timeout 30m $(PKGS); rc=$$?; \
	echo; echo "scenarios on PostgreSQL (mode, package, test, outcome):"; \
	sort -u "$$report" | awk -F'\t' "$$REPORT_AWK" | sort -b -k2,2 -k3,3; \
	rm -f "$$report"; exit $$rc
	$(MAKE) --no-print-directory test-helm

# test-clients runs the conformance suite of every client (testkit/conformance
# TestConformance, docs/clients.md): each clients/LANG/conformance present
# against two idmint serve processes on PostgreSQL behind lossy proxies, an
# instance SIGKILLed mid-run, checked against the segment log, with each
# client's throughput; then the Python client's own tests. CLIENTS (default
# all) picks the languages, e.g. make test-clients CLIENTS=python runs one
# client alone; REQUIRE_CLIENTS fails the run when one of those cannot run
# (CI requires every client in the tree). Not part of make test: it takes a
# minute or more with every client.
CLIENTS         ?= all
REQUIRE_CLIENTS ?=
test-clients:
	IDMINT_TEST_CLIENTS='$(CLIENTS)' IDMINT_TEST_REQUIRE_CLIENTS='$(REQUIRE_CLIENTS)' \
	$(GO) test -count=1 -v -timeout 20m -run '^(TestConformance|TestPythonClient)$$' ./testkit/conformance

# fuzz runs each fuzz target for FUZZTIME (CI runs it after the tests):
# request parsing, token parsing, the token check of the HTTP API, the range
# endpoints, JSON bodies, the buffer at the top of int64, Leaf exports and
# region shares (scripts/fuzz.sh).
FUZZTIME ?= 20s
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

# bench-http measures GET /id of `idmint serve` side by side with a bare
# net/http handler and a nextval()-per-request handler on real PostgreSQL
# (cmd/idmint-bench), and unary NextID over h2c (a Go load generator, in the
# same rounds): --grpc-listen beside a bare grpc-go server, gRPC and Connect
# on the HTTP port beside a bare connect-go handler; then open loop at half
# the bare ceilings (grpc-go bare against --grpc-listen, GET /id bare against
# idmint). It prints the ratios and their targets, asserts none, and is not
# part of make test. E.g. make bench-http BENCH_ARGS='-rounds 5 -cpu-profile /tmp/idmint.pprof'
bench-http:
	@mkdir -p bin
	$(GO) build -o $(BIN) ./cmd/idmint
	$(GO) build -o bin/idmint-bench ./cmd/idmint-bench
	$(GO) build -o bin/withpostgres ./testkit/cmd/withpostgres
	if [ -n "$$IDMINT_BENCH_DATABASE_URL" ]; then bin/idmint-bench -idmint $(BIN) $(BENCH_ARGS); \
	else bin/withpostgres bin/idmint-bench -idmint $(BIN) $(BENCH_ARGS); fi

# lint fails first when a tracked file is build output (an executable binary,
# or a file over 1 MiB that scripts/check-tracked.sh does not name), then runs
# gofmt, vet and staticcheck. staticcheck is pinned in go.mod (its
# tool directive), so `go tool` builds the same version offline from the
# module cache; move it with go get -tool honnef.co/go/tools/cmd/staticcheck@VERSION.
#
# It also checks the protobuf schema (proto/, buf.yaml): buf lint; buf
# breaking against PROTO_BASELINE, the committed image of the schema as
# released (a file, so that it works offline on a fresh or shallow clone);
# and that rpcapi/gen is what buf generate makes of proto/ now.
PROTO_BASELINE ?= proto/idmint-v1.baseline.binpb
lint:
	scripts/check-tracked.sh
	@unformatted=$$(gofmt -l .); \
	if [ -n "$$unformatted" ]; then echo "gofmt -l: these files need gofmt -w:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)
	$(GO) tool buf lint
	$(GO) tool buf breaking --against $(PROTO_BASELINE)
	@set -e; out=$$(mktemp -d); trap 'rm -rf "$$out"' EXIT; \
	$(GO) tool buf generate -o "$$out"; \
	if ! diff -r rpcapi/gen "$$out/rpcapi/gen"; then echo "rpcapi/gen is stale: run make generate and commit it"; exit 1; fi

# generate writes rpcapi/gen from proto/ (buf.gen.yaml: the plugins pinned in
# go.mod, run with go tool).
generate:
	$(GO) tool buf generate

# proto-baseline records the schema as released, for buf breaking: run it
# when a release's schema is final (a breaking change needs a new package,
# idmint.v2, not a new baseline).
proto-baseline:
	$(GO) tool buf build --exclude-source-info -o $(PROTO_BASELINE)

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/idmint

# image builds the container image without pulling anything: a static binary
# built here, packed into a scratch image (.ci/Dockerfile.prebuilt). With a
# registry at hand, `docker build -t idmint .` builds it from source instead.
# The image it replaces is removed, so repeated builds leave no dangling ones.
image:
	@set -e; ctx=$$(mktemp -d); trap 'rm -rf "$$ctx"' EXIT; \
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags='-s -w' -o "$$ctx/idmint" ./cmd/idmint; \
	old=$$(docker image inspect -f '{{.Id}}' $(IMAGE) 2>/dev/null || true); \
	docker build -q -f .ci/Dockerfile.prebuilt -t $(IMAGE) "$$ctx" >/dev/null; \
	new=$$(docker image inspect -f '{{.Id}}' $(IMAGE)); \
	if [ -n "$$old" ] && [ "$$old" != "$$new" ]; then docker image rm "$$old" >/dev/null 2>&1 || true; fi; \
	echo "built image $(IMAGE) ($$new)"

# drill asks running instances for IDs and fails on any duplicate, e.g.
# make drill DRILL_ARGS='--target http://127.0.0.1:8080 --target http://127.0.0.1:8081 --duration 30s'
drill:
	$(GO) run ./cmd/idmint drill $(DRILL_ARGS)

# drill-ha is the failover drill on the files of deploy/ha. First TestDrillHA
# (cmd/idmint): etcd and two Patroni-run PostgreSQL nodes on loopback, idmint
# instances under load, the replica cut off (or its stream stalled), the
# leader crashed, the replica promoted; it fails on any duplicate, and ends
# with a negative control (the standby wait off: it must see duplicates).
# Then deploy/ha/cluster.sh smoke: the walk-through of deploy/ha/README.md (three nodes,
# two instances, the leader killed under load). Needs patroni, python3-etcd,
# python3-psycopg2, etcd-server, postgresql and curl (Debian). Shape it with
# DRILL_MODES (sync, async), DRILL_REPLICA (disconnect, stall), DRILL_RUNS
# (per mode and variant), DRILL_DOWN (how long the replica is cut off,
# default 3s), DRILL_LAG (stall: replication frozen before the crash, default
# 500ms), DRILL_SERVE_ARGS (more `idmint serve` flags), DRILL_EXPECT=duplicates
# (every run a negative control), DRILL_CONTROL=0 (no control run) and
# DRILL_DEPLOY=0 (no walk-through). DRILL_TAGS says which tags: tiny (a grant
# every 50 IDs: the buffers run dry at once, so the failover shows) and
# realistic (a 60 s tag runway, the default step: the ranges grow from the
# measured rate until the buffers outlast the failover, the leader crashes
# once they hold the runway, and the run fails on any 503 or unanswered
# request); DRILL_REALISTIC_MODES (default
# async) the modes of the realistic runs. The knobs reach the test as its
# -drill.* flags; each run writes a drill report (testkit/drill), and the
# drill command (testkit/cmd/drill) prints them and fails on any failed run, e.g.
# make drill-ha DRILL_MODES=async DRILL_RUNS=10 DRILL_CONTROL=0 DRILL_DEPLOY=0
DRILL_MODES   ?= sync async
DRILL_TAGS    ?= tiny realistic
DRILL_REALISTIC_MODES ?= async
DRILL_REPLICA ?= disconnect
DRILL_RUNS    ?= 1
DRILL_CONTROL ?= 1
DRILL_DEPLOY  ?= 1
drill-ha:
	$(GO) run ./testkit/cmd/drill -go '$(GO)' -v -- -count=1 -timeout 90m -run '^TestDrillHA$$' ./cmd/idmint -args -drill.ha \
	-drill.modes='$(DRILL_MODES)' -drill.tags='$(DRILL_TAGS)' -drill.realistic-modes='$(DRILL_REALISTIC_MODES)' -drill.replica='$(DRILL_REPLICA)' \
	-drill.runs='$(DRILL_RUNS)' -drill.down='$(DRILL_DOWN)' -drill.lag='$(DRILL_LAG)' -drill.serve-args='$(DRILL_SERVE_ARGS)' \
	-drill.expect='$(DRILL_EXPECT)' -drill.control='$(DRILL_CONTROL)'
	@if [ '$(DRILL_DEPLOY)' = 1 ]; then \
		IDMINT_HA_DIR=$$(mktemp -u -d /tmp/idmint-ha-smoke.XXXXXX) deploy/ha/cluster.sh smoke; fi

# drill-far measures GET /id of an instance next to PostgreSQL and of one
# 150 ms away each way (toxiproxy), side by side under the same load, and
# prints its drill report: each p50/p99/max and their ratios, e.g.
# make drill-far FAR_DURATION=30s
FAR_DURATION ?= 20s
drill-far:
	$(GO) run ./testkit/cmd/drill -go '$(GO)' -- -count=1 -timeout 10m -run '^TestDrillFar$$' ./testkit/faults -args -drill.far='$(FAR_DURATION)'

# drill-regions is the regions drill (TestDrillRegions in cmd/idmint,
# docs/regions.md "The drill"): three regions on loopback (two PostgreSQL
# servers and a Patroni pair), each claimed with `idmint region claim` and
# served by two `idmint serve` processes with their peers, Go clients and
# GET /id callers in each under load; one region's database killed and its
# instances SIGKILLed, then restored; a region added by `idmint region
# split`; a second database claimed as one region refused beside its peers,
# then served without them as the negative control; every region's segment
# log read. It prints its drill report (a figure per phase) and fails on
# the test's verdict. Needs what drill-ha needs. Shape it with
# DRILL_REGIONS_STEADY, _DOWN, _BACK, _ADDED (each phase's load; 10s, 15s,
# 10s, 15s), _BLOCK (20000), _STEP (500) and _WAIT (a Go caller's
# deadline, 5s), passed as flags, e.g. make drill-regions DRILL_REGIONS_DOWN=30s
DRILL_REGIONS_STEADY ?= 10s
DRILL_REGIONS_DOWN   ?= 15s
DRILL_REGIONS_BACK   ?= 10s
DRILL_REGIONS_ADDED  ?= 15s
DRILL_REGIONS_BLOCK  ?= 20000
DRILL_REGIONS_STEP   ?= 500
DRILL_REGIONS_WAIT   ?= 5s
drill-regions:
	$(GO) run ./testkit/cmd/drill -go '$(GO)' -- -count=1 -timeout 10m -run '^TestDrillRegions$$' ./cmd/idmint -args -drill.regions \
	-drill.regions.steady='$(DRILL_REGIONS_STEADY)' -drill.regions.down='$(DRILL_REGIONS_DOWN)' -drill.regions.back='$(DRILL_REGIONS_BACK)' \
	-drill.regions.added='$(DRILL_REGIONS_ADDED)' -drill.regions.block='$(DRILL_REGIONS_BLOCK)' -drill.regions.step='$(DRILL_REGIONS_STEP)' \
	-drill.regions.wait='$(DRILL_REGIONS_WAIT)'

# drill-failover repeats the failover tests on real streaming replication
# (a lagging asynchronous standby promoted, a disconnected one promoted after
# the instances died, a synchronous one promoted under load) FAILOVER_RUNS
# times, prints a drill report per run and fails on any duplicate or refusal, e.g.
# make drill-failover FAILOVER_RUNS=10 (IDMINT_TEST_PG=local or docker).
FAILOVER_RUNS ?= 10
drill-failover:
	$(GO) run ./testkit/cmd/drill -go '$(GO)' -- -race -count=$(FAILOVER_RUNS) -timeout 60m -run '^TestFailover_' ./testkit/faults

# drill-runway runs the runway outage tests (testkit/faults TestRunway_*:
# PostgreSQL cut by a proxy, SQLite locked by another process, the Go client)
# RUNWAY_RUNS times and prints their drill reports: the runway held when
# the outage began, errors and duplicates through a shorter outage, the time to
# the first 503 through a longer one. E.g. make drill-runway RUNWAY_RUNS=3
RUNWAY_RUNS ?= 1
drill-runway:
	$(GO) run ./testkit/cmd/drill -go '$(GO)' -- -count=$(RUNWAY_RUNS) -timeout 30m -run '^TestRunway_' ./testkit/faults

# mutate applies each mutation of scripts/mutations.txt to a copy of the
# tree and runs the tests that must catch it; it fails if one survives.
# Not run by CI: run it after changing the core or its tests.
mutate:
	scripts/mutate.sh $(MUTATIONS)

# test-java runs the Java client's tests (clients/java) offline: Maven with
# -o, from Debian's Maven repository (clients/java/.mvn/maven.config; .ci/run
# installs the packages, install_java_packages), against real idmint serve
# processes built here: on SQLite, and for the regions' tests (RegionsTest)
# on PostgreSQL databases of a server of the test harness that
# testkit/cmd/withpostgres runs beside Maven (IDMINT_TEST_PG, see
# docs/testing.md), unless IDMINT_TEST_DATABASE_URL names one. Surefire
# stops a test JVM after 10 minutes. E.g. make test-java JAVA_TESTS=RegionsTest
test-java:
	$(GO) build -o clients/java/target/idmint ./cmd/idmint
	$(GO) build -o clients/java/target/withpostgres ./testkit/cmd/withpostgres
	cd clients/java && if [ -n "$$IDMINT_TEST_DATABASE_URL" ]; then pg=; else pg="target/withpostgres -env IDMINT_TEST_DATABASE_URL"; fi && \
		IDMINT_BIN=$$PWD/target/idmint $$pg mvn -o -B -ntp test $(if $(JAVA_TESTS),-Dtest=$(JAVA_TESTS))

# test-helm renders the Helm chart (deploy/helm/idmint) with Helm's Go
# library, lints it and decodes every object strictly into the Kubernetes
# API types, offline. deploy/helm is a module of its own (Helm and the
# Kubernetes types stay out of the server's go.mod), so `go test ./...` at
# the root does not reach it.
test-helm:
	cd deploy/helm && GOWORK=off $(GO) vet ./... && GOWORK=off $(GO) test -count=1 ./...

# test-ts installs the TypeScript client's pinned packages (clients/ts,
# package-lock.json; Node 20 and npm) and runs its tests: that src/gen is
# what buf generate makes of proto/, then node:test against real
# `idmint serve` processes built from this tree (go build) on SQLite, and
# for the regions tests on a throwaway local PostgreSQL cluster (initdb).
test-ts:
	cd clients/ts && npm ci --no-audit --no-fund && npm test
