#!/usr/bin/env python3
"""The independent auditor of hack/chaos.sh (issues 23 and 40). It shares no code with sluice: it
keeps the cluster's pods, CapacityQueues and the controller's Lease from the API server's watches
(a LIST, then a WATCH from its resourceVersion; a fresh LIST when the watch is too old or the API
server restarts), and checks the promise by its own arithmetic on that state, every --interval
seconds:

  quota     per queue, the cpu requests of admitted (no sluice.dev/admission gate), unended (phase
            not Succeeded/Failed; a terminating pod still holds its room) pods, each counted in the
            queue its own sluice.dev/queue label names, <= the queue's quota, plus its
            borrowingLimit in a cohort (no limit: the cohort's pool bounds it)
  cohort    per cohort, the pool is never overdrawn: what each queue holds beyond what it keeps
            (quota - lendingLimit; no lendingLimit: it keeps nothing) summed over the cohort <= what
            the queues lend together (min(quota, lendingLimit) each). The cohort's usage <= its
            queues' quotas follows.
  once      every pod's name stands for one uid, and every workload (the sluice.dev/workload group,
            or the pod alone) holds quota in one queue: no admitted pod of it in another
  terms     every pod sluice admitted names the replica and the term that did
            (sluice.dev/admitted-by: <identity>@<leaseTransitions>, beside sluice.dev/admitted-at).
            The Lease's watch gives each term's holder and acquireTime. An admission must name the
            holder of its term, lie after its term began and before the next term began: two
            leaders admitting at once, or a replica admitting after its term, breaks it.
            (admitted-at has whole seconds: the checks round in sluice's favour, never against.)
  stranded  no gated pod waits more than --stranded-limit seconds while the auditor computes room
            for it. Room within the queue's own quota: what the quota leaves after usage and gang
            places (a gang, pods annotated sluice.dev/min-count M, or a Job's pods annotated
            sluice.dev/job-gang M, of one sluice.dev/workload or one RayCluster (ray.io/cluster;
            minReplicas 0 in the chaos run: the head is the gang, its workers come after it), that
            holds an admitted, unended pod not being deleted keeps M places until its last
            admitted pod ends; its gated pods take those places first; a gang whose admitted pods
            are all being evicted has stopped), walking the gated demand by priority then age: a
            gang that has not started needs its whole minimum, any other gated pod its own
            requests; a StrictFIFO queue stops at the first that does not fit, and so does any queue
            at one that may preempt. In a cohort the queue's own quota is its guaranteed room
            (reclaim takes back what others borrowed: while an admitted pod of the cohort is being
            deleted, room the pool does not have yet is not counted, the victims still hold it); borrowed room is judged only when the whole
            cohort's waiting demand fits at once (then every waiting pod of the cohort has room,
            in any order). A wait counts only while the Lease is renewed by one holder.
  lag       the auditor's own lag behind the API server: every second it writes a probe pod's
            annotation (a pod no queue governs, gated by the auditor's own gate so it never runs)
            and times how long the pod watch takes to bring it back.

It writes a status line per sample to --status (for the driver) and, at the end (SIGTERM or
--duration), a JSON summary to --out. Exit status 1 if any sample broke the promise.
"""
import argparse
import base64
import datetime
import http.client
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

GATE = "sluice.dev/admission"
QUEUE_LABEL = "sluice.dev/queue"
WORKLOAD_LABEL = "sluice.dev/workload"
MIN_COUNT = "sluice.dev/min-count"
RAY_CLUSTER = "ray.io/cluster"
RAY_NODE_TYPE = "ray.io/node-type"
JOB_GANG = "sluice.dev/job-gang"  # a governed Job's gang (its parallelism at submission), on its pods
ADMITTED_AT = "sluice.dev/admitted-at"
ADMITTED_BY = "sluice.dev/admitted-by"
PROBE_GATE = "chaos-audit.sluice.dev/never"
PROBE_SENT = "chaos-audit.sluice.dev/sent"
UNLIMITED = float("inf")


def cpu_millis(q):
    """A cpu quantity in millicores ("100m", "1", "0.5"); anything else raises ValueError."""
    q = str(q).strip()
    if q.endswith("m"):
        return int(q[:-1])
    return int(round(float(q) * 1000))


