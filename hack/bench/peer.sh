#!/usr/bin/env bash
# hack/bench.sh --only peer: Kueue's scheduler performance suite (test/performance/scheduler/, the
# baseline: 15,000 workloads over 30 queues in 5 cohorts, with its creation intervals and workload
# mix) as plain pods (tools/src/bin/peer_suite.rs), against sluice, then against Kueue, on one local
# cluster (100 kwok nodes of 32 cpu). sluice's runs come first, Kueue joins the cluster for its own
# (its controller watches every pod). Env: PEER_REPS (runs of each, default 3; 1 with QUICK=1),
# PEER_SCALE (fraction of the suite's workload counts, default 1; 0.05 with QUICK=1), E2E_NODES
# (default 100), PEER_MODES (default "sluice kueue"), PEER_TIMEOUT (seconds each run may take, default
# 1800: a run stopped there reports how far it got), WRITE (1: write BENCHMARKS.md and bench/results.json),
# KEEP_CLUSTER=1 (leave it up), NO_BUILD=1, BENCH_SLUICE_BUILD=debug and TOOLS_PROFILE=debug (debug
# builds: a smoke run of the script, figures not to quote).
set -euo pipefail
# shellcheck source=hack/bench/lib.sh
source "$(dirname "$0")/lib.sh"   # $root (the working directory), $out, $quick and the helpers
reps="${PEER_REPS:-3}" scale="${PEER_SCALE:-1}"
[[ $quick == 1 ]] && { reps="${PEER_REPS:-1}"; scale="${PEER_SCALE:-0.05}"; }
nodes="${E2E_NODES:-100}"
modes="${PEER_MODES:-sluice kueue}" timeout="${PEER_TIMEOUT:-1800}"
bench_begin peer "hack/bench.sh --only peer${QUICK:+ (QUICK=$quick)} PEER_REPS=$reps PEER_SCALE=$scale PEER_MODES='$modes' PEER_TIMEOUT=$timeout"
bin="$(tool_binary peer_suite)"
bench_cluster_up "$nodes"

peer_run() { # mode rep
  local mode=$1 rep=$2 name="peer-$1-$2" prefix="ps${1:0:1}$2"
  echo "-- peer suite: $mode, run $rep (scale $scale)" >&2
  "$bin" --mode "$mode" --prefix "$prefix" --setup >&2
  # The queues ready: sluice's CapacityQueues Active, Kueue's ClusterQueues Active.
  local kind=capacityqueue; [[ $mode == kueue ]] && kind=clusterqueue
  # shellcheck disable=SC2046  # one name a word
  kubectl wait --for=condition=Active --timeout=120s $(kubectl get "$kind" -o name | grep "/$prefix-") >&2
  measure_begin "$name"
  "$bin" --mode "$mode" --prefix "$prefix" --scale "$scale" --timeout "$timeout" > "$out/$name.json"
  measure_end "$name"
  python3 "$bench_py/e2e_summary.py" "$out/$name.json" >&2
  [[ $mode == kueue ]] && end_kueue_pods $(kubectl get namespace -l "bench.sluice.dev/peer-suite=$prefix" -o jsonpath='{.items[*].metadata.name}')
  delete_namespaces "bench.sluice.dev/peer-suite=$prefix"
  if [[ $mode == sluice ]]; then
    kubectl get capacityqueue -o name | grep "/$prefix-" | xargs -r kubectl delete >&2
  else
    kubectl get clusterqueue -o name | grep "/$prefix-" | xargs -r kubectl delete >&2
    kubectl delete resourceflavor "$prefix-rf" --ignore-not-found >&2
  fi
}

if [[ " $modes " == *" sluice "* ]]; then
  for rep in $(seq "$reps"); do peer_run sluice "$rep"; done
fi
if [[ " $modes " == *" kueue "* ]]; then
  kueue_joins "$nodes"
  for rep in $(seq "$reps"); do peer_run kueue "$rep"; done
fi
python3 "$bench_py/peers_report.py" "$out" "$root" "${WRITE:-1}" peer
