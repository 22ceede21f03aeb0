#!/usr/bin/env bash
# The churn run with an independent auditor (issue 23). Not part of hack/test.sh.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: hack/chaos.sh [--pods N] [--queues Q] [--no-write]

On the local cluster (hack/cluster.sh up --with-sluice, brought up if needed, left up; the cluster
of SLUICE_CLUSTER_STATE), two sluice replicas sharing one Lease: replica 1 is the cluster's
'sluice serve --local', replica 2 is started here from the same binary with its own ports
(pids/sluice-2.pid, logs/sluice-2.log). Both register replica 1's webhook URL: the webhooks are
served by replica 1 (restarted when killed), leadership of the controller moves between the two.

Load: N pods (default 10000) in Q queues (default 4; cpu 4 each, BestEffortFIFO and StrictFIFO
alternating, one in four with admission InPass), created by tools' e2e_load (single pods, gangs of
4-8, groups of 32, 100m cpu each, 32 creates in flight per queue, each pod ended 1 s after it runs),
and, with every chaos event, one high-priority 1-cpu pod in a random queue (preemption of the
load's pods, the queues' default withinQueue LowerPriority).

Chaos, every 5-15 s until the load is done: SIGKILL of the Lease's holder right after a pod
creation was answered by the webhook (then that replica is started again), a webhook restart
(SIGTERM of replica 1, started again), and once, half way, a kube-apiserver restart.

The auditor (hack/chaos_audit.py, no sluice code) samples every second and checks per queue:
admitted unended pods' requests <= quota, every pod and workload counted once, no pod gated over
10 s while it computes room for it under a renewing leader. It prints and writes into
bench/results.json (other keys kept): churn_samples, churn_kills, churn_max_usage_ratio,
churn_longest_stranded_s. Exit status 1 if any sample broke the promise.

  --pods N      pods in all (default 10000)
  --queues Q    queues (default 4)
  --no-write    leave bench/results.json alone
EOF
}

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
PODS=10000 QUEUES=4 WRITE=1
while (($#)); do
  case $1 in
    --pods) PODS=${2:?--pods needs a number}; shift 2 ;;
    --queues) QUEUES=${2:?--queues needs a number}; shift 2 ;;
    --no-write) WRITE=0; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "chaos.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $PODS =~ ^[0-9]+$ && $PODS -ge 100 ]] || { echo "chaos.sh: --pods wants a number >= 100, not '$PODS'" >&2; exit 2; }
[[ $QUEUES =~ ^[0-9]+$ && $QUEUES -ge 1 && $QUEUES -le 26 ]] || { echo "chaos.sh: --queues wants 1-26, not '$QUEUES'" >&2; exit 2; }

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
STATE=${SLUICE_CLUSTER_STATE:-$root/.cluster}
log() { echo "chaos.sh: $*" >&2; }

# Enough kwok nodes for the load's peak (quota-bound: QUEUES x 4 cpu) and the pods kept after ending.
nodes=$(((PODS + 999) / 1000 + 1))
hack/cluster.sh up --with-sluice --nodes "$nodes" --node-cpu 64 --node-pods 1100
env_text=$(hack/cluster.sh env)
eval "$env_text"
# Later 'hack/cluster.sh up' calls must see the SLUICE_* environment of the first (or they restart sluice).
webhook_addr=$SLUICE_WEBHOOK_ADDR
unset SLUICE_WEBHOOK_ADDR SLUICE_METRICS_ADDR
kubectl_bin=$(command -v kubectl)
cargo build --quiet -p sluice-tools --bin e2e_load
e2e_load=$CARGO_TARGET_DIR/debug/e2e_load

run=chaos-$(date +%s)
out=$root/target/chaos/$run
mkdir -p "$out"
log "run $run: $PODS pods in $QUEUES queues; output in $out"

queues=()
for ((i = 0; i < QUEUES; i++)); do
  strategy=BestEffortFIFO; ((i % 2)) && strategy=StrictFIFO
  admission=AtCreation; ((i % 4 == 3)) && admission=InPass
  queues+=("$run-q$i")
  kubectl create namespace "$run-$i" >/dev/null
  kubectl apply --server-side -f - >/dev/null <<EOF
apiVersion: sluice.dev/v1alpha1
kind: CapacityQueue
metadata: {name: $run-q$i}
spec: {quota: {cpu: "4"}, queueingStrategy: $strategy, admission: $admission}
EOF
done
kubectl apply --server-side -f - >/dev/null <<EOF
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: sluice-chaos-high}
value: 1000
description: hack/chaos.sh's preemptors
EOF

