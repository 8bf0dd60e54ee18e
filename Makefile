# airlock build and test entry points.
#
#   make demo   set everything up and run a real sandbox
#   make test   run the whole test suite (what CI runs)

GO          ?= go
MODULE      := $(shell sed -n "s/^module //p" go.mod)
BIN         := bin
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
VERSION     := $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS     := -s -w -X main.version=$(VERSION)
GOOS_HOST   := $(shell $(GO) env GOOS)
# runsc (see the runsc target)
RUNSC_MOD      := cmd/airlock-runsc
GVISOR_VERSION  = $(shell $(GO) list -m -f '{{.Version}}' gvisor.dev/gvisor)
RUNSC_LDFLAGS   = -s -w -X gvisor.dev/gvisor/runsc/version.version=$(GVISOR_VERSION)

.PHONY: all build shim runsc runsc-cached runsc-version containerd2 deps demo test lint vet cross fmt-check staticcheck images kernel unit python-sdk ts-sdk fuzz bench clean install

all: build

# Both binaries are static: the agent runs inside sandboxes that may have
# no libc, and the CLI can serve as its own agent. `make runsc` makes
# airlock-runsc, the gvisor level's runsc.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/airlock ./cmd/airlock
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/airlock-guest ./cmd/airlock-guest

# airlock's containerd shim, for Kubernetes nodes (see the README's
# "Kubernetes"): apart from build, since it links containerd's libraries.
shim:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/containerd-shim-airlock-v2 ./cmd/containerd-shim-airlock-v2

# gVisor's runsc as airlock-runsc, a companion binary that airlock finds
# beside itself: runsc from the gvisor.dev/gvisor version that go.mod pins,
# built in a module of its own (cmd/airlock-runsc: runsc needs an older
# runtime-spec than airlock's cgroups package) whose go.mod must name the
# same version. Static, Linux only; about 36 MB, and about 2.5 minutes of
# CPU on a cold build cache (see the README's "The gvisor level").
runsc: runsc-version
	CGO_ENABLED=0 $(GO) -C $(RUNSC_MOD) build -trimpath -ldflags '$(RUNSC_LDFLAGS)' -o $(CURDIR)/$(BIN)/airlock-runsc .

# The gvisor level's tests run airlock-runsc, built once into a cache
# outside the checkout, keyed by the gvisor version, the Go toolchain and
# cmd/airlock-runsc's sources, and copied to $(BIN) from there on every
# later run; a new key builds again (about 2.5 minutes of CPU).
RUNSC_CACHE ?= /var/cache/airlock-runsc
export AIRLOCK_RUNSC := $(CURDIR)/$(BIN)/airlock-runsc
# The gvisor level's tests (TestGVisorLevel, the egress suite's re-run at
# gvisor) fail rather than skip where it cannot run.
export AIRLOCK_REQUIRE_GVISOR := 1

