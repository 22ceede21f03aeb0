#!/usr/bin/env bash
# hack/bench.sh --only large: the end-to-end load of e2e_load (single pods, gangs of 4-8, groups of 32,
# 10m cpu each, 32 creates in flight) at 20,000 pods on 500 kwok nodes: no gate, sluice, then Kueue
# (started for its own run, last; its webhooks scoped to its namespace). Records each component's
# CPU seconds, the API server's share of the machine over each run (its CPU seconds / wall seconds)
# and API requests per pod. Env: LARGE_PODS (default 20000; 1000 with QUICK=1), LARGE_NODES (default
# 500; 50 with QUICK=1), LARGE_MODES (default "nogate sluice kueue"), LARGE_KWOK_PARALLELISM (kwok's
# workers, default 16: with its defaults, 4 lease and 1 pod-sync worker, kwok held 500 nodes to ~5 pod
# status patches a second on 2026-11-25; the cluster is brought down first so kwok starts with it), WRITE, KEEP_CLUSTER=1,
# NO_BUILD=1 (the binaries as they are: e2e_load and sluice's release build), BENCH_SLUICE_BUILD=debug
# and TOOLS_PROFILE=debug (debug builds: a smoke run of the script, figures not to quote).
set -euo pipefail
# shellcheck source=hack/bench/lib.sh
source "$(dirname "$0")/lib.sh"   # $root (the working directory), $out, $quick and the helpers
pods="${LARGE_PODS:-20000}" nodes="${LARGE_NODES:-500}"
[[ $quick == 1 ]] && { pods="${LARGE_PODS:-1000}"; nodes="${LARGE_NODES:-50}"; }
modes="${LARGE_MODES:-nogate sluice kueue}"
kwok_parallelism="${LARGE_KWOK_PARALLELISM:-16}"
bench_begin large "hack/bench.sh --only large LARGE_PODS=$pods LARGE_NODES=$nodes LARGE_KWOK_PARALLELISM=$kwok_parallelism"
echo "$pods" > "$out/large-pods"; echo "$nodes" > "$out/large-nodes"
bin="$(tool_binary e2e_load)"
hack/cluster.sh down >&2   # kwok reads its parallelism when it starts
bench_cluster_up "$nodes" --timeout 600 --kwok-parallelism "$kwok_parallelism"
quota=$(( (pods + 500) / 50 ))   # cpu; each pod asks 10m: twice the demand and more

large_run() { # mode
  local mode=$1 name="large-$1" ns="large-$1"
  echo "-- large: $mode, $pods pods on $nodes nodes" >&2
  run_namespace "$mode" large "$ns" "$quota"
  measure_begin "$name"
  "$bin" --mode "$mode" --namespace "$ns" --queue "$ns" --pods "$pods" --timeout 1800 > "$out/$name.json"
  measure_end "$name"
  python3 "$bench_py/e2e_summary.py" "$out/$name.json" >&2
  run_namespace_gone "$mode" "$ns"
}

for mode in $modes; do
  if [[ $mode == kueue ]]; then
    kueue_joins "$nodes" --timeout 600 --kwok-parallelism "$kwok_parallelism"
  fi
  large_run "$mode"
done
python3 "$bench_py/peers_report.py" "$out" "$root" "${WRITE:-1}" large
