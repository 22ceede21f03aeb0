#!/usr/bin/env bash
# The churn run with an independent auditor (issue 23). Not part of hack/test.sh.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: hack/chaos.sh [--pods N] [--queues Q] [--in-cluster] [--minutes M] [--no-build] [--no-write]

On the local cluster (hack/cluster.sh up --with-sluice, brought up if needed, left up; the cluster
of SLUICE_CLUSTER_STATE), two sluice replicas sharing one Lease: replica 1 is the cluster's
'sluice serve --local', replica 2 is started here from the same binary with its own ports
(pids/sluice-2.pid, logs/sluice-2.log). Both register replica 1's webhook URL: the webhooks are
served by replica 1 (restarted when killed), leadership of the controller moves between the two.

Load: N pods (default 10000) in Q queues (default 4; cpu 4 each, BestEffortFIFO and StrictFIFO
alternating, one in four with admission InPass; in two cohorts, even queues with borrowingLimit 2
cpu, one in four with lendingLimit 2 cpu), created by tools' e2e_load (single pods, gangs of 4-8,
groups of 32, 100m cpu each, 32 creates in flight per queue, each pod ended 1 s after it runs).
With every chaos event: one high-priority 1-cpu pod in a random queue (preemption of the load's
pods, the queues' default withinQueue LowerPriority); a batch/v1 Job of 6 pods of 1 cpu (a gang of
6 above its queue's quota of 4: it runs on what its cohort lends, and the Job controller recreates
what sluice evicts); every fourth event a ScavengerJob of 2 pods of 500m on queue 0's
scavengerQuota (2 cpu; evicted when ordinary work needs the room); every third event a RayCluster
through the real KubeRay operator (hack/cluster.sh --with-kuberay) in a random queue (head and
workers 500m, minReplicas 0), and with every event each live RayCluster scaled to 0-6 workers as
its autoscaler would, deleted after five events; every second event a Job whose 2 pods no node
takes (a node selector no node has) in its own queue (2 cpu, podsReadyTimeout 15s): admitted, sent
back by podsReadyTimeout, recreated by the Job controller, admitted again, deleted three Jobs
later; and a round of the hostile
tenant's moves (hack/chaos_hostile.py: a pod naming
another queue's ledger, a relabel, a gate removed by hand, a replayed admission token, an absurd
minimum, a negative request, forged admission annotations), each refused or defused, or counted as
escaped (the run then fails).

Chaos, every 5-15 s until the load is done: SIGKILL of the Lease's holder right after a pod
creation was answered by the webhook (then that replica is started again), a webhook restart
(SIGTERM of replica 1, started again), and once, half way, a kube-apiserver restart.

The auditor (hack/chaos_audit.py, no sluice code) keeps pods, queues and the Lease from watches
and checks every second: per queue admitted unended pods' requests <= quota (+ borrowingLimit),
per cohort the lending pool never overdrawn, every pod and workload counted once, every admission
inside the term that made it (sluice.dev/admitted-by against the Lease's history: never two
leaders), no pod gated over 10 s while it computes room for it under a renewing leader; it times
its own lag behind the API server with a probe pod. It prints and writes into bench/results.json
(other keys kept): churn_samples, churn_kills, churn_max_usage_ratio, churn_longest_stranded_s,
churn_auditor_lag_*, churn_hostile_*. Exit status 1 if any sample broke the promise or a hostile
move escaped.

With --in-cluster, sluice runs as manifests/ installs it: the CRDs and manifests/install applied
(kubectl apply), its Deployment's two replicas pinned to the real node (hack/cluster.sh up
--real-node: root, containerd; image sluice:dev built from the Dockerfile by hack/image.sh, a
release build, unless --no-build), both serving the
webhooks through the Service sluice-webhook (the API server calls a ready endpoint, a pod IP on the
node's bridge: --enable-aggregator-routing). The Lease holder is a pod: it is killed with kill -9
of its container's process (found with ctr), after which either its pod is deleted (the Deployment
starts a new replica, a new identity) or the kubelet restarts the container in place (same pod
name, same identity), alternately; a webhook restart deletes a random replica's pod (SIGTERM).
The real node is global: this mode holds flock /tmp/sluice-real-node.lock, brings the cluster of
SLUICE_CLUSTER_STATE up (without sluice on the host: it refuses a cluster that runs one), stops
the chaos after --minutes (default 12), copies the replicas' logs and the cluster's logs into the run's
output and takes the cluster down at the end.

  --pods N      pods in all (default 10000)
  --queues Q    queues (default 4)
  --in-cluster  sluice in-cluster on the real node (see above)
  --minutes M   in-cluster: stop the chaos after M minutes (default 12; the real node is held that
                long, other users of it wait)
  --no-build    run sluice's binary as it is built (hack/cluster.sh up --no-build); SLUICE_PROFILE
                picks debug (default) or release; --in-cluster: import the last image built
  --no-write    leave bench/results.json alone