runsc-cached: runsc-version
	@set -e; key=$$( { echo $(GVISOR_VERSION); $(GO) version; cat $(RUNSC_MOD)/go.mod $(RUNSC_MOD)/go.sum $(RUNSC_MOD)/*.go; } | sha256sum | cut -c1-16); \
	cached=$(RUNSC_CACHE)/$$key/airlock-runsc; \
	if [ -x "$$cached" ]; then \
		mkdir -p $(BIN) && cp "$$cached" $(BIN)/airlock-runsc.tmp && mv $(BIN)/airlock-runsc.tmp $(BIN)/airlock-runsc; \
		echo "airlock-runsc $(GVISOR_VERSION): cached ($$key)"; \
	else \
		echo "airlock-runsc $(GVISOR_VERSION): building (key $$key), about 2.5 minutes of CPU"; \
		$(MAKE) --no-print-directory runsc; \
		if mkdir -p $(RUNSC_CACHE)/$$key 2>/dev/null && cp $(BIN)/airlock-runsc $(RUNSC_CACHE)/$$key/airlock-runsc.tmp 2>/dev/null; then \
			mv $(RUNSC_CACHE)/$$key/airlock-runsc.tmp "$$cached"; \
		else echo "airlock-runsc: $(RUNSC_CACHE) is not writable here: not cached"; fi; \
	fi

# test/containerd runs its main tests a second time under containerd 2.x
# (Debian ships 1.6): built from the Go module proxy once into a cache
# outside the checkout, keyed by its version and the Go toolchain (a few
# minutes of CPU), and found there on every later run.
CONTAINERD2_VERSION ?= v2.2.9
CONTAINERD2_CACHE ?= /var/cache/airlock-containerd
export AIRLOCK_TEST_CONTAINERD2 := $(CONTAINERD2_CACHE)/$(CONTAINERD2_VERSION)-$(shell $(GO) env GOVERSION)/containerd

containerd2:
	@set -e; cached=$(AIRLOCK_TEST_CONTAINERD2); \
	if [ -x "$$cached" ]; then \
		echo "containerd $(CONTAINERD2_VERSION): cached ($$cached)"; \
	else \
		echo "containerd $(CONTAINERD2_VERSION): building from the Go module proxy, a few minutes of CPU"; \
		dir=$$(dirname "$$cached"); tmp=$$(mktemp -d); \
		GOBIN=$$tmp CGO_ENABLED=0 $(GO) install -trimpath -tags "no_btrfs no_devmapper no_zfs" \
			github.com/containerd/containerd/v2/cmd/containerd@$(CONTAINERD2_VERSION); \
		mkdir -p "$$dir" && mv $$tmp/containerd "$$cached.tmp" && mv "$$cached.tmp" "$$cached"; rm -rf $$tmp; \
	fi

runsc-version:
	@v=$$($(GO) -C $(RUNSC_MOD) list -m -f '{{.Version}}' gvisor.dev/gvisor); \
	if [ "$$v" != "$(GVISOR_VERSION)" ]; then \
		echo "$(RUNSC_MOD)/go.mod has gvisor.dev/gvisor $$v but go.mod has $(GVISOR_VERSION): give both the same version (go -C $(RUNSC_MOD) get gvisor.dev/gvisor@$(GVISOR_VERSION) && go -C $(RUNSC_MOD) mod tidy)"; \
		exit 1; \
	fi

deps:
	./scripts/deps.sh
	$(GO) mod download

demo: deps build
	$(BIN)/airlock doctor
	$(BIN)/airlock run --memory 256m --timeout 30s -- python3 -c 'import os, socket; print("hello from", socket.gethostname(), "as uid", os.getuid())'
	@echo
	@echo "airlock is built in $(CURDIR)/$(BIN). To use it from anywhere:"
	@echo "  sudo make install                  # copies airlock and airlock-guest to /usr/local/bin"
	@echo "  export PATH=\"$(CURDIR)/$(BIN):\$$PATH\"   # or: for this shell only"

test: deps lint images kernel runsc-cached containerd2 unit python-sdk ts-sdk fuzz

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

# The image variants the tests run are built once into a cache outside the
# checkout, keyed by their content (package list, suite, architecture,
# recipe), and reused by every later run; a new key builds again. As root
# only (mmdebstrap needs it); the tests that need them skip otherwise.
IMAGE_TEST_CACHE ?= /var/cache/airlock-test
export AIRLOCK_TEST_IMAGE_CACHE := $(IMAGE_TEST_CACHE)

images:
	@if [ "$$(id -u)" -eq 0 ]; then \
		CGO_ENABLED=0 $(GO) run ./cmd/airlock image build --plain --cache-dir $(IMAGE_TEST_CACHE) --all; \
	else echo "images: not root, the image variant tests will skip"; fi

# The guest kernel of the vm boundary (internal/vmkernel): Debian's
# linux-source, tinyconfig and the fragment in internal/vmkernel/fragments,
# built once into a cache outside the checkout, keyed by the source's
# version, the fragment and the build script; about six minutes on two
# cores when the key is new, nothing when it is not. make test sets
# AIRLOCK_TEST_KERNEL_CACHE, so that the boot test (QEMU microvm, TCG)
# runs rather than skips. KERNEL_ARCHS may add arm64 (cross-compiled;
# not in CI: see the README's "Guest kernel").
KERNEL_TEST_CACHE ?= /var/cache/airlock-kernel
KERNEL_ARCHS      ?= x86_64
export AIRLOCK_TEST_KERNEL_CACHE := $(KERNEL_TEST_CACHE)
# ... and the vm level boots it, so that the suites that run over every
# isolation level that works here run over vm too.
export AIRLOCK_KERNEL_CACHE := $(KERNEL_TEST_CACHE)
# deps.sh installs QEMU: its tests (internal/qmp) fail rather than skip.
export AIRLOCK_REQUIRE_QEMU := 1

kernel:
	set -e; for arch in $(KERNEL_ARCHS); do \
		CGO_ENABLED=0 $(GO) run ./cmd/airlock kernel build --arch $$arch --cache-dir $(KERNEL_TEST_CACHE); \
	done

# The race detector runs over every package but the two file system
# suites, test/vfs and test/pjdfs, which run without it beside the rest:
# they drive thousands of sandboxed processes' file operations through the
# supervisor's FUSE servers, which the race detector slows six-fold (the
# 5,000-file tar workload of test/vfs: 53 s with it, 9 s without), and the
# code they drive (vfs, internal/vfsfuse, internal/vfsproto, the agent's
# relay, the root package's mounts) runs under it in those packages' own
# tests and in the root package's TestVFS* sandboxes.
# They run one after the other, beside the race detector's two at a time.
RACE_FREE := ./test/vfs ./test/pjdfs
unit:
	@set -e; \
	$(GO) test -p 1 -count=1 -timeout 55m $(RACE_FREE) & free=$$!; \
	status=0; \
	$(GO) test -race -count=1 -timeout 50m $$($(GO) list ./... | grep -v -x $(foreach p,$(RACE_FREE),-e '$(MODULE)/$(patsubst ./%,%,$(p))')) || status=$$?; \
	wait $$free || status=$$?; \
	exit $$status

# The Python SDK's tests (Debian's python3-pytest) against bin/airlock. A run
# in which no test passed fails (conftest.py), as does pytest's own exit 5
# (no test collected).
PYTEST ?= pytest-3
python-sdk: build
	cd sdk/python && PYTHONDONTWRITEBYTECODE=1 AIRLOCK_BIN=$(CURDIR)/$(BIN)/airlock \
		timeout 600 $(PYTEST) -q -rs -p no:cacheprovider tests

# The TypeScript SDK (sdk/typescript): its npm packages, pinned in
# package-lock.json, from npm's cache when it holds them all, else from the
# registry; then tsc, and node --test against bin/airlock (the standard
# image from the test image cache, as the Go tests use it).
ts-sdk: build
	cd sdk/typescript && { npm ci --offline --no-audit --no-fund >/dev/null 2>&1 || npm ci --no-audit --no-fund; }
	cd sdk/typescript && npm run --silent build
	cd sdk/typescript && AIRLOCK_BIN=$(CURDIR)/$(BIN)/airlock node --test --test-concurrency=1 test/*.test.mjs

# Each fuzz target runs briefly on top of its committed corpus. Budgets are
# execution counts, not durations: with a duration, Go 1.26's fuzz coordinator
# can report "context deadline exceeded" as a failure when the budget ends
# (go.dev/issue/75804). Counts are sized for roughly ten seconds each here;
# FUZZSCALE multiplies them all.
FUZZSCALE ?= 1
fuzz1 = $(GO) test -run '^$$' -fuzz '^$(1)$$' -fuzztime $$(( $(2) * $(FUZZSCALE) ))x $(4) $(3)

fuzz:
	$(call fuzz1,FuzzFrame,100000,./internal/agentproto)
	$(call fuzz1,FuzzServeLine,20000,./internal/rpc)
	$(call fuzz1,FuzzParseChunk,50000,./client)
	$(call fuzz1,FuzzHostGlob,80000,./policy)
	$(call fuzz1,FuzzRewrite,50000,./policy)
	$(call fuzz1,FuzzScriptRewrite,30000,./policy)
	$(call fuzz1,FuzzValueForms,80000,./policy)
	$(call fuzz1,FuzzCut,150000,./internal/jsonblob)
	$(call fuzz1,FuzzWriteText,100000,./internal/jsonblob)
	$(call fuzz1,FuzzDecode,100000,./internal/strictjson)
	$(call fuzz1,FuzzParseManifest,50000,./internal/image/dist)
	$(call fuzz1,FuzzClassify,80000,./internal/netstack)
	$(call fuzz1,FuzzDNSQuery,80000,./internal/netstack,-fuzzminimizetime 10x)
	$(call fuzz1,FuzzParseUpstream,80000,./internal/netstack,-fuzzminimizetime 10x)
	$(call fuzz1,FuzzParseAuthority,80000,./internal/intercept)
	$(call fuzz1,FuzzDeflate,20000,./internal/intercept)
	$(call fuzz1,FuzzCopy,60000,./internal/wsframe,-fuzzminimizetime 10x)
	$(call fuzz1,FuzzApply,5000,./internal/image/untar,-fuzzminimizetime 10x)
	$(call fuzz1,FuzzResolveUser,50000,./internal/agent)
	$(call fuzz1,FuzzReader,20000,./internal/outlog)
	$(call fuzz1,FuzzRead,50000,./internal/qmp)
	$(call fuzz1,FuzzParseLine,50000,./internal/image/variant)
	$(call fuzz1,FuzzCleanPath,100000,./vfs)
	$(call fuzz1,FuzzProviders,1000,./vfs,-fuzzminimizetime 10x)
	$(call fuzz1,FuzzDecodeRequest,50000,./internal/vfsproto)
	$(call fuzz1,FuzzServe,10000,./internal/vfsproto,-fuzzminimizetime 10x)
	$(call fuzz1,FuzzSandboxConfig,5000,./internal/ctrshim,-fuzzminimizetime 10x)

bench: build
	$(GO) run ./bench/cmd/airlock-bench -agent $(BIN)/airlock-guest

# Release archives: airlock, airlock-guest and airlock-runsc, static, for
# each Linux architecture, with SHA256SUMS. airlock alone is enough (it
# serves as its own agent); airlock-guest starts sandboxes a little
# sooner; airlock-runsc is needed for the gvisor level only.
DIST       := dist
DIST_ARCHS := amd64 arm64

dist: runsc-version
	rm -rf $(DIST) && mkdir -p $(DIST)
	set -e; for arch in $(DIST_ARCHS); do \
		name=airlock-$(VERSION)-linux-$$arch; d=$(DIST)/$$name; mkdir -p $$d; \
		for cmd in airlock airlock-guest containerd-shim-airlock-v2; do \
			CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $$d/$$cmd ./cmd/$$cmd; \
		done; \
		CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) -C $(RUNSC_MOD) build -trimpath -ldflags '$(RUNSC_LDFLAGS)' -o $(CURDIR)/$$d/airlock-runsc .; \
		cp README.md $$d/; \
		tar -C $(DIST) --owner=0 --group=0 --numeric-owner -czf $$d.tar.gz $$name; rm -rf $$d; \
	done
	cd $(DIST) && sha256sum *.tar.gz > SHA256SUMS && cat SHA256SUMS

install: build
	install -m 0755 $(BIN)/airlock $(BIN)/airlock-guest $(wildcard $(BIN)/airlock-runsc) /usr/local/bin/

clean:
	rm -rf $(BIN) $(DIST)
