#!/usr/bin/env python3
"""The independent auditor of hack/chaos.sh (issue 23). It shares no code with sluice: it reads the
API server with kubectl (one LIST of every pod per sample: a single request, so one consistent
snapshot at one resourceVersion), the CapacityQueues once (quota and queueing strategy) and the
Lease every sample, and checks the promise by its own arithmetic, every --interval seconds:

  quota     per queue, the cpu requests of admitted (no sluice.dev/admission gate), unended (phase
            not Succeeded/Failed; a terminating pod still holds its room) pods <= the queue's quota
  once      every pod appears once (uid and name), and every workload (the sluice.dev/workload
            group, or the pod alone) sits in one queue: nothing counts in two places
  stranded  no gated pod waits more than --stranded-limit seconds while the auditor computes room
            for it. Room is what the quota leaves after usage and gang places: a gang (pods
            annotated sluice.dev/min-count M, one sluice.dev/workload) that holds an admitted,
            unended pod keeps M places (M minus its admitted unended pods, each the size of its
            largest pod) until its last admitted pod ends, and its gated pods take those places
            first (room for them without more quota); that is the gang promise of the book (concepts/queues-and-workloads.md),
            read off the pods, not sluice's code. Then, walking the gated demand by priority (high
            first) then age: a gang that has not started needs its whole minimum (M places, gated
            or not created yet), any other gated pod its own requests; what fits has room (and
            takes it); a StrictFIFO queue stops at the first that does not fit, and so does a
            BestEffortFIFO queue at one that may preempt (admitted pods of lower priority exist).
            A wait counts only while the Lease is renewed by one holder (its renewTime within
            --renew-gap s of the sample; the clock restarts when the holder changes): the
            failover itself (a lease duration without a leader) is measured by the kills, not here.

It writes a status line per sample to --status (for the driver) and, at the end (SIGTERM or
--duration), a JSON summary to --out. Exit status 1 if any sample broke the promise.
"""
import argparse
import datetime
import json
import signal
import subprocess
import sys
import time

GATE = "sluice.dev/admission"
QUEUE_LABEL = "sluice.dev/queue"
WORKLOAD_LABEL = "sluice.dev/workload"
MIN_COUNT = "sluice.dev/min-count"


def cpu_millis(q):
    """A cpu quantity in millicores ("100m", "1", "0.5", "2k" is refused as unexpected)."""
    q = str(q).strip()
    if q.endswith("m"):
        return int(q[:-1])
    return int(round(float(q) * 1000))


