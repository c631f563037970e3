# Capstan: make run (start a control plane on SQLite in ./data), make test
# (install and start what the tests need, then run every test).

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
GOFLAGS_BUILD := -trimpath -ldflags "$(LDFLAGS)"
LISTEN   ?= 127.0.0.1:8080
DATA_DIR ?= ./data

.PHONY: all build dist run test test-go test-web fuzz lint testenv-down clean web web-deps web-api api-client

all: build

# build writes the control plane, with the web console in it when Node.js
# is here, and next to it a native agent binary that the control plane
# serves to servers of the same architecture.
build: web
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o bin/capstan ./cmd/capstan
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o bin/capstan-agent ./cmd/capstan-agent

# dist cross-builds the agent for every supported server architecture into
# dist/, ready to serve with capstan serve --agent-dir dist, and next to it
# the Caddy that the installer puts on servers (scripts/caddy-build.sh says
# which and why).
dist: build
	mkdir -p dist
	cp bin/capstan dist/capstan
	for arch in amd64 arm64; do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build $(GOFLAGS_BUILD) -o dist/capstan-agent-linux-$$arch ./cmd/capstan-agent || exit 1; \
		scripts/caddy-build.sh dist/caddy-linux-$$arch $$arch || exit 1; \
	done

# web builds the console into web/dist, which the control plane embeds.
# Without Node.js it says so and goes on: the control plane then serves a
# page at / that says how to build the console.
web:
	@if command -v npm >/dev/null 2>&1; then \
		$(MAKE) --no-print-directory web-deps && cd web && npm run --silent build; \
	else \
		echo "Node.js/npm not found: building without the web console (/ will say how to build it)."; \
	fi

# web-deps installs the console's packages exactly as the lockfile says
# (npm ci), only when the lockfile changed since the last install; npm's
# download cache is kept under .testenv/.
WEB_LOCK_HASH = $(shell sha256sum web/package-lock.json 2>/dev/null | cut -c1-16)
web-deps:
	@if [ "$$(cat web/node_modules/.capstan-lock 2>/dev/null)" != "$(WEB_LOCK_HASH)" ]; then \
		cd web && npm ci --no-audit --no-fund --cache ../.testenv/npm-cache && echo "$(WEB_LOCK_HASH)" > node_modules/.capstan-lock; \
	fi

# web-api regenerates the console's API types (web/src/api/schema.d.ts)
# from the OpenAPI document of a freshly built control plane.
web-api: web-deps
	CGO_ENABLED=0 $(GO) build -o bin/capstan ./cmd/capstan
	cd web && node scripts/gen-api.mjs ../bin/capstan

# api-client regenerates the command line's typed API client
# (internal/apiclient/client.gen.go) from the OpenAPI document, for the
# operations listed in internal/apiclient/oapi-codegen.yaml.
api-client:
	cd internal/apiclient && $(GO) generate ./

run: build
	@echo "Starting Capstan on http://$(LISTEN) with data in $(DATA_DIR)."
	@echo "Create the first administrator in another terminal:"
	@echo "  ./bin/capstan user create --data-dir $(DATA_DIR) --email you@example.com --admin"
	@echo "Web console: http://$(LISTEN)/   API reference: http://$(LISTEN)/docs"
	./bin/capstan serve --data-dir $(DATA_DIR) --listen $(LISTEN)

# test installs and starts PostgreSQL, the Docker engine and Caddy when
# missing (scripts/testenv.sh), then runs every test, a short fuzz run and
# the linters. The three are independent and run side by side (-j3); the
# tests wait for conditions with deadlines, so the extra load only makes
# them slower, never red.
test:
	scripts/testenv.sh up
	$(MAKE) --no-print-directory build
	. ./.testenv/env && $(MAKE) --no-print-directory --output-sync=target -j3 test-go test-web fuzz lint

# test-go runs every package's tests (scripts/test-go.sh). ./e2e takes
# most of the time, and many of its tests cannot run in parallel with the
# rest of their package, so it runs as two go test processes beside the
# other packages, its tests split between them by their measured
# durations (scripts/e2e-durations.tsv; `scripts/test-go.sh --record`
# measures them again). Its tests mostly wait on real processes (agents,
# engines, browsers), so four parallel tests per process run at once even
# on two cores.
test-go:
	GO=$(GO) TEST_TIMEOUT=45m scripts/test-go.sh

# test-web checks that the console's API types match the API, then runs
# its type check and unit tests (Vitest). Its browser tests run against
# the real binaries in ./e2e (TestConsole*), with test-go.
test-web: web-deps
	cd web && node scripts/gen-api.mjs --check ../bin/capstan
	cd web && npx tsc --noEmit
	cd web && npx vitest run

# fuzz runs each fuzz target briefly from its seeds and its regression
# corpus (testdata/fuzz): every request body decoder of /api/v1 and
# /agent/v1, the sign-in endpoints, the agent's job payload checks, the
# proxy configuration renderer, the log cursor parser and the Redis
# snapshot reader. About a minute.
# The budgets are counts of inputs, not durations: Go's fuzzing (up to
# 1.26) can report a run that ends on a deadline as a failure when the
# machine is busy (golang/go#75804); a count has no deadline. Each is
# about what a busy two-core machine runs in the seconds given before.
FUZZX ?= 1
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzRequestBodies$$' -fuzztime $$((200 * $(FUZZX)))x ./cmd/capstan
	$(GO) test -run '^$$' -fuzz '^FuzzAuthRequests$$' -fuzztime $$((1000 * $(FUZZX)))x ./internal/httpapi
	$(GO) test -run '^$$' -fuzz '^FuzzDeployPayload$$' -fuzztime $$((10000 * $(FUZZX)))x ./internal/agent/deploy
	$(GO) test -run '^$$' -fuzz '^FuzzReadPayload$$' -fuzztime $$((100000 * $(FUZZX)))x ./internal/agent/logs
	$(GO) test -run '^$$' -fuzz '^FuzzRender$$' -fuzztime $$((25000 * $(FUZZX)))x ./internal/agent/proxy
	$(GO) test -run '^$$' -fuzz '^FuzzParseCursor$$' -fuzztime $$((50000 * $(FUZZX)))x ./internal/agent/container
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $$((20000 * $(FUZZX)))x ./internal/agent/rdb

# lint checks the formatting, that go.mod says exactly what the code
# imports (go mod tidy would change nothing), go vet, staticcheck and the
# shell scripts.
lint:
	@out=$$(gofmt -l cmd internal e2e); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) mod tidy -diff
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	shellcheck scripts/*.sh .ci/run

testenv-down:
	scripts/testenv.sh down

clean:
	rm -rf bin dist