EOF
}

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
PODS=10000 QUEUES=4 WRITE=1 IN_CLUSTER=0 MINUTES=12 NO_BUILD=()
while (($#)); do
  case $1 in
    --pods) PODS=${2:?--pods needs a number}; shift 2 ;;
    --queues) QUEUES=${2:?--queues needs a number}; shift 2 ;;
    --no-write) WRITE=0; shift ;;
    --in-cluster) IN_CLUSTER=1; shift ;;
    --minutes) MINUTES=${2:?--minutes needs a number}; shift 2 ;;
    --no-build) NO_BUILD=(--no-build); shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "chaos.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $PODS =~ ^[0-9]+$ && $PODS -ge 100 ]] || { echo "chaos.sh: --pods wants a number >= 100, not '$PODS'" >&2; exit 2; }
[[ $QUEUES =~ ^[0-9]+$ && $QUEUES -ge 1 && $QUEUES -le 26 ]] || { echo "chaos.sh: --queues wants 1-26, not '$QUEUES'" >&2; exit 2; }
[[ $MINUTES =~ ^[0-9]+$ && $MINUTES -ge 1 ]] || { echo "chaos.sh: --minutes wants a whole number >= 1, not '$MINUTES'" >&2; exit 2; }

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
STATE=${SLUICE_CLUSTER_STATE:-$root/.cluster}
log() { echo "chaos.sh: $*" >&2; }

# Enough kwok nodes for the load's peak (quota-bound: QUEUES x 4 cpu) and the pods kept after ending.
nodes=$(((PODS + 999) / 1000 + 1))
node_flags=(--nodes "$nodes" --node-cpu 64 --node-pods 1100)
run=chaos-$(date +%s)
out=$root/target/chaos/$run
mkdir -p "$out"
cargo build --quiet -p sluice-tools --bin e2e_load
e2e_load=$CARGO_TARGET_DIR/debug/e2e_load

