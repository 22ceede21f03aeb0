#!/usr/bin/env bash
# A real Kubernetes control plane on loopback, built from Go modules: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, and kwok simulating nodes. Optional: sluice on the host.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/versions.sh
source "$ROOT/hack/versions.sh"
CACHE=${SLUICE_CACHE:-$HOME/.cache/sluice}
BIN=$CACHE/bin
STATE=$ROOT/.cluster
LOGS=$STATE/logs
PIDS=$STATE/pids
PKI=$STATE/pki
export GOMODCACHE=$CACHE/go/mod GOCACHE=$CACHE/go/build GOPATH=$CACHE/go GOFLAGS=-mod=mod GOTOOLCHAIN=local
export PATH=$HOME/.cargo/bin:/usr/local/go/bin:$PATH

NODES=4 NODE_CPU=32 NODE_MEMORY=128Gi NODE_PODS=110
WITH_SLUICE=false
WITH_KUBERAY=false
BUILD_SLUICE=true

usage() {
  cat <<USAGE
usage: hack/cluster.sh COMMAND [flags]

A local Kubernetes control plane for sluice's tests and demo: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler ($KUBERNETES_VERSION) and kwok ($KWOK_VERSION) nodes,
built from their Go modules into \$SLUICE_CACHE (default ~/.cache/sluice) and run as plain processes
on 127.0.0.1. State, kubeconfig and logs live in .cluster/ of the repository.

Commands:
  up        build what is missing, start what is not running, wait until ready (idempotent)
  down      stop what 'up' started (by pid file) and delete .cluster/
  status    show each component: pid, running or not, port
  env       print 'export KUBECONFIG=...' and PATH with kubectl: eval "\$(hack/cluster.sh env)"
  build     only build the binaries (all of them, add-ons included)

Flags for 'up':
  --nodes N            kwok nodes (default 4; 1000 works for benchmarks)
  --node-cpu Q         cpu of each node (default 32)
  --node-memory Q      memory of each node (default 128Gi)
  --node-pods N        pods per node (default 110)
  --with-sluice        also build sluice (cargo build) and run 'sluice serve --local' on the host;
                       restarted when its binary changed or its process is gone
  --with-kuberay       also build and run the KubeRay operator ($KUBERAY_VERSION) on the host, CRDs applied
  --no-build           with --with-sluice: use target/debug/sluice as it is (no cargo build)

Environment: SLUICE_CACHE (build cache), RUST_LOG (sluice's log filter).
Logs: .cluster/logs/<component>.log. End any pod on purpose: annotate it sluice.dev/kwok-phase=Succeeded|Failed.
USAGE
}

die() { echo "cluster.sh: $*" >&2; exit 1; }
log() { echo "cluster.sh: $*" >&2; }

# ---- building ------------------------------------------------------------------------------------

build_go() { # name version module-dir package
  local name=$1 version=$2 dir=$3 pkg=$4 out=$BIN/$1-$2
  [[ -x $out ]] && return 0
  mkdir -p "$BIN"
  log "building $name $version (first time only; cached in $CACHE)"
  local ldflags="-s -w"
  if [[ $name == k8s ]]; then
    ldflags+=" -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/component-base/version.gitMajor=1"
    ldflags+=" -X k8s.io/component-base/version.gitMinor=36 -X k8s.io/component-base/version.gitTreeState=clean"
    ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES_VERSION"
  fi
  local start=$SECONDS
  (cd "$ROOT/hack/tools/$dir" && go build -trimpath -ldflags "$ldflags" -o "$out.tmp" "$pkg") \
    || die "building $name failed (see the Go errors above)"
  mv "$out.tmp" "$out"
  log "built $name in $((SECONDS - start))s"
}

build_all() {
  build_go etcd "$ETCD_VERSION" etcd .
  build_go k8s "$KUBERNETES_VERSION" k8s .
  build_go kwok "$KWOK_VERSION" kwok sigs.k8s.io/kwok/cmd/kwok
  $WITH_KUBERAY && build_go kuberay "$KUBERAY_VERSION" kuberay github.com/ray-project/kuberay/ray-operator
  local c
  for c in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    ln -sf "k8s-$KUBERNETES_VERSION" "$BIN/$c"
  done
}

KUBECTL() { "$BIN/kubectl" --kubeconfig "$STATE/kubeconfig" "$@"; }

# ---- processes -----------------------------------------------------------------------------------

alive() { [[ -f $PIDS/$1.pid ]] && kill -0 "$(cat "$PIDS/$1.pid")" 2>/dev/null; }

start() { # name command...
  local name=$1; shift
  alive "$name" && return 0
  mkdir -p "$LOGS" "$PIDS"
  setsid "$@" >>"$LOGS/$name.log" 2>&1 < /dev/null &
  echo $! > "$PIDS/$name.pid"
}

stop() {
  local name=$1 pid
  [[ -f $PIDS/$name.pid ]] || return 0
  pid=$(cat "$PIDS/$name.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDS/$name.pid"
}

# Waits until "$@" succeeds, at most $1 seconds; on timeout tails the given log.
wait_until() { # timeout what logname command...
  local timeout=$1 what=$2 logname=$3; shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS > deadline)); then
      [[ -f $LOGS/$logname.log ]] && tail -n 30 "$LOGS/$logname.log" >&2
      die "timed out after ${timeout}s waiting for $what (log: .cluster/logs/$logname.log)"
    fi
    alive "$logname" || { [[ -f $LOGS/$logname.log ]] && tail -n 30 "$LOGS/$logname.log" >&2; die "$logname exited while waiting for $what"; }
    sleep 0.2
  done
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Ports are chosen once per cluster and kept in .cluster/ports.env.
load_ports() {
  if [[ ! -f $STATE/ports.env ]]; then
    mkdir -p "$STATE"
    {
      echo "ETCD_PORT=$(free_port)"; echo "ETCD_PEER_PORT=$(free_port)"; echo "API_PORT=$(free_port)"
      echo "KCM_PORT=$(free_port)"; echo "SCHED_PORT=$(free_port)"; echo "KWOK_PORT=$(free_port)"
      echo "SLUICE_PORT=$(free_port)"; echo "SLUICE_METRICS_PORT=$(free_port)"
    } > "$STATE/ports.env"
  fi
  # shellcheck source=/dev/null
  source "$STATE/ports.env"
}

# ---- certificates and kubeconfigs ----------------------------------------------------------------

pki() {
  [[ -f $PKI/done ]] && return 0
  mkdir -p "$PKI"; cd "$PKI"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=sluice-local-ca" 2>/dev/null
  cat > apiserver.ext <<EXT
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth
EXT
  issue() { # name subject extfile
    openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 3650 ${3:+-extfile "$3"} 2>/dev/null
  }
  printf 'extendedKeyUsage=clientAuth\n' > client.ext
  issue apiserver "/CN=kube-apiserver" apiserver.ext
  issue admin "/O=system:masters/CN=admin" client.ext
  issue controller-manager "/CN=system:kube-controller-manager" client.ext
  issue scheduler "/CN=system:kube-scheduler" client.ext
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  touch done
  cd - >/dev/null
}

kubeconfig() { # file user
  cat > "$1" <<KC
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

# ---- components ----------------------------------------------------------------------------------

start_control_plane() {
  start etcd "$BIN/etcd-$ETCD_VERSION" --name default --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "default=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync \
    --quota-backend-bytes 8589934592 --snapshot-count 10000 --log-level warn
  wait_until 60 "etcd" etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health"

  start kube-apiserver "$BIN/kube-apiserver" --bind-address 127.0.0.1 --secure-port "$API_PORT" \
    --advertise-address 127.0.0.1 --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" --client-ca-file "$PKI/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 --authorization-mode Node,RBAC --allow-privileged \
    --enable-admission-plugins NamespaceLifecycle,LimitRanger,ServiceAccount,Priority,DefaultTolerationSeconds,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ResourceQuota \
    --endpoint-reconciler-type none --enable-priority-and-fairness=false \
    --max-requests-inflight 800 --max-mutating-requests-inflight 400 --profiling=false
  wait_until 120 "kube-apiserver /readyz" kube-apiserver KUBECTL get --raw /readyz

  kubeconfig "$STATE/controller-manager.kubeconfig" controller-manager
  kubeconfig "$STATE/scheduler.kubeconfig" scheduler
  start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$STATE/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$STATE/controller-manager.kubeconfig" --authorization-kubeconfig "$STATE/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --leader-elect=false \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" --use-service-account-credentials \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --kube-api-qps 500 --kube-api-burst 1000 --concurrent-gc-syncs 50 --controllers '*,-nodeipam'
  cat > "$STATE/scheduler.yaml" <<CFG
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $STATE/scheduler.kubeconfig
  qps: 500
  burst: 1000
leaderElection:
  leaderElect: false
CFG
  start kube-scheduler "$BIN/kube-scheduler" --config "$STATE/scheduler.yaml" \
    --authentication-kubeconfig "$STATE/scheduler.kubeconfig" --authorization-kubeconfig "$STATE/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$SCHED_PORT"
  start kwok "$BIN/kwok-$KWOK_VERSION" --kubeconfig "$STATE/kubeconfig" --config "$ROOT/hack/kwok/stages.yaml" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --cidr 10.244.0.1/16 --node-ip 10.0.0.1 --server-address "127.0.0.1:$KWOK_PORT" \
    --node-lease-duration-seconds 40
}

create_nodes() {
  local existing
  existing=$(KUBECTL get nodes -l type=kwok --no-headers 2>/dev/null | wc -l)
  ((existing >= NODES)) && return 0
  log "creating $NODES kwok nodes ($NODE_CPU cpu, $NODE_MEMORY, $NODE_PODS pods each)"
  local i
  for ((i = 0; i < NODES; i++)); do
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
  done | KUBECTL apply --server-side --force-conflicts -f - >/dev/null
}

nodes_ready() {
  local ready
  ready=$(KUBECTL get nodes -l type=kwok -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True || true)
  ((ready >= NODES))
}

# ---- add-ons -------------------------------------------------------------------------------------

start_kuberay() {
  local crds
  crds=$(cd "$ROOT/hack/tools/kuberay" && go list -m -f '{{.Dir}}' github.com/ray-project/kuberay/ray-operator)/config/crd/bases
  # Server-side: the CRDs are too large for client-side apply's last-applied annotation.
  KUBECTL apply --server-side --force-conflicts -f "$crds" >/dev/null
  [[ -n ${KUBERAY_METRICS_PORT:-} ]] || { echo "KUBERAY_METRICS_PORT=$(free_port)"; echo "KUBERAY_PROBE_PORT=$(free_port)"; } >> "$STATE/ports.env"
  load_ports
  KUBECONFIG=$STATE/kubeconfig start kuberay "$BIN/kuberay-$KUBERAY_VERSION" --enable-leader-election=false \
    --metrics-addr "127.0.0.1:$KUBERAY_METRICS_PORT" --health-probe-bind-address "127.0.0.1:$KUBERAY_PROBE_PORT"
  wait_until 60 "the KubeRay operator to be healthy" kuberay curl -sf "http://127.0.0.1:$KUBERAY_PROBE_PORT/readyz"
}

# ---- sluice --------------------------------------------------------------------------------------

start_sluice() {
  local bin=${CARGO_TARGET_DIR:-$ROOT/target}/debug/sluice sum
  if $BUILD_SLUICE; then
    log "building sluice (cargo build --bin sluice)"
    (cd "$ROOT" && cargo build --quiet --bin sluice) || die "cargo build --bin sluice failed"
  fi
  [[ -x $bin ]] || die "$bin does not exist: run cargo build --bin sluice (or drop --no-build)"
  sum=$(sha256sum "$bin" | cut -d' ' -f1)
  if alive sluice && [[ $(cat "$STATE/sluice.sha256" 2>/dev/null) == "$sum" ]]; then
    return 0
  fi
  alive sluice && { log "sluice binary changed: restarting"; stop sluice; }
  cp "$bin" "$STATE/sluice"   # run a copy: a rebuild never replaces the running binary
  echo "$sum" > "$STATE/sluice.sha256"
  printf 'SLUICE_WEBHOOK_ADDR=127.0.0.1:%s\nSLUICE_METRICS_ADDR=127.0.0.1:%s\n' "$SLUICE_PORT" "$SLUICE_METRICS_PORT" > "$STATE/sluice.env"
  KUBECONFIG=$STATE/kubeconfig RUST_LOG=${RUST_LOG:-info} start sluice "$STATE/sluice" serve --local \
    --listen "127.0.0.1:$SLUICE_PORT" --metrics-listen "127.0.0.1:$SLUICE_METRICS_PORT"
  wait_until 60 "sluice /readyz" sluice curl -sfk "https://127.0.0.1:$SLUICE_PORT/readyz"
  log "sluice serving on https://127.0.0.1:$SLUICE_PORT (metrics http://127.0.0.1:$SLUICE_METRICS_PORT/metrics)"
}

# ---- commands ------------------------------------------------------------------------------------

cmd_up() {
  while (($#)); do
    case $1 in
      --nodes) NODES=$2; shift 2 ;;
      --node-cpu) NODE_CPU=$2; shift 2 ;;
      --node-memory) NODE_MEMORY=$2; shift 2 ;;
      --node-pods) NODE_PODS=$2; shift 2 ;;
      --with-sluice) WITH_SLUICE=true; shift ;;
      --no-build) BUILD_SLUICE=false; shift ;;
      --with-kuberay) WITH_KUBERAY=true; shift ;;
      -h|--help) usage; exit 0 ;;
      *) die "unknown flag '$1' for up (see hack/cluster.sh --help)" ;;
    esac
  done
  command -v openssl >/dev/null || die "openssl is needed (apt-get install openssl)"
  command -v go >/dev/null || die "Go is needed on PATH"
  local t0=$SECONDS
  build_all
  load_ports
  pki
  [[ -f $STATE/kubeconfig ]] || kubeconfig "$STATE/kubeconfig" admin
  start_control_plane
  wait_until 60 "the default ServiceAccount" kube-controller-manager KUBECTL -n default get serviceaccount default
  create_nodes
  wait_until 120 "$NODES kwok nodes Ready" kwok nodes_ready
  $WITH_KUBERAY && start_kuberay
  $WITH_SLUICE && start_sluice
  log "cluster up in $((SECONDS - t0))s: export KUBECONFIG=$STATE/kubeconfig"
}

