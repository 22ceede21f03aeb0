# shellcheck shell=bash
# One real node for the local cluster: a kubelet built from the pinned k8s.io/kubernetes module,
# containerd and runc from Debian, the CNI bridge / host-local / loopback plugins, and images built
# here (no registry) and imported with `ctr -n k8s.io images import`. Sourced by hack/cluster.sh
# (`up --real-node`, `down`, `status`); it uses cluster.sh's helpers (start, stop, alive, wait_until,
# KUBECTL, die, log) and variables (ROOT, BIN, STATE, PKI, LOGS, API_PORT, ...).
#
# Everything of the node lives in .cluster/node/ (containerd's root and state, the kubelet's root
# directory, pod logs, CNI configuration and IP allocations), except what the kernel makes global:
# the bridge sluice0, one iptables NAT rule (the `kubernetes` Service's 10.96.0.1:443 -> the API
# server on 127.0.0.1, so pods reach the API server without kube-proxy), runc's state in
# /run/containerd/runc and the pods' cgroups. `down` removes all of it. Only one real node can run on
# a host: /run/sluice-realnode.owner names the cluster that holds it.

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  echo "hack/realnode.sh is part of hack/cluster.sh: run 'hack/cluster.sh up --real-node' (see hack/cluster.sh help)" >&2
  exit 2
fi

NODE_DIR=$STATE/node
REAL_NODE_NAME="sluice-real-node"
REAL_NODE_LABEL=sluice.dev/node          # = real; kwok nodes carry type=kwok and no such label
REAL_NODE_TAINT=sluice.dev/real-node     # NoSchedule: only pods that tolerate it land here
REAL_NODE_BRIDGE=sluice0
REAL_NODE_SUBNET=10.88.0.0/24
REAL_NODE_OWNER=/run/sluice-realnode.owner
KUBERNETES_SERVICE_IP=10.96.0.1          # first address of --service-cluster-ip-range
# overlayfs by default; SLUICE_REAL_NODE_SNAPSHOTTER=native where overlay mounts are refused.
REAL_NODE_SNAPSHOTTER=${SLUICE_REAL_NODE_SNAPSHOTTER:-overlayfs}
# Image names. Pods name them as they are; sluice:dev is what manifests/install/ asks for.
PAUSE_IMAGE=sluice.local/pause:$PAUSE_VERSION
BUSYBOX_IMAGE=sluice.local/busybox:${BUSYBOX_DEB_VERSION%%-*}
BUSYBOX_IMAGE=${BUSYBOX_IMAGE/:1:/:}       # the Debian epoch "1:" is no part of a tag
SLUICE_IMAGE=docker.io/library/sluice:dev
SLUICE_UPGRADE_IMAGE=docker.io/library/sluice:upgrade
# Argo Workflows' executor (cluster.sh --with-argo names it to the controller in any case).
ARGOEXEC_IMAGE=sluice.local/argoexec:$ARGO_WORKFLOWS_VERSION

# shellcheck source=hack/images/images.sh
source "$ROOT/hack/images/images.sh"
# shellcheck source=hack/lib/deb.sh
source "$ROOT/hack/lib/deb.sh"   # deb_version: a pinned Debian package, or its newest once replaced

CTR() { ctr --address "$NODE_DIR/containerd.sock" -n k8s.io "$@"; }

# ---- packages and binaries -----------------------------------------------------------------------

