#!/usr/bin/env bash
# make bench: Go micro-benchmarks, then Trellis against etcd in one run.
# Installs etcd 3.4 (Debian's etcd-server) when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/results

if ! command -v etcd >/dev/null; then
  echo "bench: installing etcd-server (the peer we compare with)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server
fi

go test -run '^$' -bench . -benchmem ./internal/... | tee bench/results/gobench.txt
(cd bench && go run ./cmd/peerbench -trellis ../bin/trellis -out results/peerbench.md "$@")
