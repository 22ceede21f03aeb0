# shellcheck shell=bash
# Helpers of the end-to-end parts run by their own scripts (hack/bench/peer.sh, shapes.sh, large.sh)
# and of hack/bench.sh's e2e part: sourced; $root (the repository) and $out (target/bench) are set
# here unless the caller set them, and the working directory is $root. The cluster's environment is
# set by the time a run starts (bench_cluster_up).
root="${root:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
out="${out:-$root/target/bench}"
mkdir -p "$out"
cd "$root"
# The cluster's state directory: SLUICE_CLUSTER_STATE (a second cluster beside the lead's) or .cluster/.
state="${SLUICE_CLUSTER_STATE:-$root/.cluster}"
bench_py="$root/hack/bench"
quick="${quick:-${QUICK:-0}}"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
no_build=(); [[ ${NO_BUILD:-0} == 1 ]] && no_build=(--no-build)   # NO_BUILD=1: the binaries as they are
# BENCH_SLUICE_BUILD=debug: sluice's debug build instead of the release one (a smoke run of a script:
# figures not to quote), as E2E_SLUICE_BUILD does for hack/bench.sh's e2e part.
sluice_build=(--release-sluice); [[ ${BENCH_SLUICE_BUILD:-release} == debug ]] && sluice_build=()

bench_begin() { # part what: $out/run-<part> says when, what ran, the load and which sluice; the part's old results go
  rm -f "$out/$1"-*
  printf '%s\n%s\n%s\n%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$2" \
    "$(cut -d' ' -f1-3 /proc/loadavg)" "sluice $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes')" > "$out/run-$1"
}

tool_binary() { # tool: sluice-tools' binary, built unless NO_BUILD=1 (TOOLS_PROFILE=debug with NO_BUILD=1: a debug build)
  [[ ${NO_BUILD:-0} == 1 ]] || cargo build --release -p sluice-tools --bin "$1" >&2
  echo "$target_dir/${TOOLS_PROFILE:-release}/$1"
}

down_on_exit() { # the cluster goes down when the script ends, unless KEEP_CLUSTER=1
  [[ ${KEEP_CLUSTER:-0} == 1 ]] || trap 'hack/cluster.sh down >&2 || true' EXIT
}

bench_cluster_up() { # nodes [hack/cluster.sh up flags...]: the part's cluster with sluice's release build, its environment taken; down when the script ends unless KEEP_CLUSTER=1
  down_on_exit
  hack/cluster.sh up --nodes "$1" --with-sluice "${sluice_build[@]}" "${no_build[@]}" "${@:2}" >&2
  eval "$(hack/cluster.sh env)"
}

kueue_joins() { # nodes [hack/cluster.sh up flags...]: Kueue joins the cluster for its own runs (last: its controller watches every pod), its webhooks scoped
  hack/cluster.sh up --nodes "$1" --with-sluice "${sluice_build[@]}" --with-kueue --no-build "${@:2}" >&2
  scope_kueue_webhooks
}

run_namespace() { # mode part namespace quota-cpu: a run's namespace, labelled for its part (and for Kueue's webhooks under Kueue), with its queue and ServiceAccount ready
  local mode=$1 part=$2 ns=$3 quota=$4
  kubectl create namespace "$ns" >&2
  kubectl label namespace "$ns" "bench.sluice.dev/$part=on" >&2
  if [[ $mode == kueue ]]; then kubectl label namespace "$ns" bench.sluice.dev/kueue=on >&2; fi
  bench_queue "$mode" "$ns" "$quota"
  kubectl -n "$ns" wait --for=jsonpath='{.metadata.name}'=default --timeout=60s serviceaccount/default >&2
}

run_namespace_gone() { # mode namespace: a run's pods ended (Kueue's hold its finalizer), its namespace and queue deleted
  local mode=$1 ns=$2
  if [[ $mode == kueue ]]; then end_kueue_pods "$ns"; fi
  delete_namespaces "kubernetes.io/metadata.name=$ns"
  case $mode in
    sluice) kubectl delete capacityqueue "$ns" --ignore-not-found >&2 ;;
    kueue) kubectl delete clusterqueue "$ns" --ignore-not-found >&2; kubectl delete resourceflavor "$ns" --ignore-not-found >&2 ;;
  esac
}