# containerd, runc, the CNI plugins and busybox-static from Debian, at the versions of hack/versions.sh.
realnode_packages() {
  local want=("containerd=$CONTAINERD_DEB_VERSION" "runc=$RUNC_DEB_VERSION"
    "containernetworking-plugins=$CNI_PLUGINS_DEB_VERSION" "busybox-static=$BUSYBOX_DEB_VERSION")
  local spec pkg ver missing=()
  for spec in "${want[@]}"; do
    pkg=${spec%%=*} ver=${spec#*=}
    [[ $(dpkg-query -W -f '${Version}' "$pkg" 2>/dev/null || true) == "$ver" ]] || missing+=("$spec")
  done
  ((${#missing[@]})) || return 0
  command -v apt-get >/dev/null || die "the real node needs ${missing[*]} (Debian packages); this machine has no apt-get"
  apt-get update -qq >"$LOGS/apt.log" 2>&1 || fail_with_log apt "apt-get update failed"
  # A pin Debian has replaced: its newest version instead (deb_version, hack/lib/script.sh).
  local install=()
  for spec in "${missing[@]}"; do
    pkg=${spec%%=*}
    ver=$(deb_version "$pkg" "${spec#*=}")
    [[ -n $ver ]] || die "Debian's archive has no package $pkg (needed by the real node)"
    [[ $(dpkg-query -W -f '${Version}' "$pkg" 2>/dev/null || true) == "$ver" ]] || install+=("$pkg=$ver")
  done
  ((${#install[@]})) || return 0
  missing=("${install[@]}")
  log "installing ${missing[*]} (apt-get, first time only)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >>"$LOGS/apt.log" 2>&1 ||
    fail_with_log apt "apt-get install ${missing[*]} failed"
}

# The Go ldflags that stamp the Kubernetes version into a binary (kubectl version, node status).
k8s_version_ldflags() {
  local minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
  local v="-X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION"
  v+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  v+=" -X k8s.io/component-base/version.gitTreeState=clean"
  v+=" -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES_VERSION"
  v+=" -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  echo "$v"
}

# The kubelet (hack/tools/k8s/kubelet, same module as the control plane, a binary of its own) and the
# pause binary (pause.c of the same k8s.io/kubernetes module, compiled static with gcc).
realnode_build() {
  build_go kubelet "$KUBERNETES_VERSION" k8s ./kubelet "$(k8s_version_ldflags)"
  real_images_build  # SLUICE_REAL_NODE_IMAGES: the Spark and Ray images (hack/images/), cached
  local out=$BIN/pause-$PAUSE_VERSION
  [[ -x $out ]] && return 0
  command -v gcc >/dev/null || die "gcc is needed to build the pause binary (Debian: apt-get install gcc libc6-dev)"
  local src
  src=$(go_module_dir k8s k8s.io/kubernetes)/build/pause/linux/pause.c
  gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION-sluice" -o "$out.tmp" "$src" \
    || die "compiling $src failed (static linking needs libc6-dev)"
  mv "$out.tmp" "$out"
}

# ---- images ----------------------------------------------------------------------------------------

# Writes a docker-archive tarball (manifest.json + config + one layer) of a root file system.
image_archive() { # rootfs name:tag out.tar entrypoint-json [cmd-json]
  local rootfs=$1 ref=$2 out=$3 entrypoint=$4 cmd=${5:-null} work diffid cfgsum
  work=$(mktemp -d "$NODE_DIR/image.XXXXXX")
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$rootfs" -cf "$work/layer.tar" .
  diffid=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
  cat >"$work/config.json" <<CFG
{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/usr/local/bin:/usr/bin:/bin"],"Entrypoint":$entrypoint,"Cmd":$cmd,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:$diffid"]}}
CFG
  cfgsum=$(sha256sum "$work/config.json" | cut -d' ' -f1)
  mv "$work/config.json" "$work/$cfgsum.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["layer.tar"]}]\n' "$cfgsum" "$ref" >"$work/manifest.json"
  tar -C "$work" -cf "$out" manifest.json "$cfgsum.json" layer.tar
  rm -rf "$work"
}

# Imports an image unless containerd already holds the same content under that name (a label on the
# image records the sha256 of the archive it came from).
import_image() { # name:tag archive
  local ref=$1 archive=$2 sum have
  sum=$(sha256sum "$archive" | cut -d' ' -f1)
  have=$(CTR images ls "name==$ref" 2>/dev/null | awk 'NR > 1 {print $NF}')
  [[ $have == *"sluice.dev/archive=$sum"* ]] && return 0
  CTR images import --snapshotter "$REAL_NODE_SNAPSHOTTER" "$archive" >>"$LOGS/images.log" 2>&1 \
    || fail_with_log images "ctr -n k8s.io images import $archive ($ref) failed"
  CTR images label "$ref" "sluice.dev/archive=$sum" >/dev/null 2>>"$LOGS/images.log" \
    || fail_with_log images "labelling the image $ref failed"
}

base_rootfs() { # dir: /etc/passwd, /etc/group, /tmp
  mkdir -p "$1/etc" "$1/tmp" "$1/bin"
  chmod 1777 "$1/tmp"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65532:65532:nobody:/nonexistent:/bin/false\n' >"$1/etc/passwd"
  printf 'root:x:0:\nnobody:x:65532:\n' >"$1/etc/group"
}

# The pause (sandbox) image, busybox (Debian's busybox-static, every applet linked) and sluice
# (from the Dockerfile).
realnode_images() {
  local dir=$NODE_DIR/images
  rm -rf "$dir"; mkdir -p "$dir"

  base_rootfs "$dir/pause"
  cp "$BIN/pause-$PAUSE_VERSION" "$dir/pause/pause"
  image_archive "$dir/pause" "$PAUSE_IMAGE" "$dir/pause.tar" '["/pause"]'
  import_image "$PAUSE_IMAGE" "$dir/pause.tar"

  base_rootfs "$dir/busybox"
  cp /bin/busybox "$dir/busybox/bin/busybox"
  local applet
  for applet in $(/bin/busybox --list); do
    [[ $applet == busybox ]] || ln -s busybox "$dir/busybox/bin/$applet"
  done
  image_archive "$dir/busybox" "$BUSYBOX_IMAGE" "$dir/busybox.tar" null '["sh"]'
  import_image "$BUSYBOX_IMAGE" "$dir/busybox.tar"

  # argoexec (with --with-argo): the static binary at /bin/argoexec, as Argo's own image has it (the
  # controller runs `argoexec init` / `argoexec wait`; init copies it for the main container).
  if $WITH_ARGO; then
    base_rootfs "$dir/argoexec"
    cp "$BIN/argoexec-$ARGO_WORKFLOWS_VERSION" "$dir/argoexec/bin/argoexec"
    image_archive "$dir/argoexec" "$ARGOEXEC_IMAGE" "$dir/argoexec.tar" '["argoexec"]'
    import_image "$ARGOEXEC_IMAGE" "$dir/argoexec.tar"
  fi

  # sluice: the archives of realnode_sluice_archives, imported as sluice:dev (what manifests/install/
  # asks for) and sluice:<version> (what dist/sluice.yaml and the chart's defaults ask for), and the
  # second build (sluice-upgrade) under its own tag.
  local version
  version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -n1)
  realnode_sluice_archives
  import_image "$SLUICE_IMAGE" "$CACHE/images/sluice-dev.tar"
  CTR images tag --force "$SLUICE_IMAGE" "docker.io/library/sluice:$version" >/dev/null \
    || die "ctr images tag $SLUICE_IMAGE sluice:$version failed"
  if [[ " $REAL_NODE_IMAGES " == *" sluice-upgrade "* ]]; then
    import_image "$SLUICE_UPGRADE_IMAGE" "$CACHE/images/sluice-upgrade.tar"
  fi
  rm -rf "$dir"
  real_images_import  # SLUICE_REAL_NODE_IMAGES: the Spark and Ray images (hack/images/)
}

# sluice's image, built from the Dockerfile at the root (hack/image.sh: buildah, offline) as users
# build it, into $CACHE/images/sluice-dev.tar; with SLUICE_REAL_NODE_IMAGES naming sluice-upgrade, a
# second build too (version <version>-upgrade, its own tag and image id) for the upgrade tests
# (tests/real_node_install.rs). --no-build keeps the archives already there (hack/test.sh builds them
# with 'build --real-node' while its first phase runs, then brings the real node up with --no-build).
realnode_sluice_archives() {
  local archive version
  version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -n1)
  mkdir -p "$LOGS"
  archive=$CACHE/images/sluice-dev.tar
  if $BUILD_SLUICE || [[ ! -f $archive ]]; then
    SLUICE_IMAGE_LOG=$LOGS/image-build.log "$ROOT/hack/image.sh" --tag "$SLUICE_IMAGE" --out "$archive" >/dev/null \
      || fail_with_log image-build "building sluice's image from the Dockerfile failed (hack/image.sh)"
  fi
  if [[ " $REAL_NODE_IMAGES " == *" sluice-upgrade "* ]]; then
    archive=$CACHE/images/sluice-upgrade.tar
    if $BUILD_SLUICE || [[ ! -f $archive ]]; then
      SLUICE_IMAGE_LOG=$LOGS/image-build.log "$ROOT/hack/image.sh" --version "$version-upgrade" \
        --tag "$SLUICE_UPGRADE_IMAGE" --out "$archive" >/dev/null \
        || fail_with_log image-build "building sluice's second image from the Dockerfile failed (hack/image.sh)"
    fi
  fi
}

# ---- certificates ----------------------------------------------------------------------------------

# The kubelet's client certificate (system:node:<name>, for the Node authorizer), its serving
# certificate (for the node's IP: the API server verifies it with --kubelet-certificate-authority),
# and the API server's client certificate for the kubelet (logs, exec, attach, port-forward).
realnode_pki() { # node-ip
  local ip=$1
  [[ -f $PKI/kubelet-serving.ip && $(cat "$PKI/kubelet-serving.ip") == "$ip" ]] && return 0
  (
    set -e
    cd "$PKI"
    issue() { # name subject extensions
      openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2"
      printf '%s\n' "$3" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 3650 -extfile "$1.ext"
    }
    issue kubelet "/O=system:nodes/CN=system:node:$REAL_NODE_NAME" "extendedKeyUsage=clientAuth"
    issue kubelet-serving "/CN=$REAL_NODE_NAME" "subjectAltName=IP:$ip,DNS:$REAL_NODE_NAME
extendedKeyUsage=serverAuth"
  ) >>"$LOGS/pki.log" 2>&1 || fail_with_log pki "generating the kubelet's certificates with openssl failed"
  echo "$ip" >"$PKI/kubelet-serving.ip"
}

# ---- network ---------------------------------------------------------------------------------------

node_ip() { # the address of the interface of the default route: what the kubelet reports
  ip -4 route get 1.1.1.1 2>/dev/null | grep -oE 'src [0-9.]+' | cut -d' ' -f2
}

# The bridge is made here (the CNI bridge plugin adopts it) so that route_localnet can be set on it:
# pods' packets to 10.96.0.1:443 are DNAT-ed to the API server on 127.0.0.1 (the API server listens
# only on loopback). That is the one Service a pod needs without kube-proxy; sluice's webhook Service
# is reached by the API server through its endpoints (--enable-aggregator-routing).
realnode_network() {
  if ! ip link show "$REAL_NODE_BRIDGE" >/dev/null 2>&1; then
    ip link add "$REAL_NODE_BRIDGE" type bridge || die "ip link add $REAL_NODE_BRIDGE type bridge failed"
  fi
  ip link set "$REAL_NODE_BRIDGE" up
  sysctl -qw "net.ipv4.conf.$REAL_NODE_BRIDGE.route_localnet=1" || die "cannot set route_localnet on $REAL_NODE_BRIDGE"
  local rule=(-t nat -p tcp -d "$KUBERNETES_SERVICE_IP" --dport 443 -m comment --comment sluice-realnode
    -j DNAT --to-destination "127.0.0.1:$API_PORT")
  iptables -C PREROUTING "${rule[@]:2}" -t nat 2>/dev/null || iptables -A PREROUTING "${rule[@]:2}" -t nat \
    || die "iptables -t nat -A PREROUTING (10.96.0.1:443 -> 127.0.0.1:$API_PORT) failed"
  mkdir -p "$NODE_DIR/cni/net.d" "$NODE_DIR/cni/ipam"
  cat >"$NODE_DIR/cni/net.d/10-sluice.conflist" <<CNI
{
  "cniVersion": "1.0.0",
  "name": "sluice",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$REAL_NODE_BRIDGE",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$REAL_NODE_SUBNET"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$NODE_DIR/cni/ipam"
      }
    }
  ]
}
CNI
}

