# Sourced by hack/docs.sh, hack/fuzz.sh and hack/deny.sh: their --help, and the one way a pinned
# cargo tool (mdbook, cargo-fuzz, cargo-deny) is installed, the first time, into
# $SLUICE_CACHE/cargo-tools (default ~/.cache/sluice/cargo-tools; its build in
# $SLUICE_CACHE/cargo-tools-build). That needs crates.io once.
# shellcheck source=hack/lib/script.sh
source "$(dirname "${BASH_SOURCE[0]}")/script.sh"   # ROOT, the working directory, usage_if_asked
CACHE=${SLUICE_CACHE:-$HOME/.cache/sluice}
export PATH=$CACHE/cargo-tools/bin:$HOME/.cargo/bin:$PATH

# ensure_cargo_tool CALLER BINARY VERSION-LINE CRATE VERSION [cargo install flags...]
# Installs CRATE at VERSION unless `BINARY --version` prints VERSION-LINE already.
ensure_cargo_tool() {
  local caller=$1 binary=$2 expected=$3 crate=$4 version=$5
  shift 5
  if [[ $("$binary" --version 2>/dev/null) != "$expected" ]]; then
    echo "$caller: installing $crate $version into $CACHE/cargo-tools" >&2
    CARGO_TARGET_DIR=$CACHE/cargo-tools-build cargo install --locked --quiet "$crate" \
      --version "$version" --root "$CACHE/cargo-tools" "$@"
  fi
}
