# shellcheck shell=bash
# The local cluster's add-ons, started on the host: the CRDs, KubeRay, Argo Workflows, the Spark
# operator, Kueue (its webhooks on 127.0.0.1) and sluice itself. Sourced by hack/cluster.sh; it uses
# cluster.sh's helpers (start, wait_until, KUBECTL, die, log) and variables (ROOT, BIN, STATE, ports).

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  echo "hack/cluster/addons.sh is part of hack/cluster.sh: run 'hack/cluster.sh help'" >&2
  exit 2
fi

# ---- add-ons -------------------------------------------------------------------------------------

apply_crds() { # what dir
  # Server-side: some CRDs are too large for client-side apply's last-applied annotation.
  KUBECTL apply --server-side --force-conflicts -f "$2" >"$LOGS/crds.log" 2>&1 || fail_with_log crds "applying the $1 CRDs failed"
  KUBECTL wait --for condition=Established --timeout "${TIMEOUT}s" -f "$2" >/dev/null 2>>"$LOGS/crds.log" \
    || fail_with_log crds "the $1 CRDs did not become Established"
}

start_kuberay() {
  apply_crds KubeRay "$(go_module_dir kuberay github.com/ray-project/kuberay/ray-operator)/config/crd/bases"
  start kuberay env KUBECONFIG="$STATE/kubeconfig" "$BIN/kuberay-$KUBERAY_VERSION" --enable-leader-election=false \
    --metrics-addr "127.0.0.1:$KUBERAY_METRICS_PORT" --health-probe-bind-address "127.0.0.1:$KUBERAY_PROBE_PORT" \
    --qps 200 --burst 400
  wait_until "$TIMEOUT" "the KubeRay operator to be ready" kuberay curl -sf --max-time 2 "http://127.0.0.1:$KUBERAY_PROBE_PORT/readyz"
}

