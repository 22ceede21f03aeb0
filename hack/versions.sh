# shellcheck shell=bash
# Pinned versions of everything hack/ builds or installs: the one place to change them (together with
# the go.mod of the matching module under hack/tools/). Sourced by hack/cluster.sh.
# shellcheck disable=SC2034  # the variables are used by the scripts that source this file

KUBERNETES_VERSION=v1.36.3     # k8s.io/kubernetes; every staging module replaced by v0.36.3 (hack/tools/k8s/go.mod)
ETCD_VERSION=v3.6.16           # go.etcd.io/etcd/server/v3 (hack/tools/etcd/go.mod)
KWOK_VERSION=v0.8.0            # sigs.k8s.io/kwok (hack/tools/kwok/go.mod)
# github.com/ray-project/kuberay/ray-operator (hack/tools/kuberay/go.mod). v1.7.0 cannot be had here:
# the Go module proxy answers its .zip with 403 "not available"; v1.6.2 is the newest it serves.
KUBERAY_VERSION=v1.6.2
SPARK_OPERATOR_VERSION=v2.5.2  # github.com/kubeflow/spark-operator/v2 (hack/tools/spark-operator/go.mod)
PYSPARK_VERSION=4.0.4          # pyspark on PyPI: spark-submit for the Spark operator (its image ships Spark 4.0.4)
# ray on PyPI, for the real node's Ray image (hack/images/): the version KubeRay v1.6.2's samples run
# (config/samples/*.yaml: rayproject/ray:2.52.0, rayVersion 2.52.0).
RAY_VERSION=2.52.0
KUEUE_VERSION=v0.19.2          # sigs.k8s.io/kueue (hack/tools/kueue/go.mod)
# github.com/argoproj/argo-workflows/v3 (hack/tools/argo/go.mod): the workflow executor's controller.
# The newest v3.7 the Go module proxy serves: v3.7.10, v3.7.19-21 and v3.8.0 answer 403 "not available",
# its version list too; v4.0.5 is served but has security flaws reported, v4.0.6 is not served.
ARGO_WORKFLOWS_VERSION=v3.7.18
# argoexec (the init and wait containers of every Workflow step) is built from the same module at the
# same version (cmd/argoexec, static, CGO off; hack/cluster.sh build_argoexec) into the real node's image
# sluice.local/argoexec:<version>.

# The real node (hack/realnode.sh, `hack/cluster.sh up --real-node`): Debian 12 packages, installed with
# apt-get at these versions (hack/lib/deb.sh: Debian's newest, with a warning, once the archive has
# replaced one), and the pause image built from k8s.io/kubernetes' build/pause.
CONTAINERD_DEB_VERSION=1.6.20~ds1-1+deb12u3
RUNC_DEB_VERSION=1.1.5+ds1-1+deb12u1
CNI_PLUGINS_DEB_VERSION=1.1.1+ds1-3+b5
BUSYBOX_DEB_VERSION=1:1.35.0-4+deb12u1+b1
PAUSE_VERSION=3.10.2           # TAG of build/pause/Makefile in k8s.io/kubernetes v1.36.3

# The image (hack/image.sh, the Dockerfile): Debian's buildah builds it without a daemon or registry.
BUILDAH_DEB_VERSION=1.28.2+ds1-3+deb12u1+b3
# Helm (hack/tools/helm/go.mod): lints, templates and packages charts/sluice/ (hack/release.sh, tests).
HELM_VERSION=v3.22.0
# The monitoring tests (tests/monitoring.rs: promtool; tests/e2e_monitoring.rs: a live Prometheus):
# Debian 12's package, installed by hack/test.sh with apt-get at this version when missing (or the
# archive's newest, with a warning, once Debian has replaced it: hack/lib/deb.sh).
PROMETHEUS_DEB_VERSION=2.42.0+ds-5+deb12u1
# The dashboard's browser tests (tests/e2e_dashboard.rs: a real headless Chromium driven over the
# DevTools protocol): Debian 12's package (bookworm-security), installed by hack/test.sh when missing.
CHROMIUM_DEB_VERSION=156.0.8078.114-1~deb12u1
