#!/usr/bin/env bash
# A real Kubernetes control plane on loopback for sluice's tests, demo and benchmarks, built from Go
# modules: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok (simulated
# nodes). Optional add-ons: sluice, KubeRay, the Spark operator (with spark-submit), Kueue.
# Everything runs as plain processes on 127.0.0.1; see usage() below.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/versions.sh
source "$ROOT/hack/versions.sh"
CACHE=${SLUICE_CACHE:-$HOME/.cache/sluice}
BIN=$CACHE/bin
# SLUICE_CLUSTER_STATE: another directory, to run a second cluster beside the first (each has its own ports).
STATE=${SLUICE_CLUSTER_STATE:-$ROOT/.cluster}
LOGS=$STATE/logs
PIDS=$STATE/pids
PKI=$STATE/pki
# Go's module and build caches live in the cache too, so a warm machine rebuilds nothing.
export GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build GOPATH=$CACHE/go GOFLAGS=-mod=mod GOTOOLCHAIN=local
export PATH=$HOME/.cargo/bin:/usr/local/go/bin:$PATH

# Every component, in start order; `down` stops them in reverse.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok kuberay spark-operator kueue argo sluice containerd kubelet)

NODES=${SLUICE_NODES:-4} NODE_CPU=32 NODE_MEMORY=128Gi NODE_PODS=110
WITH_SLUICE=false WITH_KUBERAY=false WITH_SPARK=false WITH_KUEUE=false WITH_ARGO=false BUILD_SLUICE=true REAL_NODE=false
SLUICE_PROFILE=${SLUICE_PROFILE:-debug}  # cargo profile of the sluice run on the host: debug or release
KWOK_PARALLELISM=""                       # --kwok-parallelism: kwok's workers (its defaults when empty)
TIMEOUT=${SLUICE_CLUSTER_TIMEOUT:-120}   # seconds to wait for each component to become ready
PROFILING=${SLUICE_APISERVER_PROFILING:-false}  # true: kube-apiserver serves /debug/pprof (admin only)
STOP_TIMEOUT=10                          # seconds between TERM and KILL in `down`