# The Argo Workflows controller on the host, cluster-wide, in the namespace argo (its ConfigMap and
# lease namespace). Metrics and telemetry are off (their port, 9090, is fixed in the ConfigMap's
# default); its health endpoint is fixed at :6060, so readiness is its log line instead. Step pods
# run argoexec from $ARGOEXEC_IMAGE, never pulled: with --real-node it is built here and imported
# (hack/realnode.sh); kwok nodes run no container at all.
start_argo() {
  # The CRD files only (the folder also holds a kustomization.yaml).
  local crds=$STATE/argo-crds
  mkdir -p "$crds"
  cp "$(go_module_dir argo github.com/argoproj/argo-workflows/v3)"/manifests/base/crds/minimal/argoproj.io_*.yaml "$crds/"
  chmod u+w "$crds"/*.yaml
  apply_crds "Argo Workflows" "$crds"
  KUBECTL create namespace argo >/dev/null 2>&1 || true
  KUBECTL -n argo apply -f - >"$LOGS/argo-config.log" 2>&1 <<'YAML' || fail_with_log argo-config "the Argo ConfigMap was refused"
apiVersion: v1
kind: ConfigMap
metadata: {name: workflow-controller-configmap}
data:
  metricsConfig: |
    enabled: false
  telemetryConfig: |
    enabled: false
YAML
  alive argo && return 0
  local from
  from=$(($(stat -c %s "$LOGS/argo.log" 2>/dev/null || echo 0) + 1))
  start argo env KUBECONFIG="$STATE/kubeconfig" LEADER_ELECTION_DISABLE=true \
    "$BIN/argo-$ARGO_WORKFLOWS_VERSION" --namespace argo --configmap workflow-controller-configmap \
    --executor-image "$ARGOEXEC_IMAGE" --executor-image-pull-policy Never --workflow-workers 4 --qps 100 --burst 200
  wait_until "$TIMEOUT" "the Argo Workflows controller to start" argo \
    bash -c "tail -c +$from '$LOGS/argo.log' | grep -q 'Starting Workflow Controller'"
}

start_spark_operator() {
  local dir sparkhome javahome
  dir=$(go_module_dir spark-operator github.com/kubeflow/spark-operator/v2)
  apply_crds "Spark operator" "$dir/config/crd/bases"
  sparkhome=$(spark_home) || die "pyspark in $PYSPARK_VENV is broken: delete that directory and run up again"
  javahome=$(java_home)
  # For tests and people that run spark-submit themselves: hack/cluster.sh env exports these.
  printf 'SPARK_HOME=%s\nJAVA_HOME=%s\nPYSPARK_PYTHON=%s\n' "$sparkhome" "$javahome" "$PYSPARK_VENV/bin/python" >"$STATE/spark.env"
  # The operator runs $SPARK_HOME/bin/spark-submit with --master k8s://https://$KUBERNETES_SERVICE_HOST:PORT;
  # spark-submit (fabric8) authenticates with KUBECONFIG.
  start spark-operator env KUBECONFIG="$STATE/kubeconfig" SPARK_HOME="$sparkhome" JAVA_HOME="$javahome" \
    PATH="$javahome/bin:$PATH" SPARK_LOCAL_IP=127.0.0.1 KUBERNETES_SERVICE_HOST=127.0.0.1 KUBERNETES_SERVICE_PORT="$API_PORT" \
    "$BIN/spark-operator-$SPARK_OPERATOR_VERSION" controller start --leader-election=false \
    --health-probe-bind-address "127.0.0.1:$SPARK_OPERATOR_PROBE_PORT" \
    --enable-metrics --metrics-bind-address "127.0.0.1:$SPARK_OPERATOR_METRICS_PORT" \
    --enable-ui-service=false --kube-api-qps 200 --kube-api-burst 400
  wait_until "$TIMEOUT" "the Spark operator to be ready" spark-operator \
    curl -sf --max-time 2 "http://127.0.0.1:$SPARK_OPERATOR_PROBE_PORT/readyz"
}

# Kueue on the host. Its webhooks (and the conversion webhooks of its CRDs) are registered with url
# clientConfigs on 127.0.0.1 instead of service references. Its internal certificate management stays
# on (with it off, Kueue insists on metrics certificates under /etc/kueue), fed with a CA and a serving
# certificate made here, valid both for its service name and for 127.0.0.1, that it accepts as they are.
KUEUE_SERVICE=kueue-webhook-service KUEUE_SECRET=kueue-webhook-server-cert

kueue_pki() {
  [[ -f $PKI/kueue/done ]] && return 0
  mkdir -p "$PKI/kueue"
  (
    set -e
    cd "$PKI/kueue"
    # Kueue's certificate rotator checks its CA for the name kueue-ca and the serving certificate for
    # <service>.<namespace>.svc.
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/O=kueue/CN=kueue-ca" \
      -addext "subjectAltName=DNS:kueue-ca" -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,digitalSignature"
    openssl req -newkey rsa:2048 -nodes -keyout tls.key -out tls.csr -subj "/CN=$KUEUE_SERVICE.kueue-system.svc"
    printf 'subjectAltName=DNS:%s.kueue-system.svc,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' "$KUEUE_SERVICE" >tls.ext
    openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out tls.crt -days 3650 -extfile tls.ext
    # The rotator parses the CA key as PKCS#1 only.
    openssl rsa -in ca.key -out ca.key -traditional
  ) >"$LOGS/pki.log" 2>&1 || fail_with_log pki "generating Kueue's certificates with openssl failed"
  touch "$PKI/kueue/done"
}

# Rewrites clientConfig.service (name, namespace, path, port) into clientConfig.url on 127.0.0.1 and
# adds a caBundle; drops Service objects. Reads and writes multi-document YAML as kubectl kustomize
# prints it.
url_client_configs() { # url ca-file
  local ca
  ca=$(base64 -w0 <"$2")
  awk -v url="$1" -v ca="$ca" '
    function flush_doc() { if (!isservice) printf "%s", doc; doc = ""; isservice = 0 }
    function emit(line) { doc = doc line "\n" }
    /^---/ { flush_doc() }
    /^kind: Service$/ { isservice = 1 }
    {
      if (insvc) {
        match($0, /^ */)
        if (RLENGTH > length(indent)) { if ($1 == "path:") path = $2; next }
        doc = doc indent "url: " url path "\n" indent "caBundle: " ca "\n"; insvc = 0
      }
      if (prevcc && $1 == "service:") { match($0, /^ */); indent = substr($0, 1, RLENGTH); insvc = 1; path = ""; prevcc = 0; next }
      prevcc = ($1 == "clientConfig:")
      emit($0)
    }
    END {
      if (insvc) doc = doc indent "url: " url path "\n" indent "caBundle: " ca "\n"
      flush_doc()
    }'
}

