# The few targets people type. CI (.ci/run) runs `make test` too, so a green
# `make test` here means a green CI, given the same environment.
#
# Tests need PostgreSQL (see internal/pgtest): IDMINT_TEST_DATABASE_URL, a
# Docker engine, or the server binaries (apt-get install postgresql).

GO    ?= go
IMAGE ?= idmint:dev
BIN   ?= bin/idmint

.PHONY: run test bench lint build image drill

run:
	$(GO) run ./cmd/idmint serve

test:
	$(GO) vet ./... && $(GO) test -race -count=1 -timeout 30m ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

lint:
	@unformatted=$$(gofmt -l .); \
	if [ -n "$$unformatted" ]; then echo "gofmt -l: these files need gofmt -w:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

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
