#!/usr/bin/env bash
# The real demo (root only): Spark executors and Ray workers that really run, on the real node,
# through sluice deployed in-cluster. Brings up a cluster with the real node, KubeRay and the Spark
# and Ray images (hack/images/, built once and cached), runs the two end-to-end stories of
# tests/real_node/{spark,ray}.rs and prints what they show step by step: the ledger (admitted,
# pending) as quota frees, the computed results, the quota given back. Holds
# /tmp/sluice-real-node.lock while the real node is up (one per machine) and brings it down at the end.
set -euo pipefail
# shellcheck source=hack/lib/script.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/script.sh"   # ROOT (the working directory), usage_if_asked
usage_if_asked "$0" "$@"
((EUID == 0)) || { echo "demo-real.sh: the real node needs root" >&2; exit 1; }
export PATH=$HOME/.cargo/bin:/usr/local/go/bin:$PATH

exec 9>/tmp/sluice-real-node.lock
echo "demo-real.sh: waiting for the real node's lock (/tmp/sluice-real-node.lock)" >&2
flock 9
trap 'hack/cluster.sh down' EXIT
cargo test --quiet --test real_node --no-run
SLUICE_REAL_NODE_IMAGES="spark ray" hack/cluster.sh up --real-node --with-kuberay
eval "$(hack/cluster.sh env)"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# The tests narrate on stderr (ledger, results, and why, if one fails); the rest is left out here.
narrate() { grep --line-buffered -A3 -E '^(spark-submit log|ledger|job result|queue after|the ledger|program result|test |test result|thread .* panicked)'; }

step "Spark: spark-submit (client mode, driver on the host at 10.88.0.1), dynamic allocation up to 3 executors of 500m in a 1-cpu queue where another pod holds 500m"
step "Ray: a RayCluster with the in-tree autoscaler, a program needing 3 CPUs on 3 nodes, an 850m queue where another pod holds 250m"
echo "(one test process: sluice is deployed in-cluster once; the two stories run one after the other)"
cargo test --test real_node -- --nocapture --test-threads 2 spark_executors ray_autoscaler 2>&1 | narrate
kubectl get nodes -o wide
