# airlock build and test entry points.
#
#   make demo   set everything up and run a real sandbox
#   make test   run the whole test suite (what CI runs)

GO          ?= go
BIN         := bin
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
VERSION     := $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -s -w -X main.version=$(VERSION)
FUZZTIME    ?= 10s

.PHONY: all build deps demo test lint vet cross fmt-check staticcheck unit fuzz bench clean install

all: build

# Both binaries are static: the agent runs inside sandboxes that may have
# no libc, and the CLI can serve as its own agent.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/airlock ./cmd/airlock
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/airlock-guest ./cmd/airlock-guest

deps:
	./scripts/deps.sh
	$(GO) mod download

demo: deps build
	$(BIN)/airlock doctor
	$(BIN)/airlock run --memory 256m --timeout 30s -- python3 -c 'import os, socket; print("hello from", socket.gethostname(), "as uid", os.getuid())'

test: deps lint unit fuzz

lint: vet cross fmt-check staticcheck

vet:
	$(GO) vet ./...

# The module must keep building where only some levels exist (macOS).
cross:
	GOOS=darwin GOARCH=arm64 $(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

staticcheck:
	$(GO) run $(STATICCHECK) ./...

unit:
	$(GO) test -race -count=1 -timeout 25m ./...

# Each fuzz target runs briefly on top of its committed corpus.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzFrame$$' -fuzztime $(FUZZTIME) ./internal/agentproto
	$(GO) test -run '^$$' -fuzz '^FuzzServeLine$$' -fuzztime $(FUZZTIME) ./internal/rpc
	$(GO) test -run '^$$' -fuzz '^FuzzParseChunk$$' -fuzztime $(FUZZTIME) ./client
	$(GO) test -run '^$$' -fuzz '^FuzzHostGlob$$' -fuzztime $(FUZZTIME) ./policy
	$(GO) test -run '^$$' -fuzz '^FuzzRewrite$$' -fuzztime $(FUZZTIME) ./policy
	$(GO) test -run '^$$' -fuzz '^FuzzCut$$' -fuzztime $(FUZZTIME) ./internal/jsonblob
	$(GO) test -run '^$$' -fuzz '^FuzzClassify$$' -fuzztime $(FUZZTIME) ./internal/netstack
	$(GO) test -run '^$$' -fuzz '^FuzzDNSQuery$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 10x ./internal/netstack
	$(GO) test -run '^$$' -fuzz '^FuzzParseAuthority$$' -fuzztime $(FUZZTIME) ./internal/intercept

bench: build
	$(GO) run ./bench/cmd/airlock-bench -agent $(BIN)/airlock-guest

install: build
	install -m 0755 $(BIN)/airlock $(BIN)/airlock-guest /usr/local/bin/

clean:
	rm -rf $(BIN)
