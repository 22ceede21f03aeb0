#!/usr/bin/env python3
"""The admission part of hack/bench.sh: criterion's medians (and 95% intervals) of the groups
admission_pass and admission_pass_reference, as one JSON list on stdout.

usage: criterion_medians.py <criterion directory: $CARGO_TARGET_DIR/criterion>
"""
import json, os, sys
base = sys.argv[1]
rows = []
for group in ("admission_pass", "admission_pass_reference"):
    gdir = os.path.join(base, group)
    if not os.path.isdir(gdir):
        continue
    for case in sorted(os.listdir(gdir)):
        est = os.path.join(gdir, case, "new", "estimates.json")
        if not os.path.exists(est):
            continue
        m = json.load(open(est))["median"]
        rows.append({"group": group, "case": case, "median_ms": m["point_estimate"] / 1e6,
                     "low_ms": m["confidence_interval"]["lower_bound"] / 1e6,
                     "high_ms": m["confidence_interval"]["upper_bound"] / 1e6})
print(json.dumps(rows))