# Removes the DNAT rule, the masquerade rules and chains the bridge plugin left (sandboxes killed
# without a CNI DEL), and the bridge.
realnode_network_down() {
  local line chain
  while line=$(iptables -t nat -S 2>/dev/null | grep -m1 -E '^-A (PREROUTING|POSTROUTING) .*(sluice-realnode|name: \\"sluice\\")'); do
    eval "iptables -t nat ${line/-A /-D }" || break
    chain=$(grep -oE -- '-j CNI-[0-9a-f]+' <<<"$line" | cut -d' ' -f2 || true)
    if [[ -n $chain ]]; then iptables -t nat -F "$chain" 2>/dev/null; iptables -t nat -X "$chain" 2>/dev/null || true; fi
  done
  ip link del "$REAL_NODE_BRIDGE" 2>/dev/null || true
  # The kubelet's own chains (canaries, the iptables-mode hint, KUBE-FIREWALL and the rules using it).
  local cmd table
  for cmd in iptables ip6tables; do
    command -v "$cmd" >/dev/null || continue
    for table in filter nat mangle; do
      while line=$("$cmd" -t "$table" -S 2>/dev/null | grep -m1 -E '^-A [A-Z]+ .*-j KUBE-(FIREWALL|KUBELET-CANARY|IPTABLES-HINT)'); do
        eval "$cmd -t $table ${line/-A /-D }" || break
      done
      for chain in KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT; do
        if "$cmd" -t "$table" -F "$chain" 2>/dev/null; then "$cmd" -t "$table" -X "$chain" 2>/dev/null || true; fi
      done
    done
  done
}

