#!/usr/bin/env bash
# bench/compare.sh BASE HEAD [CELLS]: build two commits of Trellis, each
# with its own orchbench, run their orchbench cells alternated on this
# machine (base, head, then head, base, ...), and print each figure of
# both beside their ratio (head / base, of the medians).
#
#   BASE, HEAD   commits (anything git rev-parse takes)
#   CELLS        orchbench -cells (default: daemon)
#
# Environment:
#   PAIRS=N           base/head pairs to run (default 2)
#   ORCHBENCH_ARGS    more orchbench flags for every run (e.g. "-joins 200")
#   HOG=N             run N busy loops beside every run: a loaded machine,
#                     which may make Trellis slower but never wrong
#   OUT=DIR           where builds, logs and reports go (default: a new
#                     directory under /tmp, kept and printed at the end);
#                     a build already there of the same commit is reused,
#                     so the builds can be made before a quiet spell
#
# Needs git, go and etcd (bench/run.sh installs etcd-server); run from
# anywhere inside the repository. Each run's orchbench report is kept in
# OUT as <label>-<pair>.md, its output as <label>-<pair>.log.
set -euo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
base_ref=$1
head_ref=$2
cells=${3:-daemon}
pairs=${PAIRS:-2}
hog=${HOG:-0}
top=$(git rev-parse --show-toplevel)
out=${OUT:-$(mktemp -d /tmp/trellis-compare.XXXXXX)}
mkdir -p "$out"

command -v etcd >/dev/null || { echo "compare: etcd is missing (apt-get install etcd-server)" >&2; exit 1; }

# build REF LABEL: a worktree of REF, its trellis and its orchbench.
build() {
  local ref=$1 label=$2 rev
  rev=$(git -C "$top" rev-parse --verify "$ref^{commit}") || { echo "compare: $ref is not a commit" >&2; exit 1; }
  if [ -x "$out/trellis-$label" ] && [ -x "$out/orchbench-$label" ] && [ "$(cat "$out/rev-$label" 2>/dev/null)" = "$rev" ]; then
    echo "compare: reusing the build of $label = $ref ($rev)" >&2
    return
  fi
  echo "compare: building $label = $ref ($rev)" >&2
  rm -f "$out/rev-$label"
  rm -rf "$out/src-$label"
  git -C "$top" worktree add --force --detach "$out/src-$label" "$rev" >/dev/null 2>&1
  (cd "$out/src-$label" && go build -o "$out/trellis-$label" ./cmd/trellis)
  [ -d "$out/src-$label/bench/cmd/orchbench" ] || { echo "compare: $ref has no bench/cmd/orchbench" >&2; exit 1; }
  (cd "$out/src-$label/bench" && go build -o "$out/orchbench-$label" ./cmd/orchbench)
  git -C "$top" worktree remove --force "$out/src-$label"
  echo "$rev" >"$out/rev-$label"
}

build "$base_ref" base
build "$head_ref" head

