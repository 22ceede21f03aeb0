#!/usr/bin/env bash
# hack/bench.sh --only peer (peer_jobs, peer_tas): Kueue's scheduler performance suite
# (test/performance/scheduler/ of Kueue v0.19.2: 15,000 workloads over 30 queues in 5 cohorts, with its
# creation intervals and workload mix; tools/src/bin/peer_suite/) against sluice, then against Kueue,
# on one local cluster. Its shapes (PEER_SHAPE): baseline (configs/baseline, on 100 kwok nodes of 32
# cpu) or tas (configs/tas: 2-, 4- and 8-pod workloads asking for one rack, on 10 racks of 64 kwok
# nodes of 96 cpu that the tool creates); each workload as a plain pod or a batch/v1 Job (PEER_AS:
# pods, the default for the baseline; jobs, what Kueue's users run, and the only way for tas). The
# part's name says which: peer (baseline as pods), peer_jobs (baseline as Jobs), peer_tas.
# sluice's runs come first, Kueue joins the cluster for its own (its controller watches every pod).
# Env: PEER_REPS (runs of each, default 3; 1 with QUICK=1), PEER_SCALE (fraction of the suite's
# workload counts, default 1; 0.05 with QUICK=1), E2E_NODES (plain kwok nodes, default 100; 4 for
# tas, whose pods go to its racks), PEER_MODES (default "sluice kueue"), PEER_TIMEOUT (seconds each
# run may take, default 1800: a run stopped there reports how far it got), WRITE (1: write
# BENCHMARKS.md and bench/results.json), KEEP_CLUSTER=1 (leave it up), NO_BUILD=1,
# BENCH_SLUICE_BUILD=debug and TOOLS_PROFILE=debug (debug builds: a smoke run of the script, figures
# not to quote).
set -euo pipefail
# shellcheck source=hack/bench/lib.sh
source "$(dirname "$0")/lib.sh"   # $root (the working directory), $out, $quick and the helpers
reps="${PEER_REPS:-3}" scale="${PEER_SCALE:-1}"
[[ $quick == 1 ]] && { reps="${PEER_REPS:-1}"; scale="${PEER_SCALE:-0.05}"; }
shape="${PEER_SHAPE:-baseline}"
case $shape in
  baseline) kind="${PEER_AS:-pods}"; nodes="${E2E_NODES:-100}" ;;
  tas) kind="${PEER_AS:-jobs}"; nodes="${E2E_NODES:-4}" ;;
  *) echo "peer.sh: PEER_SHAPE is baseline or tas, not '$shape'" >&2; exit 2 ;;
esac
case $shape/$kind in
  baseline/pods) part=peer ;;
  baseline/jobs) part=peer_jobs ;;
  tas/jobs) part=peer_tas ;;
  *) echo "peer.sh: PEER_SHAPE=$shape runs as PEER_AS=jobs (its workloads are 2 to 8 pods), not '$kind'" >&2; exit 2 ;;
esac
modes="${PEER_MODES:-sluice kueue}" timeout="${PEER_TIMEOUT:-1800}"
bench_begin "$part" "hack/bench.sh --only $part${QUICK:+ (QUICK=$quick)} PEER_SHAPE=$shape PEER_AS=$kind PEER_REPS=$reps PEER_SCALE=$scale PEER_MODES='$modes' PEER_TIMEOUT=$timeout E2E_NODES=$nodes"
bin="$(tool_binary peer_suite)"
bench_cluster_up "$nodes"

peer_run() { # mode rep
  local mode=$1 rep=$2 name="$part-$1-$2" prefix="p${shape:0:1}${kind:0:1}${1:0:1}$2"
  local suite=(--mode "$mode" --shape "$shape" --as "$kind" --prefix "$prefix")
  echo "-- peer suite ($part): $mode, run $rep (scale $scale)" >&2
  "$bin" "${suite[@]}" --setup >&2
  # The queues ready: sluice's CapacityQueues Active, Kueue's ClusterQueues Active.
  local queue_kind=capacityqueue; [[ $mode == kueue ]] && queue_kind=clusterqueue
  # shellcheck disable=SC2046  # one name a word
  kubectl wait --for=condition=Active --timeout=120s $(kubectl get "$queue_kind" -o name | grep "/$prefix-") >&2
  measure_begin "$name"
  "$bin" "${suite[@]}" --scale "$scale" --timeout "$timeout" > "$out/$name.json"
  measure_end "$name"
  python3 "$bench_py/e2e_summary.py" "$out/$name.json" >&2
  # Kueue's last run needs no clean-up when the cluster goes down after it: its ClusterQueues keep
  # their finalizer while any Workload is left, and waiting for that measures nothing.
  if [[ $mode == kueue && $rep == "$reps" && ${KEEP_CLUSTER:-0} != 1 ]]; then return 0; fi
  [[ $mode == kueue ]] && end_kueue_pods $(kubectl get namespace -l "bench.sluice.dev/peer-suite=$prefix" -o jsonpath='{.items[*].metadata.name}')
  delete_namespaces "bench.sluice.dev/peer-suite=$prefix"
  if [[ $mode == sluice ]]; then
    kubectl get capacityqueue -o name | grep "/$prefix-" | xargs -r kubectl delete >&2
  else
    kubectl get clusterqueue -o name | grep "/$prefix-" | xargs -r kubectl delete >&2
    kubectl delete resourceflavor "$prefix-rf" --ignore-not-found >&2
    kubectl delete topologies.kueue.x-k8s.io "$prefix-topology" --ignore-not-found >&2
  fi
}

if [[ " $modes " == *" sluice "* ]]; then
  for rep in $(seq "$reps"); do peer_run sluice "$rep"; done
fi
if [[ " $modes " == *" kueue "* ]]; then
  kueue_joins "$nodes"
  for rep in $(seq "$reps"); do peer_run kueue "$rep"; done
fi
E2E_NODES="$nodes" python3 "$bench_py/peers_report.py" "$out" "$root" "${WRITE:-1}" "$part"
