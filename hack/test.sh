#!/usr/bin/env bash
# The one test command. Compiles the tests, brings the local cluster up (hack/cluster.sh up with the
# add-ons the tests need), runs every test (cargo test --workspace, with KUBECONFIG and SLUICE_REPO
# set) and always brings the cluster down again: on success, failure or Ctrl-C.
#
# Plain `cargo test --workspace` needs no cluster: it runs the unit, property and manifest tests and
# skips each end-to-end test, saying that hack/test.sh runs it. Here SLUICE_REQUIRE_CLUSTER=1 makes a
# test that finds no cluster fail instead (docs/src/development/architecture.md, Test tiers).
#
# usage: hack/test.sh [cargo test arguments...]     e.g. hack/test.sh --test cluster_smoke
#
# With no arguments, `cargo fmt --check`, `cargo clippy --all-targets -- -D warnings` and
# `hack/deny.sh` (cargo deny: licences, bans, sources) run first (SLUICE_TEST_LINT=0 skips them), then the fuzz targets (hack/fuzz.sh, 20 s each), then the book is built
# (hack/docs.sh: mdbook, offline; its links, commands and generated reference are tests/docs.rs, run
# with the others; its blocks marked `run` are tests/e2e_docs.rs), and a second phase follows
# on a cluster of its own: the real node's tests
# (tests/real_node.rs: containers that really run, sluice deployed in-cluster from manifests/), with
# 'hack/cluster.sh up --real-node' and no sluice on the host; then, on another, the install tests
# (tests/real_node_install.rs: Helm and the release manifest, upgrade, uninstall). They need root.
# What those two phases build (sluice's image, the kubelet, the Spark and Ray images, argoexec) is
# built in the background at nice 19 while the first cluster's tests run (hack/cluster.sh build --real-node).
# `hack/test.sh --test real_node` (or `--test real_node_install`) runs only that phase.
#
# Environment:
#   SLUICE_TEST_CLUSTER_FLAGS  flags for 'hack/cluster.sh up' (default: --with-sluice --with-kuberay
#                              --with-spark-operator --with-argo)
#   SLUICE_TEST_REAL_NODE      0: skip the real node's phase of a full run (default 1)
#   SLUICE_TEST_FUZZ_SECONDS   seconds each fuzz target runs in a full run (default 20; 0 skips them)
#   SLUICE_TEST_LINT           0: skip cargo fmt --check, cargo clippy and hack/deny.sh in a full run (default 1)
#   SLUICE_TEST_DOCS           0: do not build the book in a full run (default 1)
#   SLUICE_CACHE               where the cluster's binaries are built (default ~/.cache/sluice)
#   CARGO_TARGET_DIR           cargo's target directory (default target/ of the repository)
# Exits with cargo test's status (or the cluster's, if it could not come up).
set -euo pipefail
# shellcheck source=hack/lib/script.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/script.sh"   # ROOT (the working directory), usage_if_asked
usage_if_asked "$0" "$@"
# shellcheck source=hack/lib/deb.sh
source "$ROOT/hack/lib/deb.sh"   # deb_version: a pinned Debian package, or its newest once replaced
export PATH=$HOME/.cargo/bin:/usr/local/go/bin:$PATH
command -v cargo >/dev/null || { echo "test.sh: cargo is not on PATH (install Rust with rustup: ~/.cargo/bin)" >&2; exit 1; }
read -r -a CLUSTER_FLAGS <<<"${SLUICE_TEST_CLUSTER_FLAGS:---with-sluice --with-kuberay --with-spark-operator --with-argo}"