# ---- processes -------------------------------------------------------------------------------------

containerd_config() {
  cat >"$NODE_DIR/containerd.toml" <<TOML
version = 2
root = "$NODE_DIR/containerd/root"
state = "$NODE_DIR/containerd/state"
[grpc]
  address = "$NODE_DIR/containerd.sock"
[ttrpc]
  address = "$NODE_DIR/containerd.sock.ttrpc"
[debug]
  level = "info"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # No CAP_SYS_RESOURCE in these sandboxes: an oom_score_adj below containerd's own (the sandbox's
  # -998, a Guaranteed pod's -997) is refused by the kernel ("failed to update /proc/self/oom_score_adj:
  # Permission denied" from runc). This clamps them to containerd's.
  restrict_oom_score_adj = true
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "$REAL_NODE_SNAPSHOTTER"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$NODE_DIR/cni/net.d"
TOML
}

kubelet_config() { # node-ip
  cat >"$NODE_DIR/kubelet.yaml" <<CFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://$NODE_DIR/containerd.sock
imageServiceEndpoint: unix://$NODE_DIR/containerd.sock
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
oomScoreAdj: 0                # not -999: no CAP_SYS_RESOURCE here (see containerd.toml)
registerNode: true
registerWithTaints:
- {key: $REAL_NODE_TAINT, value: "true", effect: NoSchedule}
podLogsDir: $NODE_DIR/pod-logs
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
maxPods: 30
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
nodeStatusUpdateFrequency: 10s
syncFrequency: 10s
CFG
}