usage() {
  cat <<USAGE
usage: hack/cluster.sh COMMAND [flags]

A local Kubernetes control plane for sluice: etcd $ETCD_VERSION, kube-apiserver, kube-controller-manager,
kube-scheduler and kubectl $KUBERNETES_VERSION, and kwok $KWOK_VERSION simulating nodes (pods on them
become Running without containers). Built from their Go modules (hack/tools/, versions in
hack/versions.sh) into \$SLUICE_CACHE, only when missing, and run as plain processes on 127.0.0.1
with free ports. State lives in .cluster/ of the repository: kubeconfig (admin), pki/, etcd/,
logs/<component>.log, pids/<component>.pid, ports.env.

Commands:
  up [flags]      build what is missing, start what is not running, wait until the API server is
                  ready, the kwok nodes are Ready and the default ServiceAccount exists. Idempotent:
                  with everything running it only checks and exits 0.
  down            stop the processes 'up' started (by pid file: TERM, KILL after ${STOP_TIMEOUT}s) and
                  delete .cluster/
  status          each component: pid, running or not, port
  env             print shell exports for the cluster: eval "\$(hack/cluster.sh env)" sets KUBECONFIG,
                  puts kubectl (from the cache) on PATH and, with sluice running, SLUICE_WEBHOOK_ADDR
                  and SLUICE_METRICS_ADDR; with the Spark operator, SPARK_HOME, JAVA_HOME and
                  PYSPARK_PYTHON (spark-submit from the pinned pyspark)
  build [flags]   only build (the add-ons named by --with-* flags too; --all builds every add-on;
                  --real-node: the kubelet, argoexec with --with-argo, the SLUICE_REAL_NODE_IMAGES and
                  sluice's image archives from the Dockerfile, which 'up --real-node --no-build' imports)
  help            this text

Flags of 'up' (and 'build'):
  --nodes N            number of kwok nodes (default 4; 1000 works for benchmarks). Nodes are named
                       kwok-node-<i>, labelled type=kwok, annotated kwok.x-k8s.io/node=fake, not tainted.
                       Existing nodes are kept; 'up --nodes N' adds the missing ones.
  --node-cpu Q         allocatable cpu of each node (default 32)
  --node-memory Q      allocatable memory of each node (default 128Gi)
  --node-pods N        allocatable pods of each node (default 110)
  --kwok-parallelism N kwok's workers for pod stages, node stages, node leases and pod syncs (its own
                       defaults 4, 4, 4 and 1 when not given; the large benchmark's 500 nodes need more).
                       Applies when kwok starts: a running kwok keeps its settings until 'down'.
  --with-sluice        build sluice (cargo build --bin sluice) and run 'sluice serve --local' on the host;
                       writes .cluster/sluice.env (SLUICE_WEBHOOK_ADDR, SLUICE_METRICS_ADDR, SLUICE_DASHBOARD_ADDR). Settings come
                       from the SLUICE_* environment (sluice serve --help). Restarted when its binary or
                       that environment changed or its process is gone, on the same ports.
  --release-sluice     with --with-sluice: build and run the release build (cargo build --release --bin
                       sluice, target/release/sluice) instead of the debug one; what benchmarks measure
                       (hack/bench.sh e2e). Same as SLUICE_PROFILE=release. A running sluice of the other
                       build is restarted (its binary changed).
  --no-build           with --with-sluice: use target/debug/sluice (target/release/sluice with
                       --release-sluice) as it is (no cargo build); with --real-node: import sluice's
                       image archives already built (by 'build --real-node') instead of building them
  --with-kuberay       the KubeRay operator $KUBERAY_VERSION on the host, its CRDs applied
  --with-spark-operator
                       the Spark operator $SPARK_OPERATOR_VERSION (controller only, no webhook) on the host,
                       CRDs applied, with spark-submit from pyspark $PYSPARK_VERSION (a venv in the cache;
                       needs Java 17: /usr/bin/java, installed with apt-get when missing and run as root)
  --with-kueue         Kueue $KUEUE_VERSION on the host, CRDs applied, its webhooks registered by URL
                       (frameworks: batch/job, pod, ray.io/rayjob, ray.io/raycluster,
                       sparkoperator.k8s.io/sparkapplication)
  --with-argo          the Argo Workflows controller $ARGO_WORKFLOWS_VERSION on the host (namespace argo, its
                       CRDs applied; metrics off). kwok runs no container, so a Workflow's pods on kwok
                       nodes run until ended by hand (annotation sluice.dev/kwok-phase) and no argoexec
                       reports outputs. With --real-node, argoexec $ARGO_WORKFLOWS_VERSION is built from
                       the same module (bin/argoexec-<version>, static) into the image $ARGOEXEC_IMAGE
                       on the real node (imagePullPolicy Never): steps placed there really run.
  --real-node          one real node beside the kwok nodes (root only; hack/realnode.sh): a kubelet
                       $KUBERNETES_VERSION built from the same module (bin/kubelet-$KUBERNETES_VERSION), containerd,
                       runc and the CNI plugins from Debian (apt-get install when missing), and images built
                       here and imported with ctr: $PAUSE_IMAGE, $BUSYBOX_IMAGE and sluice:dev (also tagged
                       sluice:<version>), built from the Dockerfile by hack/image.sh (buildah, offline; a
                       release build; --no-build imports the last one built as it is).
                       The node is $REAL_NODE_NAME, labelled $REAL_NODE_LABEL=real, tainted
                       $REAL_NODE_TAINT=true:NoSchedule; kwok never manages it. State in .cluster/node/;
                       'down' stops its containers and cleans up.
  --all                (build only) every add-on
  --timeout S          seconds to wait for each component to become ready (default $TIMEOUT)

Environment:
  SLUICE_CACHE         build cache (default ~/.cache/sluice): bin/<name>-<version>, go/ (module and build
                       caches), pyspark-<version>/ (venv)
  SLUICE_NODES         default for --nodes
  SLUICE_CLUSTER_STATE the cluster's state directory (default .cluster/ of the repository); another one runs
                       a second cluster beside the first, with its own ports (tests find it through
                       'hack/cluster.sh env', which exports it)
  SLUICE_REAL_NODE_IMAGES
                       images of real workloads for the real node, built here once (cached in
                       \$SLUICE_CACHE/images/, keyed on their inputs) and imported by up --real-node:
                       "spark" (sluice.local/spark:$PYSPARK_VERSION, Java 17 and pyspark's jars), "ray"
                       (sluice.local/ray:$RAY_VERSION, Python 3.11 and ray[default]), "sluice-upgrade" (a second
                       build of sluice's image, sluice:upgrade, for the upgrade tests); default none
                       (hack/images/images.sh)
  SLUICE_REAL_NODE_SNAPSHOTTER
                       containerd's snapshotter on the real node (default overlayfs; native where overlay
                       mounts are refused)
  SLUICE_PROFILE       debug (default) or release: the build of sluice --with-sluice runs on the host
                       (release: as --release-sluice)
  SLUICE_APISERVER_PROFILING
                       true: kube-apiserver serves /debug/pprof to the admin client (default false), e.g.
                       kubectl get --raw '/debug/pprof/profile?seconds=30' > cpu.pprof
  RUST_LOG             sluice's log filter (default info)
  CARGO_TARGET_DIR     where cargo puts target/{debug,release}/sluice (default target/ of the repository)

kwok stages (hack/kwok/stages.yaml): pods on kwok nodes become Running; pods owned by a Job complete
(unless annotated sluice.dev/kwok-hold); any pod annotated sluice.dev/kwok-phase=Succeeded or =Failed
ends so (exit code 0 or 1).
USAGE
}

die() { echo "cluster.sh: error: $*" >&2; exit 1; }
log() { echo "cluster.sh: $*" >&2; }

# shellcheck source=hack/realnode.sh
source "$ROOT/hack/realnode.sh"
# shellcheck source=hack/cluster/build.sh
source "$ROOT/hack/cluster/build.sh"
# shellcheck source=hack/cluster/addons.sh
source "$ROOT/hack/cluster/addons.sh"

# ---- processes -----------------------------------------------------------------------------------
# Each process runs in its own session (setsid), so its pid is also its process group: `down` ends
# it with any children (spark-submit JVMs). A pid file holds the pid; <name>.start its start time,
# so a pid reused by another process after a reboot is never taken for ours.

proc_field() { # pid field-number (of /proc/<pid>/stat, 1-based)
  local stat rest n=$2
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  rest=${stat##*) }
  local -a f
  read -r -a f <<<"$rest"
  echo "${f[n - 3]}"
}

pid_of() { [[ -f $PIDS/$1.pid ]] && cat "$PIDS/$1.pid"; }

alive() { # name: its process runs (a zombie, or another process that got the pid, does not count)
  local pid started state
  pid=$(pid_of "$1") || return 1
  state=$(proc_field "$pid" 3) || return 1
  [[ $state != Z && $state != X ]] || return 1
  started=$(cat "$PIDS/$1.start" 2>/dev/null || true)
  [[ -z $started || $(proc_field "$pid" 22) == "$started" ]]
}

start() { # name command...
  local name=$1 pid; shift
  alive "$name" && return 0
  mkdir -p "$LOGS" "$PIDS"
  echo "---- $(date -u +%FT%TZ) cluster.sh starts: $*" >>"$LOGS/$name.log"
  setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$PIDS/$name.pid"
  proc_field "$pid" 22 >"$PIDS/$name.start" 2>/dev/null || rm -f "$PIDS/$name.start"
}

signal() { # signal name: to the process group when the process leads one, else to the process
  local pid
  pid=$(pid_of "$2") || return 0
  if [[ $(proc_field "$pid" 5 2>/dev/null) == "$pid" ]]; then
    kill "-$1" -- "-$pid" 2>/dev/null || true
  else
    kill "-$1" "$pid" 2>/dev/null || true
  fi
}

# TERM to every named process that runs, then wait for all of them; KILL what is left after STOP_TIMEOUT.
stop() { # names...
  local name running=() killed=0 deadline=$((SECONDS + STOP_TIMEOUT))
  for name in "$@"; do
    if alive "$name"; then signal TERM "$name"; running+=("$name"); else rm -f "$PIDS/$name.pid" "$PIDS/$name.start"; fi
  done
  while ((${#running[@]})); do
    local left=()
    for name in "${running[@]}"; do alive "$name" && left+=("$name"); done
    running=("${left[@]+"${left[@]}"}")
    ((${#running[@]})) || break
    if ((SECONDS >= deadline)); then
      ((killed)) && die "could not stop ${running[*]} (pids in $PIDS)"
      for name in "${running[@]}"; do log "$name did not stop within ${STOP_TIMEOUT}s: KILL"; signal KILL "$name"; done
      killed=1 deadline=$((SECONDS + 5))
    fi
    sleep 0.1
  done
  for name in "$@"; do rm -f "$PIDS/$name.pid" "$PIDS/$name.start"; done
}

fail_with_log() { # component message
  if [[ -f $LOGS/$1.log ]]; then
    echo "---- last lines of .cluster/logs/$1.log ----" >&2
    tail -n 40 "$LOGS/$1.log" >&2
    echo "----" >&2
  fi
  die "$2 (full log: $LOGS/$1.log)"
}

# Polls "$@" until it succeeds, for at most `timeout` seconds; fails early when the component exits.
wait_until() { # timeout what component command...
  local timeout=$1 what=$2 component=$3; shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    alive "$component" || fail_with_log "$component" "$component exited while waiting for $what"
    ((SECONDS < deadline)) || fail_with_log "$component" "timed out after ${timeout}s waiting for $what"
    sleep 0.2
  done
}

# ---- ports ---------------------------------------------------------------------------------------
# Chosen once per cluster (free loopback ports) and kept in .cluster/ports.env, so restarts reuse them.

PORT_NAMES=(ETCD_PORT ETCD_PEER_PORT API_PORT KCM_PORT SCHED_PORT KWOK_PORT SLUICE_PORT SLUICE_METRICS_PORT
  SLUICE_DASHBOARD_PORT
  KUBERAY_METRICS_PORT KUBERAY_PROBE_PORT SPARK_OPERATOR_PROBE_PORT SPARK_OPERATOR_METRICS_PORT
  KUEUE_WEBHOOK_PORT KUEUE_PROBE_PORT KUEUE_METRICS_PORT KUBELET_PORT KUBELET_HEALTHZ_PORT)

load_ports() {
  mkdir -p "$STATE"
  # shellcheck source=/dev/null
  [[ -f $STATE/ports.env ]] && source "$STATE/ports.env"
  local missing=() taken=() name
  for name in "${PORT_NAMES[@]}"; do
    if [[ -z ${!name:-} ]]; then missing+=("$name"); else taken+=("${!name}"); fi
  done
  ((${#missing[@]})) || return 0
  command -v python3 >/dev/null || die "python3 is needed to pick free ports"
  local ports
  # Binds them all at once (so they differ), skipping the ones already given out.
  ports=$(python3 - "${#missing[@]}" "${taken[@]+"${taken[@]}"}" <<'PY'
import socket, sys
want, taken, held, out = int(sys.argv[1]), set(sys.argv[2:]), [], []
while len(out) < want:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); held.append(s)
    p = str(s.getsockname()[1])
    if p not in taken: out.append(p)
print(" ".join(out))
PY
  ) || die "could not pick free ports"
  local -a list
  read -r -a list <<<"$ports"
  local i
  for i in "${!missing[@]}"; do
    echo "${missing[i]}=${list[i]}" >>"$STATE/ports.env"
    printf -v "${missing[i]}" %s "${list[i]}"
  done
}

# ---- certificates and kubeconfigs ----------------------------------------------------------------

pki() {
  [[ -f $PKI/done ]] && return 0
  command -v openssl >/dev/null || die "openssl is needed (Debian: apt-get install openssl)"
  mkdir -p "$PKI" "$LOGS"
  (
    set -e
    cd "$PKI"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=sluice-local-ca"
    issue() { # name subject extensions
      openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2"
      printf '%s\n' "$3" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 3650 -extfile "$1.ext"
    }
    local_san="subjectAltName=IP:127.0.0.1,DNS:localhost"
    issue apiserver "/CN=kube-apiserver" "$local_san,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth"
    issue admin "/O=system:masters/CN=admin" "extendedKeyUsage=clientAuth"
    issue controller-manager "/CN=system:kube-controller-manager" "extendedKeyUsage=clientAuth"
    issue scheduler "/CN=system:kube-scheduler" "extendedKeyUsage=clientAuth"
    # The API server's client certificate for kubelets (logs, exec, attach of pods on a real node).
    issue apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "extendedKeyUsage=clientAuth"
    openssl genrsa -out sa.key 2048
    openssl rsa -in sa.key -pubout -out sa.pub
  ) >"$LOGS/pki.log" 2>&1 || fail_with_log pki "generating certificates with openssl failed"
  touch "$PKI/done"
}

kubeconfig() { # file user
  cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: sluice-local
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: sluice-local
  context: {cluster: sluice-local, user: $2}
current-context: sluice-local
KC
}

KUBECTL() { "$BIN/kubectl" --kubeconfig "$STATE/kubeconfig" "$@"; }

api_ready() {
  curl -sf --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://127.0.0.1:$API_PORT/readyz" >/dev/null
}

# ---- control plane -------------------------------------------------------------------------------

start_etcd() {
  start etcd "$BIN/etcd-$ETCD_VERSION" --name default --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "default=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync --quota-backend-bytes 4294967296 --snapshot-count 10000 --log-level warn
  wait_until "$TIMEOUT" "etcd to be healthy" etcd curl -sf --max-time 2 "http://127.0.0.1:$ETCD_PORT/health"
}

start_apiserver() {
  # Logs, exec and attach of pods on a real node: the API server calls the kubelet with a client
  # certificate and checks the kubelet's serving certificate. (Clusters made before this had no such
  # certificate: they run without, until down and up.)
  local kubelet_client=()
  [[ -f $PKI/apiserver-kubelet-client.crt ]] && kubelet_client=(--kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt"
    --kubelet-client-key "$PKI/apiserver-kubelet-client.key" --kubelet-certificate-authority "$PKI/ca.crt"
    --kubelet-preferred-address-types InternalIP)
  start kube-apiserver "$BIN/kube-apiserver" --bind-address 127.0.0.1 --secure-port "$API_PORT" \
    --advertise-address 127.0.0.1 --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" --client-ca-file "$PKI/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 --authorization-mode Node,RBAC --allow-privileged \
    "${kubelet_client[@]}" --enable-aggregator-routing=true \
    --enable-admission-plugins NamespaceLifecycle,LimitRanger,ServiceAccount,Priority,DefaultTolerationSeconds,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ResourceQuota \
    --endpoint-reconciler-type none --enable-priority-and-fairness=false \
    --max-requests-inflight 800 --max-mutating-requests-inflight 400 --profiling="$PROFILING"
  wait_until "$TIMEOUT" "kube-apiserver /readyz" kube-apiserver api_ready
}

start_controllers() {
  kubeconfig "$STATE/controller-manager.kubeconfig" controller-manager
  kubeconfig "$STATE/scheduler.kubeconfig" scheduler
  start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --leader-elect=false \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" --use-service-account-credentials \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --kube-api-qps 200 --kube-api-burst 400 --concurrent-gc-syncs 50 --controllers '*,-nodeipam' \
    --node-monitor-grace-period 180s
  cat >"$STATE/scheduler.yaml" <<CFG
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $STATE/scheduler.kubeconfig
  qps: 200
  burst: 400
leaderElection:
  leaderElect: false
CFG
  start kube-scheduler "$BIN/kube-scheduler" --config "$STATE/scheduler.yaml" \
    --authentication-kubeconfig "$STATE/scheduler.kubeconfig" --authorization-kubeconfig "$STATE/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$SCHED_PORT"
  # kwok manages only the nodes annotated kwok.x-k8s.io/node=fake, never another node. It renews node
  # leases every quarter of their duration: 160s keeps 1000 nodes at 25 lease updates a second (the
  # controller-manager's grace period is 180s to match).
  local kwok_configs=(--config "$ROOT/hack/kwok/stages.yaml")
  if [[ -n $KWOK_PARALLELISM ]]; then
    cat >"$STATE/kwok-parallelism.yaml" <<YAML
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: $KWOK_PARALLELISM
  nodePlayStageParallelism: $KWOK_PARALLELISM
  nodeLeaseParallelism: $KWOK_PARALLELISM
  podsOnNodeSyncParallelism: $KWOK_PARALLELISM
YAML
    kwok_configs+=(--config "$STATE/kwok-parallelism.yaml")
  fi
  start kwok "$BIN/kwok-$KWOK_VERSION" --kubeconfig "$STATE/kubeconfig" "${kwok_configs[@]}" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --cidr 10.244.0.1/16 --node-ip 10.0.0.1 --server-address "127.0.0.1:$KWOK_PORT" \
    --node-lease-duration-seconds 160
  wait_until "$TIMEOUT" "kube-controller-manager to be healthy" kube-controller-manager \
    curl -sfk --max-time 2 "https://127.0.0.1:$KCM_PORT/healthz"
  wait_until "$TIMEOUT" "kube-scheduler to be healthy" kube-scheduler curl -sfk --max-time 2 "https://127.0.0.1:$SCHED_PORT/healthz"
  wait_until "$TIMEOUT" "the default ServiceAccount (made by the controller-manager)" kube-controller-manager \
    KUBECTL -n default get serviceaccount default
}

node_yaml() { # indices...
  local i
  for i in "$@"; do
    cat <<NODE
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels: {type: kwok, kubernetes.io/hostname: kwok-node-$i, kubernetes.io/os: linux, kubernetes.io/arch: amd64}
status:
  allocatable: {cpu: "$NODE_CPU", memory: "$NODE_MEMORY", pods: "$NODE_PODS"}
  capacity: {cpu: "$NODE_CPU", memory: "$NODE_MEMORY", pods: "$NODE_PODS"}
  nodeInfo: {architecture: amd64, kubeletVersion: fake, kubeProxyVersion: fake, operatingSystem: linux}
  phase: Running
NODE
  done
}

count_ready_nodes() {
  local out
  out=$(KUBECTL get nodes -l type=kwok -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}') || return 1
  grep -c '^True$' <<<"$out" || true
}

# Creates the kwok nodes kwok-node-0..N-1 that do not exist yet, with one kubectl for all of them
# (create keeps the status it is given: the nodes' capacity).
create_nodes() {
  local names i missing=()
  names=$(KUBECTL get nodes -l type=kwok -o 'jsonpath={range .items[*]}{.metadata.name}{" "}{end}') || die "cannot list the nodes"
  local -A have=()
  for i in $names; do have[$i]=1; done
  for ((i = 0; i < NODES; i++)); do [[ -n ${have[kwok-node-$i]:-} ]] || missing+=("$i"); done
  ((${#missing[@]})) || return 0
  log "creating ${#missing[@]} kwok nodes ($NODE_CPU cpu, $NODE_MEMORY, $NODE_PODS pods each)"
  node_yaml "${missing[@]}" | KUBECTL create -f - >/dev/null 2>"$LOGS/nodes.log" \
    || fail_with_log nodes "creating the kwok nodes failed"
}

nodes_ready() { local n; n=$(count_ready_nodes) || return 1; ((n >= NODES)); }

# ---- commands ------------------------------------------------------------------------------------

parse_flags() { # command flags...
  local cmd=$1; shift
  while (($#)); do
    case $1 in
      --nodes | --node-cpu | --node-memory | --node-pods | --timeout | --kwok-parallelism)
        (($# >= 2)) || die "$1 needs a value (see hack/cluster.sh help)"
        case $1 in
          --nodes) NODES=$2 ;; --node-cpu) NODE_CPU=$2 ;; --node-memory) NODE_MEMORY=$2 ;;
          --node-pods) NODE_PODS=$2 ;; --timeout) TIMEOUT=$2 ;;
          --kwok-parallelism) [[ $2 =~ ^[1-9][0-9]*$ ]] || die "--kwok-parallelism needs a positive whole number, not '$2'"
                              KWOK_PARALLELISM=$2 ;;
        esac
        shift 2 ;;
      --with-sluice) WITH_SLUICE=true; shift ;;
      --release-sluice) SLUICE_PROFILE=release; shift ;;
      --no-build) BUILD_SLUICE=false; shift ;;
      --with-kuberay) WITH_KUBERAY=true; shift ;;
      --with-spark-operator) WITH_SPARK=true; shift ;;
      --with-kueue) WITH_KUEUE=true; shift ;;
      --with-argo) WITH_ARGO=true; shift ;;
      --real-node) REAL_NODE=true; shift ;;
      --all) [[ $cmd == build ]] || die "--all is a flag of build"; WITH_KUBERAY=true WITH_SPARK=true WITH_KUEUE=true WITH_ARGO=true; shift ;;
      -h | --help) usage; exit 0 ;;
      *) die "unknown flag '$1' for $cmd (see hack/cluster.sh help)" ;;
    esac
  done
  [[ $NODES =~ ^[0-9]+$ && $NODES -ge 1 ]] || die "--nodes wants a positive number, not '$NODES'"
  [[ $NODE_PODS =~ ^[0-9]+$ ]] || die "--node-pods wants a number, not '$NODE_PODS'"
  [[ $TIMEOUT =~ ^[0-9]+$ ]] || die "--timeout wants seconds, not '$TIMEOUT'"
  [[ $SLUICE_PROFILE == debug || $SLUICE_PROFILE == release ]] \
    || die "SLUICE_PROFILE wants debug or release, not '$SLUICE_PROFILE'"
}