# Builds running in the background (each its own process group), stopped if the run ends first.
CLUSTER_BUILD_PID= PREBUILD_PID=
cleanup() {
  local status=$? pid
  trap - EXIT INT TERM
  for pid in $CLUSTER_BUILD_PID $PREBUILD_PID; do
    kill -TERM -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if ((status != 0)) && [[ -d .cluster/logs ]]; then
    echo "test.sh: failed ($status); component logs are in .cluster/logs/ until the cluster is down:" >&2
    ls .cluster/logs >&2 || true
    if [[ -f .cluster/logs/sluice.log ]]; then
      echo "--- last lines of .cluster/logs/sluice.log ---" >&2
      tail -n 40 .cluster/logs/sluice.log >&2 || true
    fi
  fi
  hack/cluster.sh down || echo "test.sh: hack/cluster.sh down failed" >&2
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

export SLUICE_REPO=$ROOT
# Without a cluster, plain `cargo test` skips the tests that need one (tests/support/mod.rs,
# cluster_or_skip); here a missing cluster is a failure, never a silent skip.
export SLUICE_REQUIRE_CLUSTER=1

# The real node's tests, on a cluster with the real node and without sluice on the host. The image
# of sluice is built from the Dockerfile (hack/image.sh) as the node comes up.
real_node_phase() { # images add-on-flags cargo-test-arguments (naming --test real_node or real_node_install)...
  ((EUID == 0)) || { echo "test.sh: the real node's tests need root (containerd, runc, mounts); SLUICE_TEST_REAL_NODE=0 skips them" >&2; exit 1; }
  local images=$1 addons=$2; shift 2
  local -a flags
  read -r -a flags <<<"$addons"
  # KubeRay; for tests/real_node.rs Argo Workflows too (argoexec built for the node:
  # tests/real_node/workflow.rs and the counter demo's workflow step); and the images: Spark and Ray
  # (hack/images/, cached) for tests/real_node/{spark,ray}.rs, a second build of sluice's image for
  # the upgrade of tests/real_node_install.rs.
  SLUICE_REAL_NODE_IMAGES="$images" hack/cluster.sh up --real-node --with-kuberay "${flags[@]+"${flags[@]}"}"
  eval "$(hack/cluster.sh env)"
  cargo test "$@"
}

if [[ " $* " == *" --test real_node "* || " $* " == *" --test=real_node "* ]]; then
  cargo test --no-run "$@"
  real_node_phase "spark ray" --with-argo "$@"
  exit 0
fi
if [[ " $* " == *" --test real_node_install "* || " $* " == *" --test=real_node_install "* ]]; then
  cargo test --no-run "$@"
  real_node_phase sluice-upgrade "" "$@"
  exit 0
fi

# A Debian package the tests need, at its pinned version (hack/versions.sh; the archive's newest, with
# a warning, once Debian has replaced it: deb_version in hack/lib/deb.sh), installed when one of
# its programs is missing (as root, apt-get; first time only); the tests then require it rather
# than skip. Args: package, version variable of hack/versions.sh, what needs it, programs...
ensure_deb() {
  local package=$1 version_var=$2 needed_by=$3 program missing=0
  # shellcheck source=hack/versions.sh
  source "$ROOT/hack/versions.sh"
  local version=${!version_var}
  for program in "${@:4}"; do [[ -x $program ]] || missing=1; done
  if ((missing)); then
    ((EUID == 0)) && command -v apt-get >/dev/null \
      || { echo "test.sh: $needed_by need $package (Debian: apt-get install $package=$version)" >&2; exit 1; }
    apt-get update -qq >&2 || { echo "test.sh: apt-get update failed" >&2; exit 1; }
    version=$(deb_version "$package" "$version")
    [[ -n $version ]] || { echo "test.sh: Debian's archive has no package $package" >&2; exit 1; }
    echo "test.sh: installing $package $version (apt-get, first time only)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package=$version" >&2 \
      || { echo "test.sh: apt-get install $package=$version failed" >&2; exit 1; }
  fi
}
# Prometheus (promtool and the server) for the monitoring tests; Chromium for the dashboard's.
ensure_deb prometheus PROMETHEUS_DEB_VERSION "the monitoring tests" /usr/bin/prometheus /usr/bin/promtool
export SLUICE_REQUIRE_PROMTOOL=1
ensure_deb chromium CHROMIUM_DEB_VERSION "the dashboard's browser tests" /usr/bin/chromium
export SLUICE_REQUIRE_CHROMIUM=1

# join_background PID_VAR LOG WHAT: waits for the background build whose pid the variable PID_VAR
# holds, then empties it (the cleanup no longer stops it); a failed build prints its log's tail.
join_background() {
  local -n pid_var=$1
  local status=0
  wait "$pid_var" || status=$?
  pid_var=
  if ((status != 0)); then
    tail -n 30 "$2" >&2
    echo "test.sh: $3 failed (log above: $2)" >&2
    exit 1
  fi
}
# The cluster's programs (Go: the control plane and the add-ons; about 15 minutes on a cold machine)
# are built beside the Rust builds below, at nice 10: the last crates of a cargo build keep one core
# busy, not two. Its log is in the cache; it is waited for before the cluster comes up, and nothing
# else builds into $SLUICE_CACHE/bin meanwhile.
cluster_build_log=${SLUICE_CACHE:-$HOME/.cache/sluice}/cluster-build.log
mkdir -p "$(dirname "$cluster_build_log")"
setsid nice -n 10 hack/cluster.sh build "${CLUSTER_FLAGS[@]}" >"$cluster_build_log" 2>&1 &
CLUSTER_BUILD_PID=$!

# The project's own rules first (a full run: what CI runs): formatted, and clippy clean.
if (($# == 0)) && [[ ${SLUICE_TEST_LINT:-1} != 0 ]]; then
  cargo fmt --all -- --check || { echo "test.sh: run 'cargo fmt --all'" >&2; exit 1; }
  cargo clippy --workspace --all-targets -- -D warnings
  # The dependency tree against deny.toml: licences, bans, sources (advisories: hack/deny.sh --help).
  hack/deny.sh
fi
# Compile everything before the cluster is up, so the cluster runs no longer than the tests need.
cargo test --workspace --no-run
# The fuzz targets for a bounded time each (hack/fuzz.sh; longer runs on demand): no cluster needed.
if (($# == 0)) && [[ ${SLUICE_TEST_FUZZ_SECONDS:-20} != 0 ]]; then hack/fuzz.sh --time "${SLUICE_TEST_FUZZ_SECONDS:-20}"; fi
# The book (hack/docs.sh: a pinned mdbook, installed into the cache the first time): no cluster needed.
if (($# == 0)) && [[ ${SLUICE_TEST_DOCS:-1} != 0 ]]; then hack/docs.sh; fi
if (($# == 0)) && [[ ${SLUICE_TEST_REAL_NODE:-1} != 0 ]]; then cargo test --test real_node --test real_node_install --no-run; fi
join_background CLUSTER_BUILD_PID "$cluster_build_log" "building the cluster's programs"
hack/cluster.sh up "${CLUSTER_FLAGS[@]}"
eval "$(hack/cluster.sh env)"
# What the real node's phases need and a cold machine must build (sluice's image from the Dockerfile,
# twice; the Spark and Ray images; the kubelet; argoexec: about 25 minutes on 2 cores) is built now, in
# the background at the lowest priority, while the tests below mostly wait on the cluster. Its own
# state directory (logs in $SLUICE_CACHE/prebuild/logs); the cluster's builds above are done, so no
# two builds write the same file. The real node then comes up with --no-build.
if (($# == 0)) && [[ ${SLUICE_TEST_REAL_NODE:-1} != 0 ]]; then
  ((EUID == 0)) || { echo "test.sh: the real node's tests need root (containerd, runc, mounts); SLUICE_TEST_REAL_NODE=0 skips them" >&2; exit 1; }
  prebuild_state=${SLUICE_CACHE:-$HOME/.cache/sluice}/prebuild
  rm -rf "$prebuild_state"; mkdir -p "$prebuild_state"
  SLUICE_CLUSTER_STATE=$prebuild_state SLUICE_REAL_NODE_IMAGES="spark ray sluice-upgrade" \
    setsid nice -n 19 hack/cluster.sh build --real-node --with-kuberay --with-argo >"$prebuild_state/build.log" 2>&1 &
  PREBUILD_PID=$!
fi
cargo test --workspace "$@"
if (($# == 0)) && [[ ${SLUICE_TEST_REAL_NODE:-1} != 0 ]]; then
  echo "test.sh: waiting for the real node's builds (log: $prebuild_state/build.log)" >&2
  join_background PREBUILD_PID "$prebuild_state/build.log" "building for the real node"
  hack/cluster.sh down
  real_node_phase "spark ray" "--with-argo --no-build" --test real_node
  # Installing as users do (Helm, the release manifest), upgrade and uninstall: a cluster of its own.
  hack/cluster.sh down
  real_node_phase sluice-upgrade --no-build --test real_node_install
fi