api_metrics() { # file: apiserver_request_total, read with the admin client certificate
  local server
  server="$(kubectl config view --raw -o jsonpath='{.clusters[0].cluster.server}')"
  curl -sf --max-time 20 --cacert "$state/pki/ca.crt" --cert "$state/pki/admin.crt" --key "$state/pki/admin.key" \
    "$server/metrics" | grep '^apiserver_request_total' > "$1"
}

cpu_seconds() { # "<component> <user+system seconds>" for every process hack/cluster.sh started
  local tick f pid
  tick=$(getconf CLK_TCK)
  for f in "$state"/pids/*.pid; do
    pid=$(cat "$f" 2>/dev/null) || continue
    [[ -r /proc/$pid/stat ]] || continue
    # Fields 14 and 15 of /proc/<pid>/stat (after the command in parentheses): utime, stime.
    awk -v n="$(basename "$f" .pid)" -v t="$tick" '{sub(/^.*\) /, ""); print n, ($12 + $13) / t}' "/proc/$pid/stat"
  done
}

scope_kueue_webhooks() {
  # Kueue's pod webhooks have no object selector: scoped to the namespaces labelled for Kueue's runs
  # (bench.sluice.dev/kueue=on), so that the other runs pay for no Kueue call.
  local kind cfg
  for kind in mutatingwebhookconfigurations validatingwebhookconfigurations; do
    for cfg in $(kubectl get "$kind" -o name | grep -i kueue); do
      kubectl get "$cfg" -o json | python3 "$bench_py/scope_kueue_webhooks.py" | kubectl replace -f - >&2
    done
  done
}

measure_begin() { # name: the API server's request counters, the components' CPU and the load average before a run
  api_metrics "$out/$1.metrics-before"
  cpu_seconds > "$out/$1.cpu-before"
  cut -d' ' -f1-3 /proc/loadavg > "$out/$1.load-before"
  date +%s.%N > "$out/$1.t-before"
}

measure_end() { # name
  date +%s.%N > "$out/$1.t-after"
  cut -d' ' -f1-3 /proc/loadavg > "$out/$1.load-after"
  cpu_seconds > "$out/$1.cpu-after"
  api_metrics "$out/$1.metrics-after"
}

end_kueue_pods() { # namespace...: Kueue's pods carry its finalizer until they end; kwok ends no pod being deleted
  local ns
  for ns in "$@"; do
    kubectl -n "$ns" annotate pods --all --field-selector=status.phase=Running sluice.dev/kwok-phase=Succeeded \
      --overwrite >/dev/null 2>&1 || true
  done
}

delete_namespaces() { # selector: delete the namespaces and wait until they are gone (finalizers left behind taken off)
  local sel=$1 i ns
  kubectl delete namespace -l "$sel" --wait=false >&2 || true
  for i in $(seq 900); do
    [[ -z "$(kubectl get namespace -l "$sel" -o name 2>/dev/null)" ]] && return 0
    if (( i % 120 == 0 )); then
      for ns in $(kubectl get namespace -l "$sel" -o jsonpath='{.items[*].metadata.name}'); do
        # Only the pods that hold a finalizer: a slow deletion of 20,000 pods without any is no reason
        # to patch each of them.
        kubectl -n "$ns" get pods -o jsonpath='{range .items[?(@.metadata.finalizers)]}pod/{.metadata.name}{"\n"}{end}' \
          | xargs -r -P 4 -n 20 kubectl -n "$ns" patch --type=merge \
          -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
      done
    fi
    sleep 1
  done
  echo "bench: namespaces $sel still there after 900 s" >&2
  return 1
}

bench_queue() { # mode namespace quota-cpu [admission]: the run's queue, sluice's or Kueue's, active
  local mode=$1 ns=$2 quota=$3 admission=${4:-}
  case $mode in
    sluice) kubectl apply -f - >&2 <<YAML
apiVersion: sluice.dev/v1alpha1
kind: CapacityQueue
metadata: {name: $ns}
spec: {quota: {cpu: "$quota"}${admission:+, admission: $admission}}
YAML
      kubectl wait --for=condition=Active --timeout=120s "capacityqueue/$ns" >&2 ;;
    kueue) kubectl apply -f - >&2 <<YAML
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: $ns}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: $ns}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: $ns
      resources:
      - {name: cpu, nominalQuota: "$quota"}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: $ns, namespace: $ns}
spec: {clusterQueue: $ns}
YAML
      kubectl wait --for=condition=Active --timeout=120s "clusterqueue/$ns" >&2
      kubectl -n "$ns" wait --for=condition=Active --timeout=120s "localqueue/$ns" >&2 ;;
  esac
}
