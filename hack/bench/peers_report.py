#!/usr/bin/env python3
"""The report of the end-to-end parts run by their own scripts (hack/bench/peer.sh, shapes.sh,
large.sh): each into its own section of BENCHMARKS.md (<!-- bench.sh:<part>:begin/end -->) and its
own keys of bench/results.json (read-modify-write right before writing; the other keys stay).

usage: peers_report.py <raw results directory: target/bench> <repository root> <1: write | 0: print only> <part>...
"""
import glob, json, os, statistics, sys
from runs import api_requests, build_sections, measured, put_sections, run_of as run_in
out, root, write, parts = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4:]

def load(name):
    p = os.path.join(out, name)
    if not os.path.exists(p):
        return None
    txt = open(p).read().strip()
    return json.loads(txt.splitlines()[-1]) if txt else None

def text(name, default="?"):
    p = os.path.join(out, name)
    return open(p).read().strip() if os.path.exists(p) else default

def requests(name):
    return api_requests(out, name)

def cpu(name):
    """CPU seconds each component used during a run."""
    b, a = {}, {}
    for d, when in ((b, "before"), (a, "after")):
        p = os.path.join(out, f"{name}.cpu-{when}")
        if os.path.exists(p):
            for line in open(p):
                k, v = line.split()
                d[k] = float(v)
    return {k: a[k] - b.get(k, 0.0) for k in a}

def seconds(name):
    try:
        return float(text(f"{name}.t-after")) - float(text(f"{name}.t-before"))
    except ValueError:
        return None

def measured_runs(names, count_key):
    """Each run of `names` that left results: (name, its JSON, API requests per unit of `count_key`,
    CPU seconds by component, the gate's CPU seconds: sluice's or Kueue's, None without a gate)."""
    for name in names:
        d = load(f"{name}.json")
        if not d:
            continue
        req = requests(name)
        per = sum(req.values()) / d[count_key] if req and d[count_key] else None
        c = cpu(name)
        gate = c.get(d["mode"]) if d["mode"] in ("sluice", "kueue") else None
        yield name, d, per, c, gate

def run_of(part):
    return run_in(out, part)

