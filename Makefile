# Trellis build entry points. `make test` is what CI runs.
GO ?= go
BIN := bin/trellis
PROTOS := $(shell find api -name '*.proto')
# What `make dev` passes to `trellis dev`: three local instances, which the
# README's quick start uses (the daemon scheduler needs more than one to show).
DEV_FLAGS ?= -instances 3

# The benchmark commands are a module of their own (bench/go.mod, which
# replaces trellis.dev/trellis with this tree): test and lint build it too,
# so that a change to an internal API cannot break `make bench` unseen. Its
# tests are unit tests of the commands' arithmetic and checks; nothing in
# them starts a cluster.
BENCH_MODULE := bench

.PHONY: build test test-long test-short proto lint bench dev clean cni-plugins

# What `trellis version` reports. Go records the commit by itself when it
# builds from a git clone, but not from a git worktree nor under
# GOFLAGS=-buildvcs=false; these say the same in every case, and nothing
# outside git (then the binary says "unknown"). The build date is the
# commit's, as Go's own vcs.time is, so a commit always builds the same
# binary. The version is the tag, when the commit has one.
GIT_COMMIT := $(shell git rev-parse HEAD 2>/dev/null)
GIT_DATE := $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null)
GIT_MODIFIED := $(if $(GIT_COMMIT),$(if $(shell git status --porcelain 2>/dev/null),true,false))
GIT_TAG := $(shell git describe --tags --exact-match 2>/dev/null)
LDFLAGS := -X main.commit=$(GIT_COMMIT) -X main.buildDate=$(GIT_DATE) -X main.modified=$(GIT_MODIFIED) -X main.version=$(GIT_TAG)

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/trellis

dev: build cni-plugins
	./$(BIN) dev $(DEV_FLAGS)

test: cni-plugins
	$(GO) test -race -count=1 -timeout 20m ./...
	cd $(BENCH_MODULE) && $(GO) test -race -count=1 -timeout 5m ./...

# test-long runs the packages whose tests have a long form in it
# (TRELLIS_LONG=1): tasknet's leak test starts and stops a thousand bridge
# tasks, where `make test` runs a hundred (minutes against one). CI runs
# it after `make test`. The variable is not -short, which `make
# test-short` gives its own meaning.
LONG_PACKAGES := ./internal/tasknet/
test-long: cni-plugins
	TRELLIS_LONG=1 $(GO) test -race -count=1 -timeout 30m $(LONG_PACKAGES)

# cni-plugins installs the CNI plugins that tasks with `network: bridge`
# need (Debian's containernetworking-plugins) when they are missing and
# this is root on a Debian-like system; otherwise it says how, and the
# agent runs without bridge networking (its tests skip, saying why).
CNI_PLUGIN_DIR ?= /usr/lib/cni
cni-plugins:
	@if [ ! -x $(CNI_PLUGIN_DIR)/bridge ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing the CNI plugins (containernetworking-plugins) for network: bridge"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containernetworking-plugins || echo "could not install containernetworking-plugins: bridge networking stays off"; \
	  else \
	    echo "note: the CNI plugins are not in $(CNI_PLUGIN_DIR): tasks with network: bridge need them (as root: apt-get install containernetworking-plugins)"; \
	  fi; \
	fi

# test-short skips the tests that start several processes or a three-server
# cluster, and runs without the race detector: a quick check while working.
test-short:
	$(GO) test -short -count=1 ./...
	cd $(BENCH_MODULE) && $(GO) test -short -count=1 ./...

proto:
	@command -v protoc >/dev/null || { echo "protoc missing: apt-get install protobuf-compiler"; exit 1; }
	GOFLAGS= $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	GOFLAGS= $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
	PATH="$$($(GO) env GOPATH)/bin:$$PATH" protoc -I . -I /usr/include \
		--go_out=. --go_opt=module=trellis.dev/trellis \
		--go-grpc_out=. --go-grpc_opt=module=trellis.dev/trellis \
		$(PROTOS)

# staticcheck's version is pinned: a newer one may add checks that fail CI.
STATICCHECK_VERSION := v0.8.2

# gofmt reads every tracked file, the bench module's too; vet and
# staticcheck go module by module.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); [ -z "$$out" ] || { echo "gofmt:"; echo "$$out"; exit 1; }
	$(GO) vet ./...
	cd $(BENCH_MODULE) && $(GO) vet ./...
	@command -v staticcheck >/dev/null || GOFLAGS= $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	PATH="$$($(GO) env GOPATH)/bin:$$PATH" staticcheck ./...
	cd $(BENCH_MODULE) && PATH="$$($(GO) env GOPATH)/bin:$$PATH" staticcheck ./...

bench: build
	./bench/run.sh

clean:
	rm -rf bin