cmd_down() {
  local c
  for c in sluice kuberay kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$c"; done
  rm -rf "$STATE"
  log "cluster down"
}

cmd_status() {
  [[ -d $STATE ]] || { echo "no cluster (hack/cluster.sh up starts one)"; return 0; }
  load_ports
  local c port
  for c in etcd kube-apiserver kube-controller-manager kube-scheduler kwok kuberay sluice; do
    case $c in
      etcd) port=$ETCD_PORT ;; kube-apiserver) port=$API_PORT ;; kube-controller-manager) port=$KCM_PORT ;;
      kube-scheduler) port=$SCHED_PORT ;; kwok) port=$KWOK_PORT ;; sluice) port=$SLUICE_PORT ;;
      kuberay) port=${KUBERAY_METRICS_PORT:-} ;;
    esac
    if alive "$c"; then printf '%-24s running  pid %-8s port %s\n' "$c" "$(cat "$PIDS/$c.pid")" "$port"
    else printf '%-24s stopped\n' "$c"; fi
  done
}

cmd_env() {
  echo "export KUBECONFIG=$STATE/kubeconfig"
  echo "export PATH=$BIN:\$PATH"
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) cmd_env ;;
  build) WITH_KUBERAY=true; build_all ;;
  -h|--help|help|"") usage ;;
  *) die "unknown command '$1' (see hack/cluster.sh --help)" ;;
esac
