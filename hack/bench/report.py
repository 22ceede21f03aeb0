#!/usr/bin/env python3
"""hack/bench.sh's report: the tables of the parts a run measured (or, with --report-only, found in
the raw results directory), each into its own section of BENCHMARKS.md (between the
<!-- bench.sh:<part>:begin/end --> markers) and its own keys of bench/results.json; the other
parts' sections and keys stay as they are. Prints the sections it writes.

usage: report.py <raw results directory: target/bench> <repository root> <1: write | 0: print only> <part>...
"""
import json, os, re, sys
from runs import api_requests, build_sections, measured, put_sections, run_of as run_in
out, root, write, parts = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4:]
def load(name, lines=False):
    p = os.path.join(out, name)
    if not os.path.exists(p):
        return None
    if lines:
        return [json.loads(l) for l in open(p) if l.strip().startswith("{")]
    txt = open(p).read().strip()
    return json.loads(txt) if txt else None
def max_rss_mib(name):
    p = os.path.join(out, name)
    if not os.path.exists(p):
        return None
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(p).read())
    return int(m.group(1)) // 1024 if m else None
def run_of(part):  # target/bench/run-<part>: started_at, command, load average, versions
    return run_in(out, part)

results_path = os.path.join(root, "bench", "results.json")
results = json.load(open(results_path)) if os.path.exists(results_path) else {}
sections = {}   # part -> (heading, body lines)

def admission_part():
    admission = load("admission.json")
    if not admission:
        return None
    md = ["`cargo bench --bench admission --features reference` (criterion, median [95% CI]); `reference` is the pass before the",
          "rewrite (`src/queue/admission_reference.rs`) on the same snapshots, in the same run.", "",
          "| workloads × pods | pass | reference | ratio |", "|---|---:|---:|---:|"]
    by = {(r["group"], r["case"]): r for r in admission}
    for case in sorted({r["case"] for r in admission}, key=lambda c: [int(x[:-1]) for x in c.split("_")]):
        new = by.get(("admission_pass", case)); ref = by.get(("admission_pass_reference", case))
        fmt = lambda r: f"{r['median_ms']:.2f} ms [{r['low_ms']:.2f}, {r['high_ms']:.2f}]" if r else "–"
        ratio = f"{ref['median_ms'] / new['median_ms']:.1f}×" if new and ref else "–"
        md.append(f"| {case.replace('w_', ' w × ').replace('p', ' p')} | {fmt(new)} | {fmt(ref)} | {ratio} |")
    md.append("")
    # The figure of the target: 10k workloads (of one pod each, the snapshot of the
    # first round of BENCHMARKS.md); 10k workloads with 100k pods are in the table.
    ten = by.get(("admission_pass", "10000w_10000p"))
    results["admission_pass_ms_10k_workloads"] = round(ten["median_ms"], 3) if ten else None
    return "### Admission pass", md

