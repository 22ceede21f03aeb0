# shellcheck shell=bash
# Building the local cluster's programs: the Kubernetes components and add-ons from Go modules into
# $BIN, Helm, argoexec, and spark-submit (a pyspark venv) with a Java to run it. Sourced by
# hack/cluster.sh; it uses cluster.sh's helpers (die, log) and variables (ROOT, BIN, CACHE, ...).

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  echo "hack/cluster/build.sh is part of hack/cluster.sh: run 'hack/cluster.sh help'" >&2
  exit 2
fi

# ---- building ------------------------------------------------------------------------------------

# Builds a Go main from the module hack/tools/<dir> into $BIN/<name>-<version>, once.
build_go() { # name version module-dir package [extra ldflags]
  local name=$1 version=$2 dir=$3 pkg=$4 extra=${5:-} out=$BIN/$1-$2
  [[ -x $out ]] && return 0
  command -v go >/dev/null || die "Go is needed to build $name: install Go 1.26 (expected at /usr/local/go/bin/go)"
  mkdir -p "$BIN"
  log "building $name $version (first time only, cached in $BIN)"
  local start=$SECONDS
  (cd "$ROOT/hack/tools/$dir" && go build -trimpath -ldflags "-s -w $extra" -o "$out.tmp" "$pkg") \
    || die "building $name $version failed (the Go errors are above); module: hack/tools/$dir"
  mv "$out.tmp" "$out"
  log "built $name $version in $((SECONDS - start))s"
}

build_core() {
  build_go etcd "$ETCD_VERSION" etcd .
  local v
  v=$(k8s_version_ldflags)
  # One multi-call binary (hack/tools/k8s/main.go) for the four: linked once, a quarter of the disk.
  build_go k8s "$KUBERNETES_VERSION" k8s . "$v"
  local c
  for c in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    ln -sfn "k8s-$KUBERNETES_VERSION" "$BIN/$c"
  done
  build_go kwok "$KWOK_VERSION" kwok sigs.k8s.io/kwok/cmd/kwok
  build_helm
}

