#!/usr/bin/env bash
# Checks the dependency tree against deny.toml with a pinned cargo-deny: licences, bans (a crate in
# two versions, wildcard requirements) and sources (crates.io only). hack/test.sh runs it before the
# tests, beside cargo fmt and cargo clippy.
#
# usage: hack/deny.sh [cargo deny check arguments...]     e.g. hack/deny.sh licenses
#
# cargo-deny 0.20.2 is installed the first time into $SLUICE_CACHE/cargo-tools (hack/lib/cargo-tools.sh;
# default ~/.cache/sluice/cargo-tools); that needs crates.io once.
# Advisories are NOT checked by default: they need the RustSec advisory database, a git repository
# on GitHub that this machine cannot reach, and no package registry serves it. With
# SLUICE_DENY_ADVISORIES=1 (where GitHub is reachable) they are checked too.
set -euo pipefail
# shellcheck source=hack/lib/cargo-tools.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/cargo-tools.sh"   # ROOT (the working directory), usage_if_asked
usage_if_asked "$0" "$@"
CARGO_DENY_VERSION=0.20.2
ensure_cargo_tool deny.sh cargo-deny "cargo-deny $CARGO_DENY_VERSION" cargo-deny "$CARGO_DENY_VERSION"
if (($#)); then checks=("$@")
elif [[ ${SLUICE_DENY_ADVISORIES:-0} == 1 ]]; then checks=(advisories licenses bans sources)
else
  checks=(licenses bans sources)
  echo "deny.sh: advisories not checked (the RustSec database needs GitHub; SLUICE_DENY_ADVISORIES=1 where it is reachable)" >&2
fi
exec cargo deny --workspace check "${checks[@]}"