realnode_up() {
  [[ $(id -u) == 0 ]] || die "--real-node needs root (containerd, runc, mounts, cgroups, the bridge)"
  mkdir -p "$NODE_DIR" "$LOGS"
  if [[ -f $REAL_NODE_OWNER && $(cat "$REAL_NODE_OWNER") != "$STATE" ]]; then
    local other; other=$(cat "$REAL_NODE_OWNER")
    [[ -d $other/node ]] && die "a real node of another cluster runs on this host ($other): only one can; run 'hack/cluster.sh down' there first"
  fi
  echo "$STATE" >"$REAL_NODE_OWNER"
  local t0=$SECONDS ip
  realnode_packages
  realnode_build
  ip=$(node_ip) || true
  [[ -n $ip ]] || die "cannot tell this host's address (ip -4 route get 1.1.1.1 shows no src): the kubelet needs a non-loopback node IP"
  realnode_pki "$ip"
  kubeconfig "$NODE_DIR/kubelet.kubeconfig" kubelet
  realnode_network
  containerd_config
  start containerd containerd --config "$NODE_DIR/containerd.toml"
  wait_until "$TIMEOUT" "containerd to answer" containerd CTR version
  realnode_images
  kubelet_config "$ip"
  start kubelet "$BIN/kubelet-$KUBERNETES_VERSION" --config "$NODE_DIR/kubelet.yaml" \
    --kubeconfig "$NODE_DIR/kubelet.kubeconfig" --root-dir "$NODE_DIR/kubelet" \
    --hostname-override "$REAL_NODE_NAME" --node-ip "$ip" \
    --node-labels "$REAL_NODE_LABEL=real,type=real"
  wait_until "$TIMEOUT" "the real node $REAL_NODE_NAME to be Ready" kubelet real_node_ready
  log "real node $REAL_NODE_NAME ($ip) Ready in $((SECONDS - t0))s: label $REAL_NODE_LABEL=real, taint $REAL_NODE_TAINT=true:NoSchedule, images $BUSYBOX_IMAGE and $SLUICE_IMAGE$($WITH_ARGO && echo " and $ARGOEXEC_IMAGE")"
}

