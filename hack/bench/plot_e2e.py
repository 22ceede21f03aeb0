#!/usr/bin/env python3
"""The end-to-end part of hack/bench.sh: pods Running over time of each run, as
<out>/e2e-running.png (matplotlib; bench.sh runs it in a venv of its own).

usage: plot_e2e.py <raw results directory: target/bench>
"""
import json, os, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
out = sys.argv[1]
fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
for name, label in (("nogate", "(a) no gate"), ("floor", "(a') no gate, do-nothing webhook"), ("sluice", "(b) sluice"), ("inpass", "(b') sluice, every pod gated"), ("kueue", "(c) Kueue plain pods")):
    p = os.path.join(out, f"e2e-{name}.json")
    if not os.path.exists(p):
        continue
    times = json.load(open(p))["running_times"]
    ax.step([0] + times, range(len(times) + 1), where="post", label=label)
ax.set_xlabel("seconds since the first create")
ax.set_ylabel("pods Running")
ax.set_title("Pods Running over time (local control plane, kwok nodes, 2 shared cores)")
ax.grid(alpha=0.3)
ax.legend()
fig.tight_layout()
fig.savefig(os.path.join(out, "e2e-running.png"))