hog_pids=()
start_hog() {
  local i
  for ((i = 0; i < hog; i++)); do
    sh -c 'while :; do :; done' &
    hog_pids+=($!)
  done
}
stop_hog() {
  if [ ${#hog_pids[@]} -gt 0 ]; then
    kill "${hog_pids[@]}" 2>/dev/null || true
    wait "${hog_pids[@]}" 2>/dev/null || true
  fi
  hog_pids=()
}
trap stop_hog EXIT

# run LABEL PAIR: one orchbench run of LABEL's binaries.
run() {
  local label=$1 pair=$2
  echo "compare: pair $pair, $label ($(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  start_hog
  # shellcheck disable=SC2086
  if ! (cd "$out" && "$out/orchbench-$label" -trellis "$out/trellis-$label" -cells "$cells" \
      -out "$out/$label-$pair.md" ${ORCHBENCH_ARGS:-} >"$out/$label-$pair.log" 2>&1); then
    echo "compare: $label, pair $pair failed (the cell's own checks): see $out/$label-$pair.log" >&2
  fi
  stop_hog
}

for ((p = 1; p <= pairs; p++)); do
  if ((p % 2 == 1)); then run base "$p"; run head "$p"; else run head "$p"; run base "$p"; fi
done

# figures FILE: one "figure<TAB>value" line per figure of an orchbench
# report, durations in milliseconds.
figures() {
  awk '
    function ms(s,   v) {
      gsub(/\*/, "", s); gsub(/ /, "", s)
      if (s ~ /^[0-9.]+ms$/) return s + 0
      if (s ~ /^[0-9.]+µs$/) return s / 1000
      if (s ~ /^[0-9]+m[0-9.]+s$/) { split(s, p, "m"); return (p[1] * 60 + p[2]) * 1000 }
      if (s ~ /^[0-9.]+s$/) return s * 1000
      return ""
    }
    BEGIN { FS = "|" }
    /^\| fresh deployment to [0-9]+ instances/ {
      name = $2; gsub(/^ +| +$/, "", name)
      print name " (ms)\t" ms($4)
      r = $8; gsub(/[ ×]/, "", r); if (r != "–" && r != "") print name ", Trellis / etcd\t" r
    }
    /^- (fresh deployment|rolling update)/ {
      line = $0; sub(/^- /, "", line)
      name = line; sub(/: leader .*/, "", name); sub(/, min_healthy.*/, "", name)
      if (match(line, /leader [0-9.]+ s/)) { v = substr(line, RSTART + 7, RLENGTH - 9); print name ", leader CPU (s)\t" v }
      if (match(line, /sim [0-9.]+ s/)) { v = substr(line, RSTART + 4, RLENGTH - 6); print name ", sim CPU (s)\t" v }
      if (match(line, /[0-9]+ instances marked down/)) { v = substr(line, RSTART, RLENGTH); sub(/ .*/, "", v); print name ", instances marked down\t" v }
    }
    /of scheduler overhead per batch/ {
      if (match($0, /\*\*[0-9.]+[mµ]?s of scheduler overhead/)) { v = substr($0, RSTART + 2, RLENGTH); sub(/ of scheduler.*/, "", v); print "rolling update, overhead per batch (ms)\t" ms(v) }
    }
    /^\| instance joins → task RUNNING/ { print "join → RUNNING, p99 (ms)\t" ms($5) }
    /^\| task dies → replacement RUNNING/ { print "replacement → RUNNING, p99 (ms)\t" ms($5) }
    /^Instances marked down for missed heartbeats over the whole cell/ { v = $0; sub(/.*: /, "", v); sub(/\.$/, "", v); print "instances marked down, whole cell\t" v }
    /^\| trellis server [0-9]+ \| leader/ { split($5, a, " "); print "leader CPU at rest, 3 environments (cores)\t" a[1] }
  ' "$1"
}

echo
echo "# bench/compare.sh: base $base_ref, head $head_ref; cells $cells; $pairs pairs, alternated${hog:+; }$( ((hog > 0)) && echo "a CPU hog of $hog busy loops beside every run")"
echo
echo "Reports and logs: $out"
echo
for label in base head; do
  for ((p = 1; p <= pairs; p++)); do
    [ -f "$out/$label-$p.md" ] && figures "$out/$label-$p.md" | sed "s/^/$label\t$p\t/"
  done
done >"$out/figures.tsv"

awk -F'\t' -v pairs="$pairs" '
  function median(list,   n, a, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    if (n == 0) return ""
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  {
    if (!($3 in seen)) { seen[$3] = 1; order[++k] = $3 }
    v[$1, $3] = v[$1, $3] (v[$1, $3] == "" ? "" : " ") $4
  }
  END {
    print "| figure | base runs | head runs | base median | head median | head / base |"
    print "|---|---|---|---|---|---|"
    for (i = 1; i <= k; i++) {
      f = order[i]; b = median(v["base", f]); h = median(v["head", f])
      ratio = (b != "" && h != "" && b + 0 != 0) ? sprintf("%.2f×", h / b) : "–"
      printf "| %s | %s | %s | %s | %s | %s |\n", f, v["base", f], v["head", f], b, h, ratio
    }
  }
' "$out/figures.tsv"