def pod_cpu(pod):
    spec = pod.get("spec", {})
    total = 0
    for c in spec.get("containers", []):
        total += cpu_millis(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
    init = 0
    for c in spec.get("initContainers", []) or []:
        init = max(init, cpu_millis(c.get("resources", {}).get("requests", {}).get("cpu", "0")))
    overhead = cpu_millis((spec.get("overhead") or {}).get("cpu", "0"))
    return max(total, init) + overhead


def min_count(pods):
    """A workload's minimum gang: the largest sluice.dev/min-count its pods carry (1 without one;
    a value that is not a positive integer counts as 1, as for a pod alone)."""
    best = 1
    for p in pods:
        try:
            best = max(best, int(p["metadata"].get("annotations", {}).get(MIN_COUNT, "1")))
        except ValueError:
            pass
    return best


def rfc3339_seconds(text):
    """Seconds since the epoch of a Kubernetes timestamp ("2026-11-25T15:08:40.123456Z"), or None."""
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def kubectl_json(kubectl, path, timeout=30):
    out = subprocess.run([kubectl, "get", "--raw", path], capture_output=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"kubectl get --raw {path}: {out.stderr.decode(errors='replace').strip()}")
    return json.loads(out.stdout)


class Auditor:
    def __init__(self, args):
        self.a = args
        self.samples = 0
        self.failed_reads = 0
        self.violations = []
        self.max_ratio = 0.0
        self.longest_stranded = 0.0
        self.longest_stranded_pod = None
        self.room_since = {}  # pod uid -> time it was first seen with room (continuously)
        self.lease_key = None  # (holder, leaseTransitions)
        self.renewing_since = None  # since when one holder has renewed without a gap
        self.queues = {}

    def load_queues(self):
        for q in kubectl_json(self.a.kubectl, "/apis/sluice.dev/v1alpha1/capacityqueues")["items"]:
            name = q["metadata"]["name"]
            if name in self.a.queues:
                spec = q.get("spec", {})
                self.queues[name] = {
                    "quota": cpu_millis(spec.get("quota", {}).get("cpu", "0")),
                    "strict": spec.get("queueingStrategy") == "StrictFIFO",
                }
        missing = set(self.a.queues) - set(self.queues)
        if missing:
            raise RuntimeError(f"CapacityQueues not found: {sorted(missing)}")

    def observe_lease(self, now):
        """The Lease's own renewTime says when its holder last renewed (the auditor runs on the
        same host as the API server: one clock). Judged from it, not from resourceVersion changes
        between samples: a LIST of 10,000 pods takes seconds here, and samples further apart than
        --renew-gap would make every sample look like a gap (the clock would never run)."""
        lease = kubectl_json(self.a.kubectl, f"/apis/coordination.k8s.io/v1/namespaces/{self.a.lease_namespace}/leases/{self.a.lease_name}")
        spec = lease.get("spec", {})
        key = (spec.get("holderIdentity") or "", spec.get("leaseTransitions", 0))
        renewed = rfc3339_seconds(spec.get("renewTime"))
        fresh = bool(key[0]) and renewed is not None and now - renewed <= self.a.renew_gap
        if not fresh:
            self.renewing_since = None  # nobody renews: no leader admits
        elif key != self.lease_key or self.renewing_since is None:
            self.renewing_since = now  # a new holder, or renewals resumed: the clock starts
        self.lease_key = key

    def violation(self, now, what):
        self.violations.append({"at": round(now - self.start, 1), "what": what})
        print(f"chaos_audit: VIOLATION at {now - self.start:.1f}s: {what}", file=sys.stderr, flush=True)

    def sample(self):
        now = time.time()
        try:
            self.observe_lease(now)
            pods = kubectl_json(self.a.kubectl, "/api/v1/pods?labelSelector=" + QUEUE_LABEL)["items"]
        except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
            # The API server restart: no sample, said so.
            self.failed_reads += 1
            print(f"chaos_audit: no sample: {e}", file=sys.stderr, flush=True)
            return None
        self.samples += 1
        by_queue = {q: [] for q in self.queues}
        uids, names, workload_queue = set(), set(), {}
        for p in pods:
            md = p["metadata"]
            if not md["namespace"].startswith(self.a.namespace_prefix):
                continue
            queue = md.get("labels", {}).get(QUEUE_LABEL)
            if queue not in self.queues:
                continue
            uid, name = md["uid"], (md["namespace"], md["name"])
            if uid in uids or name in names:
                self.violation(now, f"pod {name} listed twice")
            uids.add(uid)
            names.add(name)
            wl = (md["namespace"], md.get("labels", {}).get(WORKLOAD_LABEL) or "pod/" + md["name"])
            if workload_queue.setdefault(wl, queue) != queue:
                self.violation(now, f"workload {wl} in two queues: {workload_queue[wl]} and {queue}")
            by_queue[queue].append(p)
        gated_total = holding_total = 0
        with_room = {}
        for queue, qpods in by_queue.items():
            g, h, room = self.check_queue(now, queue, qpods)
            gated_total += g
            holding_total += h
            with_room.update((uid, queue) for uid in room)
        self.update_stranded(now, with_room)
        return {"t": round(now - self.start, 1), "pods": len(uids), "gated": gated_total, "holding": holding_total,
                "leader": bool(self.renewing_since)}

    def check_queue(self, now, queue, pods):
        quota = self.queues[queue]["quota"]
        usage, admitted_priorities = 0, []
        workloads = {}  # (namespace, workload) -> {"all": pods, "admitted": n, "gated": pods}
        for p in pods:
            md = p["metadata"]
            wl = workloads.setdefault(
                (md["namespace"], md.get("labels", {}).get(WORKLOAD_LABEL) or "pod/" + md["name"]),
                {"all": [], "admitted": 0, "gated": []})
            wl["all"].append(p)
            phase = p.get("status", {}).get("phase")
            is_gated = any(g.get("name") == GATE for g in p["spec"].get("schedulingGates", []) or [])
            if phase in ("Succeeded", "Failed"):
                continue
            if not is_gated:
                usage += pod_cpu(p)
                admitted_priorities.append(p["spec"].get("priority", 0))
                wl["admitted"] += 1
            elif not md.get("deletionTimestamp"):
                wl["gated"].append(p)
        if quota > 0:
            self.max_ratio = max(self.max_ratio, usage / quota)
        if usage > quota:
            self.violation(now, f"queue {queue}: admitted pods hold {usage}m cpu, over its quota {quota}m")
        # Gang places: a started gang keeps its minimum; its gated pods fill those places first.
        reserved, demand, with_room = 0, [], set()
        for key, wl in workloads.items():
            m, gated = min_count(wl["all"]), sorted(wl["gated"], key=lambda p: p["metadata"]["creationTimestamp"])
            size = max(pod_cpu(p) for p in wl["all"])
            if wl["admitted"]:
                missing = max(0, m - wl["admitted"])
                reserved += missing * size
                fills, gated = gated[:missing], gated[missing:]
                with_room.update(p["metadata"]["uid"] for p in fills)
                demand += [(key, [p], pod_cpu(p)) for p in gated]  # each on its own
            elif gated:
                # Not started: all or nothing, its whole minimum (places of pods not created yet
                # included); gated pods beyond the minimum wait for it to start.
                head = gated[:m]
                need = sum(pod_cpu(p) for p in head) + max(0, m - len(head)) * size
                demand.append((key, head, need))
        room = self.with_room(queue, quota - usage - reserved, demand, admitted_priorities)
        gated_total = sum(len(wl["gated"]) for wl in workloads.values())
        return gated_total, len(admitted_priorities), with_room | room

    def with_room(self, queue, free, demand, admitted_priorities):
        """The uids of the gated pods the auditor computes room for (see the module's doc).
        demand: (workload, pods, cpu needed) per item: a gang that has not started, or one pod."""
        def order(item):
            pods = item[1]
            return (-max(p["spec"].get("priority", 0) for p in pods),
                    min(p["metadata"]["creationTimestamp"] for p in pods), item[0])
        lowest_admitted = min(admitted_priorities) if admitted_priorities else None
        strict = self.queues[queue]["strict"]
        with_room = set()
        # Items of one priority created in the same second (creationTimestamp's resolution)
        # have no order the auditor can see: it walks them as one step. In a StrictFIFO queue one
        # of them that does not fit may be the head, so none of that step counts as having room.
        steps = {}
        for item in sorted(demand, key=order):
            steps.setdefault(order(item)[:2], []).append(item)
        for (neg_priority, _), step in steps.items():
            fits = []
            blocked = False
            for _, pods, need in step:
                if need <= free:
                    free -= need
                    fits.append(pods)
                else:
                    blocked = True
            if strict and blocked:
                break
            for pods in fits:
                with_room.update(p["metadata"]["uid"] for p in pods)
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
                self.violation(now, f"queue {queue}: pod {uid} gated {waited:.1f}s with room for it under a renewing leader")
                self.room_since[uid] = now  # one violation per stranded stretch

    def run(self):
        self.start = time.time()
        self.load_queues()
        stop = {"now": False}
        signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
        deadline = self.start + self.a.duration if self.a.duration else None
        while not stop["now"] and (deadline is None or time.time() < deadline):
            began = time.time()
            status = self.sample()
            if status is not None and self.a.status:
                with open(self.a.status, "w") as f:
                    json.dump(status, f)
            if self.samples % 10 == 0 and status:
                print(f"chaos_audit: {status}", file=sys.stderr, flush=True)
            time.sleep(max(0.0, self.a.interval - (time.time() - began)))
        summary = {
            "churn_samples": self.samples,
            "failed_reads": self.failed_reads,
            "churn_max_usage_ratio": round(self.max_ratio, 4),
            "churn_longest_stranded_s": round(self.longest_stranded, 1),
            "longest_stranded_pod_uid": self.longest_stranded_pod,
            "violations": self.violations[:100],
            "violation_count": len(self.violations),
        }
        with open(self.a.out, "w") as f:
            json.dump(summary, f, indent=2)
        print(json.dumps({k: v for k, v in summary.items() if k != "violations"}), file=sys.stderr, flush=True)
        return 1 if self.violations else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubectl", default="kubectl")
    p.add_argument("--queues", nargs="+", required=True)
    p.add_argument("--namespace-prefix", required=True)
    p.add_argument("--lease-namespace", default="sluice-system")
    p.add_argument("--lease-name", default="sluice-controller")
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--stranded-limit", type=float, default=10.0)
    p.add_argument("--renew-gap", type=float, default=5.0)
    p.add_argument("--duration", type=float, default=0.0)
    p.add_argument("--status")
    p.add_argument("--out", required=True)
    sys.exit(Auditor(p.parse_args()).run())


if __name__ == "__main__":
    main()