def pod_cpu(spec):
    total = sum(cpu_millis(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
                for c in spec.get("containers", []) or [])
    init = max([cpu_millis(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
                for c in spec.get("initContainers", []) or []] or [0])
    overhead = cpu_millis((spec.get("overhead") or {}).get("cpu", "0"))
    return max(total, init) + overhead


def rfc3339_seconds(text):
    """Seconds since the epoch of a Kubernetes timestamp ("2026-11-25T15:08:40.123456Z"), or None."""
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def workload_of(labels):
    """The workload a pod belongs to: its sluice.dev/workload, or its RayCluster (KubeRay's label:
    the head and the workers of one cluster are one workload, whose gang starts with the head)."""
    if labels.get(WORKLOAD_LABEL):
        return labels[WORKLOAD_LABEL]
    if labels.get(RAY_CLUSTER):
        return "ray/" + labels[RAY_CLUSTER]
    return None


def ledger_name(workload):
    """The DynamicWorkload's name for a sluice.dev/workload label value (sluice's documented
    naming: the value itself when it is a valid name, else a cleaned form with a hash)."""
    cleaned = "".join(c if c in "abcdefghijklmnopqrstuvwxyz0123456789-." else c.lower() if "A" <= c <= "Z" else "-"
                      for c in workload)
    trimmed = cleaned.strip("-.")
    if trimmed == workload and trimmed and len(trimmed) <= 253:
        return workload
    h = 0xcbf29ce484222325
    for b in workload.encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{trimmed[:200] or 'workload'}-{h & 0xFFFFFFFF:08x}"


def slim_pod(obj):
    """What the checks read of a pod (the rest is dropped: 10,000 pods stay small)."""
    md, spec, st = obj["metadata"], obj.get("spec", {}), obj.get("status", {})
    labels, ann = md.get("labels") or {}, md.get("annotations") or {}
    try:
        cpu = pod_cpu(spec)
    except ValueError:
        cpu = None  # a quantity the auditor cannot read: reported, not guessed
    min_count = 1
    for key in (MIN_COUNT, JOB_GANG):
        try:
            min_count = max(min_count, int(ann.get(key, "1")))
        except ValueError:
            pass
    gates = [g.get("name") for g in spec.get("schedulingGates", []) or []]
    return {
        "uid": md["uid"], "ns": md["namespace"], "name": md["name"],
        "queue": labels.get(QUEUE_LABEL), "workload": workload_of(labels),
        "head": labels.get(RAY_NODE_TYPE) == "head",
        "min": min_count, "cpu": cpu, "gated": GATE in gates, "phase": st.get("phase"),
        "deleting": "deletionTimestamp" in md, "priority": spec.get("priority", 0) or 0,
        "created": md.get("creationTimestamp", ""),
        "admitted_at": rfc3339_seconds(ann.get(ADMITTED_AT)), "admitted_by": ann.get(ADMITTED_BY),
        "probe": ann.get(PROBE_SENT) if PROBE_GATE in gates else None,
    }


class Api:
    """The API server from the kubeconfig kubectl uses (client certificate or token)."""

    def __init__(self, kubectl):
        raw = subprocess.run([kubectl, "config", "view", "--raw", "--minify", "-o", "json"],
                             capture_output=True, check=True).stdout
        cfg = json.loads(raw)
        cluster, user = cfg["clusters"][0]["cluster"], cfg["users"][0]["user"]
        url = urllib.parse.urlparse(cluster["server"])
        self.host, self.port = url.hostname, url.port or 443
        self.ctx = ssl.create_default_context()
        self.dir = tempfile.mkdtemp(prefix="chaos-audit-")
        if "certificate-authority-data" in cluster:
            self.ctx.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        elif "certificate-authority" in cluster:
            self.ctx.load_verify_locations(cafile=cluster["certificate-authority"])
        self.headers = {"Accept": "application/json"}
        if "token" in user:
            self.headers["Authorization"] = f"Bearer {user['token']}"
        cert, key = user.get("client-certificate"), user.get("client-key")
        if "client-certificate-data" in user:
            cert, key = self.write("cert.pem", user["client-certificate-data"]), self.write("key.pem", user["client-key-data"])
        if cert:
            self.ctx.load_cert_chain(cert, key)

    def write(self, name, data):
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        os.chmod(path, 0o600)
        return path

    def connect(self, timeout):
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout)

    def call(self, method, path, body=None, content_type="application/json", timeout=30):
        conn = self.connect(timeout)
        try:
            headers = dict(self.headers)
            if body is not None:
                headers["Content-Type"] = content_type
            conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status >= 300:
                raise RuntimeError(f"{method} {path}: {resp.status} {data[:300]!r}")
            return json.loads(data)
        finally:
            conn.close()


class Watched(threading.Thread):
    """One resource kept from a LIST and a WATCH: `items` by uid, as `keep` slims them."""

    def __init__(self, api, path, keep, on_event=None):
        super().__init__(daemon=True)
        self.api, self.path, self.keep, self.on_event = api, path, keep, on_event
        self.items, self.lock = {}, threading.Lock()
        self.synced, self.relists, self.events, self.errors = threading.Event(), 0, 0, 0
        self.stop = False
        self.connected = False  # a watch stream is open (else the state may be behind)

    def snapshot(self):
        with self.lock:
            return list(self.items.values())

    def run(self):
        rv = None
        while not self.stop:
            try:
                if rv is None:
                    rv = self.relist()
                rv = self.watch(rv)
            except Exception as e:  # the API server's restart, a dropped stream: try again
                self.connected = False
                self.errors += 1
                print(f"chaos_audit: watch {self.path}: {e}", file=sys.stderr, flush=True)
                time.sleep(0.5)

    def relist(self):
        listed = self.api.call("GET", self.path)
        with self.lock:
            self.items = {o["metadata"]["uid"]: self.keep(o) for o in listed.get("items", [])}
        self.relists += 1
        self.synced.set()
        return listed["metadata"]["resourceVersion"]

    def watch(self, rv):
        """Reads one watch stream to its end; returns the resourceVersion to go on from (None:
        relist, the version is too old)."""
        sep = "&" if "?" in self.path else "?"
        conn = self.api.connect(timeout=120)
        try:
            conn.request("GET", f"{self.path}{sep}watch=1&allowWatchBookmarks=true&timeoutSeconds=60&resourceVersion={rv}",
                         headers=self.api.headers)
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"watch {self.path}: {resp.status}")
            self.connected = True
            while not self.stop:
                line = resp.readline()
                if not line:
                    return rv
                ev = json.loads(line)
                obj, kind = ev.get("object", {}), ev.get("type")
                if kind == "ERROR":
                    return None if obj.get("code") == 410 else rv
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if kind == "BOOKMARK":
                    continue
                slim = self.keep(obj)
                with self.lock:
                    if kind == "DELETED":
                        self.items.pop(obj["metadata"]["uid"], None)
                    else:
                        self.items[obj["metadata"]["uid"]] = slim
                self.events += 1
                if self.on_event:
                    self.on_event(slim)
            return rv
        finally:
            conn.close()


