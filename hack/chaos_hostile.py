#!/usr/bin/env python3
"""The hostile tenant of hack/chaos.sh (issue 40): one round of the moves of the quota-hole issues,
made with kubectl as a namespace user would, each judged by what the cluster then holds. No sluice
code: a move is "refused" when the API server answers with an error, "defused" when the object
exists but holds nothing (its pod waits behind sluice's gate, the copy removed), and "escaped" when
it got quota it should not have (the auditor's quota check is the second judge of that). A pod sluice
admitted at creation in the queue its own label names, with room there, is "admitted": charged
where its label says, which the auditor checks.

Moves, in the namespace of queue A (its pods labelled for queue A), with queue B another queue:
  other-ledger   a pod labelled for queue B naming a workload (sluice.dev/workload) that runs in A
  relabel        an admitted pod's sluice.dev/queue changed to queue B
  ungate         a gated pod's scheduling gate removed by the user
  replay         a new pod carrying an admitted pod's sluice.dev/admitted-at-creation token
  absurd-min     a pod whose sluice.dev/min-count is 1,000,000
  negative       a pod asking for -1 cpu
  forged-by      a pod created with sluice.dev/admitted-at and sluice.dev/admitted-by already set

Appends one JSON line per move to --log: {"move", "outcome", "detail"}.
"""
import argparse
import json
import random
import subprocess
import sys
import time


def kubectl(args, *cmd, stdin=None):
    out = subprocess.run([args.kubectl, *cmd], input=stdin, capture_output=True, text=True, timeout=30)
    return out.returncode, (out.stdout + out.stderr).strip()


def pods(args, ns, selector):
    rc, out = kubectl(args, "-n", ns, "get", "pods", "-l", selector, "-o", "json")
    if rc != 0:
        return []
    try:
        return json.loads(out)["items"]
    except ValueError:
        return []


def gated(pod):
    return any(g.get("name") == "sluice.dev/admission" for g in pod.get("spec", {}).get("schedulingGates", []) or [])


def pod_doc(name, queue, labels=None, annotations=None, cpu="100m"):
    return json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"sluice.dev/queue": queue, **(labels or {})},
                     "annotations": {"sluice.dev/kwok-phase": "Succeeded", **(annotations or {})}},
        "spec": {"terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}]},
    })


def create(args, ns, doc, forged=None):
    """refused (the API server said no), or defused / escaped by the pod's state: a pod that waits
    behind sluice's gate is defused; one admitted is defused when sluice admitted it on its own
    merits (the forged annotations replaced by sluice's own), escaped when it runs on the forgery
    or, without one, when nothing should have let it in (`forged` None: any admission escapes)."""
    name = json.loads(doc)["metadata"]["name"]
    rc, out = kubectl(args, "-n", ns, "create", "-f", "-", stdin=doc)
    if rc != 0:
        return "refused", out.splitlines()[-1][:300] if out else ""
    rc, got = kubectl(args, "-n", ns, "get", "pod", name, "-o", "json")
    pod = json.loads(got) if rc == 0 else {}
    kubectl(args, "-n", ns, "delete", "pod", name, "--wait=false")
    if not pod:
        return "defused", "created, gone before it was read"
    if gated(pod):
        return "defused", "created, waiting behind sluice's gate"
    annotations = pod["metadata"].get("annotations") or {}
    sluice_own = {k: v for k, v in annotations.items() if k.startswith("sluice.dev/admitted")}
    if forged is not None and all(annotations.get(k) != v for k, v in forged.items()):
        return "defused", "admitted by sluice on its own (the forged annotations replaced)"
    if forged is None and sluice_own.get("sluice.dev/admitted-by"):
        # Sluice admitted it at creation, charged to the queue its own label names (the auditor
        # judges that queue's quota and that its workload holds quota in one queue only).
        return "admitted", "admitted at creation in its own queue: " + json.dumps(sluice_own)
    return "escaped", "created without sluice's gate: " + json.dumps(sluice_own)


def round_of_moves(args, tag):
    a, b = random.sample(range(len(args.queues)), 2)
    ns, qa, qb = f"{args.namespace_prefix}{a}", args.queues[a], args.queues[b]
    live = [p for p in pods(args, ns, "sluice.dev/workload") if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
    admitted = [p for p in live if not gated(p)]
    waiting = [p for p in live if gated(p)]
    moves = []
    if live:
        workload = live[0]["metadata"]["labels"]["sluice.dev/workload"]
        moves.append(("other-ledger", *create(args, ns, pod_doc(f"hostile-{tag}-ledger", qb, {"sluice.dev/workload": workload}))))
    if admitted:
        name = admitted[0]["metadata"]["name"]
        rc, out = kubectl(args, "-n", ns, "label", "pod", name, f"sluice.dev/queue={qb}", "--overwrite")
        moves.append(("relabel", "refused" if rc != 0 else "escaped", out.splitlines()[-1][:300] if out else ""))
        token = (admitted[0]["metadata"].get("annotations") or {}).get("sluice.dev/admitted-at-creation")
        if token:
            forged = {"sluice.dev/admitted-at-creation": token}
            moves.append(("replay", *create(args, ns, pod_doc(f"hostile-{tag}-replay", qa, annotations=forged), forged)))
    if waiting:
        name = waiting[0]["metadata"]["name"]
        rc, out = kubectl(args, "-n", ns, "patch", "pod", name, "--type", "json", "-p",
                          json.dumps([{"op": "remove", "path": "/spec/schedulingGates"}]))
        moves.append(("ungate", "refused" if rc != 0 else "escaped", out.splitlines()[-1][:300] if out else ""))
    moves.append(("absurd-min", *create(args, ns, pod_doc(f"hostile-{tag}-min", qa, annotations={"sluice.dev/min-count": "1000000"}))))
    moves.append(("negative", *create(args, ns, pod_doc(f"hostile-{tag}-neg", qa, cpu="-1"))))
    forged = {"sluice.dev/admitted-at": "2026-01-01T00:00:00Z", "sluice.dev/admitted-by": "me@0"}
    moves.append(("forged-by", *create(args, ns, pod_doc(f"hostile-{tag}-forged", qa, annotations=forged), forged)))
    with open(args.log, "a") as f:
        for move, outcome, detail in moves:
            f.write(json.dumps({"at": time.time(), "move": move, "outcome": outcome, "queue": qa, "detail": detail}) + "\n")
    return moves


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubectl", default="kubectl")
    p.add_argument("--queues", nargs="+", required=True, help="the queues; queue i's namespace is <prefix><i>")
    p.add_argument("--namespace-prefix", required=True)
    p.add_argument("--tag", required=True, help="names this round's pods")
    p.add_argument("--log", required=True)
    args = p.parse_args()
    if len(args.queues) < 2:
        sys.exit("chaos_hostile.py: needs two queues at least")
    for move, outcome, _ in round_of_moves(args, args.tag):
        print(f"{move}: {outcome}", file=sys.stderr)


if __name__ == "__main__":
    main()
