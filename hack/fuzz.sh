#!/usr/bin/env bash
# Fuzzes sluice's untrusted inputs with libFuzzer (cargo-fuzz, nightly Rust): resource quantities,
# the pod webhooks (AdmissionReview decoding, the real classifier, admission at creation, validation)
# and the application webhooks of every integration. Targets: fuzz/fuzz_targets/*.rs.
#
# usage: hack/fuzz.sh [--time S | --runs N] [--record] [--merge] [TARGET...]
#   --time S   run each target for S seconds (default 20: the bounded run of hack/test.sh)
#   --runs N   run each target for N inputs instead (e.g. --runs 1000000: the goal of issue 23)
#   --record   write the figures to bench/results.json (fuzz_inputs_min, fuzz_slowest_ms)
#   --merge    afterwards, merge what the run found into the committed corpus (fuzz/corpus/),
#              keeping only inputs that add coverage
# Built with debug assertions (integer overflow panics) and without a sanitizer (the code forbids
# unsafe): a panic, an input slower than 2 s, or more than 2 GiB of memory fails the run, and the
# input is kept in $SLUICE_CACHE/fuzz-artifacts/<target>/ to replay with
#   fuzz/target/.../<target> <input>   (printed on failure).
# Prints per target: inputs run, inputs per second, the slowest input's CPU time (measured inside the
# target around one input, on its thread) and the corpus size. Exits non-zero on any finding.
#
# Environment: SLUICE_CACHE (default ~/.cache/sluice): cargo-fuzz is installed into
# $SLUICE_CACHE/cargo-tools, the build goes to $SLUICE_CACHE/fuzz-target, new corpus entries to
# $SLUICE_CACHE/fuzz-corpus.
set -euo pipefail
# shellcheck source=hack/lib/cargo-tools.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/cargo-tools.sh"   # ROOT (the working directory), usage_if_asked
usage_if_asked "$0" "$@"
CARGO_FUZZ_VERSION=0.13.2
export CARGO_TARGET_DIR=$CACHE/fuzz-target
die() { echo "fuzz.sh: $*" >&2; exit 1; }

LIMIT=(-max_total_time=20) RECORD=false MERGE=false TARGETS=()
while (($#)); do
  case $1 in
    --time) LIMIT=("-max_total_time=${2:?--time needs seconds}"); shift 2 ;;
    --runs) LIMIT=("-runs=${2:?--runs needs a count}"); shift 2 ;;
    --record) RECORD=true; shift ;;
    --merge) MERGE=true; shift ;;
    -*) die "unknown flag '$1' (hack/fuzz.sh --help)" ;;
    *) TARGETS+=("$1"); shift ;;
  esac
done
ALL=($(ls fuzz/fuzz_targets | sed 's/\.rs$//'))
((${#TARGETS[@]})) || TARGETS=("${ALL[@]}")
for t in "${TARGETS[@]}"; do [[ -f fuzz/fuzz_targets/$t.rs ]] || die "no target '$t' (targets: ${ALL[*]})"; done

rustup toolchain list 2>/dev/null | grep -q '^nightly' \
  || die "the nightly Rust toolchain is needed (libFuzzer's instrumentation): rustup toolchain install nightly --profile minimal"
ensure_cargo_tool fuzz.sh cargo-fuzz "cargo-fuzz $CARGO_FUZZ_VERSION" cargo-fuzz "$CARGO_FUZZ_VERSION"
python3 fuzz/seeds/make_seeds.py fuzz/corpus
build_log=$CACHE/fuzz-build.log
for t in "${TARGETS[@]}"; do
  (cd fuzz && cargo +nightly fuzz build -s none --debug-assertions "$t") >"$build_log" 2>&1 \
    || { tail -n 40 "$build_log" >&2; die "the fuzz target $t did not build (log: $build_log)"; }
done
BIN=$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release
summary=$(mktemp) failed=()
trap 'rm -f "$summary"' EXIT
printf '%-22s %12s %10s %12s %8s\n' target inputs inputs/s slowest_ms corpus  # slowest: CPU time of one input
for t in "${TARGETS[@]}"; do
  found=$CACHE/fuzz-corpus/$t artifacts=$CACHE/fuzz-artifacts/$t slowest=$CACHE/fuzz-slowest-$t log=$CACHE/fuzz-$t.log
  mkdir -p "$found" "$artifacts" && rm -f "$slowest"
  set +e
  SLUICE_FUZZ_SLOWEST=$slowest "$BIN/$t" "$found" "fuzz/corpus/$t" "${LIMIT[@]}" -dict=fuzz/dict/admission.dict \
    -timeout=2 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1
  status=$?
  set -e
  inputs=$(awk '/stat::number_of_executed_units/ {print $NF}' "$log" | tail -1)
  seconds=$(awk '/stat::average_exec_per_sec/ {print $NF}' "$log" | tail -1)
  read -r slow_us _ <"$slowest" 2>/dev/null || slow_us=0
  corpus=$(($(ls "$found" | wc -l) + $(ls "fuzz/corpus/$t" | wc -l)))
  printf '%-22s %12s %10s %12s %8s\n' "$t" "${inputs:-?}" "${seconds:-?}" "$(awk "BEGIN {printf \"%.3f\", $slow_us / 1000}")" "$corpus"
  echo "$t ${inputs:-0} $slow_us" >>"$summary"
  if ((status != 0)); then
    failed+=("$t")
    echo "fuzz.sh: $t FAILED (exit $status); the input is in $artifacts/, the log in $log:" >&2
    grep -E 'panicked|ERROR|SUMMARY|Test unit written' "$log" | head -20 >&2
    echo "replay: $BIN/$t <input>" >&2
  fi
  if $MERGE; then "$BIN/$t" -merge=1 "fuzz/corpus/$t" "$found" >>"$log" 2>&1 || die "merging the corpus of $t failed ($log)"; fi
done
if $RECORD; then
  python3 - "$summary" bench/results.json <<'PY'
import json, sys
rows = [line.split() for line in open(sys.argv[1]) if line.strip()]
path = sys.argv[2]
try:
    results = json.load(open(path))
except FileNotFoundError:
    results = {}
results["fuzz_inputs_min"] = min(int(r[1]) for r in rows)
results["fuzz_slowest_ms"] = round(max(int(r[2]) for r in rows) / 1000, 3)
results["fuzz_targets"] = {r[0]: {"inputs": int(r[1]), "slowest_ms": round(int(r[2]) / 1000, 3)} for r in rows}
json.dump(results, open(path, "w"), indent=2)
open(path, "a").write("\n")
PY
  echo "fuzz.sh: recorded in bench/results.json" >&2
fi
((${#failed[@]} == 0)) || die "findings in: ${failed[*]}"
