#!/usr/bin/env bash
# Builds the book (docs/: book.toml, docs/src/SUMMARY.md) with a pinned mdbook, offline.
#
# usage: hack/docs.sh [--out DIR] [--allow-missing]
#   --out DIR         where the HTML goes (default docs/book, ignored by git)
#   --allow-missing   a page SUMMARY.md lists but nobody wrote yet is built as a one-line
#                     placeholder (in a copy, never in docs/src) and named on stderr; without it a
#                     missing page fails the build
# mdbook 0.5.4 is installed the first time into $SLUICE_CACHE/cargo-tools (default
# ~/.cache/sluice/cargo-tools), as hack/fuzz.sh installs cargo-fuzz; that needs crates.io once,
# the build itself needs no network. The book is built from a copy of docs/ in which
# operations/benchmarks.md includes BENCHMARKS.md and its images (bench/*.png, *.svg) sit beside
# it. Links, the commands in the book and the generated reference are checked by
# `cargo test --test docs` (docs/src/development/docs.md says what is and is not executed).
set -euo pipefail
# shellcheck source=hack/lib/cargo-tools.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/cargo-tools.sh"   # ROOT (the working directory), usage_if_asked
usage_if_asked "$0" "$@"
MDBOOK_VERSION=0.5.4
die() { echo "docs.sh: $*" >&2; exit 1; }

OUT=$ROOT/docs/book ALLOW_MISSING=false
while (($#)); do
  case $1 in
    --out) OUT=$(realpath -m "${2:?--out needs a directory}"); shift 2 ;;
    --allow-missing) ALLOW_MISSING=true; shift ;;
    *) die "unknown argument '$1' (hack/docs.sh --help)" ;;
  esac
done

ensure_cargo_tool docs.sh mdbook "mdbook v$MDBOOK_VERSION" mdbook "$MDBOOK_VERSION" \
  --no-default-features --features search

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/docs"
cp -r docs/book.toml docs/src "$work/docs/"
cp BENCHMARKS.md "$work/"
mkdir -p "$work/docs/src/operations/bench"
for image in bench/*.png bench/*.svg; do [[ -f $image ]] && cp "$image" "$work/docs/src/operations/bench/"; done
# Every page SUMMARY.md links to must exist.
missing=()
while read -r page; do
  [[ -f docs/src/$page ]] || missing+=("$page")
done < <(grep -o '](\([^)]*\.md\))' docs/src/SUMMARY.md | sed 's/^](//; s/)$//')
if ((${#missing[@]})); then
  $ALLOW_MISSING || die "SUMMARY.md lists pages that do not exist: ${missing[*]} (--allow-missing builds placeholders)"
  for page in "${missing[@]}"; do
    echo "docs.sh: docs/src/$page does not exist yet: built as a placeholder" >&2
    mkdir -p "$(dirname "$work/docs/src/$page")"
    echo "# $(basename "$page" .md) (not written yet)" >"$work/docs/src/$page"
  done
fi
log=$work/mdbook.log
if ! mdbook build "$work/docs" --dest-dir "$OUT" >"$log" 2>&1; then
  cat "$log" >&2
  die "mdbook build failed"
fi
# mdbook reports problems (an include that fails, a broken summary) as warnings and still builds.
if grep -E '(WARN|ERROR)' "$log" >&2; then die "mdbook warned (above)"; fi
echo "docs.sh: the book is in $OUT (open $OUT/index.html)"
