# Trellis build entry points. `make test` is what CI runs.
GO ?= go
BIN := bin/trellis
PROTOS := $(shell find api -name '*.proto')

.PHONY: build test test-short proto lint bench dev clean

build:
	$(GO) build -o $(BIN) ./cmd/trellis

dev: build
	./$(BIN) dev

test:
	$(GO) test -race -count=1 -timeout 20m ./...

test-short:
	$(GO) test -short -count=1 ./...

proto:
	@command -v protoc >/dev/null || { echo "protoc missing: apt-get install protobuf-compiler"; exit 1; }
	GOFLAGS= $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
	GOFLAGS= $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
	PATH="$$($(GO) env GOPATH)/bin:$$PATH" protoc -I . -I /usr/include \
		--go_out=. --go_opt=module=trellis.dev/trellis \
		--go-grpc_out=. --go-grpc_opt=module=trellis.dev/trellis \
		$(PROTOS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); [ -z "$$out" ] || { echo "gofmt:"; echo "$$out"; exit 1; }
	$(GO) vet ./...

bench: build
	./bench/run.sh

clean:
	rm -rf bin
