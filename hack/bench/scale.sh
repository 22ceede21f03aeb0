#!/usr/bin/env bash
# hack/bench.sh --only scale: the controller holding 10k workloads / 100k realistic pods, one
# process per run under /usr/bin/time -v (admission_scale, tools/): the pods held as the
# controller's pod cache holds them (`--hold cached`: decoded into queue::pod_cache::CachedPod, in a
# reflector store) three times, and at 200k pods (the growth per extra pod); then, once each, the
# same pods held as k8s_openapi Pods for comparison (as listed, managedFields dropped, trimmed as the
# cache did before CachedPod). Raw results in <out>/scale-*.{json,time}; report.py makes the table.
#
# usage: hack/bench/scale.sh <raw results dir> <cargo target dir> <quick: 0|1>
set -euo pipefail
out="$1" target_dir="$2" quick="${3:-0}"
bin="$target_dir/release/admission_scale"
workloads=10000 pods=100000 more=200000 reps=3
[[ $quick == 1 ]] && { workloads=1000 pods=10000 more=20000 reps=1; }
run() { # name admission_scale-arguments...
  local name=$1; shift
  /usr/bin/time -v "$bin" --workloads "$workloads" "$@" > "$out/$name.json" 2> "$out/$name.time"
  cat "$out/$name.json" >&2
}
for rep in $(seq "$reps"); do run "scale-cached-$rep" --pods "$pods" --hold cached; done
run scale-cached-more --pods "$more" --hold cached
# One process at a time (up to ~3 GB each).
for hold in listed stripped trimmed-before; do run "scale-$hold" --pods "$pods" --hold "$hold" --passes 0; done