def scale_part():
    cached = [r for r in (load(f"scale-cached-{i}.json") for i in (1, 2, 3)) if r]
    peaks = [p for p in (max_rss_mib(f"scale-cached-{i}.time") for i in (1, 2, 3)) if p is not None]
    more, more_peak = load("scale-cached-more.json"), max_rss_mib("scale-cached-more.time")
    refs = [(load(f"scale-{n}.json"), max_rss_mib(f"scale-{n}.time"), label) for n, label in (
        ("listed", "as listed (k8s Pod)"), ("stripped", "managedFields dropped (k8s Pod)"),
        ("trimmed-before", "trimmed as the controller's cache held them before CachedPod (k8s Pod)"))]
    if not cached and not any(r for r, _, _ in refs):
        return None
    med = lambda v: sorted(v)[len(v) // 2] if v else None
    md = ["`hack/bench/scale.sh`: `target/release/admission_scale --workloads 10000 --pods N --hold cached|listed|stripped|trimmed-before`",
          "under `/usr/bin/time -v`, one process per row, one after another: realistic Spark executor pods (4.1 KB of",
          "JSON each, managedFields and status included), each encoded to bytes and decoded as the pod watch decodes it.",
          "`cached` is the controller's figure: decoded straight into `queue::pod_cache::CachedPod` (the full pod never",
          "exists) and kept in a kube-runtime reflector store, as the queue controller's pod reflector keeps it, and the",
          "same bytes decoded into `scavenger::pod::WatchedPod` in a second store, as the ScavengerJob controller's watch",
          "of every non-terminal pod keeps them (the leader runs both: two caches of the same pods); each pass reads the",
          "stores and the pods' facts as `Controller::pass` and the scavengers' capacity do (snapshot build and pass:",
          "median of 5 passes). The other rows hold one cache of `k8s_openapi` Pods for comparison (memory only, no pass;",
          "before `CachedPod` the leader held two such caches: the queue's trimmed one and the ScavengerJob controller's).", "",
          "The incremental columns: the same passes as the controller runs them now (`queue::incremental`, kept",
          "alive to the end as the controller keeps it): its first pass over everything, then the median after one pod",
          "changed, each with the whole lent to the pass and given back; the peak RSS includes it. After deciding: each workload's",
          "status computed and compared with the last (what a full pass's `want_workload_statuses` does; an incremental",
          "pass does it only for the groups it decided) and the room published for admission at creation (every pass).", "",
          "| pods held | snapshot build | pass | pods admitted | incremental: first pass / after one change | after deciding: every status / publish | RSS holding the pods | peak RSS (time -v) |",
          "|---|---:|---:|---:|---:|---:|---:|---:|"]
    def incremental(r):
        first, after = r.get("incremental_first_pass_ms"), r.get("incremental_pass_ms_median")
        cell = f"{first:.1f} / {after:.1f} ms" if first is not None and after is not None else "–"
        statuses, publish = r.get("statuses_ms_median"), r.get("publish_ms_median")
        after_deciding = f"{statuses:.1f} / {publish:.1f} ms" if statuses is not None and publish is not None else "–"
        return f"{cell} | {after_deciding}"
    for i, r in enumerate(cached):
        peak = max_rss_mib(f"scale-cached-{i + 1}.time")
        md.append(f"| {r['pods']:,} in {r['workloads']:,} workloads, cached (run {i + 1}) | {r['snapshot_build_ms_median']:.1f} ms | "
                  f"{r['decide_ms_median']:.1f} ms | {r['admitted']:,} | {incremental(r)} | {r['rss_holding_pods_mib']:,} MiB | {peak:,} MiB |")
    if more:
        md.append(f"| {more['pods']:,} in {more['workloads']:,} workloads, cached | {more['snapshot_build_ms_median']:.1f} ms | "
                  f"{more['decide_ms_median']:.1f} ms | {more['admitted']:,} | {incremental(more)} | {more['rss_holding_pods_mib']:,} MiB | {more_peak:,} MiB |")
    for r, peak, label in refs:
        if r:
            md.append(f"| {r['pods']:,}, {label} | – | – | – | – | – | {r['rss_holding_pods_mib']:,} MiB | {f'{peak:,} MiB' if peak is not None else '–'} |")
    md.append("")
    peak = med(peaks)
    growth = None
    if more and more_peak is not None and peak is not None and cached:
        extra = (more["pods"] - cached[0]["pods"]) / 10000
        growth = round((more_peak - peak) / extra, 1) if extra > 0 else None
        md.append(f"Peak RSS, median of {len(peaks)}: {peak:,} MiB at {cached[0]['pods']:,} pods (target: under 300 MiB); "
                  f"{more_peak:,} MiB at {more['pods']:,}: {growth} MiB per extra 10,000 pods.")
        before = next((p for r, p, label in refs if r and r["hold"] == "trimmed-before"), None)
        listed = next((p for r, p, label in refs if r and r["hold"] == "listed"), None)
        if before:
            md.append(f"Against one cache of trimmed Pods as before `CachedPod`, in the same run: {before:,} MiB for one cache against {peak:,} MiB for both ({before / peak:.1f}× less)"
                      + (f"; against pods as listed: {listed / peak:.1f}× less." if listed else "."))
        md.append("")
    results["controller_rss_mib_10k_100k"] = peak
    # The controller's pass as it runs now (incremental) against the full build and decide, same runs.
    def med_key(key):
        values = [r[key] for r in cached if r.get(key) is not None]
        return round(med(values), 1) if values else None
    results["controller_pass_ms_10k_100k_incremental"] = med_key("incremental_pass_ms_median")
    results["controller_pass_ms_10k_100k_incremental_first"] = med_key("incremental_first_pass_ms")
    full = [r["snapshot_build_ms_median"] + r["decide_ms_median"] for r in cached
            if r.get("snapshot_build_ms_median") is not None and r.get("decide_ms_median") is not None]
    results["controller_pass_ms_10k_100k_full"] = round(med(full), 1) if full else None
    results["controller_statuses_ms_10k_100k_every_workload"] = med_key("statuses_ms_median")
    results["controller_rss_growth_mib_per_10k_pods"] = growth
    # The earlier keys: the controller's figure (now the cached pods), and pods held as listed.
    results["controller_peak_rss_mib_10k_workloads_100k_pods"] = peak
    results["controller_peak_rss_mib_10k_workloads_100k_pods_untrimmed"] = max_rss_mib("scale-listed.time")
    results["controller_peak_rss_mib_10k_workloads_100k_pods_trimmed_before"] = max_rss_mib("scale-trimmed-before.time")
    return "### Controller at scale", md

def webhook_part():
    web = load("webhook.jsonl", lines=True)
    if not web:
        return None
    reps = max(r.get("rep", 1) for r in web)
    md = ["`target/release/webhook_load --serve-only --server-threads 1` (sluice's webhook server as",
          "`sluice serve` builds it, on a runtime of its own with one thread) in one process,",
          "`webhook_load --url ... --shape mixed --json --rate R --seconds S --warmup 1 --concurrency 32` in",
          "another: TLS 1.3 (rustls, ring), keep-alive, HTTP/1.1 on 32 connections (how the API server calls a",
          "webhook Service) or HTTP/2 on one (`--http2`: how it calls a loopback URL), Spark executor and Ray worker",
          f"pods in turn ({web[0].get('review_bytes_mean', 0) / 1000:.1f} KB on average, each with the managedFields entry the API server",
          "records before admission), every answer checked to be a JSONPatch. Latency counts from the",
          "scheduled send time (open loop): a pacer on the load generator's one thread releases each request on",
          "time from a timerfd (microseconds), and the first second at the rate (`--warmup 1`) is sent but not",
          "counted: a fresh client process and 32 fresh connections start with page faults and empty buffers",
          "(the floor alike: up to 20 ms in the first 50 ms of a run). The processes share the 2 cores.",
          "Beside it, the **floor** (`--serve-only --floor`, a process of its own): the same server stack",
          "(axum-server, rustls, TCP_NODELAY, one thread) answering one fixed review after reading the body,",
          "never decoding it. No webhook can be faster here than the floor; what it cannot hold belongs to the",
          "machine, the kernel, TLS, HTTP and the load generator on the same two cores.",
          f"Each load ran {reps} time(s) against each server, alternating sluice and floor; the table gives the median",
          "of the runs (p99: median [lowest – highest]).", "",
          "| load | protocol | sluice: achieved | p50 | p99 | p99.9 | floor: achieved | p50 | p99 | p99.9 |",
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    runs = {}
    for r in web:
        key = (r["target_rps"] or 0, bool(r.get("http2")), r["concurrency"])
        runs.setdefault(key, {}).setdefault(r.get("server", "sluice"), []).append(r)
    def median(xs):
        xs = sorted(xs)
        return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2
    def summary(rs):
        if not rs:
            return None
        return {"achieved": median([r["achieved_rps"] for r in rs]), "errors": sum(r["errors"] for r in rs),
                "p50": median([r["p50_ms"] for r in rs]), "p99": median([r["p99_ms"] for r in rs]),
                "p99_lo": min(r["p99_ms"] for r in rs), "p99_hi": max(r["p99_ms"] for r in rs),
                "p999": median([r["p999_ms"] for r in rs])}
    def cells(m):
        if m is None:
            return "– | – | – | –"
        err = f" ({m['errors']} errors)" if m["errors"] else ""
        rng = f" [{m['p99_lo']:.2f} – {m['p99_hi']:.2f}]" if m["p99_hi"] > m["p99_lo"] else ""
        return f"{m['achieved']:,.0f}/s{err} | {m['p50']:.3f} ms | {m['p99']:.3f} ms{rng} | {m['p999']:.3f} ms"
    held = {"sluice": None, "floor": None}
    results["webhook_p99_ms"] = results["webhook_p99_ms_http2"] = results["webhook_floor_p99_ms"] = None
    for key in sorted(runs, key=lambda k: (k[0] == 0, k[1], k[0])):
        rate, http2, conc = key
        ms = {kind: summary(runs[key].get(kind)) for kind in ("sluice", "floor")}
        load_ = f"{rate:,.0f}/s" if rate else f"closed loop, concurrency {conc}"
        md.append(f"| {load_} | {'HTTP/2' if http2 else 'HTTP/1.1'} | {cells(ms['sluice'])} | {cells(ms['floor'])} |")
        for kind, m in ms.items():
            if m and rate and not http2 and m["errors"] == 0 and m["p99"] < 1.0 and m["achieved"] >= 0.95 * rate:
                held[kind] = max(held[kind] or 0, rate)
        if rate == 20000 and ms["sluice"]:
            results["webhook_p99_ms_http2" if http2 else "webhook_p99_ms"] = round(ms["sluice"]["p99"], 3)
        if rate == 20000 and not http2 and ms["floor"]:
            results["webhook_floor_p99_ms"] = round(ms["floor"]["p99"], 3)
    fmt = lambda h: f"{h:,.0f}/s" if h else "none of the rates tried"
    md += ["", f"Highest fixed rate (HTTP/1.1) held with a median p99 under 1 ms: sluice {fmt(held['sluice'])}; "
           f"floor {fmt(held['floor'])}.", ""]
    results["webhook_max_rps_p99_under_1ms"] = held["sluice"]
    results["webhook_floor_max_rps_p99_under_1ms"] = held["floor"]
    return "### Webhook", md

def e2e_part():
    names = ("nogate", "floor", "sluice", "noevents", "nolimit", "inpass", "kueue", "churn", "churn-noevents")
    e2e = {n: load(f"e2e-{n}.json") for n in names}
    if not any(e2e.values()):
        return None
    import shutil
    def metrics(name):
        return api_requests(out, f"e2e-{name}")
    def rate(r):
        return r["pods"] / r["all_running_s"] if r and r.get("complete") and r.get("all_running_s") else None
    def steady(r):
        t = r and r.get("admitted_times")
        if not t or len(t) < 10:
            return None
        lo, hi = t[len(t) // 5], t[(4 * len(t)) // 5]
        return ((4 * len(t)) // 5 - len(t) // 5) / (hi - lo) if hi > lo else None
    def text(name, default="?"):
        p = os.path.join(out, name)
        return open(p).read().strip() if os.path.exists(p) else default
    versions_e2e, nodes, build = text("e2e-versions"), text("e2e-nodes"), text("e2e-sluice-build", "debug")
    how = ("`target/release/sluice serve --local`, its release build" if build == "release" else
           "`target/debug/sluice serve --local`, dependencies at opt-level 2")
    flags = "--with-sluice --release-sluice" if build == "release" else "--with-sluice"
    first = next(r for r in e2e.values() if r)
    md = [f"One cluster (`hack/cluster.sh up --nodes {nodes} {flags}`; {versions_e2e}; sluice as",
          f"`hack/cluster.sh` runs it: {how}), the runs one after",
          f"another, each in a fresh namespace deleted (and its pods gone) before the next. The same {first['pods']:,} pods in",
          f"{first['workloads']:,} workloads ({first['singles']:,} single pods, {first['gangs_4_8']:,} gangs of 4–8, {first['groups_32']:,} groups of 32), 10m cpu each, created by",
          f"`target/release/e2e_load --mode M --pods N` with {first['concurrency']} creates in flight; a pod counts as Running",
          "when the client's watch first shows it so. Kueue joins the cluster (`--with-kueue`) only for its own run, the",
          "last (its controller watches every pod of the cluster), and its webhooks are scoped to that run's namespace",
          "(they have no object selector); sluice's select pods by its queue label: no run pays for the other's calls.",
          "(b) is sluice as installed (`admission: AtCreation`: a pod that fits in a queue where nothing waits is",
          "admitted by the webhook as it is created); (b') the same queue with `admission: InPass` (every pod gated,",
          "then ungated by a pass). (a') is (a) with one do-nothing mutating webhook on every pod create (the floor",
          "server, `webhook_load --serve-only --floor`: sluice's TLS/HTTP stack answering the request's uid and one fixed",
          "label patch without decoding the pod): what the API server pays for calling any webhook, the floor of every",
          "webhook-based gate.", "",
          "| run | pods | all created | all Running | pods Running/s | create retries |", "|---|---:|---:|---:|---:|---:|"]
    labels = {"nogate": "(a) no gate", "floor": "(a') no gate, a do-nothing webhook on every create", "sluice": "(b) sluice, quota ≥ demand", "nolimit": "(b0) sluice as (b), no status write budget (`--status-writes-per-second 0`)", "noevents": "(b-) sluice as (b), no events on users' objects (`--events-per-second 0`)", "inpass": "(b') sluice, same quota, `admission: InPass`",
              "kueue": "(c) Kueue plain pods / pod groups, same quota"}
    for n in ("nogate", "floor", "sluice", "noevents", "nolimit", "inpass", "kueue"):
        r = e2e[n]
        if r:
            ar = f"{r['all_running_s']:.1f} s" if r.get("complete") else f"incomplete: {len(r['running_times']):,} Running at {r['all_running_s'] or 0:.1f} s"
            md.append(f"| {labels[n]} | {r['pods']:,} | {r['create_s']:.1f} s | {ar} | "
                      f"{(f'{rate(r):.1f}' if rate(r) else '–')} | {r['create_retries']} |")
    rn, rs, rk, ri = rate(e2e["nogate"]), rate(e2e["sluice"]), rate(e2e["kueue"]), rate(e2e.get("inpass"))
    rf = rate(e2e.get("floor"))
    rl = rate(e2e.get("nolimit"))
    md += ["", f"Ratios: sluice / no gate = {f'{rs / rn:.2f}' if rs and rn else '–'} (target ≥ 0.8); "
           f"sluice / Kueue = {f'{rs / rk:.2f}' if rs and rk else '–'} (target ≥ 2); "
           f"InPass: / no gate = {f'{ri / rn:.2f}' if ri and rn else '–'}, / Kueue = {f'{ri / rk:.2f}' if ri and rk else '–'}; "
           f"do-nothing webhook (a') / no gate = {f'{rf / rn:.2f}' if rf and rn else '–'}, sluice / (a') = {f'{rs / rf:.2f}' if rs and rf else '–'}; "
           f"no status write budget (b0) / no gate = {f'{rl / rn:.2f}' if rl and rn else '–'}.", ""]
    c = e2e["churn"]
    if c:
        st = steady(c)
        md += [f"(d) quota-limited sluice: the same pods in a queue with a fifth of their demand, each pod ended",
               f"(`sluice.dev/kwok-phase=Succeeded`) {c['end_after_s']} s after the client sees it Running: all {c['pods']:,} admitted in",
               f"{c['all_admitted_s'] or 0:.1f} s; **{f'{st:.1f}' if st else '–'} admitted pods/s at steady state** (the middle 60 % of admissions).", ""]
    per = {n: metrics(n) for n in names}
    results["e2e_apiserver_requests_per_pod"] = None
    if per["nogate"] and per["sluice"]:
        keys = set()
        for n, m in per.items():
            if m and e2e[n]:
                keys |= {k for k, v in m.items() if v / e2e[n]["pods"] >= 0.01}
        cols = [n for n in names if per[n] and e2e[n]]
        md += ["API server requests per pod (deltas of `apiserver_request_total` read from the API server's `/metrics`",
               "with the admin certificate before and after each run; every client counts: the load tool's creates,",
               "the scheduler's bindings, kwok's status writes, node leases; the sluice column less the no-gate one is what",
               "sluice adds):", "",
               "| verb | resource | " + " | ".join(cols) + " | sluice − no gate |", "|---|---|" + "---:|" * (len(cols) + 1)]
        tot = {n: 0.0 for n in cols}
        for k in sorted(keys, key=lambda k: -(per["sluice"].get(k, 0) / e2e["sluice"]["pods"])):
            vals = {n: per[n].get(k, 0) / e2e[n]["pods"] for n in cols}
            md.append(f"| {k[0]} | {k[1]} | " + " | ".join(f"{vals[n]:.2f}" for n in cols) + f" | {vals['sluice'] - vals['nogate']:+.2f} |")
        for n in cols:
            tot[n] = sum(per[n].values()) / e2e[n]["pods"]
        md += ["| all | | " + " | ".join(f"**{tot[n]:.2f}**" for n in cols) + f" | **{tot['sluice'] - tot['nogate']:+.2f}** |", ""]
        for with_events, without in (("sluice", "noevents"), ("churn", "churn-noevents")):
            if with_events in tot and without in tot:
                # What the events add: each verb on events per pod, with them less without them.
                ev = {k: per[with_events].get(k, 0) / e2e[with_events]["pods"]
                         - per[without].get(k, 0) / e2e[without]["pods"] for k in keys if k[1] == "events"}
                md += [f"Events on users' objects, {with_events} − {without} (`--events-per-second 0`): "
                       f"{tot[with_events] - tot[without]:+.2f} requests per pod in all; on events themselves: "
                       + (", ".join(f"{k[0]} {v:+.3f}" for k, v in sorted(ev.items())) or "none") + ".", ""]
        results["e2e_apiserver_requests_per_pod"] = {n: round(tot[n], 3) for n in cols}
    def cpu(n):
        b, a = os.path.join(out, f"e2e-{n}.cpu-before"), os.path.join(out, f"e2e-{n}.cpu-after")
        if not (os.path.exists(b) and os.path.exists(a)):
            return None
        rd = lambda p: {l.split()[0]: float(l.split()[1]) for l in open(p) if len(l.split()) == 2}
        before, after = rd(b), rd(a)
        d = {k: after[k] - before.get(k, 0.0) for k in after}
        c = os.path.join(out, f"e2e-{n}.cpu-client")
        if os.path.exists(c):
            f = open(c).read().split()
            if len(f) >= 3 and f[-3] == "e2e_load":
                d["e2e_load (the client)"] = float(f[-2]) + float(f[-1])
        return d
    cpus = {n: cpu(n) for n in names}
    ccols = [n for n in names if cpus[n] and e2e[n]]
    if ccols:
        comps = sorted({k for n in ccols for k in cpus[n]}, key=lambda k: -max(cpus[n].get(k, 0) for n in ccols))
        md += ["CPU seconds (user + system) each process used during each run (`/proc/<pid>/stat` before and after;",
               "the machine has 2 cores, so a run of T seconds has 2T to give):", "",
               "| process | " + " | ".join(ccols) + " |", "|---|" + "---:|" * len(ccols)]
        for k in comps:
            md.append(f"| {k} | " + " | ".join(f"{cpus[n].get(k, 0):.1f}" for n in ccols) + " |")
        md.append("| **all** | " + " | ".join(f"**{sum(cpus[n].values()):.1f}**" for n in ccols) + " |")
        md.append("| run's wall time × 2 cores | " + " | ".join(f"{2 * (e2e[n].get('all_running_s') or 0):.1f}" for n in ccols) + " |")
        md.append("")
    def sluice_delta(n):
        b, a = os.path.join(out, f"e2e-{n}.sluice-before"), os.path.join(out, f"e2e-{n}.sluice-after")
        if not (os.path.exists(b) and os.path.exists(a)):
            return None
        rd = lambda p: {l.rsplit(" ", 1)[0]: float(l.rsplit(" ", 1)[1]) for l in open(p) if " " in l.strip()}
        before, after = rd(b), rd(a)
        agg = {}
        for k, v in after.items():
            base = k.split("{")[0]
            agg[base] = agg.get(base, 0.0) + v - before.get(k, 0.0)
        return agg
    sd = {n: sluice_delta(n) for n in ("sluice", "nolimit", "inpass", "churn")}
    scols = [n for n in ("sluice", "nolimit", "inpass", "churn") if sd[n]]
    def pending_at_end(n): # a gauge: its value when the run ended, not a delta
        a = os.path.join(out, f"e2e-{n}.sluice-after")
        for l in (open(a) if os.path.exists(a) else []):
            if l.startswith("sluice_status_writes_pending "):
                return f"{float(l.split()[1]):,.0f}"
        return "–"
    if scols:
        def row(label, f):
            vals = []
            for n in scols:
                try:
                    vals.append(f(sd[n]))
                except (KeyError, ZeroDivisionError):
                    vals.append("–")
            return f"| {label} | " + " | ".join(vals) + " |"
        md += ["sluice's own metrics over each run (deltas of its `/metrics`):", "",
               "| | " + " | ".join(scols) + " |", "|---|" + "---:|" * len(scols),
               row("pods admitted at creation", lambda d: f"{d['sluice_admitted_at_creation_pods_total']:,.0f}"),
               row("pods admitted by a pass (ungated)", lambda d: f"{d['sluice_admitted_pods_total']:,.0f}"),
               row("admission passes", lambda d: f"{d['sluice_admission_pass_duration_seconds_count']:,.0f}"),
               row("mean pass (ms)", lambda d: f"{1000 * d['sluice_admission_pass_duration_seconds_sum'] / d['sluice_admission_pass_duration_seconds_count']:.1f}"),
               row("CPU in passes (s)", lambda d: f"{d['sluice_admission_pass_duration_seconds_sum']:.1f}"),
               row("webhook reviews", lambda d: f"{d['sluice_webhook_request_duration_seconds_count']:,.0f}"),
               row("mean webhook answer (µs, in the handler)", lambda d: f"{1e6 * d['sluice_webhook_request_duration_seconds_sum'] / d['sluice_webhook_request_duration_seconds_count']:.0f}"),
               row("status writes", lambda d: f"{d['sluice_status_writes_total']:,.0f}"),
               "| workload statuses not yet written when the last pod ran | " + " | ".join(pending_at_end(n) for n in scols) + " |",
               ""]
    png = os.path.join(out, "e2e-running.png")
    if os.path.exists(png):
        if write:
            shutil.copy(png, os.path.join(root, "bench", "e2e-running.png"))
        md += ["![Pods Running over time](bench/e2e-running.png)", ""]
    results["e2e_pods_per_s"] = {"nogate": round(rn, 1) if rn else None, "sluice": round(rs, 1) if rs else None,
                                 "kueue": round(rk, 1) if rk else None}
    results["e2e_ratio_sluice_nogate"] = round(rs / rn, 3) if rs and rn else None
    results["e2e_ratio_sluice_kueue"] = round(rs / rk, 3) if rs and rk else None
    results["e2e_pods_per_s_sluice_inpass"] = round(ri, 1) if ri else None
    results["e2e_pods_per_s_webhook_floor"] = round(rf, 1) if rf else None
    results["e2e_pods_per_s_sluice_no_status_budget"] = round(rl, 1) if rl else None
    results["e2e_quota_limited_admitted_pods_per_s"] = round(steady(c), 1) if c and steady(c) else None
    return "### End to end on the local control plane", md

titles = {"admission": "Admission pass: latest `hack/bench.sh --only admission` run",
          "scale": "Controller at scale: latest `hack/bench.sh --only scale` run",
          "webhook": "Webhook: latest `hack/bench.sh --only webhook` run",
          "e2e": "End to end: latest `hack/bench.sh --only e2e` run"}
build = {"admission": admission_part, "scale": scale_part, "webhook": webhook_part, "e2e": e2e_part}
by_part = results.setdefault("measured_at_by_part", {})
made, started = build_sections(parts, build, out, "bench.sh")
sections.update(made)
by_part.update(started)
# Keys every results.json has, measured or not.
for key in ("admission_pass_ms_10k_workloads", "controller_peak_rss_mib_10k_workloads_100k_pods",
            "webhook_p99_ms", "webhook_max_rps_p99_under_1ms"):
    results.setdefault(key, None)
results["e2e_pods_per_s"] = results.get("e2e_pods_per_s") or {"nogate": None, "sluice": None, "kueue": None}
if by_part:
    results["measured_at"] = max(by_part.values())
results.setdefault("measured_at", None)

def header(part):
    return measured(out, part, lambda c: ("hack/bench.sh " + c).strip(),
                    ", shared with other work (load average {load} when this part started).")
bm = os.path.join(root, "BENCHMARKS.md")
text = put_sections(open(bm).read() if os.path.exists(bm) else "# Benchmarks\n", sections, titles, header)
if not write:
    sys.exit(0)
open(bm, "w").write(text)
json.dump(results, open(results_path, "w"), indent=2)
open(results_path, "a").write("\n")
