#!/usr/bin/env bash
# hack/bench.sh --only large: the end-to-end load of e2e_load (single pods, gangs of 4-8, groups of 32,
# 10m cpu each, 32 creates in flight) at 20,000 pods on 500 kwok nodes: no gate, sluice, then Kueue
# (started for its own run, last; its webhooks scoped to its namespace). Records each component's
# CPU seconds, the API server's share of the machine over each run (its CPU seconds / wall seconds)
# and API requests per pod. Env: LARGE_PODS (default 20000; 1000 with QUICK=1), LARGE_NODES (default
# 500; 50 with QUICK=1), LARGE_MODES (default "nogate sluice kueue"), LARGE_KWOK_PARALLELISM (kwok's
# workers, default 16: with its defaults, 4 lease and 1 pod-sync worker, kwok held 500 nodes to ~5 pod
# status patches a second on 2026-11-25; the cluster is brought down first so kwok starts with it), WRITE, KEEP_CLUSTER=1,
# NO_BUILD=1 (the binaries as they are: e2e_load and sluice's release build).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
out="$root/target/bench"
mkdir -p "$out"
# shellcheck source=hack/bench/lib.sh
source "$root/hack/bench/lib.sh"
pods="${LARGE_PODS:-20000}" nodes="${LARGE_NODES:-500}"
[[ $quick == 1 ]] && { pods="${LARGE_PODS:-1000}"; nodes="${LARGE_NODES:-50}"; }
modes="${LARGE_MODES:-nogate sluice kueue}"
kwok_parallelism="${LARGE_KWOK_PARALLELISM:-16}"
bench_begin large "hack/bench.sh --only large LARGE_PODS=$pods LARGE_NODES=$nodes LARGE_KWOK_PARALLELISM=$kwok_parallelism"
echo "$pods" > "$out/large-pods"; echo "$nodes" > "$out/large-nodes"
bin="$(tool_binary e2e_load)"
down_on_exit
hack/cluster.sh down >&2   # kwok reads its parallelism when it starts
hack/cluster.sh up --nodes "$nodes" --with-sluice --release-sluice "${no_build[@]}" --timeout 600 --kwok-parallelism "$kwok_parallelism" >&2
eval "$(hack/cluster.sh env)"
quota=$(( (pods + 500) / 50 ))   # cpu; each pod asks 10m: twice the demand and more

large_run() { # mode
  local mode=$1 name="large-$1" ns="large-$1"
  echo "-- large: $mode, $pods pods on $nodes nodes" >&2
  kubectl create namespace "$ns" >&2
  kubectl label namespace "$ns" bench.sluice.dev/large=on >&2
  [[ $mode == kueue ]] && kubectl label namespace "$ns" bench.sluice.dev/kueue=on >&2
  bench_queue "$mode" "$ns" "$quota"
  kubectl -n "$ns" wait --for=jsonpath='{.metadata.name}'=default --timeout=60s serviceaccount/default >&2
  measure_begin "$name"
  "$bin" --mode "$mode" --namespace "$ns" --queue "$ns" --pods "$pods" --timeout 1800 > "$out/$name.json"
  measure_end "$name"
  python3 "$bench_py/e2e_summary.py" "$out/$name.json" >&2
  [[ $mode == kueue ]] && end_kueue_pods "$ns"
  delete_namespaces "kubernetes.io/metadata.name=$ns"
  case $mode in
    sluice) kubectl delete capacityqueue "$ns" --ignore-not-found >&2 ;;
    kueue) kubectl delete clusterqueue "$ns" --ignore-not-found >&2; kubectl delete resourceflavor "$ns" --ignore-not-found >&2 ;;
  esac
}

for mode in $modes; do
  if [[ $mode == kueue ]]; then
    hack/cluster.sh up --nodes "$nodes" --with-sluice --release-sluice --with-kueue --no-build --timeout 600 --kwok-parallelism "$kwok_parallelism" >&2
    scope_kueue_webhooks
  fi
  large_run "$mode"
done
python3 "$bench_py/peers_report.py" "$out" "$root" "${WRITE:-1}" large
