#!/usr/bin/env bash
# Turnover latency (issue 24, part 3): in a quota-limited queue, from a pod ending to the next
# waiting pod being ungated (tools/src/bin/turnover.rs), p50/p99 over --handovers handovers, --runs
# times, on the local cluster of $SLUICE_CLUSTER_STATE (brought up with sluice's release build if it
# is not running; left running). Each run's JSON goes to target/bench/turnover-<label>-<i>.json;
# the section <!-- bench.sh:turnover --> of BENCHMARKS.md shows every label found there (e.g. a
# baseline and the run after a change, side by side), and bench/results.json gets turnover_p50_ms
# and turnover_p99_ms (the median over the runs of the newest label) under its own keys.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: hack/bench/turnover.sh [--label NAME] [--runs N] [--handovers N] [--quick] [--no-write | --report-only]

  --label NAME     names this run's results (default: the short commit); rows of other labels stay
  --runs N         runs, one after another (default 3)
  --handovers N    measured handovers per run (default 2000; 100 with --quick)
  --quick          a smoke test of the tooling (1 run of 100 handovers)
  --no-write       print, leave BENCHMARKS.md and bench/results.json alone
  --report-only    measure nothing: write the section and keys from the runs in target/bench
EOF
}

root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
label="$(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes')"
runs=3 handovers=2000 write=1 measure=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --label) label="${2:?--label needs a value}"; shift 2 ;;
    --runs) runs="${2:?--runs needs a value}"; shift 2 ;;
    --handovers) handovers="${2:?--handovers needs a value}"; shift 2 ;;
    --quick) runs=1 handovers=100; shift ;;
    --no-write) write=0; shift ;;
    --report-only) measure=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "turnover.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
target_dir="${CARGO_TARGET_DIR:-$root/target}"
out="$root/target/bench"
mkdir -p "$out" "$root/bench"

if [[ $measure == 1 ]]; then
  hack/cluster.sh up --with-sluice --release-sluice
  eval "$(hack/cluster.sh env)"
  cargo build --release -p sluice-tools --bin turnover
  for i in $(seq 1 "$runs"); do
    echo "turnover.sh: run $i/$runs ($label, $handovers handovers)"
    "$target_dir/release/turnover" --handovers "$handovers" --json "$out/turnover-$label-$i.json"
  done
fi

[[ $write == 1 ]] || exit 0
python3 - "$out" "$label" "$root" <<'EOF'
import glob, json, os, re, statistics, sys, time
out, label, root = sys.argv[1:4]
rows = {}
for path in sorted(glob.glob(os.path.join(out, "turnover-*.json"))):
    m = re.match(r"turnover-(.+)-(\d+)\.json$", os.path.basename(path))
    if not m:
        continue
    with open(path) as f:
        run = json.load(f)
    run["mtime"] = os.path.getmtime(path)
    rows.setdefault(m.group(1), []).append(run)
lines = [
    "",
    f"Written {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} by `hack/bench/turnover.sh` "
    "(`hack/bench.sh --only turnover`); machine: 2 cores, 24 GiB "
    "(load average per run below: what else ran shows there). A queue with room for 4 pods of 1 cpu, 8 more waiting; "
    "an admitted pod is ended the way kwok ends pods (annotation `sluice.dev/kwok-phase=Succeeded`) and "
    "the clock runs from the tool's pod watch showing it Succeeded to the same watch showing the next "
    "pod without sluice's gate (`tools/src/bin/turnover.rs`).",
    "",
    "| build | run | handovers | p50 | p90 | p99 | max | load average (before → after) |",
    "|---|---:|---:|---:|---:|---:|---:|---|",
]
for name, runs in sorted(rows.items(), key=lambda kv: min(r["mtime"] for r in kv[1])):
    for i, r in enumerate(sorted(runs, key=lambda r: r["mtime"]), 1):
        lines.append(
            f"| {name} | {i} | {r['handovers']} | {r['p50_ms']:.1f} ms | {r['p90_ms']:.1f} ms | "
            f"{r['p99_ms']:.1f} ms | {r['max_ms']:.1f} ms | {r['load_before']} → {r['load_after']} |"
        )
lines.append("")
section = "\n".join(lines)
bench_md = os.path.join(root, "BENCHMARKS.md")
with open(bench_md) as f:
    text = f.read()
begin, end = "<!-- bench.sh:turnover:begin -->", "<!-- bench.sh:turnover:end -->"
if begin in text and end in text:
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    text = head + begin + "\n" + section + "\n" + end + tail
else:
    text = text.rstrip("\n") + "\n\n## Turnover latency\n\n" + begin + "\n" + section + "\n" + end + "\n"
with open(bench_md, "w") as f:
    f.write(text)
latest = rows.get(label, [])
if latest:
    results_path = os.path.join(root, "bench", "results.json")
    with open(results_path) as f:
        results = json.load(f)
    results["turnover_p50_ms"] = round(statistics.median(r["p50_ms"] for r in latest), 1)
    results["turnover_p99_ms"] = round(statistics.median(r["p99_ms"] for r in latest), 1)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results.setdefault("measured_at_by_part", {})["turnover"] = stamp
    with open(results_path, "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
EOF
