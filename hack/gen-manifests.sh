#!/usr/bin/env bash
# Regenerates the manifests that come from Rust code: the CRDs, the in-cluster webhook
# configurations and the RBAC (sluice's own rules plus each integration's), the book's table of
# integrations and its generated reference (docs/src/reference/). tests/manifests.rs and tests/docs.rs
# fail when the checked-in copies are out of date.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--help" || "${1:-}" == "-h" ]]; then
  echo "usage: hack/gen-manifests.sh   (writes manifests/crds/*.yaml and manifests/install/{01-rbac,01-rbac-tasks,03-webhooks}.yaml, the table of integrations in docs/src/concepts/gangs-and-elastic-pods.md, docs/src/reference/ and the generated templates of charts/sluice/)"
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
"$bin" manifests rbac > manifests/install/01-rbac.yaml
"$bin" manifests rbac-tasks > manifests/install/01-rbac-tasks.yaml
hack/gen-chart.sh
# The book's table of integrations (the lines from its header row to the next blank line).
table=$(mktemp) readme=$(mktemp)
trap 'rm -f "$table" "$readme"' EXIT
"$bin" integrations > "$table"
awk -v table="$table" '
  /^\| integration \| / { while ((getline line < table) > 0) print line; skipping = 1; next }
  skipping && /^$/ { skipping = 0 }
  !skipping { print }' docs/src/concepts/gangs-and-elastic-pods.md > "$readme"
cat "$readme" > docs/src/concepts/gangs-and-elastic-pods.md
"$bin" docs reference --out docs/src/reference >/dev/null
ls manifests/crds manifests/install/01-rbac.yaml manifests/install/01-rbac-tasks.yaml manifests/install/03-webhooks.yaml docs/src/concepts/gangs-and-elastic-pods.md docs/src/reference