# ---- sluice in-cluster (--in-cluster) -----------------------------------------------------------
SYS=sluice-system
CTR() { ctr --address "$STATE/node/containerd.sock" -n k8s.io "$@"; }
sluice_pods() { # name phase deleting(0/1) ready(true/false) containerID restarts, one line per pod
  kubectl -n $SYS get pods -l app.kubernetes.io/name=sluice -o json 2>/dev/null | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    cs = (p.get("status", {}).get("containerStatuses") or [{}])[0]
    print(p["metadata"]["name"], p.get("status", {}).get("phase"), int("deletionTimestamp" in p["metadata"]),
          str(cs.get("ready", False)).lower(), cs.get("containerID", "-"), cs.get("restartCount", 0))' || true
}
install_in_cluster() {
  kubectl apply --server-side -f manifests/crds >/dev/null
  kubectl wait --for condition=Established --timeout 60s -f manifests/crds >/dev/null
  kubectl apply -f manifests/install >/dev/null
  # What this node needs (its selector and toleration) and the log level; as tests/real_node.rs does.
  kubectl -n $SYS patch deployment sluice --type strategic -p "$(python3 -c '
import json, sys
print(json.dumps({"spec": {"template": {"spec": {
    "nodeSelector": {"sluice.dev/node": "real"},
    "tolerations": [{"key": "sluice.dev/real-node", "operator": "Exists", "effect": "NoSchedule"}],
    "containers": [{"name": "sluice", "env": [{"name": "RUST_LOG", "value": sys.argv[1]}]}]}}}}))' "${RUST_LOG:-info}")" >/dev/null
  kubectl -n $SYS rollout status deployment sluice --timeout 300s >&2
  local i
  for ((i = 0; i < 120; i++)); do
    [[ $(sluice_pods | awk '$2 == "Running" && $3 == 0 && $4 == "true"' | wc -l) == 2 ]] && break
    sleep 1
  done
  log "sluice in-cluster: $(sluice_pods | awk '{printf "%s(%s,%s) ", $1, $2, $4}')"
}
keep_log() { # pod: its container logs (the current and the previous one) into the run's output
  kubectl -n $SYS logs "$1" --all-containers >>"$out/sluice-pod-$1.log" 2>/dev/null || true
  kubectl -n $SYS logs "$1" --previous >>"$out/sluice-pod-$1.previous.log" 2>/dev/null || true
}
container_pid() { # containerd://<id> -> the pid of its task
  local id=${1#containerd://}
  CTR task ls 2>/dev/null | awk -v id="$id" '$1 == id {print $2}'
}
# The real node is global: its logs are kept in the run's output and the cluster goes down.
in_cluster_down() {
  local p
  for p in $(sluice_pods | awk '{print $1}'); do keep_log "$p"; done
  cp -r "$STATE/logs" "$out/cluster-logs" 2>/dev/null || true
  hack/cluster.sh down >>"$out/cluster.log" 2>&1 || log "hack/cluster.sh down failed ($out/cluster.log)"
}

if ((IN_CLUSTER)); then
  [[ $(id -u) == 0 ]] || { echo "chaos.sh: --in-cluster needs root (the real node)" >&2; exit 2; }
  if [[ -f $STATE/pids/sluice.pid ]] && kill -0 "$(cat "$STATE/pids/sluice.pid")" 2>/dev/null; then
    echo "chaos.sh: --in-cluster wants a cluster without sluice on the host; $STATE runs one (use another SLUICE_CLUSTER_STATE)" >&2
    exit 2
  fi
  # The image is built (from the Dockerfile, as hack/cluster.sh --real-node builds it) before the
  # lock is taken: the lock's time is for the node. --no-build imports the last one built.
  if ! ((${#NO_BUILD[@]})); then
    log "building sluice's image (hack/image.sh)"
    hack/image.sh --tag docker.io/library/sluice:dev --out "${SLUICE_CACHE:-$HOME/.cache/sluice}/images/sluice-dev.tar" >/dev/null
  fi
  exec 9>/tmp/sluice-real-node.lock
  log "waiting for the real node's lock (/tmp/sluice-real-node.lock)"
  flock -w 1200 9 || { echo "chaos.sh: the real node stayed taken for 20 minutes" >&2; exit 1; }
  trap in_cluster_down EXIT # also when what follows fails: the real node must not stay up
  hack/cluster.sh up --real-node --with-kuberay --no-build "${node_flags[@]}"
  eval "$(hack/cluster.sh env)"
  install_in_cluster
else
  hack/cluster.sh up --with-sluice --with-kuberay "${NO_BUILD[@]}" "${node_flags[@]}"
  env_text=$(hack/cluster.sh env)
  eval "$env_text"
  # Later 'hack/cluster.sh up' calls must see the SLUICE_* environment of the first (or they restart sluice).
  webhook_addr=$SLUICE_WEBHOOK_ADDR
  unset SLUICE_WEBHOOK_ADDR SLUICE_METRICS_ADDR SLUICE_DASHBOARD_ADDR
fi
kubectl_bin=$(command -v kubectl)
log "run $run: $PODS pods in $QUEUES queues$( ((IN_CLUSTER)) && echo ', sluice in-cluster'); output in $out"

queues=()
for ((i = 0; i < QUEUES; i++)); do
  strategy=BestEffortFIFO; ((i % 2)) && strategy=StrictFIFO
  admission=AtCreation; ((i % 4 == 3)) && admission=InPass
  limits=""
  ((i % 2 == 0)) && limits+=", borrowingLimit: {cpu: \"2\"}"
  ((i % 4 == 1)) && limits+=", lendingLimit: {cpu: \"2\"}"
  ((i == 0)) && limits+=", scavengerQuota: {cpu: \"2\"}"
  queues+=("$run-q$i")
  kubectl create namespace "$run-$i" >/dev/null
  kubectl apply --server-side -f - >/dev/null <<EOF
apiVersion: sluice.dev/v1alpha1
kind: CapacityQueue
metadata: {name: $run-q$i}
spec: {quota: {cpu: "4"}, queueingStrategy: $strategy, admission: $admission, cohort: $run-c$((i % 2))$limits}
EOF
done
# The never-ready Jobs' queue: outside the cohorts, so its requeues touch no other queue's load.
ready_queue=$run-qready
queues+=("$ready_queue")
kubectl create namespace "$run-ready" >/dev/null
kubectl apply --server-side -f - >/dev/null <<EOF
apiVersion: sluice.dev/v1alpha1
kind: CapacityQueue
metadata: {name: $ready_queue}
spec: {quota: {cpu: "2"}, queueingStrategy: BestEffortFIFO, podsReadyTimeout: 15s, requeueLimit: 1000}
EOF
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

((IN_CLUSTER)) || start_replica2

# ---- the auditor and the load -----------------------------------------------------------------
python3 hack/chaos_audit.py --kubectl "$kubectl_bin" --queues "${queues[@]}" --namespace-prefix "$run-" \
  --status "$out/status.json" --out "$out/audit.json" 2>"$out/audit.log" &
auditor=$!
cleanup() {
  kill -TERM "${loads[@]}" 2>/dev/null || true
  kill -TERM "$auditor" 2>/dev/null || true
  if ((IN_CLUSTER)); then in_cluster_down; else stop_replica2; fi
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
jobs=0
job_in_a_cohort() { # a Job whose gang (6 x 1 cpu) exceeds its queue's quota (4): its cohort lends
  local i=$((RANDOM % QUEUES))
  jobs=$((jobs + 1))
  kubectl -n "$run-$i" create -f - >/dev/null 2>>"$out/chaos.log" <<EOF || log "job-$jobs refused (see chaos.log)"
apiVersion: batch/v1
kind: Job
metadata:
  name: job-$jobs
  labels: {sluice.dev/queue: $run-q$i}
spec:
  parallelism: 6
  completions: 6
  backoffLimit: 20
  template:
    metadata:
      annotations: {sluice.dev/kwok-phase: Succeeded}
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 0
      containers: [{name: c, image: busybox, resources: {requests: {cpu: "1"}}}]
EOF
}
scavengers=0
scavenger() { # a ScavengerJob on idle capacity, charged to queue 0's scavengerQuota (2 cpu)
  scavengers=$((scavengers + 1))
  kubectl -n "$run-0" create -f - >/dev/null 2>>"$out/chaos.log" <<EOF || log "scavenger-$scavengers refused (see chaos.log)"
apiVersion: sluice.dev/v1alpha1
kind: ScavengerJob
metadata: {name: scavenger-$scavengers}
spec:
  image: busybox
  command: [sleep, "3600"]
  resources: {requests: {cpu: 500m, memory: 64Mi}, limits: {cpu: 500m, memory: 64Mi}}
  parallelism: 2
  duration: 2m
  queueName: $run-q0
EOF
}
ready_jobs=0
never_ready() { # a Job whose pods no node takes: podsReadyTimeout sends it back, again and again
  ready_jobs=$((ready_jobs + 1))
  kubectl -n "$run-ready" create -f - >/dev/null 2>>"$out/chaos.log" <<EOF || log "never-ready-$ready_jobs refused (see chaos.log)"
apiVersion: batch/v1
kind: Job
metadata:
  name: never-ready-$ready_jobs
  labels: {sluice.dev/queue: $ready_queue}
spec:
  parallelism: 2
  completions: 2
  backoffLimit: 1000
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 0
      nodeSelector: {sluice.dev/chaos: nowhere}
      containers: [{name: c, image: busybox, resources: {requests: {cpu: 500m}}}]
EOF
  if ((ready_jobs > 3)); then
    kubectl -n "$run-ready" delete job "never-ready-$((ready_jobs - 3))" --propagation-policy Background \
      --wait=false >/dev/null 2>>"$out/chaos.log" || true
  fi
}
rays=0 ray_scales=0 live_rays=()
ray_cluster() { # a RayCluster through KubeRay: head and workers of 500m, the head its gang
  local i=$((RANDOM % QUEUES))
  rays=$((rays + 1))
  kubectl -n "$run-$i" create -f - >/dev/null 2>>"$out/chaos.log" <<EOF || { log "ray-$rays refused (see chaos.log)"; return 0; }
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: ray-$rays
  labels: {sluice.dev/queue: $run-q$i}
spec:
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        terminationGracePeriodSeconds: 0
        containers: [{name: ray-head, image: rayproject/ray, resources: {requests: {cpu: 500m}}}]
  workerGroupSpecs:
  - groupName: workers
    replicas: 1
    minReplicas: 0
    maxReplicas: 6
    rayStartParams: {}
    template:
      spec:
        terminationGracePeriodSeconds: 0
        containers: [{name: ray-worker, image: rayproject/ray, resources: {requests: {cpu: 500m}}}]
EOF
  live_rays+=("$run-$i/ray-$rays/$events")
}
scale_rays() { # each live RayCluster scaled as an autoscaler would; deleted after five events
  local r ns name born kept=()
  for r in "${live_rays[@]+"${live_rays[@]}"}"; do
    IFS=/ read -r ns name born <<<"$r"
    if ((events - born >= 5)); then
      kubectl -n "$ns" delete raycluster "$name" --wait=false >/dev/null 2>>"$out/chaos.log" || true
      continue
    fi
    kubectl -n "$ns" patch raycluster "$name" --type json \
      -p "[{\"op\": \"replace\", \"path\": \"/spec/workerGroupSpecs/0/replicas\", \"value\": $((RANDOM % 7))}]" \
      >/dev/null 2>>"$out/chaos.log" && ray_scales=$((ray_scales + 1))
    kept+=("$r")
  done
  live_rays=("${kept[@]+"${kept[@]}"}")
}
hostile_rounds=0
hostile() {
  hostile_rounds=$((hostile_rounds + 1))
  python3 hack/chaos_hostile.py --kubectl "$kubectl_bin" --queues "${queues[@]:0:QUEUES}" --namespace-prefix "$run-" \
    --tag "$hostile_rounds" --log "$out/hostile.jsonl" 2>>"$out/chaos.log" || log "hostile round $hostile_rounds failed (chaos.log)"
}
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
# In-cluster: the holder is a pod's name; live when that pod runs, is not being deleted and is ready.
live_holder_pod() {
  local h i
  for ((i = 0; i < 120; i++)); do
    h=$(holder)
    if [[ -n $h ]] && sluice_pods | awk -v h="$h" '$1 == h && $2 == "Running" && $3 == 0 && $4 == "true" {f=1} END {exit !f}'; then
      echo "$h"; return 0
    fi
    sleep 0.5
  done
  echo ""
}
kill_leader_pod() {
  local h cid pid restarts
  h=$(live_holder_pod)
  [[ -n $h ]] || { log "no live replica took the Lease within a minute (holder: $(holder))"; return 0; }
  read -r cid restarts < <(sluice_pods | awk -v h="$h" '$1 == h {print $5, $6}') || true
  preemptor
  pid=$(container_pid "$cid")
  [[ -n $pid ]] || { log "no task for the leader $h's container $cid"; return 0; }
  kill -KILL "$pid"
  kills=$((kills + 1))
  # Alternately a new replica (pod deleted: the Deployment starts another, a new identity) and a
  # restart in place (the kubelet starts the container again: same pod name, same identity),
  # unless the kubelet's crash back-off would keep it down long (restarted twice already).
  if ((kills % 2 == 1 || restarts >= 2)); then
    keep_log "$h"
    kubectl -n $SYS delete pod "$h" --wait=false >/dev/null 2>&1 || true
    log "kill -9 leader $h (pid $pid); pod deleted"
  else
    log "kill -9 leader $h (pid $pid); the kubelet restarts it in place"
  fi
}
kill_leader() {
  if ((IN_CLUSTER)); then kill_leader_pod; return 0; fi
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
restart_webhook() {
  if ((IN_CLUSTER)); then # a random replica's pod deleted (SIGTERM); the Deployment replaces it
    local p
    p=$(sluice_pods | awk '$2 == "Running" && $3 == 0 {print $1}' | shuf -n 1)
    [[ -n $p ]] || { log "no running replica to restart"; return 0; }
    keep_log "$p"
    kubectl -n $SYS delete pod "$p" --wait=false >/dev/null 2>&1 || true
    log "webhook restart: pod $p deleted"
    webhook_restarts=$((webhook_restarts + 1))
    return 0
  fi
  log "restarting the webhook (replica 1)"
  r1_pid=$(cat "$STATE/pids/sluice.pid")
  kill -TERM "$r1_pid" 2>/dev/null || log "replica 1 was not running (it is started again)"
  # Gone before 'up' looks, or 'up' finds it alive and leaves it to finish shutting down.
  for ((w = 0; w < 300; w++)); do kill -0 "$r1_pid" 2>/dev/null || break; sleep 0.1; done
  restart_replica1
  webhook_restarts=$((webhook_restarts + 1))
}
restart_apiserver() {
  log "restarting kube-apiserver"
  kill -TERM "$(cat "$STATE/pids/kube-apiserver.pid")"
  while kill -0 "$(cat "$STATE/pids/kube-apiserver.pid")" 2>/dev/null; do sleep 0.2; done
  if ((IN_CLUSTER)); then
    hack/cluster.sh up "${node_flags[@]}" >>"$out/cluster.log" 2>&1 # the API server again; the replicas reconnect
  else
    restart_replica1
  fi
  apiserver_restarts=1
}
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
    if "ray.io/cluster" in (md.get("labels") or {}):  # Ray pods run until their cluster is scaled or deleted
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
# In-cluster the real node is held: the chaos stops after --minutes.
over_time() { ((IN_CLUSTER && $(date +%s) - started > MINUTES * 60)); }
while loads_running && ! settled && ! over_time; do
  sleep $((5 + RANDOM % 11))
  loads_running && ! settled || break
  janitor
  job_in_a_cohort
  hostile
  ((events % 4 == 0)) && scavenger
  ((events % 3 == 0)) && ray_cluster
  scale_rays
  ((events % 2 == 0)) && never_ready
  events=$((events + 1))
  if ((apiserver_restarts == 0)) && [[ $(python3 -c "import json;print(json.load(open('$out/status.json'))['pods'])" 2>/dev/null || echo 0) -ge $((PODS / 2)) ]]; then
    restart_apiserver
  elif ((events % 3 == 0)); then
    restart_webhook
  else
    kill_leader
  fi
done
elapsed=$(($(date +%s) - started))
kill -TERM "${loads[@]}" 2>/dev/null || true
# podsReadyTimeout's requeues, as the never-ready Jobs' DynamicWorkloads count them (those still there).
ready_requeues=$(kubectl -n "$run-ready" get dynamicworkloads -o json 2>/dev/null | python3 -c '
import json, sys
print(sum((w.get("status") or {}).get("requeueCount", 0) for w in json.load(sys.stdin)["items"]))' || echo 0)
kill -TERM "$auditor"
audit_rc=0
wait "$auditor" || audit_rc=$?
if ((IN_CLUSTER)); then in_cluster_down; else stop_replica2; fi
trap - EXIT

summary=$(python3 - "$out" "$kills" "$webhook_restarts" "$apiserver_restarts" "$preemptors" "$elapsed" "$PODS" "$QUEUES" "$janitor_ended" "$IN_CLUSTER" "$jobs" "$scavengers" "$rays" "$ray_scales" "$ready_jobs" "$ready_requeues" <<'PY'
import json, sys, glob, os
out, kills, webhooks, apiservers, preemptors, elapsed, pods, queues, janitor, in_cluster, jobs, scavengers, rays, ray_scales, ready_jobs, ready_requeues = sys.argv[1:]
audit = json.load(open(f"{out}/audit.json"))
moves = [json.loads(l) for l in open(f"{out}/hostile.jsonl")] if os.path.exists(f"{out}/hostile.jsonl") else []
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
    "churn_in_cluster": in_cluster == "1",
    "churn_jobs": int(jobs), "churn_scavenger_jobs": int(scavengers),
    "churn_rayclusters": int(rays), "churn_ray_scales": int(ray_scales),
    "churn_never_ready_jobs": int(ready_jobs), "churn_ready_requeues": int(ready_requeues),
    **{k: audit.get(k) for k in ("churn_samples_per_second", "churn_auditor_lag_p50_s", "churn_auditor_lag_p99_s",
                                 "churn_auditor_lag_max_s", "terms_seen", "admissions_checked", "max_usage_ratio_by_queue")},
    "churn_hostile_tried": len(moves),
    "churn_hostile_refused": sum(1 for m in moves if m["outcome"] == "refused"),
    "churn_hostile_defused": sum(1 for m in moves if m["outcome"] == "defused"),
    "churn_hostile_admitted": sum(1 for m in moves if m["outcome"] == "admitted"),
    "churn_hostile_escaped": sum(1 for m in moves if m["outcome"] == "escaped"),
    "churn_hostile_by_move": {mv: {o: sum(1 for m in moves if m["move"] == mv and m["outcome"] == o)
                                   for o in ("refused", "defused", "admitted", "escaped")} for mv in sorted({m["move"] for m in moves})},
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
escaped=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["churn_hostile_escaped"])' "$summary")
if ((escaped > 0)); then
  log "FAILED: $escaped hostile move(s) escaped ($out/hostile.jsonl)"
  exit 1
fi
if ((audit_rc != 0)); then
  log "FAILED: the auditor saw the promise broken ($out/audit.json, $out/audit.log)"
  exit 1
fi
log "passed: no sample broke the promise ($out)"
