#!/usr/bin/env bash
# sluice's benchmarks (issue 6): produces the figures, writes each part's tables into its own section
# of BENCHMARKS.md (between the bench.sh:<part> markers) and its keys into bench/results.json, leaving
# the parts not run as they are. Not part of hack/test.sh.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: hack/bench.sh [--only admission|scale|webhook|e2e] [--quick] [--no-write | --report-only]

  admission  criterion: one admission pass over 1k/10k/100k workloads and 10k/100k pods, the
             rewritten pass and the one before it (admission_reference) side by side
  scale      a process holding 10k workloads / 100k realistic pods as the controller's pod cache
             holds them (queue::pod_cache::CachedPod in a reflector store): snapshot build, pass,
             peak RSS, three runs, and one at 200k pods (growth per pod); beside them the same pods
             held as k8s Pods (as listed, managedFields dropped, trimmed as before CachedPod):
             hack/bench/scale.sh
  webhook    sluice's webhook server in one process, the load generator in another (TLS,
             keep-alive, HTTP/1.1, Spark executor and Ray worker AdmissionReviews of ~8 KB, 1 s warm-up):
             p50/p99/p99.9/max at fixed rates, and the highest rate held with p99 under 1 ms; the
             same loads against the floor (webhook_load --floor: the same TLS/HTTP server stack with
             a fixed answer), side by side: the part of the latency that belongs to the machine

  --quick     shorter runs (a smoke test of the tooling; figures not meant to be quoted)
  --no-write  print the results, leave BENCHMARKS.md and bench/results.json alone
  --report-only  measure nothing: rewrite the tables of the parts with raw results in target/bench
             (each from its last run; with --only, that part's only)

  e2e        one local cluster (hack/cluster.sh up --nodes 100 --with-sluice --release-sluice:
             sluice's release build; Kueue added with --with-kueue for its own run, the last), and in
             it, one after another, the same 5,000+ pods (single pods, gangs of 4-8, groups of 32)
             created by e2e_load (tools/, 32 creates in flight): (a) no gate, (a')
             no gate but a do-nothing webhook on every create,
             (b) sluice with quota above demand (and again, (b0), with no status write budget:
             --status-writes-per-second 0), (c) Kueue's plain-pod integration (pod groups)
             with the same quota, (d) sluice with a fifth of the quota, each pod ended 1 s after
             it runs: pods Running over time, admitted pods/s, API server requests per pod (deltas
             of apiserver_request_total); a PNG plot (matplotlib in a venv under
             ${SLUICE_CACHE:-~/.cache/sluice}/bench-venv). Brings the cluster down at the end.

  status_lag DynamicWorkload status lag behind pods during the e2e burst, every workload (no gate and
             sluice, RUNS times): hack/bench/status_lag.sh (its own cluster; not part of a full run)

  shapes     Spark-shaped (driver, then executors over time) and Ray-shaped (RayClusters scaled up)
             applications: no gate, sluice, Kueue (elastic RayClusters): hack/bench/shapes.sh
  peer       Kueue's scheduler performance suite (baseline, 15,000 workloads) as plain pods, sluice
             and Kueue: hack/bench/peer.sh
  peer_jobs  the same suite as batch/v1 Jobs (what Kueue's users run): hack/bench/peer.sh, PEER_AS=jobs
  peer_tas   the suite's topology-aware shape (configs/tas: 2/4/8-pod Jobs asking for one rack, 10
             racks of 64 nodes): hack/bench/peer.sh, PEER_SHAPE=tas
  large      the e2e load at 20,000 pods on 500 kwok nodes, no gate, sluice, Kueue: hack/bench/large.sh
             (shapes, peer*, large: their own cluster, runs and report; not part of a full run)

  turnover   a pod ending to the next waiting pod ungated in a full queue, p50/p99 over 2,000
             handovers, 3 runs: hack/bench/turnover.sh (not part of a full run)

Env: E2E_PODS (default 5000; 300 with --quick), E2E_NODES (default 100), E2E_RUNS (the e2e runs
to make, by name, e.g. "nogate sluice noevents churn churn-noevents"; default all).

Each part writes only its own section of BENCHMARKS.md (<!-- bench.sh:<part>:begin/end -->: the run's
date, command, versions and machine, then its tables) and only its keys of bench/results.json
(measured_at_by_part.<part>; measured_at is the latest of them); the other parts' stay as they are.
EOF
}

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
orig_args="$*"
only="" quick=0 write=1 measure=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --only) only="${2:?--only needs a value}"; shift 2 ;;
    --quick) quick=1; shift ;;
    --no-write) write=0; shift ;;
    --report-only) measure=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$only" in
  ""|admission|scale|webhook|e2e) ;;
  status_lag) exec "$root/hack/bench/status_lag.sh" ;;   # its own cluster, runs and report (see that script)
  shapes|peer|large) QUICK=$quick WRITE=$write exec "$root/hack/bench/$only.sh" ;;   # its own cluster, runs and report
  peer_jobs) PEER_AS=jobs QUICK=$quick WRITE=$write exec "$root/hack/bench/peer.sh" ;;
  peer_tas) PEER_SHAPE=tas QUICK=$quick WRITE=$write exec "$root/hack/bench/peer.sh" ;;
  turnover) exec "$root/hack/bench/turnover.sh" $( ((quick)) && echo --quick ) $( ((write)) || echo --no-write ) ;;   # the cluster of $SLUICE_CLUSTER_STATE
  *) echo "bench.sh: --only wants admission, scale, webhook or e2e, not $only" >&2; exit 2 ;;
