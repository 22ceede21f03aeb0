#!/usr/bin/env bash
# Regenerates the manifests that come from Rust code: the CRDs and the in-cluster webhook
# configurations. tests/manifests.rs fails when the checked-in copies are out of date.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--help" || "${1:-}" == "-h" ]]; then
  echo "usage: hack/gen-manifests.sh   (writes manifests/crds/*.yaml and manifests/install/03-webhooks.yaml)"
  exit 0
fi
cargo build --quiet --bin sluice
bin=${CARGO_TARGET_DIR:-target}/debug/sluice
mkdir -p manifests/crds
rm -f manifests/crds/*.yaml
# `sluice crds` prints one document per CRD, each starting with '---'.
"$bin" crds | awk '
  /^---$/ { n++; next }
  { docs[n] = docs[n] $0 "\n" }
  /^  name: / && !(n in names) { names[n] = $2 }
  END { for (i = 1; i <= n; i++) { f = "manifests/crds/" names[i] ".yaml"; printf "%s", docs[i] > f; close(f) } }'
"$bin" manifests webhooks > manifests/install/03-webhooks.yaml
ls manifests/crds manifests/install/03-webhooks.yaml
