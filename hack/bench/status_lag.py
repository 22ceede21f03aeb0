#!/usr/bin/env python3
"""hack/bench/status_lag.sh's report: per run pair (no gate, sluice) the pod rates and their ratio,
the status lag of every workload (status_lag's JSON), API server requests per pod (deltas of
apiserver_request_total, the statuses' writes after the burst included), sluice's status writes and
the load average; into BENCHMARKS.md's status_lag section and bench/results.json's status_lag keys.

usage: status_lag.py <raw results: target/bench/status_lag> <repository root> <1: write | 0: print only>
"""
import json, os, statistics, sys
from runs import api_requests

out, root, write = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
info = {}
for line in open(os.path.join(out, "run-info")):
    k, _, v = line.rstrip("\n").partition(" ")
    info[k] = v


def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) and os.path.getsize(p) else None


def text(name):
    p = os.path.join(out, name)
    return open(p).read().strip() if os.path.exists(p) else "?"


def metric(name, metric_name):
    p = os.path.join(out, name)
    if not os.path.exists(p):
        return 0.0
    return sum(float(l.split()[-1]) for l in open(p) if l.startswith(metric_name + " ") or l.startswith(metric_name + "{"))


def cpu(name):
    p = os.path.join(out, name)
    d = {}
    if os.path.exists(p):
        for l in open(p):
            k, v = l.split()
            d[k] = float(v)
    return d


tags = sorted({f.split("-")[0] for f in os.listdir(out) if f.startswith("run") and f.endswith(".lag.json")})
rows = []
for tag in tags:
    row = {"run": tag}
    for mode in ("nogate", "sluice"):
        p = f"{tag}-{mode}"
        e2e, lag = load(f"{p}.json"), load(f"{p}.lag.json")
        if not e2e or not lag:
            continue
        delta = api_requests(out, p) or {}
        pods = e2e["pods"]
        c0, c1 = cpu(f"{p}.cpu-before"), cpu(f"{p}.cpu-after")
        row[mode] = {
            "pods": pods,
            "all_running_s": e2e["all_running_s"],
            "pods_per_s": round(pods / e2e["all_running_s"], 1) if e2e.get("all_running_s") else None,
            "lag": lag,
            "requests_per_pod": round(sum(delta.values()) / pods, 2),
            "status_writes_per_pod": round(sum(v for (verb, r), v in delta.items() if r == "dynamicworkloads/status" and verb not in ("GET", "LIST", "WATCH")) / pods, 3),
            "record_writes_per_pod": round(sum(v for (verb, r), v in delta.items() if r == "dynamicworkloads" and verb not in ("GET", "LIST", "WATCH")) / pods, 3),
            "sluice_status_writes": int(metric(f"{p}.sluice-after", "sluice_status_writes_total") - metric(f"{p}.sluice-before", "sluice_status_writes_total")),
            "apiserver_cpu_s": round(c1.get("kube-apiserver", 0) - c0.get("kube-apiserver", 0), 1),
            "sluice_cpu_s": round(c1.get("sluice", 0) - c0.get("sluice", 0), 1),
            "all_cpu_s": round(sum(c1.values()) - sum(c0.values()), 1),
            "load_before": text(f"{p}.load-before"),
            "load_after": text(f"{p}.load-after"),
        }
    if "nogate" in row and "sluice" in row and row["nogate"]["pods_per_s"] and row["sluice"]["pods_per_s"]:
        row["ratio"] = round(row["sluice"]["pods_per_s"] / row["nogate"]["pods_per_s"], 3)
    rows.append(row)

md = [f"Measured {info.get('started_at', '?')} by `{info.get('command', '?')}` ({info.get('settings') or 'sluice as installed'}) — "
      f"{info.get('versions', '?')}; machine: {os.cpu_count()} cores "
      "(load averages per run below; other work on the machine, if any, is said beside the table).", "",
      "Every pod change that changes what a DynamicWorkload's status shows (its pods pending, admitted, running,",
      "ended) of every workload of the sluice run, from the watch showing the pod change to the watch showing a",
      "status with that state or a later one (`tools/src/bin/status_lag.rs`, watching beside the load; changes",
      "never shown before the 120 s drain count with their lag so far). Requests per pod: all of the API server's,",
      "from before the load to after the statuses caught up.", "",
      "| run | no gate pods/s | sluice pods/s | ratio | changes (workloads) | lag p50 | p99 | max | never shown | status writes/pod | requests/pod (no gate → sluice) | API server CPU s (no gate → sluice) | load before → after (sluice) |",
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
for row in rows:
    n, s = row.get("nogate"), row.get("sluice")
    if not n or not s:
        continue
    lag = s["lag"]
    md.append(f"| {row['run']} | {n['pods_per_s']} | {s['pods_per_s']} | {row.get('ratio', '–')} | {lag['changes']:,} ({lag['workloads']:,}) | "
              f"{lag['lag_p50_s']:.2f} s | {lag['lag_p99_s']:.2f} s | {lag['lag_max_s']:.2f} s | {lag['changes_never_shown']} | "
              f"{s['status_writes_per_pod']:.3f} | {n['requests_per_pod']:.2f} → {s['requests_per_pod']:.2f} | "
              f"{n['apiserver_cpu_s']} → {s['apiserver_cpu_s']} | {s['load_before']} → {s['load_after']} |")
md.append("")
print("\n".join(md))
json.dump(rows, open(os.path.join(out, "summary.json"), "w"), indent=1)

if write and any("ratio" in r for r in rows):
    good = [r for r in rows if "ratio" in r]
    results_path = os.path.join(root, "bench", "results.json")
    results = json.load(open(results_path)) if os.path.exists(results_path) else {}
    med = lambda xs: round(statistics.median(xs), 3)
    results["status_lag_p50_s"] = med([r["sluice"]["lag"]["lag_p50_s"] for r in good])
    results["status_lag_p99_s"] = med([r["sluice"]["lag"]["lag_p99_s"] for r in good])
    results["status_lag_runs"] = [{
        "p50_s": r["sluice"]["lag"]["lag_p50_s"], "p99_s": r["sluice"]["lag"]["lag_p99_s"], "max_s": r["sluice"]["lag"]["lag_max_s"],
        "changes": r["sluice"]["lag"]["changes"], "never_shown": r["sluice"]["lag"]["changes_never_shown"],
        "pods_per_s_sluice": r["sluice"]["pods_per_s"], "pods_per_s_nogate": r["nogate"]["pods_per_s"], "ratio_sluice_nogate": r["ratio"],
        "status_writes_per_pod": r["sluice"]["status_writes_per_pod"],
        "apiserver_requests_per_pod": {"nogate": r["nogate"]["requests_per_pod"], "sluice": r["sluice"]["requests_per_pod"]},
        "load_before": r["sluice"]["load_before"]} for r in good]
    results.setdefault("measured_at_by_part", {})["status_lag"] = info.get("started_at")
    with open(results_path + ".tmp", "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    os.replace(results_path + ".tmp", results_path)
    bench_md = os.path.join(root, "BENCHMARKS.md")
    doc = open(bench_md).read()
    begin, end = "<!-- bench.sh:status_lag:begin -->", "<!-- bench.sh:status_lag:end -->"
    body = begin + "\n### Status lag during the end-to-end burst\n\n" + "\n".join(md) + "\n" + end
    if begin in doc and end in doc:
        doc = doc[:doc.index(begin)] + body + doc[doc.index(end) + len(end):]
    else:
        doc = doc.rstrip("\n") + "\n\n## Status lag: latest `hack/bench.sh --only status_lag` run\n\n" + body + "\n"
    open(bench_md, "w").write(doc)