start_kueue() {
  local dir url
  dir=$(go_module_dir kueue sigs.k8s.io/kueue)
  url=https://127.0.0.1:$KUEUE_WEBHOOK_PORT
  kueue_pki
  KUBECTL kustomize "$dir/config/components/crd" | url_client_configs "$url" "$PKI/kueue/ca.crt" >"$STATE/kueue-crds.yaml" \
    || die "rendering Kueue's CRDs failed"
  apply_crds Kueue "$STATE/kueue-crds.yaml"
  KUBECTL kustomize "$dir/config/components/webhook" | url_client_configs "$url" "$PKI/kueue/ca.crt" |
    sed -e 's/^  name: mutating-webhook-configuration$/  name: kueue-mutating-webhook-configuration/' \
      -e 's/^  name: validating-webhook-configuration$/  name: kueue-validating-webhook-configuration/' \
      >"$STATE/kueue-webhooks.yaml" || die "rendering Kueue's webhook configurations failed"
  {
    KUBECTL create namespace kueue-system --dry-run=client -o yaml
    echo ---
    KUBECTL -n kueue-system create secret generic "$KUEUE_SECRET" --dry-run=client -o yaml \
      --from-file=ca.crt="$PKI/kueue/ca.crt" --from-file=ca.key="$PKI/kueue/ca.key" \
      --from-file=tls.crt="$PKI/kueue/tls.crt" --from-file=tls.key="$PKI/kueue/tls.key"
    echo ---
    cat "$STATE/kueue-webhooks.yaml"
  } | KUBECTL apply --server-side --force-conflicts -f - >>"$LOGS/kueue.log" 2>&1 \
    || fail_with_log kueue "registering Kueue's namespace, certificate Secret and webhooks failed"
  mkdir -p "$STATE/kueue-certs"
  cp "$PKI/kueue/tls.crt" "$PKI/kueue/tls.key" "$STATE/kueue-certs/"
  cat >"$STATE/kueue.yaml" <<CFG
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: 127.0.0.1:$KUEUE_PROBE_PORT
metrics:
  bindAddress: 127.0.0.1:$KUEUE_METRICS_PORT
webhook:
  host: 127.0.0.1
  port: $KUEUE_WEBHOOK_PORT
  certDir: $STATE/kueue-certs
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: true
  webhookServiceName: $KUEUE_SERVICE
  webhookSecretName: $KUEUE_SECRET
clientConnection:
  qps: 200
  burst: 400
featureGates:
  VisibilityOnDemand: false
  SparkApplicationIntegration: true
integrations:
  frameworks: [batch/job, pod, ray.io/rayjob, ray.io/raycluster, sparkoperator.k8s.io/sparkapplication]
CFG
  start kueue env KUBECONFIG="$STATE/kubeconfig" "$BIN/kueue-$KUEUE_VERSION" --config "$STATE/kueue.yaml"
  wait_until "$TIMEOUT" "Kueue to be ready" kueue curl -sf --max-time 2 "http://127.0.0.1:$KUEUE_PROBE_PORT/readyz"
}

# ---- sluice --------------------------------------------------------------------------------------

start_sluice() {
  local bin=${CARGO_TARGET_DIR:-$ROOT/target}/$SLUICE_PROFILE/sluice sum build=(cargo build --bin sluice)
  [[ $SLUICE_PROFILE == release ]] && build+=(--release)
  if $BUILD_SLUICE; then
    command -v cargo >/dev/null || die "cargo is needed for --with-sluice (rustup: ~/.cargo/bin)"
    log "building sluice (${build[*]})"
    (cd "$ROOT" && "${build[@]}" --quiet) || die "${build[*]} failed (errors above)"
  fi
  [[ -x $bin ]] || die "$bin does not exist: run ${build[*]} (or drop --no-build)"
  # The binary and the SLUICE_* environment it reads its settings from (sluice serve --help).
  sum=$({ sha256sum "$bin" | cut -d' ' -f1; env | { grep '^SLUICE_' || true; } | sort; } | sha256sum | cut -d' ' -f1)
  if alive sluice && [[ $(cat "$STATE/sluice.sha256" 2>/dev/null) == "$sum" ]]; then
    return 0
  fi
  if alive sluice; then log "sluice's binary or SLUICE_* settings changed: restarting it"; stop sluice; fi
  # Run a copy: a rebuild never replaces the binary of the running process.
  cp "$bin" "$STATE/sluice.tmp" && mv "$STATE/sluice.tmp" "$STATE/sluice"
  echo "$sum" >"$STATE/sluice.sha256"
  echo "$SLUICE_PROFILE" >"$STATE/sluice.profile"
  printf 'SLUICE_WEBHOOK_ADDR=127.0.0.1:%s\nSLUICE_METRICS_ADDR=127.0.0.1:%s\nSLUICE_DASHBOARD_ADDR=127.0.0.1:%s\n' \
    "$SLUICE_PORT" "$SLUICE_METRICS_PORT" "$SLUICE_DASHBOARD_PORT" >"$STATE/sluice.env"
  # The dashboard is on in the local cluster (tests/e2e_dashboard.rs), its history sampled often.
  start sluice env KUBECONFIG="$STATE/kubeconfig" RUST_LOG="${RUST_LOG:-info}" "$STATE/sluice" serve --local \
    --listen "127.0.0.1:$SLUICE_PORT" --metrics-listen "127.0.0.1:$SLUICE_METRICS_PORT" \
    --dashboard-addr "127.0.0.1:$SLUICE_DASHBOARD_PORT" --dashboard-sample-interval "${SLUICE_DASHBOARD_SAMPLE_INTERVAL:-5s}"
  wait_until "$TIMEOUT" "sluice /readyz" sluice curl -sfk --max-time 2 "https://127.0.0.1:$SLUICE_PORT/readyz"
  log "sluice ($SLUICE_PROFILE build) serving on https://127.0.0.1:$SLUICE_PORT (metrics: http://127.0.0.1:$SLUICE_METRICS_PORT/metrics)"
}
