#!/usr/bin/env bash
# hack/bench.sh --only shapes: Spark-shaped and Ray-shaped applications (tools/src/bin/shapes_load.rs)
# on one local cluster (100 kwok nodes, KubeRay on the host): no gate, sluice, then Kueue (started
# for its own runs, last). Spark: a spark-submit's pods (driver, then executors in doubling batches,
# owned by the driver pod); under Kueue every pod is its own plain-pod workload (Kueue's elastic
# workload slices need a SparkApplication, whose executors only a running Spark driver creates: not
# on kwok). Ray: RayClusters scaled up; under Kueue elastic ones (kueue.x-k8s.io/elastic-job,
# ElasticJobsViaWorkloadSlices, Beta and on by default in v0.19). Quota above demand.
# Env: SHAPES_REPS (default 3; 1 with QUICK=1), SHAPES_APPS (default 40; 5 with QUICK=1), E2E_NODES,
# WRITE (1: write the report), KEEP_CLUSTER=1.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
out="$root/target/bench"
mkdir -p "$out"
# shellcheck source=hack/bench/lib.sh
source "$root/hack/bench/lib.sh"
reps="${SHAPES_REPS:-3}" apps="${SHAPES_APPS:-40}"
[[ $quick == 1 ]] && { reps="${SHAPES_REPS:-1}"; apps="${SHAPES_APPS:-5}"; }
nodes="${E2E_NODES:-100}"
bench_begin shapes "hack/bench.sh --only shapes SHAPES_REPS=$reps SHAPES_APPS=$apps"
bin="$(tool_binary shapes_load)"
down_on_exit
hack/cluster.sh up --nodes "$nodes" --with-sluice --release-sluice --with-kuberay "${no_build[@]}" >&2
eval "$(hack/cluster.sh env)"

shapes_run() { # mode shape rep
  local mode=$1 shape=$2 rep=$3 name="shapes-$1-$2-$3" ns="shapes-$1-$2-$3"
  echo "-- shapes: $shape, $mode, run $rep" >&2
  kubectl create namespace "$ns" >&2
  kubectl label namespace "$ns" bench.sluice.dev/shapes=on >&2
  [[ $mode == kueue ]] && kubectl label namespace "$ns" bench.sluice.dev/kueue=on >&2
  bench_queue "$mode" "$ns" 1000
  kubectl -n "$ns" wait --for=jsonpath='{.metadata.name}'=default --timeout=60s serviceaccount/default >&2
  measure_begin "$name"
  "$bin" --mode "$mode" --shape "$shape" --namespace "$ns" --queue "$ns" --apps "$apps" > "$out/$name.json"
  measure_end "$name"
  cat "$out/$name.json" >&2
  kubectl -n "$ns" delete rayclusters --all --wait=false >/dev/null 2>&1 || true
  [[ $mode == kueue ]] && end_kueue_pods "$ns"
  delete_namespaces "kubernetes.io/metadata.name=$ns"
  case $mode in
    sluice) kubectl delete capacityqueue "$ns" --ignore-not-found >&2 ;;
    kueue) kubectl delete clusterqueue "$ns" --ignore-not-found >&2; kubectl delete resourceflavor "$ns" --ignore-not-found >&2 ;;
  esac
}

for rep in $(seq "$reps"); do
  for shape in spark ray; do
    for mode in nogate sluice; do shapes_run "$mode" "$shape" "$rep"; done
  done
done
hack/cluster.sh up --nodes "$nodes" --with-sluice --release-sluice --with-kuberay --with-kueue --no-build >&2
scope_kueue_webhooks
for rep in $(seq "$reps"); do
  for shape in spark ray; do shapes_run kueue "$shape" "$rep"; done
done
python3 "$bench_py/peers_report.py" "$out" "$root" "${WRITE:-1}" shapes