# Helm (hack/tools/helm): charts/sluice/ is linted, templated and packaged with it (hack/release.sh,
# tests/install.rs, the real node's install tests). The ldflags are those of Helm's Makefile: its
# version, and the Kubernetes version `helm template` assumes (client-go's minor, major 1).
build_helm() {
  local cg minor
  cg=$(awk '$1 == "k8s.io/client-go" {print $2}' "$ROOT/hack/tools/helm/go.mod")
  minor=${cg#v0.}; minor=${minor%%.*}
  build_go helm "$HELM_VERSION" helm helm.sh/helm/v3/cmd/helm \
    "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean
     -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$minor
     -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor"
  ln -sfn "helm-$HELM_VERSION" "$BIN/helm"
}

build_addons() {
  if $WITH_KUBERAY; then build_go kuberay "$KUBERAY_VERSION" kuberay github.com/ray-project/kuberay/ray-operator; fi
  if $WITH_SPARK; then
    build_go spark-operator "$SPARK_OPERATOR_VERSION" spark-operator github.com/kubeflow/spark-operator/v2/cmd/operator
    install_pyspark
  fi
  if $WITH_KUEUE; then build_go kueue "$KUEUE_VERSION" kueue sigs.k8s.io/kueue/cmd/kueue; fi
  if $WITH_ARGO; then
    build_go argo "$ARGO_WORKFLOWS_VERSION" argo github.com/argoproj/argo-workflows/v3/cmd/workflow-controller
    if $REAL_NODE; then build_argoexec; fi  # only a real node runs step pods
  fi
  if $REAL_NODE; then realnode_build; fi
  return 0
}

# argoexec, Argo's executor (the init and wait containers of every step pod; its init copies it into
# the main container too), from the same module and version as the controller, built static with
# CGO off as Argo's Makefile does, into $BIN/argoexec-<version>. The module's zip (what the Go proxy
# serves) leaves out what git holds as symlinks, and workflow/executor/osspecific/signal_linux.go is
# one (to signal_darwin.go): without it nothing builds for linux. So the build runs in a copy of the
# module ($CACHE/argoexec-src-<version>, 53 MB, kept for the next build) with that file put back,
# against the module's own go.mod and go.sum (the dependency versions Argo releases with).
build_argoexec() {
  local out=$BIN/argoexec-$ARGO_WORKFLOWS_VERSION src=$CACHE/argoexec-src-$ARGO_WORKFLOWS_VERSION osdir
  [[ -x $out ]] && return 0
  if [[ ! -f $src/.complete ]]; then
    rm -rf "$src"
    cp -r "$(go_module_dir argo github.com/argoproj/argo-workflows/v3)" "$src" || die "copying Argo's module to $src failed"
    chmod -R u+w "$src"
    osdir=$src/workflow/executor/osspecific
    [[ -f $osdir/signal_darwin.go && ! -e $osdir/signal_linux.go ]] \
      || die "Argo $ARGO_WORKFLOWS_VERSION: expected signal_darwin.go and no signal_linux.go in $osdir (see build_argoexec in hack/cluster.sh)"
    cp "$osdir/signal_darwin.go" "$osdir/signal_linux.go"
    touch "$src/.complete"
  fi
  mkdir -p "$BIN"
  log "building argoexec $ARGO_WORKFLOWS_VERSION (first time only, cached in $BIN)"
  local start=$SECONDS
  (cd "$src" && CGO_ENABLED=0 go build -trimpath -o "$out.tmp" \
    -ldflags "-s -w -X github.com/argoproj/argo-workflows/v3.version=$ARGO_WORKFLOWS_VERSION -X github.com/argoproj/argo-workflows/v3.gitTreeState=clean" \
    ./cmd/argoexec) || die "building argoexec $ARGO_WORKFLOWS_VERSION failed (the Go errors are above); source: $src"
  mv "$out.tmp" "$out"
  log "built argoexec $ARGO_WORKFLOWS_VERSION in $((SECONDS - start))s"
}

PYSPARK_VENV=$CACHE/pyspark-$PYSPARK_VERSION

# spark-submit comes from the pyspark wheel (it carries Spark's jars and bin/); a venv in the cache.
install_pyspark() {
  [[ -f $PYSPARK_VENV/.installed ]] && return 0
  command -v python3 >/dev/null || die "python3 is needed to install pyspark (spark-submit)"
  log "installing pyspark $PYSPARK_VERSION into $PYSPARK_VENV (first time only)"
  local start=$SECONDS
  rm -rf "$PYSPARK_VENV"
  python3 -m venv "$PYSPARK_VENV" || die "python3 -m venv $PYSPARK_VENV failed (Debian: apt-get install python3-venv)"
  "$PYSPARK_VENV/bin/pip" install --quiet --disable-pip-version-check "pyspark==$PYSPARK_VERSION" \
    || die "pip install pyspark==$PYSPARK_VERSION failed (see pip's errors above)"
  touch "$PYSPARK_VENV/.installed"
  log "installed pyspark $PYSPARK_VERSION in $((SECONDS - start))s"
}

spark_home() { "$PYSPARK_VENV/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))'; }

# Spark 4 needs Java 17 or 21. Prints a JAVA_HOME.
java_home() {
  local d
  for d in /usr/lib/jvm/java-17-openjdk-* /usr/lib/jvm/java-21-openjdk-*; do
    [[ -x $d/bin/java ]] && { echo "$d"; return 0; }
  done
  if ! command -v java >/dev/null; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
      log "installing Java 17 for spark-submit (apt-get install openjdk-17-jre-headless)"
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless; } >&2 \
        || die "apt-get install openjdk-17-jre-headless failed"
      java_home; return
    fi
    die "spark-submit needs Java 17: install it (Debian: apt-get install openjdk-17-jre-headless)"
  fi
  d=$(readlink -f "$(command -v java)"); echo "${d%/bin/java}"
}

go_module_dir() { # tools-dir module
  (cd "$ROOT/hack/tools/$1" && go list -m -f '{{.Dir}}' "$2") || die "cannot find Go module $2 (hack/tools/$1)"
}