def med(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None

def rng(v, fmt="{:.1f}"):
    v = [x for x in v if x is not None]
    if not v:
        return "–"
    if len(v) == 1:
        return fmt.format(v[0])
    return f"{fmt.format(statistics.median(v))} ({fmt.format(min(v))}–{fmt.format(max(v))})"

results = {}   # this report's keys only; merged into bench/results.json at the end

PEER_SHAPES = {
    "baseline": ("baseline (`configs/baseline/generator.yaml`)", "per queue 350 small (1 cpu, 200 ms, priority 50) created every 100 ms, "
                 "100 medium (5 cpu, 500 ms, priority 100) every 500 ms, 50 large (20 cpu, 1 s, priority 200) every 1.2 s, the three sets at once"),
    "tas": ("topology-aware shape (`configs/tas/generator.yaml`)", "per queue the baseline's sizes as 2-pod small (500m each), 4-pod medium "
            "(1250m) and 8-pod large (2500m) workloads, each size in three sets asking for one rack (`cloud.provider.com/topology-rack`) "
            "required, preferred or balanced (Kueue: slices of 1, 2, 4 pods per rack; sluice has no slices, so balanced runs as "
            "preferred there), all nine sets at once, on 10 racks of 64 kwok nodes of 96 cpu"),
}
PEER_KINDS = {"pods": "each one plain pod here, ended its runtime after its admission; a preempted pod is created again",
              "jobs": "each one batch/v1 Job here (parallelism = completions = its pods; Kueue's created suspended), admitted "
                      "when all its pods are ungated, its pods ended its runtime after that; a preempted Job is brought back by "
                      "the Job controller (sluice) or resumed by Kueue"}

def peer_part(part):
    runs = {m: sorted(glob.glob(os.path.join(out, f"{part}-{m}-*.json"))) for m in ("sluice", "kueue")}
    data = {m: [(os.path.basename(p)[:-5], load(os.path.basename(p))) for p in ps] for m, ps in runs.items()}
    if not any(data.values()):
        return None
    first = next(d for ds in data.values() for _, d in ds if d)
    shape, kind = first.get("shape", "baseline"), first.get("as", "pods")
    what, mix = PEER_SHAPES[shape]
    md = [f"Kueue v0.19.2's `test/performance/scheduler` {what}: {first['cohorts']} cohorts × "
          f"{first['queues'] // max(first['cohorts'], 1)} queues (nominal 20 cpu, borrowing limit 100, reclaimWithinCohort Any, "
          f"withinClusterQueue LowerPriority), {mix}: {first['workloads']:,} workloads of {first.get('pods', first['workloads']):,} pods "
          f"(scale {first['scale']}), {PEER_KINDS[kind]} (`tools/src/bin/peer_suite/`); its time to admit runs to its last admission "
          f"(as Kueue's recorder counts). One local cluster ({os.environ.get('E2E_NODES', '100')} plain kwok nodes"
          f"{' and the 640 racked ones' if shape == 'tas' else ''}); sluice's runs first, Kueue started for its own.", "",
          "| run | complete | wall: all admitted | wall: all finished | admissions/s | time to admit p50 / p99 | avg small / medium / large | preempted | API requests / workload | API server CPU s | gate CPU s | load avg before → after |",
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    walls = {}
    for mode, ds in data.items():
        for name, d in ds:
            if not d:
                continue
            req = requests(name)
            per = sum(req.values()) / d["workloads"] if req else None
            c = cpu(name)
            gate = c.get("sluice" if mode == "sluice" else "kueue")
            t, bc = d["time_to_admit"], d["time_to_admit_by_class"]
            walls.setdefault(mode, []).append(d["wall_admit_all_s"] if d["complete"] else None)
            done = "yes" if d["complete"] else (f"no: {d.get('stopped') or 'stopped'} at {d['elapsed_s']:.0f} s, "
                                                f"{d['admitted']:,} admitted, {d['finished']:,} finished")
            wa = f"{d['wall_admit_all_s']:.1f} s" if d["complete"] else "–"
            wf = f"{d['wall_finish_all_s']:.1f} s" if d["complete"] else "–"
            md.append(f"| {name} | {done} | {wa} | "
                      f"{wf} | {d['admissions_per_s'] or 0:.1f} | {t['p50_s']} / {t['p99_s']} s | "
                      f"{bc['small']['avg_s']} / {bc['medium']['avg_s']} / {bc['large']['avg_s']} s | {d['preempted']} | "
                      f"{per:.1f} | {c.get('kube-apiserver', 0):.0f} | {gate or 0:.0f} | "
                      f"{text(name + '.load-before')} → {text(name + '.load-after')} |" if per is not None else f"| {name} | (no metrics) |")
    ws, wk = med(walls.get("sluice", [])), med(walls.get("kueue", []))
    md += ["", f"Median wall time to admit all: sluice {rng(walls.get('sluice', []))} s, Kueue {rng(walls.get('kueue', []))} s"
           + (f"; ratio Kueue / sluice {wk / ws:.2f}." if ws and wk else "."), ""]
    key = "peer_suite" if part == "peer" else f"{part}_suite"
    results[f"{key}_wall_s"] = {"sluice": round(ws, 1) if ws else None, "kueue": round(wk, 1) if wk else None}
    def tta(mode, q):
        return med([d["time_to_admit"][q] for _, d in data.get(mode, []) if d and d["complete"]])
    results[f"{key}_time_to_admit_s"] = {m: {"p50": tta(m, "p50_s"), "p99": tta(m, "p99_s")} for m in ("sluice", "kueue")}
    results[f"{key}_admissions_per_s"] = {m: med([d["admissions_per_s"] for _, d in data.get(m, []) if d and d["complete"]])
                                          for m in ("sluice", "kueue")}
    # Runs stopped by --timeout or --stall-timeout: how far each got in the same time box (the side-by-side figure then).
    results[f"{key}_incomplete"] = {m: [{"elapsed_s": round(d["elapsed_s"]), "admitted": d["admitted"], "finished": d["finished"],
                                         "workloads": d["workloads"], "preempted": d["preempted"],
                                         "stopped": d.get("stopped"), "left_sample": d.get("left_sample", [])[:5]}
                                        for _, d in data.get(m, []) if d and not d["complete"]] for m in ("sluice", "kueue")}
    heading = {"peer": "as plain pods", "peer_jobs": "as batch/v1 Jobs", "peer_tas": "topology-aware (TAS) shape as batch/v1 Jobs"}[part]
    return f"### Kueue's scheduler performance suite, {heading}", md

def shapes_part():
    names = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(out, "shapes-*.json")))
    if not names:
        return None
    md = ["Spark-shaped applications (a spark-submit's pods: a driver, then, once it runs, executors requested in batches "
          "doubling every second, as dynamic allocation does, owned by the driver pod) and Ray-shaped ones (RayClusters "
          "through the KubeRay operator: a head and minReplicas workers, then `replicas` doubled every second to the maximum), "
          "created by `tools/src/bin/shapes_load.rs`; quota above demand (what is measured is the gate's cost, not queueing). "
          "Time to admit: from a pod first seen to first seen without scheduling gates; step: from the request (a driver "
          "created, an executor batch created, a RayCluster created or scaled up) to all its pods Running.", "",
          "| run | pods (gated) | errors | all running | pods/s | time to admit p50 / p99 | driver / RayCluster step p50 / p99 | executors / scale-up step p50 / p99 | API requests / pod | API server CPU s | gate CPU s | load avg before → after |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    per_mode = {}
    for name, d, per, c, gate in measured_runs(names, "pods"):
        st = d["steps"]
        first = st.get("driver") or st.get("raycluster") or {}
        later = st.get("executors") or st.get("scale-up") or {}
        md.append(f"| {name} | {d['pods']:,} ({d['gated_pods']:,}) | {d['errors']} | {d['all_running_s']:.1f} s | {d['pods_per_s'] or 0:.1f} | "
                  f"{d['time_to_admit_p50_s']} / {d['time_to_admit_p99_s']} s | {first.get('p50_s')} / {first.get('p99_s')} s | "
                  f"{later.get('p50_s')} / {later.get('p99_s')} s | {per if per is None else round(per, 1)} | {c.get('kube-apiserver', 0):.0f} | "
                  f"{'–' if gate is None else round(gate)} | {text(name + '.load-before')} → {text(name + '.load-after')} |")
        per_mode.setdefault(d["shape"], {}).setdefault(d["mode"], []).append(
            {"pods_per_s": d["pods_per_s"], "tta_p99": d["time_to_admit_p99_s"], "req": per,
             "first_p99": first.get("p99_s"), "later_p99": later.get("p99_s")})
    md.append("")
    for shape, modes in per_mode.items():
        results[f"shapes_{shape}"] = {m: {"pods_per_s": med([r["pods_per_s"] for r in rs]),
                                          "time_to_admit_p99_s": med([r["tta_p99"] for r in rs]),
                                          "step_p99_s": med([r["later_p99"] for r in rs]),
                                          "apiserver_requests_per_pod": med([r["req"] for r in rs])} for m, rs in modes.items()}
    return "### Shapes people run: Spark and Ray", md

def large_part():
    names = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(out, "large-*.json")))
    if not names:
        return None
    md = [f"The end-to-end load of `e2e_load` (single pods, gangs of 4–8, groups of 32, 10m cpu each, 32 creates in flight) at "
          f"{text('large-pods')} pods on {text('large-nodes')} kwok nodes. API server CPU share: its CPU seconds over the run's "
          "wall time (1.0 = one of the machine's 2 cores).", "",
          "| run | complete | pods | all running | pods/s | API requests / pod | API server CPU s | API server share | gate CPU s | load avg before → after |",
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    rates = {}
    for name, d, per, c, gate in measured_runs(names, "pods"):
        wall = seconds(name)
        api = c.get("kube-apiserver", 0.0)
        mode = d["mode"]
        rate = d["pods"] / d["all_running_s"] if d.get("complete") and d.get("all_running_s") else None
        rates[mode] = rate
        md.append(f"| {name} | {'yes' if d['complete'] else 'no'} | {d['pods']:,} | {d['all_running_s'] or 0:.1f} s | {rate or 0:.1f} | "
                  f"{per if per is None else round(per, 1)} | {api:.0f} | {api / wall if wall else 0:.2f} | "
                  f"{'–' if gate is None else round(gate)} | {text(name + '.load-before')} → {text(name + '.load-after')} |")
    md.append("")
    results["e2e_large_pods_per_s"] = {m: round(r, 1) if r else None for m, r in rates.items()}
    return f"### End to end at {text('large-pods')} pods on {text('large-nodes')} nodes", md

titles = {"peer": "A peer's own benchmark: latest `hack/bench.sh --only peer` run",
          "peer_jobs": "A peer's own benchmark as Jobs: latest `hack/bench.sh --only peer_jobs` run",
          "peer_tas": "A peer's topology-aware benchmark: latest `hack/bench.sh --only peer_tas` run",
          "shapes": "Shapes people run: latest `hack/bench.sh --only shapes` run",
          "large": "Larger: latest `hack/bench.sh --only large` run"}
build = {"peer": lambda: peer_part("peer"), "peer_jobs": lambda: peer_part("peer_jobs"),
         "peer_tas": lambda: peer_part("peer_tas"), "shapes": shapes_part, "large": large_part}
sections, stamps = build_sections(parts, build, out, "bench")

def header(part):
    return measured(out, part, lambda c: c, " (load average {load} when this part started; other work on the "
                    "machine, if any, is said beside the table).")
bm = os.path.join(root, "BENCHMARKS.md")
doc = put_sections(open(bm).read(), sections, titles, header)
print(json.dumps(results, indent=2))
if not write:
    sys.exit(0)
open(bm, "w").write(doc)
results_path = os.path.join(root, "bench", "results.json")
current = json.load(open(results_path)) if os.path.exists(results_path) else {}
current.update(results)
by_part = current.setdefault("measured_at_by_part", {})
by_part.update(stamps)
current["measured_at"] = max(v for v in by_part.values() if v)
json.dump(current, open(results_path, "w"), indent=2)
open(results_path, "a").write("\n")