def slim_queue(obj):
    spec = obj.get("spec", {})

    def cpu_of(field):
        q = (spec.get(field) or {}).get("cpu")
        return None if q is None else cpu_millis(q)

    status = obj.get("status") or {}

    def status_cpu(field):
        q = (status.get(field) or {}).get("cpu")
        try:
            return 0 if q is None else cpu_millis(q)
        except ValueError:
            return q

    # sluice's own count, as its last status write gave it: only reported beside the auditor's
    # when a check fails (never used to judge, so the auditor stays independent of it).
    sluice = {f: status_cpu(f) for f in ("usage", "reserved", "borrowed", "lent")}
    sluice.update(pending_pods=status.get("pendingPods"), admitted_pods=status.get("admittedPods"))
    return {"name": obj["metadata"]["name"], "quota": cpu_of("quota") or 0,
            "strict": spec.get("queueingStrategy") == "StrictFIFO", "cohort": spec.get("cohort"),
            "borrowing": cpu_of("borrowingLimit"), "lending": cpu_of("lendingLimit"), "sluice": sluice}


def lending(members):
    """A cohort's terms: what each queue keeps for itself (quota - lendingLimit; no lendingLimit:
    nothing), and the pool its queues lend together (min(quota, lendingLimit) each)."""
    lends = {q["name"]: min(q["quota"], q["quota"] if q["lending"] is None else q["lending"]) for q in members}
    return {q["name"]: q["quota"] - lends[q["name"]] for q in members}, sum(lends.values())