real_node_ready() {
  [[ $(KUBECTL get node "$REAL_NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}') == True ]]
}

# Stops the kubelet, then every container and sandbox, then containerd and any shim left; unmounts
# what the kubelet and containerd mounted under .cluster/node; removes the network and the pods' cgroups.
realnode_down() {
  [[ -d $NODE_DIR ]] || return 0
  stop kubelet
  if alive containerd; then
    local id
    for id in $(CTR tasks ls -q 2>/dev/null); do CTR tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true; done
    for id in $(CTR tasks ls -q 2>/dev/null); do CTR tasks delete -f "$id" >/dev/null 2>&1 || true; done
  fi
  stop containerd
  # Shims outlive containerd by design; ours run with -address .cluster/node/containerd.sock.
  local pid
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $NODE_DIR/containerd.sock" || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done
  local mnt
  # Deepest first: every mount point under .cluster/node (pod volumes, snapshots, sandbox /dev/shm, netns).
  while read -r mnt; do
    umount -l "$mnt" 2>/dev/null || true
  done < <(awk -v p="$NODE_DIR/" 'index($2, p) == 1 {print $2}' /proc/self/mounts | sort -r)
  realnode_network_down
  # Network namespaces containerd made for our sandboxes (bind mounts under /run/netns).
  while read -r mnt; do
    if umount "$mnt" 2>/dev/null; then rm -f "$mnt"; fi
  done < <(awk '$2 ~ "^/run/netns/cni-" {print $2}' /proc/self/mounts)
  # The containers' cgroups (cgroupsPerQOS is off: containerd puts them under /k8s.io in each hierarchy).
  local h
  for h in /sys/fs/cgroup/*/k8s.io; do
    if [[ -d $h ]]; then find "$h" -depth -type d -exec rmdir {} + 2>/dev/null || true; fi
  done
  [[ -f $REAL_NODE_OWNER && $(cat "$REAL_NODE_OWNER") == "$STATE" ]] && rm -f "$REAL_NODE_OWNER"
  rm -rf "$NODE_DIR"
}
