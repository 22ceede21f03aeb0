#!/usr/bin/env bash
# The one test command: brings the local cluster up with sluice, runs every test (unit, property,
# manifest and end-to-end: `cargo test --workspace`), and always brings the cluster down again.
# Extra arguments go to cargo test, e.g. hack/test.sh --test e2e_gate
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  sed -n '2,4p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
export PATH=$HOME/.cargo/bin:/usr/local/go/bin:$PATH
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}

cleanup() {
  local status=$?
  if ((status != 0)) && [[ -d .cluster/logs ]]; then
    echo "--- last lines of sluice's log (.cluster/logs/sluice.log) ---" >&2
    tail -n 40 .cluster/logs/sluice.log >&2 2>/dev/null || true
  fi
  hack/cluster.sh down || true
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Compile the tests while nothing else runs, so the cluster is not up longer than it must be.
cargo test --workspace --no-run
hack/cluster.sh up --with-sluice --with-kuberay
eval "$(hack/cluster.sh env)"
export SLUICE_REPO=$ROOT
cargo test --workspace "$@"
