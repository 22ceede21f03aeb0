#!/usr/bin/env bash
# hack/bench.sh --only shapes: Spark-shaped and Ray-shaped applications (tools/src/bin/shapes_load.rs)
# on one local cluster (100 kwok nodes, KubeRay on the host): no gate, sluice, then Kueue (started
# for its own runs, last). Spark: a spark-submit's pods (driver, then executors in doubling batches,
# owned by the driver pod); under Kueue every pod is its own plain-pod workload (Kueue's elastic
# workload slices need a SparkApplication, whose executors only a running Spark driver creates: not
# on kwok). Ray: RayClusters scaled up; under Kueue elastic ones (kueue.x-k8s.io/elastic-job,
# ElasticJobsViaWorkloadSlices, Beta and on by default in v0.19). Quota above demand.
# Env: SHAPES_REPS (default 3; 1 with QUICK=1), SHAPES_APPS (default 40; 5 with QUICK=1), E2E_NODES,
# WRITE (1: write the report), KEEP_CLUSTER=1, NO_BUILD=1, BENCH_SLUICE_BUILD=debug and TOOLS_PROFILE=debug
# (debug builds: a smoke run of the script, figures not to quote).
set -euo pipefail
# shellcheck source=hack/bench/lib.sh
source "$(dirname "$0")/lib.sh"   # $root (the working directory), $out, $quick and the helpers
reps="${SHAPES_REPS:-3}" apps="${SHAPES_APPS:-40}"
[[ $quick == 1 ]] && { reps="${SHAPES_REPS:-1}"; apps="${SHAPES_APPS:-5}"; }
nodes="${E2E_NODES:-100}"
bench_begin shapes "hack/bench.sh --only shapes SHAPES_REPS=$reps SHAPES_APPS=$apps"
bin="$(tool_binary shapes_load)"
bench_cluster_up "$nodes" --with-kuberay

shapes_run() { # mode shape rep
  local mode=$1 shape=$2 rep=$3 name="shapes-$1-$2-$3" ns="shapes-$1-$2-$3"
  echo "-- shapes: $shape, $mode, run $rep" >&2
  run_namespace "$mode" shapes "$ns" 1000
  measure_begin "$name"
  "$bin" --mode "$mode" --shape "$shape" --namespace "$ns" --queue "$ns" --apps "$apps" > "$out/$name.json"
  measure_end "$name"
  cat "$out/$name.json" >&2
  kubectl -n "$ns" delete rayclusters --all --wait=false >/dev/null 2>&1 || true
  run_namespace_gone "$mode" "$ns"
}

for rep in $(seq "$reps"); do
  for shape in spark ray; do
    for mode in nogate sluice; do shapes_run "$mode" "$shape" "$rep"; done
  done
done
kueue_joins "$nodes" --with-kuberay
for rep in $(seq "$reps"); do
  for shape in spark ray; do shapes_run kueue "$shape" "$rep"; done
done
python3 "$bench_py/peers_report.py" "$out" "$root" "${WRITE:-1}" shapes
