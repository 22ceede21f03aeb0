#!/usr/bin/env bash
# Writes a release into dist/ (or --out DIR):
#
#   sluice.yaml              the install manifest: the Namespace, then the chart rendered with its
#                            default values (`helm template --no-hooks`: CRDs, ServiceAccount, RBAC,
#                            user roles, Deployment, Service, PodDisruptionBudget, NetworkPolicy,
#                            webhook configurations), image sluice:<VERSION>. For
#                            `kubectl apply --server-side -f dist/sluice.yaml`.
#   sluice-<VERSION>.tgz     the Helm chart (helm package charts/sluice)
#   SHA256SUMS               sha256sum of the files above (and of the image archive, with --image)
#   sluice-image-<VERSION>.tar  with --image: the image built from the Dockerfile (hack/image.sh),
#                            a docker-archive for `docker load` / `ctr images import` / `skopeo copy`
#
# usage: hack/release.sh VERSION [--out DIR] [--image]
#
# VERSION must be Cargo.toml's workspace version (SemVer), which charts/sluice/Chart.yaml's version
# and appVersion repeat: the one version of a release. The chart is the one source of the install
# manifest (its generated templates come from the Rust code through hack/gen-manifests.sh), so the
# manifest and `helm install` with default values create the same objects; tests/install.rs checks
# that `helm template` with default values renders exactly what sluice.yaml holds after its
# Namespace. Helm is built by hack/cluster.sh build (hack/tools/helm, cached in $SLUICE_CACHE).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
if [[ ${1:-} == -h || ${1:-} == --help || $# == 0 ]]; then
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  (($#)) && exit 0 || exit 2
fi
# shellcheck source=hack/versions.sh
source "$ROOT/hack/versions.sh"
die() { echo "release.sh: error: $*" >&2; exit 1; }
VERSION=$1; shift
OUT=$ROOT/dist
IMAGE=false
while (($#)); do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --image) IMAGE=true; shift ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || die "VERSION $VERSION is not SemVer (MAJOR.MINOR.PATCH)"
cargo_version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
[[ $VERSION == "$cargo_version" ]] || die "VERSION $VERSION is not Cargo.toml's workspace version $cargo_version: change Cargo.toml (and charts/sluice/Chart.yaml) first"
chart_version=$(sed -n 's/^version: //p' charts/sluice/Chart.yaml)
app_version=$(sed -n 's/^appVersion: "\(.*\)"/\1/p' charts/sluice/Chart.yaml)
[[ $chart_version == "$VERSION" && $app_version == "$VERSION" ]] \
  || die "charts/sluice/Chart.yaml has version $chart_version, appVersion $app_version: both must be $VERSION"
grep -q "^## \[$VERSION\]" CHANGELOG.md || die "CHANGELOG.md has no section '## [$VERSION]'"

CACHE=${SLUICE_CACHE:-$HOME/.cache/sluice}
HELM=$CACHE/bin/helm-$HELM_VERSION
[[ -x $HELM ]] || hack/cluster.sh build >&2 || die "building Helm failed"
[[ -x $HELM ]] || die "$HELM was not built"

mkdir -p "$OUT"
"$HELM" lint --strict charts/sluice >/dev/null || die "helm lint charts/sluice failed"
{
  cat <<HEADER
# sluice $VERSION: kubectl apply --server-side -f sluice.yaml
# The Namespace, then charts/sluice rendered with its default values (helm template --no-hooks).
# Uninstall: sluice uninstall (docs/src/operations/uninstall.md); deleting the namespace alone leaves
# the webhook configurations behind.
---
apiVersion: v1
kind: Namespace
metadata:
  name: sluice-system
  labels:
    app.kubernetes.io/name: sluice
HEADER
  "$HELM" template sluice charts/sluice --namespace sluice-system --no-hooks
} >"$OUT/sluice.yaml.tmp" || die "helm template charts/sluice failed"
mv "$OUT/sluice.yaml.tmp" "$OUT/sluice.yaml"
rm -f "$OUT"/sluice-*.tgz
"$HELM" package charts/sluice --destination "$OUT" >/dev/null || die "helm package charts/sluice failed"
files=(sluice.yaml "sluice-$VERSION.tgz")
if $IMAGE; then
  hack/image.sh --version "$VERSION" --tag "sluice:$VERSION" --out "$OUT/sluice-image-$VERSION.tar" >/dev/null
  files+=("sluice-image-$VERSION.tar")
fi
(cd "$OUT" && sha256sum "${files[@]}" >SHA256SUMS)
echo "release.sh: wrote $OUT: ${files[*]} SHA256SUMS" >&2