esac
want() { [[ -z "$only" || "$only" == "$1" ]]; }

out="$root/target/bench"
# Where cargo builds (the tools' binaries, criterion's results): CARGO_TARGET_DIR when set.
target_dir="${CARGO_TARGET_DIR:-$root/target}"
# The Python of the report, the plot and small helpers (hack/bench/*.py).
bench_py="$root/hack/bench"
mkdir -p "$out" "$root/bench"
started_at="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
versions="sluice $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes'), $(rustc --version | cut -d' ' -f1-2)"
parts=()   # the parts whose sections and keys this run rewrites
# A part about to be measured: its earlier raw results go, target/bench/run-<part> notes this run
# (start, command, load average as the part starts, versions) for its section's first line.
begin_part() {
  rm -f "$out/$1".* "$out/$1"-*
  printf '%s\n%s\n%s\n%s\n' "$started_at" "$orig_args" "$(cut -d' ' -f1-3 /proc/loadavg)" "$versions" > "$out/run-$1"
  parts+=("$1")
}
if [[ $measure == 0 ]]; then
  for part in admission scale webhook e2e; do
    if want "$part" && [[ -s "$out/run-$part" ]]; then parts+=("$part"); fi
  done
  [[ ${#parts[@]} -gt 0 ]] || { echo "bench.sh: no earlier run${only:+ of $only} in $out" >&2; exit 1; }
  only="none"   # measure nothing below
fi

if want admission; then
  echo "== admission pass (criterion)" >&2
  begin_part admission
  crit_args=(--noplot)
  [[ $quick == 1 ]] && crit_args+=(--warm-up-time 1 --measurement-time 2)
  # The bench compares the pass with the reference model, which only tests and --features reference build.
  cargo bench --bench admission --features reference -- "${crit_args[@]}" 2>&1 | tee "$out/admission.txt" >&2
  python3 "$bench_py/criterion_medians.py" "$target_dir/criterion" > "$out/admission.json"
fi

if want scale; then
  echo "== controller holding 10k workloads / 100k pods" >&2
  begin_part scale
  cargo build --release -p sluice-tools --bin admission_scale >&2
  "$root/hack/bench/scale.sh" "$out" "$target_dir" "$quick"
fi

if want webhook; then
  echo "== webhook: sluice's server and the floor, each in its own process, the load generator in a third" >&2
  begin_part webhook
  cargo build --release -p sluice-tools --bin webhook_load >&2
  bin="$target_dir/release/webhook_load"
  seconds=10; reps=3; [[ $quick == 1 ]] && { seconds=2; reps=1; }
  rates=(2000 5000 10000 15000 20000 25000 30000 35000 40000)
  [[ $quick == 1 ]] && rates=(2000 20000)
  : > "$out/webhook.jsonl"
  # sluice's webhook server and the floor (webhook_load --floor: the same TLS/HTTP stack answering a
  # fixed review, never decoding it), both up at once, one server thread each (as `sluice serve
  # --webhook-threads` defaults to); an idle one costs nothing. Every load runs against each in
  # turn, $reps times: this machine's tail latency varies from run to run by more than the
  # difference between the two, so the tables give the median and the range.
  declare -A port
  servers=()
  trap 'kill "${servers[@]}" 2>/dev/null || true' EXIT
  for kind in sluice floor; do
    port[$kind]="$(python3 "$bench_py/free_port.py")"
    floor_flag=(); [[ $kind == floor ]] && floor_flag=(--floor)
    "$bin" --serve-only --server-threads 1 "${floor_flag[@]}" --listen "127.0.0.1:${port[$kind]}" \
      --ca-out "$out/webhook-$kind-ca.pem" > "$out/webhook-$kind-server.log" 2>&1 &
    servers+=("$!")
    for _ in $(seq 300); do grep -q '^serving' "$out/webhook-$kind-server.log" 2>/dev/null && break; sleep 0.1; done
    grep -q '^serving' "$out/webhook-$kind-server.log" || { echo "bench.sh: the webhook server ($kind) did not start" >&2; exit 1; }
  done
  load() { # server rep webhook_load-arguments...: one JSON line, tagged, into webhook.jsonl
    local kind=$1 rep=$2; shift 2
    "$bin" --url "https://127.0.0.1:${port[$kind]}" --ca "$out/webhook-$kind-ca.pem" \
      --shape mixed --json --concurrency 32 "$@" | sed "s/^{/{\"server\":\"$kind\",\"rep\":$rep,/" | tee -a "$out/webhook.jsonl" >&2
  }
  for rep in $(seq "$reps"); do
    for rate in "${rates[@]}"; do
      for kind in sluice floor; do load "$kind" "$rep" --rate "$rate" --seconds "$seconds" --warmup 1; done
    done
    # HTTP/2 on one connection: how the API server calls a webhook at a loopback URL (sluice serve --local).
    for rate in 10000 20000; do
      for kind in sluice floor; do load "$kind" "$rep" --rate "$rate" --seconds "$seconds" --warmup 1 --http2; done
    done
    # Closed loop: the most each answers with the load generator beside it, whatever the latency.
    for kind in sluice floor; do load "$kind" "$rep" --requests $((seconds * 20000)); done
  done
  kill "${servers[@]}" 2>/dev/null || true
  wait "${servers[@]}" 2>/dev/null || true
  trap - EXIT
fi


if want e2e; then
  echo "== end to end on the local control plane: no gate, sluice, Kueue, quota-limited sluice" >&2
  begin_part e2e
  cargo build --release -p sluice-tools --bin e2e_load >&2
  e2e_bin="$target_dir/release/e2e_load"
  e2e_pods="${E2E_PODS:-5000}"; [[ $quick == 1 ]] && e2e_pods="${E2E_PODS:-300}"
  e2e_nodes="${E2E_NODES:-100}"
  trap 'hack/cluster.sh down >&2 || true' EXIT
  # sluice's release build (what is measured); a cluster already up restarts sluice with it.
  # Kueue joins the cluster only for its own run (c), the last: its controller watches every pod of
  # the cluster, which would cost every other run CPU (4-18 s per run when it ran throughout).
  # E2E_SLUICE_BUILD=debug runs the debug build (request counts only: figures not to quote).
  sluice_build=--release-sluice; [[ ${E2E_SLUICE_BUILD:-release} == debug ]] && sluice_build=
  hack/cluster.sh up --nodes "$e2e_nodes" --with-sluice $sluice_build >&2
  eval "$(hack/cluster.sh env)"
  cat "$root/.cluster/sluice.profile" > "$out/e2e-sluice-build"
  # shellcheck disable=SC1091  # hack/versions.sh: pinned versions (variables only)
  (source hack/versions.sh && echo "Kubernetes $KUBERNETES_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION, Kueue $KUEUE_VERSION") > "$out/e2e-versions"
  echo "$e2e_nodes" > "$out/e2e-nodes"
  # shellcheck source=hack/bench/lib.sh
  source "$root/hack/bench/lib.sh"   # api_metrics, cpu_seconds, scope_kueue_webhooks, bench_queue

  # The floor of any webhook-based gate: a do-nothing mutating webhook (webhook_load --floor: sluice's
  # TLS/HTTP server stack answering every review with the request's uid and one fixed label patch,
  # never decoding the pod) called on every pod create of the run (a'), scoped to its namespace.
  cargo build --release -p sluice-tools --bin webhook_load >&2
  floor_port="$(python3 "$bench_py/free_port.py")"
  "$target_dir/release/webhook_load" --serve-only --floor --server-threads 1 --listen "127.0.0.1:$floor_port" \
    --ca-out "$out/e2e-floor-ca.pem" > "$out/e2e-floor-server.log" 2>&1 &
  floor_server=$!
  trap 'kill "$floor_server" 2>/dev/null || true; hack/cluster.sh down >&2 || true' EXIT
  for _ in $(seq 300); do grep -q '^serving' "$out/e2e-floor-server.log" 2>/dev/null && break; sleep 0.1; done
  grep -q '^serving' "$out/e2e-floor-server.log" || { echo "bench.sh: the floor webhook server did not start" >&2; exit 1; }
  kubectl apply -f - >&2 <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: bench-floor}
webhooks:
- name: floor.bench.sluice.dev
  clientConfig:
    url: https://127.0.0.1:$floor_port/mutate-pods
    caBundle: $(base64 -w0 < "$out/e2e-floor-ca.pem")
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods], scope: Namespaced}]
  namespaceSelector: {matchLabels: {bench.sluice.dev/floor: "on"}}
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  timeoutSeconds: 10
YAML

  sluice_metrics() { # sluice's own figures after a run (its /metrics on the host)
    # shellcheck disable=SC1091  # written by hack/cluster.sh: SLUICE_METRICS_ADDR
    (source "$root/.cluster/sluice.env" && curl -sf --max-time 10 "http://$SLUICE_METRICS_ADDR/metrics") |
      grep -E '^sluice_(webhook_request_duration_seconds_(sum|count)|admission_pass_duration_seconds_(sum|count)|admitted_pods_total|admitted_at_creation_pods_total|status_writes_total|ungate_errors_total|status_writes_pending)' || true
  }
  e2e_run() { # name mode quota-cpu [e2e_load args]; mode: nogate, sluice, sluice-inpass, kueue
    local name=$1 mode=$2 quota=$3 ns="e2e-$1" admission=AtCreation; shift 3
    if [[ -n ${E2E_RUNS:-} && " $E2E_RUNS " != *" $name "* ]]; then return 0; fi
    echo "-- e2e $name ($mode, quota ${quota:-none})" >&2
    kubectl create namespace "$ns" >&2
    [[ $mode == kueue ]] && kubectl label namespace "$ns" bench.sluice.dev/kueue=on >&2
    [[ $mode == floor ]] && { kubectl label namespace "$ns" bench.sluice.dev/floor=on >&2; mode=nogate; }
    for _ in $(seq 100); do kubectl -n "$ns" get serviceaccount default >/dev/null 2>&1 && break; sleep 0.2; done
    [[ $mode == sluice-inpass ]] && { mode=sluice; admission=InPass; }
    [[ $mode == nogate ]] || bench_queue "$mode" "$ns" "$quota" "$admission"
    sleep 2
    api_metrics "$out/e2e-$name.metrics-before"
    cpu_seconds > "$out/e2e-$name.cpu-before"
    [[ $mode == sluice ]] && sluice_metrics > "$out/e2e-$name.sluice-before"
    /usr/bin/time -f "e2e_load %U %S" -o "$out/e2e-$name.cpu-client" \
      "$e2e_bin" --mode "$mode" --namespace "$ns" --queue "$ns" --pods "$e2e_pods" "$@" > "$out/e2e-$name.json"
    cpu_seconds > "$out/e2e-$name.cpu-after"
    api_metrics "$out/e2e-$name.metrics-after"
    [[ $mode == sluice ]] && sluice_metrics > "$out/e2e-$name.sluice-after"
    python3 "$bench_py/e2e_summary.py" "$out/e2e-$name.json" >&2
    # Clean up: the namespace and its pods gone before the next run. Kueue's plain pods carry its
    # finalizer, which it drops only once a pod has ended, and kwok ends no pod being deleted: end
    # them first (kwok's pod-end-on-request stage), then delete.
    if [[ $mode == kueue ]]; then
      kubectl -n "$ns" annotate pods --all sluice.dev/kwok-phase=Succeeded --overwrite >/dev/null
      for _ in $(seq 300); do
        [[ -z "$(kubectl -n "$ns" get pods --field-selector=status.phase=Running -o name 2>/dev/null | head -1)" ]] && break
        sleep 1
      done
    fi
    kubectl delete namespace "$ns" --wait=false >&2
    for i in $(seq 600); do
      kubectl get namespace "$ns" >/dev/null 2>&1 || break
      if [[ $i == 120 ]]; then # a finalizer left behind: take it off
        kubectl -n "$ns" get pods -o name | xargs -r -P 4 -n 1 kubectl -n "$ns" patch --type=merge \
          -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
      fi
      sleep 1
    done
    kubectl get namespace "$ns" >/dev/null 2>&1 && { echo "bench.sh: namespace $ns still there after 600 s" >&2; exit 1; }
    case $mode in
      sluice) kubectl delete capacityqueue "$ns" --ignore-not-found >&2 ;;
      kueue) kubectl delete clusterqueue "$ns" --ignore-not-found >&2; kubectl delete resourceflavor "$ns" --ignore-not-found >&2 ;;
    esac
    sleep 3
  }
  quota=$(( (e2e_pods + 500) / 50 ))   # cpu; each pod asks 10m: twice the demand and more
  e2e_run nogate nogate ""
  e2e_run floor floor ""
  # (b0) sluice with no status write budget (sluice serve --status-writes-per-second 0): what the
  # budget saves the API server, and what it costs the ledger's freshness. Before (b), so that any
  # slowing of later runs (a fuller etcd, a bigger API server heap) falls on (b), not on (b0).
  # cluster.sh restarts sluice when its SLUICE_* settings change; back to the defaults after.
  SLUICE_STATUS_WRITES_PER_SECOND=0 hack/cluster.sh up --nodes "$e2e_nodes" --with-sluice $sluice_build --no-build >&2
  e2e_run nolimit sluice "$quota"
  hack/cluster.sh up --nodes "$e2e_nodes" --with-sluice $sluice_build --no-build >&2
  e2e_run sluice sluice "$quota"
  e2e_run inpass sluice-inpass "$quota"
  churn_quota=$(( e2e_pods / 500 > 0 ? e2e_pods / 500 : 1 ))   # a fifth of the demand
  e2e_run churn sluice "$churn_quota" --end-after 1
  # (b-), (d-): (b) and (d) without events on users' objects (--events-per-second 0): what the
  # events of "why is my job waiting" cost the API server, per pod (most in (d), where pods wait).
  SLUICE_EVENTS_PER_SECOND=0 hack/cluster.sh up --nodes "$e2e_nodes" --with-sluice $sluice_build --no-build >&2
  e2e_run noevents sluice "$quota"
  e2e_run churn-noevents sluice "$churn_quota" --end-after 1
  hack/cluster.sh up --nodes "$e2e_nodes" --with-sluice $sluice_build --no-build >&2
  # Kueue's run only when asked (its cluster start builds and starts Kueue, minutes on a cold cache).
  if [[ -z ${E2E_RUNS:-} || " $E2E_RUNS " == *" kueue "* ]]; then
    hack/cluster.sh up --nodes "$e2e_nodes" --with-sluice --release-sluice --with-kueue --no-build >&2
    scope_kueue_webhooks
    e2e_run kueue kueue "$quota"
  fi
  kill "$floor_server" 2>/dev/null || true
  hack/cluster.sh down >&2
  trap - EXIT
  venv="${SLUICE_CACHE:-$HOME/.cache/sluice}/bench-venv"
  if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
    python3 -m venv "$venv" >&2 && "$venv/bin/pip" install -q matplotlib >&2
  fi
  "$venv/bin/python" "$bench_py/plot_e2e.py" "$out"
fi

# The tables of the parts this run measured (or, with --report-only, found in target/bench), each
# into its own section of BENCHMARKS.md and its own keys of bench/results.json.
python3 "$bench_py/report.py" "$out" "$root" "$write" "${parts[@]}"