# ---- replica 2 --------------------------------------------------------------------------------
r2_count=0
start_replica2() {
  local ports
  ports=$(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
  read -r r2_port r2_metrics <<<"$ports"
  r2_count=$((r2_count + 1))
  r2_identity="$run-replica-2-$r2_count"
  env KUBECONFIG="$STATE/kubeconfig" RUST_LOG="${RUST_LOG:-info}" "$STATE/sluice" serve --local --no-install \
    --identity "$r2_identity" --listen "127.0.0.1:$r2_port" --metrics-listen "127.0.0.1:$r2_metrics" \
    --webhook-url "https://$webhook_addr" >>"$STATE/logs/sluice-2.log" 2>&1 &
  echo $! >"$STATE/pids/sluice-2.pid"
}
stop_replica2() {
  local pid
  pid=$(cat "$STATE/pids/sluice-2.pid" 2>/dev/null) || return 0
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -f "$STATE/pids/sluice-2.pid"
}
restart_replica1() { hack/cluster.sh up --with-sluice --no-build >>"$out/cluster.log" 2>&1; }

start_replica2

# ---- the auditor and the load -----------------------------------------------------------------
python3 hack/chaos_audit.py --kubectl "$kubectl_bin" --queues "${queues[@]}" --namespace-prefix "$run-" \
  --status "$out/status.json" --out "$out/audit.json" 2>"$out/audit.log" &
auditor=$!
cleanup() {
  kill -TERM "${loads[@]}" 2>/dev/null || true
  kill -TERM "$auditor" 2>/dev/null || true
  stop_replica2
}
trap cleanup EXIT

per_queue=$((PODS / QUEUES))
loads=()
for ((i = 0; i < QUEUES; i++)); do
  "$e2e_load" --mode sluice --namespace "$run-$i" --queue "$run-q$i" --pods "$per_queue" --cpu 100m \
    --end-after 1 --timeout $((300 + PODS / 5)) >"$out/load-$i.json" 2>"$out/load-$i.log" &
  loads+=($!)
done

# ---- chaos ------------------------------------------------------------------------------------
kills=0 webhook_restarts=0 apiserver_restarts=0 preemptors=0 events=0
holder() { kubectl -n sluice-system get lease sluice-controller -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true; }
preemptor() { # a high-priority pod in a random queue; returns once the webhook answered
  local i=$((RANDOM % QUEUES))
  preemptors=$((preemptors + 1))
  kubectl -n "$run-$i" create -f - >/dev/null 2>>"$out/chaos.log" <<EOF || true
apiVersion: v1
kind: Pod
metadata:
  name: high-$preemptors
  labels: {sluice.dev/queue: $run-q$i}
  annotations: {sluice.dev/kwok-phase: Succeeded}
spec:
  priorityClassName: sluice-chaos-high
  terminationGracePeriodSeconds: 0
  containers: [{name: c, image: busybox, resources: {requests: {cpu: "1"}}}]
EOF
}
r1_identity() { echo "$(cat /proc/sys/kernel/hostname)-$(cat "$STATE/pids/sluice.pid" 2>/dev/null)"; }
# Waits (up to a minute) until a live replica holds the Lease: right after a kill the Lease still
# names the dead one for up to a lease duration, and killing the other then would kill a follower.
live_holder() {
  local h i
  for ((i = 0; i < 120; i++)); do
    h=$(holder)
    if [[ -n $h && ($h == "$r2_identity" || $h == "$(r1_identity)") ]]; then echo "$h"; return 0; fi
    sleep 0.5
  done
  echo ""
}
kill_leader() {
  local h pid
  h=$(live_holder)
  [[ -n $h ]] || { log "no live replica took the Lease within a minute (holder: $(holder))"; return 0; }
  preemptor
  if [[ $h == "$r2_identity" ]]; then
    pid=$(cat "$STATE/pids/sluice-2.pid")
    kill -KILL "$pid"; wait "$pid" 2>/dev/null || true
    log "SIGKILL leader replica 2 ($h)"
    start_replica2
  else
    kill -KILL "$(cat "$STATE/pids/sluice.pid")"
    log "SIGKILL leader replica 1 ($h)"
    restart_replica1
  fi
  kills=$((kills + 1))
}
# e2e_load ends each pod 1 s after it runs, retrying for 2 s: a pod that ran while the API server
# was down stays Running for good and holds its queue's room (a StrictFIFO queue then waits behind
# a gang that no longer fits, rightly). The janitor ends such pods (Running over 20 s, not told to end).
janitor_ended=0
janitor() {
  local stale
  stale=$(kubectl get pods -A -l sluice.dev/queue -o json 2>/dev/null | python3 -c '
import json, sys, datetime
now = datetime.datetime.now(datetime.timezone.utc)
for p in json.load(sys.stdin)["items"]:
    md, st = p["metadata"], p.get("status", {})
    if not md["namespace"].startswith(sys.argv[1]) or st.get("phase") != "Running":
        continue
    if "sluice.dev/kwok-phase" in md.get("annotations", {}) or not st.get("startTime"):
        continue
    started = datetime.datetime.fromisoformat(st["startTime"].replace("Z", "+00:00"))
    if (now - started).total_seconds() > 20:
        print(md["namespace"], md["name"])' "$run-") || true
  [[ -n $stale ]] || return 0
  while read -r ns name; do
    kubectl -n "$ns" annotate pod "$name" sluice.dev/kwok-phase=Succeeded >/dev/null 2>&1 || true
  done <<<"$stale"
  janitor_ended=$((janitor_ended + $(wc -l <<<"$stale")))
  log "janitor: ended $(wc -l <<<"$stale") pods left Running by the load"
}
loads_running() { local p; for p in "${loads[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
# A load whose pod was lost (its creates refused 20 times while the webhook was down) or evicted
# before it ran waits for it until its timeout: the run also ends once nothing is gated or held
# for 15 s (the auditor's status), which never happens while pods are still being created.
idle_since=""
settled() {
  local busy
  busy=$(python3 -c "import json;s=json.load(open('$out/status.json'));print(s['gated']+s['holding'])" 2>/dev/null || echo 1)
  if ((busy > 0)); then idle_since=""; return 1; fi
  [[ -n $idle_since ]] || idle_since=$(date +%s)
  (($(date +%s) - idle_since >= 15))
}
started=$(date +%s)
while loads_running && ! settled; do
  sleep $((5 + RANDOM % 11))
  loads_running && ! settled || break
  janitor
  events=$((events + 1))
  if ((apiserver_restarts == 0)) && [[ $(python3 -c "import json;print(json.load(open('$out/status.json'))['pods'])" 2>/dev/null || echo 0) -ge $((PODS / 2)) ]]; then
    log "restarting kube-apiserver"
    kill -TERM "$(cat "$STATE/pids/kube-apiserver.pid")"
    while kill -0 "$(cat "$STATE/pids/kube-apiserver.pid")" 2>/dev/null; do sleep 0.2; done
    restart_replica1
    apiserver_restarts=1
  elif ((events % 3 == 0)); then
    log "restarting the webhook (replica 1)"
    r1_pid=$(cat "$STATE/pids/sluice.pid")
    kill -TERM "$r1_pid" 2>/dev/null || log "replica 1 was not running (it is started again)"
    # Gone before 'up' looks, or 'up' finds it alive and leaves it to finish shutting down.
    for ((w = 0; w < 300; w++)); do kill -0 "$r1_pid" 2>/dev/null || break; sleep 0.1; done
    restart_replica1
    webhook_restarts=$((webhook_restarts + 1))
  else
    kill_leader
  fi
done
elapsed=$(($(date +%s) - started))
kill -TERM "${loads[@]}" 2>/dev/null || true
kill -TERM "$auditor"
audit_rc=0
wait "$auditor" || audit_rc=$?
stop_replica2
trap - EXIT

summary=$(python3 - "$out" "$kills" "$webhook_restarts" "$apiserver_restarts" "$preemptors" "$elapsed" "$PODS" "$QUEUES" "$janitor_ended" <<'PY'
import json, sys, glob
out, kills, webhooks, apiservers, preemptors, elapsed, pods, queues, janitor = sys.argv[1:]
audit = json.load(open(f"{out}/audit.json"))
loads = []
for f in sorted(glob.glob(f"{out}/load-*.json")):
    try:
        loads.append(json.load(open(f)))
    except ValueError:
        loads.append({})
print(json.dumps({
    "churn_samples": audit["churn_samples"], "churn_kills": int(kills),
    "churn_max_usage_ratio": audit["churn_max_usage_ratio"],
    "churn_longest_stranded_s": audit["churn_longest_stranded_s"],
    "churn_violations": audit["violation_count"], "churn_failed_reads": audit["failed_reads"],
    "churn_webhook_restarts": int(webhooks), "churn_apiserver_restarts": int(apiservers),
    "churn_preemptors": int(preemptors), "churn_seconds": int(elapsed), "churn_pods_asked": int(pods),
    "churn_queues": int(queues), "churn_janitor_ended": int(janitor),
    "churn_pods_run": sum(l.get("pods", 0) for l in loads if l.get("complete")) ,
    "churn_loads_complete": sum(1 for l in loads if l.get("complete")),
    "churn_create_retries": sum(l.get("create_retries", 0) for l in loads),
    "churn_creates_given_up": sum(open(f).read().count("(giving up)") for f in glob.glob(f"{out}/load-*.log")),
}))
PY
)
echo "$summary"
if ((WRITE)); then
  python3 - "$summary" <<'PY'
import json, sys, datetime
new = json.loads(sys.argv[1])
path = "bench/results.json"
try:
    data = json.load(open(path))
except (OSError, ValueError):
    data = {}
data.update(new)
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
data.setdefault("measured_at_by_part", {})["churn"] = now
data["measured_at"] = max(data.get("measured_at", now), now)
with open(path, "w") as f:
    json.dump(data, f, indent=2)
    f.write("\n")
PY
fi
if ((audit_rc != 0)); then
  log "FAILED: the auditor saw the promise broken ($out/audit.json, $out/audit.log)"
  exit 1
fi
log "passed: no sample broke the promise ($out)"
