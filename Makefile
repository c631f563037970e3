# Capstan: make run (start a control plane on SQLite in ./data), make test
# (install and start what the tests need, then run every test).

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
GOFLAGS_BUILD := -trimpath -ldflags "$(LDFLAGS)"
LISTEN   ?= 127.0.0.1:8080
DATA_DIR ?= ./data

.PHONY: all build dist run test test-go fuzz lint testenv-down clean

all: build

# build writes the control plane and, next to it, a native agent binary
# that the control plane serves to servers of the same architecture.
build:
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o bin/capstan ./cmd/capstan
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o bin/capstan-agent ./cmd/capstan-agent

# dist cross-builds the agent for every supported server architecture into
# dist/, ready to serve with capstan serve --agent-dir dist.
dist: build
	mkdir -p dist
	cp bin/capstan dist/capstan
	for arch in amd64 arm64; do \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build $(GOFLAGS_BUILD) -o dist/capstan-agent-linux-$$arch ./cmd/capstan-agent || exit 1; \
	done

run: build
	@echo "Starting Capstan on http://$(LISTEN) with data in $(DATA_DIR)."
	@echo "Create the first administrator in another terminal:"
	@echo "  ./bin/capstan user create --data-dir $(DATA_DIR) --email you@example.com --admin"
	@echo "API reference: http://$(LISTEN)/docs"
	./bin/capstan serve --data-dir $(DATA_DIR) --listen $(LISTEN)

# test installs and starts PostgreSQL, the Docker engine and Caddy when
# missing (scripts/testenv.sh), then runs every test, a short fuzz run and
# the linters. The three are independent and run side by side (-j3); the
# tests wait for conditions with deadlines, so the extra load only makes
# them slower, never red.
test: build
	scripts/testenv.sh up
	. ./.testenv/env && $(MAKE) --no-print-directory --output-sync=target -j3 test-go fuzz lint

# test-go runs the packages two at a time (go test's default on two
# cores). ./e2e takes most of the time; its tests mostly wait on real
# processes, so -parallel above the core count would shorten it further.
test-go:
	$(GO) test -count=1 -timeout 25m ./...

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzAuthRequests$$' -fuzztime 10s ./internal/httpapi

lint:
	@out=$$(gofmt -l cmd internal e2e); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	shellcheck scripts/*.sh .ci/run

testenv-down:
	scripts/testenv.sh down

clean:
	rm -rf bin dist