cmd_up() {
  parse_flags up "$@"
  command -v curl >/dev/null || die "curl is needed (Debian: apt-get install curl)"
  local t0=$SECONDS
  build_core
  build_addons
  load_ports
  pki
  [[ -f $STATE/kubeconfig ]] || kubeconfig "$STATE/kubeconfig" admin
  start_etcd
  start_apiserver
  start_controllers
  create_nodes
  wait_until $((TIMEOUT + NODES / 10)) "$NODES kwok nodes to be Ready" kwok nodes_ready
  if $WITH_KUBERAY; then start_kuberay; fi
  if $WITH_SPARK; then start_spark_operator; fi
  if $WITH_KUEUE; then start_kueue; fi
  if $WITH_ARGO; then start_argo; fi
  if $WITH_SLUICE; then start_sluice; fi
  if $REAL_NODE; then realnode_up; fi
  log "cluster up in $((SECONDS - t0))s: eval \"\$(hack/cluster.sh env)\" (KUBECONFIG=$STATE/kubeconfig)"
}

cmd_down() {
  (($# == 0)) || die "down takes no flags"
  if [[ -d $PIDS ]]; then
    realnode_down
    local c reversed=()
    for c in "${COMPONENTS[@]}"; do reversed=("$c" "${reversed[@]+"${reversed[@]}"}"); done
    # Everything but etcd at once, then etcd (the API server shuts down faster with its storage there).
    stop "${reversed[@]:0:${#reversed[@]}-1}"
    stop etcd
    local left
    left=$(find "$PIDS" -name '*.pid' 2>/dev/null | head -n 1)
    [[ -z $left ]] || die "a process in $left is still known; not deleting .cluster"
  fi
  rm -rf "$STATE"
  log "cluster down"
}

cmd_status() {
  (($# == 0)) || die "status takes no flags"
  [[ -d $STATE ]] || { echo "no cluster (start one with: hack/cluster.sh up)"; return 0; }
  # shellcheck source=/dev/null
  [[ -f $STATE/ports.env ]] && source "$STATE/ports.env"
  local c port pid state
  printf '%-24s %-8s %-8s %s\n' COMPONENT PID STATE PORT
  for c in "${COMPONENTS[@]}"; do
    case $c in
      etcd) port=${ETCD_PORT:-} ;; kube-apiserver) port=${API_PORT:-} ;; kube-controller-manager) port=${KCM_PORT:-} ;;
      kube-scheduler) port=${SCHED_PORT:-} ;; kwok) port=${KWOK_PORT:-} ;; kuberay) port=${KUBERAY_PROBE_PORT:-} ;;
      spark-operator) port=${SPARK_OPERATOR_PROBE_PORT:-} ;; kueue) port=${KUEUE_WEBHOOK_PORT:-} ;; argo) port=6060 ;;
      sluice) port=${SLUICE_PORT:-} ;; kubelet) port=${KUBELET_PORT:-} ;; containerd) port=.cluster/node/containerd.sock ;;
    esac
    pid=$(pid_of "$c" || true)
    if [[ -z $pid ]]; then
      case $c in kuberay | spark-operator | kueue | argo | sluice | containerd | kubelet) continue ;; esac  # add-on never started
      state=stopped
    elif alive "$c"; then state=running
    else state=dead; fi
    printf '%-24s %-8s %-8s %s\n' "$c" "${pid:--}" "$state" "${port:--}"
  done
  if alive sluice && [[ -f $STATE/sluice.profile ]]; then echo "sluice build: $(cat "$STATE/sluice.profile")"; fi
  [[ -f $STATE/kubeconfig ]] && echo "kubeconfig: $STATE/kubeconfig"
  return 0
}

cmd_env() {
  (($# == 0)) || die "env takes no flags"
  echo "export KUBECONFIG=$STATE/kubeconfig"
  if [[ -n ${SLUICE_CLUSTER_STATE:-} ]]; then echo "export SLUICE_CLUSTER_STATE=$STATE"; fi
  echo "export PATH=$BIN:\$PATH"
  local f
  for f in sluice.env spark.env; do
    if [[ -f $STATE/$f ]]; then sed 's/^/export /' "$STATE/$f"; fi
  done
}

cmd_build() {
  parse_flags build "$@"
  build_core
  build_addons
  # With --real-node, sluice's images from the Dockerfile too (needs root: buildah), so that a later
  # 'up --real-node --no-build' only imports them.
  if $REAL_NODE; then realnode_sluice_archives; fi
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) shift; cmd_down "$@" ;;
  status) shift; cmd_status "$@" ;;
  env) shift; cmd_env "$@" ;;
  build) shift; cmd_build "$@" ;;
  -h | --help | help) usage ;;
  "") usage >&2; exit 2 ;;
  *) die "unknown command '$1' (see hack/cluster.sh help)" ;;
esac