def slim_lease(obj):
    spec = obj.get("spec", {})
    return {"name": obj["metadata"]["name"], "holder": spec.get("holderIdentity") or "",
            "transitions": spec.get("leaseTransitions", 0) or 0,
            "acquired": rfc3339_seconds(spec.get("acquireTime")), "renewed": rfc3339_seconds(spec.get("renewTime")),
            "duration": spec.get("leaseDurationSeconds", 15) or 15}


class Auditor:
    def __init__(self, args):
        self.a = args
        self.api = Api(args.kubectl)
        self.samples = 0
        self.last_state = {}
        self.stale_samples = 0
        self.violations = []
        self.max_ratio = {}  # queue or "cohort/<name>" -> max usage / what it may hold
        self.longest_stranded, self.longest_stranded_pod = 0.0, None
        self.room_since = {}  # pod uid -> since when it has had room (continuously)
        self.pods_by_uid, self.ledger_cache = {}, {}  # for the report of a stranded pod
        self.lease_key, self.renewing_since = None, None
        self.terms = {}  # leaseTransitions -> {"holder", "acquired", "renewed", "duration"}
        self.admissions = {}  # leaseTransitions -> (latest admitted-at, pod) of that term
        self.checked_admissions = set()
        self.lags, self.probe_sent = [], {}
        self.probe_ns = args.namespace_prefix + "audit"
        self.sample_seconds = []

    # ---- the probe of the auditor's own lag -------------------------------------------------
    def on_pod(self, pod):
        sent = pod.get("probe")
        if sent and pod["ns"] == self.probe_ns and sent in self.probe_sent:
            self.lags.append(time.time() - self.probe_sent.pop(sent))

    def make_probe(self):
        try:
            self.api.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": self.probe_ns}})
        except RuntimeError as e:
            if " 409 " not in str(e):
                raise
        try:
            self.api.call("POST", f"/api/v1/namespaces/{self.probe_ns}/pods", {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
                "spec": {"schedulingGates": [{"name": PROBE_GATE}],
                         "containers": [{"name": "c", "image": "busybox"}]}})
        except RuntimeError as e:
            if " 409 " not in str(e):
                raise

    def send_probe(self):
        sent = f"{time.time():.6f}"
        self.probe_sent[sent] = time.time()
        try:
            self.api.call("PATCH", f"/api/v1/namespaces/{self.probe_ns}/pods/probe",
                          {"metadata": {"annotations": {PROBE_SENT: sent}}},
                          content_type="application/merge-patch+json", timeout=5)
        except Exception:  # the API server restarting: that second has no probe
            self.probe_sent.pop(sent, None)
        # A probe never seen back (a relist skipped it) is dropped after a minute.
        now = time.time()
        self.probe_sent = {k: v for k, v in self.probe_sent.items() if now - v < 60}

    # ---- leadership ---------------------------------------------------------------------------
    def observe_lease(self, now):
        leases = [l for l in self.leases.snapshot() if l["name"] == self.a.lease_name]
        if not leases:
            self.renewing_since = None
            return
        lease = leases[0]
        # A holder that shuts down releases the Lease (holderIdentity emptied, leaseTransitions
        # kept): that ends its term, it names no second holder.
        if lease["holder"]:
            term = self.terms.setdefault(lease["transitions"], {"holder": lease["holder"], "acquired": lease["acquired"]})
            if term["holder"] != lease["holder"]:
                self.violation(now, f"term {lease['transitions']} named two holders: {term['holder']} and {lease['holder']}")
            term.update(renewed=lease["renewed"], duration=lease["duration"])
        key = (lease["holder"], lease["transitions"])
        fresh = bool(lease["holder"]) and lease["renewed"] is not None and now - lease["renewed"] <= self.a.renew_gap
        if not fresh:
            self.renewing_since = None
        elif key != self.lease_key or self.renewing_since is None:
            self.renewing_since = now
        self.lease_key = key

    def check_terms(self, now, pods):
        """Each admission inside its own term (see the module's doc)."""
        for p in pods:
            by, at = p["admitted_by"], p["admitted_at"]
            if p["gated"] or not by or at is None or p["uid"] in self.checked_admissions:
                continue
            identity, _, generation = by.rpartition("@")
            try:
                generation = int(generation)
            except ValueError:
                self.violation(now, f"pod {p['ns']}/{p['name']}: admitted-by {by!r} names no term")
                self.checked_admissions.add(p["uid"])
                continue
            term = self.terms.get(generation)
            if term is None:
                continue  # the Lease's watch has not shown that term yet: judged later
            self.checked_admissions.add(p["uid"])
            if term["holder"] != identity:
                self.violation(now, f"pod {p['ns']}/{p['name']} admitted by {identity} in term {generation}, whose holder is {term['holder']}")
            if term["acquired"] is not None and at + 1 <= term["acquired"]:
                self.violation(now, f"pod {p['ns']}/{p['name']} admitted at {at:.0f} before its term {generation} began ({term['acquired']:.3f})")
            latest = self.admissions.get(generation)
            if latest is None or at > latest[0]:
                self.admissions[generation] = (at, f"{p['ns']}/{p['name']}")
        # No term admits after a later term began (never two leaders at once).
        ordered = sorted(self.terms)
        for i, generation in enumerate(ordered):
            latest = self.admissions.get(generation)
            later = [self.terms[g]["acquired"] for g in ordered[i + 1:] if self.terms[g]["acquired"] is not None]
            if latest and later and latest[0] > min(later):
                self.violation(now, f"pod {latest[1]} admitted by term {generation} at {latest[0]:.0f}, after a later term began ({min(later):.3f})")
                self.admissions[generation] = (min(later), latest[1])  # once

    # ---- the quota ------------------------------------------------------------------------------
    def violation(self, now, what):
        self.violations.append({"at": round(now - self.start, 1), "what": what})
        print(f"chaos_audit: VIOLATION at {now - self.start:.1f}s: {what}", file=sys.stderr, flush=True)

    def note_ratio(self, key, usage, limit):
        if limit and limit != UNLIMITED:
            self.max_ratio[key] = max(self.max_ratio.get(key, 0.0), usage / limit)

    def sample(self):
        now = time.time()
        self.observe_lease(now)
        queues = {q["name"]: q for q in self.queues.snapshot() if q["name"] in self.a.queues}
        pods = [p for p in self.pods.snapshot() if p["ns"].startswith(self.a.namespace_prefix) and p["queue"] in queues]
        self.samples += 1
        if not all(w.connected for w in (self.pods, self.queues, self.leases)):
            self.stale_samples += 1  # judged all the same: the state is one the cluster had
        names, workload_queue = {}, {}
        by_queue = {q: [] for q in queues}
        for p in pods:
            name = (p["ns"], p["name"])
            if names.setdefault(name, p["uid"]) != p["uid"]:
                self.violation(now, f"pod {name} stands for two uids at once")
            wl = (p["ns"], p["workload"] or "pod/" + p["name"])
            holds = not p["gated"] and p["phase"] not in ("Succeeded", "Failed")
            if holds and workload_queue.setdefault(wl, p["queue"]) != p["queue"]:
                self.violation(now, f"workload {wl} in two queues: {workload_queue[wl]} and {p['queue']}")
            if p["cpu"] is None:
                self.violation(now, f"pod {name}: a cpu request the auditor cannot read")
                continue
            by_queue[p["queue"]].append(p)
        self.check_terms(now, pods)
        state = {q: self.queue_state(queues[q], qpods) for q, qpods in by_queue.items()}
        with_room = {}
        pools = {c: self.pool_of([q for q in queues.values() if q["cohort"] == c], state)
                 for c in {q["cohort"] for q in queues.values() if q["cohort"]}}
        for name, st in state.items():
            q = queues[name]
            limit = q["quota"] + (UNLIMITED if q["borrowing"] is None else q["borrowing"]) if q["cohort"] else q["quota"]
            self.note_ratio(name, st["usage"], limit if limit != UNLIMITED else None)
            if st["usage"] > limit:
                self.violation(now, f"queue {name}: admitted pods hold {st['usage']}m cpu, over its quota {q['quota']}m"
                                    + (f" + borrowingLimit {q['borrowing']}m" if q["cohort"] and q["borrowing"] is not None else ""))
            free = q["quota"] - st["usage"] - st["reserved"]
            room = self.with_room(q, free, st["demand"], st["admitted_priorities"], pools.get(q["cohort"]))
            with_room.update((uid, name) for uid in st["fills"] | room)
        for cohort in sorted({q["cohort"] for q in queues.values() if q["cohort"]}):
            members = [q for q in queues.values() if q["cohort"] == cohort]
            with_room.update(self.check_cohort(now, cohort, members, state))
        self.last_state = {name: {"usage": st["usage"], "reserved": st["reserved"], "quota": queues[name]["quota"],
                                  "cohort": queues[name]["cohort"], "waiting_items": len(st["demand"]),
                                  "waiting_cpu": sum(d[2] for d in st["demand"]),
                                  "sluice_says": queues[name]["sluice"]} for name, st in state.items()}
        self.pods_by_uid = {p["uid"]: p for p in pods}
        self.update_stranded(now, with_room)
        gated = sum(st["gated"] for st in state.values())
        holding = sum(len(st["admitted_priorities"]) for st in state.values())
        return {"t": round(now - self.start, 1), "pods": len(pods), "gated": gated, "holding": holding,
                "leader": bool(self.renewing_since)}

    def queue_state(self, queue, pods):
        """Usage, gang places and the gated demand of one queue (see the module's doc)."""
        usage, admitted_priorities, workloads, terminating = 0, [], {}, 0
        for p in pods:
            wl = workloads.setdefault((p["ns"], p["workload"] or "pod/" + p["name"]), {"all": [], "admitted": 0, "gated": []})
            wl["all"].append(p)
            if p["phase"] in ("Succeeded", "Failed"):
                continue
            if not p["gated"]:
                usage += p["cpu"]  # a terminating pod holds its room until it ends
                admitted_priorities.append(p["priority"])
                # A gang whose admitted pods are all being evicted (preemption, reclaim) has
                # stopped: its recreated pods wait for the whole minimum again.
                wl["admitted"] += 0 if p["deleting"] else 1
                terminating += 1 if p["deleting"] else 0
            elif not p["deleting"]:
                wl["gated"].append(p)
        reserved, demand, fills = 0, [], set()
        for key, wl in workloads.items():
            m = max(p["min"] for p in wl["all"])
            # A RayCluster's gang is its head (the chaos run's clusters have minReplicas 0): it
            # comes first, its workers after it.
            gated = sorted(wl["gated"], key=lambda p: (not p["head"], p["created"]))
            size = max(p["cpu"] for p in wl["all"])
            if wl["admitted"]:
                missing = max(0, m - wl["admitted"])
                reserved += missing * size
                fills.update(p["uid"] for p in gated[:missing])
                demand += [(key, [p], p["cpu"]) for p in gated[missing:]]
            elif gated:
                head = gated[:m]
                demand.append((key, head, sum(p["cpu"] for p in head) + max(0, m - len(head)) * size))
        return {"usage": usage, "reserved": reserved, "terminating": terminating, "demand": demand, "fills": fills,
                "admitted_priorities": admitted_priorities, "gated": sum(len(w["gated"]) for w in workloads.values())}

    def check_cohort(self, now, cohort, members, state):
        """The pool is never overdrawn; when all the cohort's waiting demand fits at once, every
        waiting pod of the cohort has room. Returns those pods (uid -> queue)."""
        keeps, pool = lending(members)
        drawn = sum(max(0, state[q["name"]]["usage"] - keeps[q["name"]]) for q in members)
        usage, quota = sum(state[q["name"]]["usage"] for q in members), sum(q["quota"] for q in members)
        self.note_ratio(f"cohort/{cohort}", usage, quota)
        if drawn > pool:
            self.violation(now, f"cohort {cohort}: its queues draw {drawn}m cpu from a pool of {pool}m (usage {usage}m of quotas {quota}m)")
        needs = {}
        for q in members:
            st = state[q["name"]]
            need = st["usage"] + st["reserved"] + sum(d[2] for d in st["demand"])
            cap = q["quota"] + (UNLIMITED if q["borrowing"] is None else q["borrowing"])
            if need > cap:
                return {}
            needs[q["name"]] = need
        if sum(max(0, needs[n] - keeps[n]) for n in needs) > pool:
            return {}
        room = {}
        for q in members:
            st = state[q["name"]]
            room.update((p["uid"], q["name"]) for _, pods, _ in st["demand"] for p in pods)
        return room

    @staticmethod
    def pool_of(members, state):
        """A cohort's pool now: what is free of it (load, usage and reservations, beyond what each
        queue keeps) and whether a reclaim is under way (an admitted pod of the cohort is being
        deleted: room that needs it is room only once it is gone)."""
        keeps, pool = lending(members)
        drawn = sum(max(0, state[q["name"]]["usage"] + state[q["name"]]["reserved"] - keeps[q["name"]]) for q in members)
        return {"free": pool - drawn,
                "reclaiming": any(state[q["name"]]["terminating"] for q in members)}

    def with_room(self, queue, free, demand, admitted_priorities, pool=None):
        """The uids of the gated pods with room in the queue's own quota (see the module's doc).
        demand: (workload, pods, cpu needed) per item: a gang that has not started, or one pod.
        pool: the queue's cohort's (see pool_of): an item the pool has no room for needs a
        reclaim; while one is under way its room is not counted (the victims still hold it)."""
        def order(item):
            pods = item[1]
            return (-max(p["priority"] for p in pods), min(p["created"] for p in pods), item[0])
        lowest_admitted = min(admitted_priorities) if admitted_priorities else None
        with_room = set()
        # Items of one priority created in the same second (creationTimestamp's resolution) have
        # no order the auditor can see: it walks them as one step. In a StrictFIFO queue one of them
        # that does not fit may be the head, so none of that step counts as having room.
        steps = {}
        for item in sorted(demand, key=order):
            steps.setdefault(order(item)[:2], []).append(item)
        for (neg_priority, _), step in steps.items():
            fits, blocked = [], False
            for _, pods, need in step:
                if need <= free and (pool is None or need <= pool["free"] or not pool["reclaiming"]):
                    free -= need
                    if pool is not None:
                        pool["free"] -= min(need, max(0, pool["free"]))
                    fits.append(pods)
                else:
                    blocked = True
            if queue["strict"] and blocked:
                break
            for pods in fits:
                with_room.update(p["uid"] for p in pods)
            if blocked and lowest_admitted is not None and lowest_admitted < -neg_priority:
                break  # a preemptor may hold the room
        return with_room

    def update_stranded(self, now, with_room):
        """Advances the clocks of the pods with room (a pod without room now starts over)."""
        self.room_since = {u: t for u, t in self.room_since.items() if u in with_room}
        for uid, queue in with_room.items():
            since = self.room_since.setdefault(uid, now)
            if self.renewing_since is None:
                continue
            waited = now - max(since, self.renewing_since)
            if waited > self.longest_stranded:
                self.longest_stranded, self.longest_stranded_pod = waited, uid
            if waited > self.a.stranded_limit:
                # What the auditor saw, to diagnose from: the queue and its cohort at this sample.
                cohort = self.last_state.get(queue, {}).get("cohort")
                seen = {n: st for n, st in self.last_state.items() if n == queue or (cohort and st["cohort"] == cohort)}
                self.violation(now, f"queue {queue}: pod {uid} gated {waited:.1f}s with room for it under a renewing leader"
                                    f" (room since {since - self.start:.1f}s, leader since {self.renewing_since - self.start:.1f}s; state {json.dumps(seen)};"
                                    f" its ledger says: {self.ledger_says(uid)})")
                self.room_since[uid] = now  # one violation per stranded stretch

    def ledger_says(self, uid):
        """What sluice's ledger of a stranded pod's workload says of its wait (read once per
        workload per 30 s; reported, never judged): the answer a user would get."""
        pod = self.pods_by_uid.get(uid)
        if pod is None or not pod["workload"] or pod["workload"].startswith("ray/"):
            return None
        key = (pod["ns"], pod["workload"])
        said = self.ledger_cache.get(key)
        if said and time.time() - said[0] < 30:
            return said[1]
        try:
            obj = self.api.call("GET", f"/apis/sluice.dev/v1alpha1/namespaces/{pod['ns']}/dynamicworkloads/"
                                       f"{ledger_name(pod['workload'])}", timeout=5)
            st = obj.get("status") or {}
            answer = {"phase": st.get("phase"), "message": st.get("message"),
                      "conditions": [(c.get("type"), c.get("status"), c.get("message")) for c in st.get("conditions") or []]}
        except (OSError, RuntimeError, ValueError) as e:
            answer = f"not read: {e}"[:300]
        self.ledger_cache[key] = (time.time(), answer)
        return answer

    # ---- the loop -------------------------------------------------------------------------------
    def run(self):
        self.start = time.time()
        self.make_probe()
        self.pods = Watched(self.api, "/api/v1/pods", slim_pod, on_event=self.on_pod)
        self.queues = Watched(self.api, "/apis/sluice.dev/v1alpha1/capacityqueues", slim_queue)
        self.leases = Watched(self.api, f"/apis/coordination.k8s.io/v1/namespaces/{self.a.lease_namespace}/leases", slim_lease)
        for w in (self.pods, self.queues, self.leases):
            w.start()
        for w in (self.pods, self.queues, self.leases):
            if not w.synced.wait(120):
                raise RuntimeError(f"no first LIST of {w.path} within 120 s")
        missing = set(self.a.queues) - {q["name"] for q in self.queues.snapshot()}
        if missing:
            raise RuntimeError(f"CapacityQueues not found: {sorted(missing)}")
        stop = {"now": False}
        signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
        deadline = self.start + self.a.duration if self.a.duration else None
        while not stop["now"] and (deadline is None or time.time() < deadline):
            began = time.time()
            self.send_probe()
            status = self.sample()
            self.sample_seconds.append(time.time() - began)
            if self.a.status:
                with open(self.a.status + ".tmp", "w") as f:
                    json.dump(status, f)
                os.replace(self.a.status + ".tmp", self.a.status)
            if self.samples % 30 == 0:
                print(f"chaos_audit: {status} lag p50 {self.lag(50)} s", file=sys.stderr, flush=True)
            time.sleep(max(0.0, self.a.interval - (time.time() - began)))
        return self.finish()

    def lag(self, pct):
        if not self.lags:
            return None
        ordered = sorted(self.lags)
        return round(ordered[min(len(ordered) - 1, int(len(ordered) * pct / 100))], 3)

    def finish(self):
        elapsed = time.time() - self.start
        summary = {
            "churn_samples": self.samples,
            "churn_stale_samples": self.stale_samples,
            "churn_samples_per_second": round(self.samples / elapsed, 3) if elapsed else 0,
            "churn_sample_seconds_p99": round(sorted(self.sample_seconds)[int(len(self.sample_seconds) * 0.99)], 3) if self.sample_seconds else None,
            "churn_auditor_lag_p50_s": self.lag(50), "churn_auditor_lag_p99_s": self.lag(99),
            "churn_auditor_lag_max_s": round(max(self.lags), 3) if self.lags else None,
            "churn_auditor_probes": len(self.lags),
            "churn_max_usage_ratio": round(max(self.max_ratio.values(), default=0.0), 4),
            "max_usage_ratio_by_queue": {k: round(v, 4) for k, v in sorted(self.max_ratio.items())},
            "churn_longest_stranded_s": round(self.longest_stranded, 1),
            "longest_stranded_pod_uid": self.longest_stranded_pod,
            "terms_seen": len(self.terms), "admissions_checked": len(self.checked_admissions),
            "watch_relists": {w.path: w.relists for w in (self.pods, self.queues, self.leases)},
            "watch_errors": sum(w.errors for w in (self.pods, self.queues, self.leases)),
            "failed_reads": 0,
            "violations": self.violations[:100],
            "violation_count": len(self.violations),
        }
        with open(self.a.out, "w") as f:
            json.dump(summary, f, indent=2)
        print(json.dumps({k: v for k, v in summary.items() if k != "violations"}), file=sys.stderr, flush=True)
        return 1 if self.violations else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubectl", default="kubectl", help="kubectl, for its kubeconfig (KUBECONFIG)")
    p.add_argument("--queues", nargs="+", required=True, help="the CapacityQueues to audit")
    p.add_argument("--namespace-prefix", required=True, help="only pods of namespaces starting with this count")
    p.add_argument("--lease-namespace", default="sluice-system")
    p.add_argument("--lease-name", default="sluice-controller")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    p.add_argument("--stranded-limit", type=float, default=10.0)
    p.add_argument("--renew-gap", type=float, default=5.0, help="a Lease not renewed for this long has no leader")
    p.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds (0: at SIGTERM)")
    p.add_argument("--status")
    p.add_argument("--out", required=True)
    sys.exit(Auditor(p.parse_args()).run())


if __name__ == "__main__":
    main()
