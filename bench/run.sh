#!/usr/bin/env bash
# make bench: Go micro-benchmarks, then Trellis against etcd in one run,
# then the orchestrator against its peers (etcd leases, os/exec), then
# leader failover (SIGKILL under writes, and during daemon deployments),
# then the Connect CA's leaf signatures on 3 servers, then a root
# rotation under 5,000 simulated agents holding leaves, then what task
# networking (network: bridge) adds to a task's start and its traffic,
# then an agent's DNS against nsd,
# then the catalog's health API: a check's change seen by 1,000 blocking
# queries, and 10,000 registered instances.
# Installs etcd 3.4 (Debian's etcd-server) and the CNI plugins when they
# are missing.
#
# Arguments go to peerbench; ORCHBENCH_ARGS to orchbench, for instance
# ORCHBENCH_ARGS="-cells start" to run one of its cells alone;
# FAILOVERBENCH_ARGS to failoverbench (FAILOVERBENCH_ARGS="-cells writes");
# CABENCH_ARGS to cabench (CABENCH_ARGS="-duration 20s"); CAROTBENCH_ARGS
# to carotbench (CAROTBENCH_ARGS="-limits 10000"); NETBENCH_ARGS to
# netbench (NETBENCH_ARGS="-starts 200"); CATALOGBENCH_ARGS to
# catalogbench (CATALOGBENCH_ARGS="-cells watch").
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/results

if ! command -v etcd >/dev/null; then
  echo "bench: installing etcd-server (the peer we compare with)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server
fi

go test -run '^$' -bench . -benchmem ./internal/... | tee bench/results/gobench.txt
(cd bench && go run ./cmd/peerbench -trellis ../bin/trellis -out results/peerbench.md "$@")
(cd bench && go run ./cmd/orchbench -trellis ../bin/trellis -out results/orchbench.md ${ORCHBENCH_ARGS:-})
(cd bench && go run ./cmd/failoverbench -trellis ../bin/trellis -out results/failoverbench.md ${FAILOVERBENCH_ARGS:-})
(cd bench && go run ./cmd/cabench -trellis ../bin/trellis -out results/cabench.md ${CABENCH_ARGS:-})
(cd bench && go run ./cmd/carotbench -trellis ../bin/trellis -out results/carotbench.md ${CAROTBENCH_ARGS:-})
if [ ! -x /usr/lib/cni/bridge ]; then
  echo "bench: installing containernetworking-plugins (task networking)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containernetworking-plugins
fi
(cd bench && go run ./cmd/netbench -out results/netbench.md ${NETBENCH_ARGS:-})
if ! command -v dnsperf >/dev/null || ! command -v nsd >/dev/null || ! command -v dig >/dev/null; then
  echo "bench: installing dnsperf, nsd and dig (the DNS benchmark and its peer)" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dnsperf nsd bind9-dnsutils
fi
(cd bench && go run ./cmd/dnsbench -trellis ../bin/trellis -out results/dnsbench.md ${DNSBENCH_ARGS:-})
(cd bench && go run ./cmd/catalogbench -trellis ../bin/trellis -out results/catalogbench.md ${CATALOGBENCH_ARGS:-})
