#!/usr/bin/env bash
# hack/bench.sh --only status_lag (issue 24, part 2): how far DynamicWorkload statuses lag their
# pods during the end-to-end burst, and what sluice's pod rate is beside no gate's in the same run.
#
# One local cluster (hack/cluster.sh up --nodes 100 --with-sluice --release-sluice, in
# $SLUICE_CLUSTER_STATE: default /tmp/cluster-status, not the lead's .cluster), then $RUNS times
# (default 1) one after another: (a) no gate and (b) sluice as installed (quota above demand), the
# same 5,000+ pods of e2e_load (tools/, 32 creates in flight) each, and each run under
# `status_lag` (tools/): it watches the namespace's pods and DynamicWorkloads and records, for every
# pod change that changes what a workload's status shows, when a status first showed it (every
# workload, not a sample), waiting after the load for the statuses to catch up. Both runs carry the
# same watches (the no-gate run has no DynamicWorkload to lag: its watches only cost the same).
# Recorded per run: e2e_load's JSON, the lag, apiserver_request_total before and after (after the
# statuses caught up: writes after the burst count), sluice's status write metrics, CPU seconds of
# the cluster's processes, and the load average before and after.
#
# Env: E2E_PODS (5000), E2E_NODES (100), RUNS (1), SLUICE_CLUSTER_STATE, KEEP_CLUSTER=1 (leave it up),
# NO_BUILD=1 (sluice's release binary and the tools as they are),
# SLUICE_STATUS_WRITES_PER_SECOND and the other SLUICE_* settings of `sluice serve` (hack/cluster.sh
# restarts sluice when they change). Writes target/bench/status_lag/, its section of BENCHMARKS.md
# and its keys of bench/results.json (unless WRITE=0).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
export SLUICE_CLUSTER_STATE="${SLUICE_CLUSTER_STATE:-/tmp/cluster-status}"
state="$SLUICE_CLUSTER_STATE"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
out="$root/target/bench/status_lag"
runs="${RUNS:-1}" pods="${E2E_PODS:-5000}" nodes="${E2E_NODES:-100}"
mkdir -p "$out"
rm -f "$out"/run*-*
{
  echo "started_at $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "versions sluice $(git rev-parse --short HEAD)$(git diff --quiet -- src || echo '+changes'), $(rustc --version | cut -d' ' -f1-2)"
  echo "settings ${SLUICE_STATUS_WRITES_PER_SECOND:+SLUICE_STATUS_WRITES_PER_SECOND=$SLUICE_STATUS_WRITES_PER_SECOND}"
  echo "command RUNS=$runs E2E_PODS=$pods E2E_NODES=$nodes hack/bench/status_lag.sh"
} > "$out/run-info"

# NO_BUILD=1: the tools as built too (when both exist).
if [[ -z ${NO_BUILD:-} || ! -x $target_dir/release/e2e_load || ! -x $target_dir/release/status_lag ]]; then
  cargo build --release -p sluice-tools --bin e2e_load --bin status_lag >&2
fi
hack/cluster.sh up --nodes "$nodes" --with-sluice --release-sluice ${NO_BUILD:+--no-build} >&2
[[ ${KEEP_CLUSTER:-0} == 1 ]] || trap 'hack/cluster.sh down >&2 || true' EXIT
eval "$(hack/cluster.sh env)"
pki="$state/pki"
server="$(kubectl config view --raw -o jsonpath='{.clusters[0].cluster.server}')"

api_metrics() { # file: apiserver_request_total, read with the admin client certificate
  curl -sf --max-time 20 --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
    "$server/metrics" | grep '^apiserver_request_total' > "$1"
}
cpu_seconds() { # "<component> <user+system seconds>" for every process hack/cluster.sh started
  local tick; tick=$(getconf CLK_TCK)
  for f in "$state"/pids/*.pid; do
    local pid; pid=$(cat "$f" 2>/dev/null) || continue
    [[ -r /proc/$pid/stat ]] || continue
    awk -v n="$(basename "$f" .pid)" -v t="$tick" '{sub(/^.*\) /, ""); print n, ($12 + $13) / t}' "/proc/$pid/stat"
  done
}
sluice_metrics() {
  # shellcheck disable=SC1091  # written by hack/cluster.sh: SLUICE_METRICS_ADDR
  (source "$state/sluice.env" && curl -sf --max-time 10 "http://$SLUICE_METRICS_ADDR/metrics") |
    grep -E '^sluice_(status_writes_total|status_writes_pending|admitted_at_creation_pods_total|admitted_pods_total|admission_pass_duration_seconds_(sum|count))' || true
}
run_one() { # tag mode: one load under status_lag in a fresh namespace, then the namespace gone
  local tag=$1 mode=$2 ns="lag-$1-$2"
  echo "-- $tag $mode" >&2
  kubectl create namespace "$ns" >&2
  for _ in $(seq 100); do kubectl -n "$ns" get serviceaccount default >/dev/null 2>&1 && break; sleep 0.2; done
  if [[ $mode == sluice ]]; then
    kubectl apply -f - >&2 <<YAML
apiVersion: sluice.dev/v1alpha1
kind: CapacityQueue
metadata: {name: $ns}
spec: {quota: {cpu: "$(( (pods + 500) / 50 ))"}}
YAML
    for _ in $(seq 100); do
      [[ "$(kubectl get capacityqueue "$ns" -o jsonpath='{.status.conditions[?(@.type=="Active")].status}' 2>/dev/null)" == True ]] && break
      sleep 0.2
    done
  fi
  local p="$out/$tag-$mode"
  cut -d' ' -f1-3 /proc/loadavg > "$p.load-before"
  api_metrics "$p.metrics-before"
  cpu_seconds > "$p.cpu-before"
  sluice_metrics > "$p.sluice-before"
  # No gate: no DynamicWorkload will ever show a change (the watches run for their cost only).
  local drain=120; [[ $mode == nogate ]] && drain=0
  "$target_dir/release/status_lag" --namespace "$ns" --out "$p.lag.json" --drain "$drain" -- \
    "$target_dir/release/e2e_load" --mode "$mode" --namespace "$ns" --queue "$ns" --pods "$pods" > "$p.json"
  cpu_seconds > "$p.cpu-after"
  api_metrics "$p.metrics-after"
  sluice_metrics > "$p.sluice-after"
  cut -d' ' -f1-3 /proc/loadavg > "$p.load-after"
  kubectl delete namespace "$ns" --wait=false >&2
  for _ in $(seq 600); do kubectl get namespace "$ns" >/dev/null 2>&1 || break; sleep 1; done
  [[ $mode == sluice ]] && kubectl delete capacityqueue "$ns" --ignore-not-found >&2
  sleep 3
}
for r in $(seq "$runs"); do
  run_one "run$r" nogate
  run_one "run$r" sluice
done
python3 "$root/hack/bench/status_lag.py" "$out" "$root" "${WRITE:-1}"
