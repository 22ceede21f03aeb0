#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/seed-*): real shapes of what the
API server sends sluice, so libFuzzer starts from inputs that reach deep into the webhooks instead
of from random bytes. hack/fuzz.sh runs it before each run; the corpus the fuzzer grows from these is
kept beside them (fuzz/corpus/) and committed. Each file: one selector byte (even: mutating,
odd: validating webhook; the targets say so) then the AdmissionReview body.

usage: fuzz/seeds/make_seeds.py [OUT_DIR]   (default fuzz/corpus)
"""
import copy
import json
import os
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "corpus")
CONTROLLER = "system:serviceaccount:sluice-system:sluice"


def review(kind, obj, operation="CREATE", old=None, namespace="ns", user="alice", sub=None,
           group="", version="v1", resource=None):
    req = {
        "uid": "0d6b9a7e-5a2f-4c0b-9d3e-1f2a3b4c5d6e",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource or kind.lower() + "s"},
        "namespace": namespace,
        "operation": operation,
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
    }
    if sub:
        req["subResource"] = sub
    if obj is not None and obj.get("metadata", {}).get("name"):
        req["name"] = obj["metadata"]["name"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def pod(labels, cpu="1", memory="1Gi", name="p-1", annotations=None, extra_spec=None, gates=None):
    spec = {"containers": [{"name": "c", "image": "busybox",
                            "resources": {"requests": {"cpu": cpu, "memory": memory},
                                          "limits": {"cpu": cpu, "memory": memory}}}]}
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    spec.update(extra_spec or {})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "labels": labels,
                         "annotations": annotations or {}},
            "spec": spec}


def pod_seeds():
    plain = pod({"sluice.dev/queue": "q"})
    gang = pod({"sluice.dev/queue": "q", "sluice.dev/workload": "g1"},
               annotations={"sluice.dev/min-count": "4"})
    spark = pod({"spark-app-selector": "spark-0a1b", "spark-role": "executor",
                 "sluice.dev/queue": "q"}, cpu="500m", memory="512Mi")
    ray = pod({"ray.io/cluster": "rc", "ray.io/node-type": "worker", "ray.io/group": "cpu",
               "sluice.dev/queue": "q"}, cpu="2", memory="4Gi")
    task = pod({"sluice.dev/task-cluster": "tc", "sluice.dev/queue": "q"})
    token = pod({"sluice.dev/queue": "q"}, cpu="64",
                annotations={"sluice.dev/admitted-at-creation": "t-1"})
    negative = pod({"sluice.dev/queue": "q"}, cpu="-1")
    huge = pod({"sluice.dev/queue": "q"}, cpu="9223372036854775807", memory="1e18Ei")
    podlevel = pod({"sluice.dev/queue": "q"},
                   extra_spec={"resources": {"requests": {"cpu": "3"}}, "overhead": {"cpu": "250m"},
                               "initContainers": [{"name": "i", "image": "x",
                                                   "resources": {"requests": {"cpu": "5"}}}]})
    dra = pod({"sluice.dev/queue": "q"},
              extra_spec={"resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]})
    capped = pod({"sluice.dev/queue": "capped"}, extra_spec={"priority": 1000000})
    default_ns = pod({}, name="d-1")
    gated = pod({"sluice.dev/queue": "q"}, gates=["sluice.dev/admission"])
    ungated = copy.deepcopy(gated)
    ungated["spec"].pop("schedulingGates")
    relabelled = copy.deepcopy(plain)
    relabelled["metadata"]["labels"]["sluice.dev/queue"] = "capped"
    resized = copy.deepcopy(plain)
    resized["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "30"
    seeds = {}
    for name, obj in [("plain", plain), ("gang", gang), ("spark", spark), ("ray", ray),
                      ("task", task), ("token", token), ("negative", negative), ("huge", huge),
                      ("podlevel", podlevel), ("dra", dra), ("capped", capped)]:
        seeds["mutate-" + name] = (0, review("Pod", obj))
        seeds["validate-" + name] = (1, review("Pod", obj))
    seeds["mutate-default-queue"] = (0, review("Pod", default_ns))
    seeds["mutate-plain-namespace"] = (0, review("Pod", plain, namespace="plain"))
    seeds["validate-ungate-by-user"] = (1, review("Pod", ungated, "UPDATE", gated))
    seeds["validate-ungate-by-sluice"] = (1, review("Pod", ungated, "UPDATE", gated, user=CONTROLLER))
    seeds["validate-relabel"] = (1, review("Pod", relabelled, "UPDATE", plain))
    seeds["validate-resize"] = (1, review("Pod", resized, "UPDATE", plain, sub="resize"))
    seeds["validate-token-copied"] = (1, review("Pod", token, "UPDATE", plain))
    seeds["mutate-delete"] = (0, review("Pod", None, "DELETE", plain))
    return seeds


def app_seeds():
    spark = {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
             "metadata": {"name": "pi", "namespace": "ns", "labels": {"sluice.dev/queue": "q"}},
             "spec": {"type": "Scala", "mode": "cluster", "sparkVersion": "4.0.0",
                      "mainClass": "org.apache.spark.examples.SparkPi",
                      "driver": {"cores": 1, "memory": "512m"},
                      "executor": {"cores": 1, "memory": "512m", "instances": 2},
                      "dynamicAllocation": {"enabled": True, "initialExecutors": 1,
                                            "minExecutors": 1, "maxExecutors": 6}}}
    ray = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
           "metadata": {"name": "rc", "namespace": "ns", "labels": {"sluice.dev/queue": "q"}},
           "spec": {"enableInTreeAutoscaling": True,
                    "headGroupSpec": {"template": {"spec": {"containers": [
                        {"name": "head", "image": "ray", "resources": {"requests": {"cpu": "1"}}}]}}},
                    "workerGroupSpecs": [{"groupName": "cpu", "replicas": 1, "minReplicas": 1,
                                          "maxReplicas": 5, "template": {"spec": {"containers": [
                                              {"name": "w", "image": "ray",
                                               "resources": {"requests": {"cpu": "2"}}}]}}}]}}
    task_cluster = {"apiVersion": "sluice.dev/v1alpha1", "kind": "TaskCluster",
                    "metadata": {"name": "tc", "namespace": "ns", "labels": {"sluice.dev/queue": "q"}},
                    "spec": {"replicas": 2, "template": {"spec": {"containers": [
                        {"name": "w", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}}}
    seeds = {}
    for name, obj, group, version, resource in [
        ("spark", spark, "sparkoperator.k8s.io", "v1beta2", "sparkapplications"),
        ("ray", ray, "ray.io", "v1", "rayclusters"),
        ("taskcluster", task_cluster, "sluice.dev", "v1alpha1", "taskclusters"),
    ]:
        kw = dict(group=group, version=version, resource=resource)
        seeds["mutate-" + name] = (0, review(obj["kind"], obj, **kw))
        seeds["validate-" + name] = (1, review(obj["kind"], obj, **kw))
        moved = copy.deepcopy(obj)
        moved["metadata"]["labels"]["sluice.dev/queue"] = "capped"
        seeds["validate-move-" + name] = (1, review(obj["kind"], moved, "UPDATE", obj, **kw))
        unlabelled = copy.deepcopy(obj)
        unlabelled["metadata"]["labels"] = {}
        seeds["mutate-default-" + name] = (0, review(obj["kind"], unlabelled, **kw))
    negative = copy.deepcopy(ray)
    negative["spec"]["workerGroupSpecs"][0]["replicas"] = -3
    negative["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "-2"}}
    seeds["validate-negative-ray"] = (1, review("RayCluster", negative, group="ray.io",
                                                 resource="rayclusters"))
    return seeds


def scavenger_seeds():
    sj = {"apiVersion": "sluice.dev/v1alpha1", "kind": "ScavengerJob",
          "metadata": {"name": "counter", "namespace": "ns"},
          "spec": {"image": "busybox", "command": ["sh", "-c", "true"],
                   "resources": {"requests": {"cpu": "500m", "memory": "64Mi"},
                                 "limits": {"cpu": "500m", "memory": "64Mi"}},
                   "parallelism": 2, "duration": "10m", "runAsUser": 1000, "queueName": "q",
                   "mounts": [{"persistentVolumeClaim": "counter", "mountPath": "/data"},
                              {"configMap": "cfg", "mountPath": "/etc/cfg"},
                              {"secret": "s", "mountPath": "/etc/s"}]}}
    kw = dict(group="sluice.dev", version="v1alpha1", resource="scavengerjobs")
    seeds = {"validate-sj": (0, review("ScavengerJob", sj, **kw))}
    bad = copy.deepcopy(sj)
    bad["spec"]["resources"]["limits"]["cpu"] = "1"
    bad["spec"]["duration"] = "99999999999999d"
    bad["spec"]["parallelism"] = -1
    seeds["validate-sj-bad"] = (0, review("ScavengerJob", bad, **kw))
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "counter-run-1", "namespace": "ns",
                        "labels": {"sluice.dev/scavenger-job": "counter"}},
           "spec": {"template": {"metadata": {"labels": {"sluice.dev/scavenger-job": "counter"}},
                                 "spec": {"priorityClassName": "sluice-scavenger",
                                          "containers": [{"name": "c", "image": "busybox"}]}}}}
    seeds["workloads-job-by-user"] = (1, review("Job", job, group="batch", resource="jobs"))
    seeds["workloads-job-by-sluice"] = (1, review("Job", job, group="batch", resource="jobs",
                                                  user=CONTROLLER))
    p = pod({"sluice.dev/scavenger-job": "counter"}, extra_spec={"priorityClassName": "sluice-scavenger"})
    p["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "counter-run-1",
                                         "uid": "u", "controller": True}]
    seeds["workloads-pod-by-job-controller"] = (1, review(
        "Pod", p, user="system:serviceaccount:kube-system:job-controller"))
    seeds["workloads-pod-forged"] = (1, review("Pod", p))
    return seeds


def quantity_seeds():
    values = ["1", "500m", "1Gi", "1.5", "0.001", "1e3", "1E-3", "12Ki", "-1", "+1", ".5", "5.",
              "9223372036854775807", "1e18Ei", "0e2000000000", "100n", "1u", "123456789012345678901234",
              "1.0000000000000000000001", "Ki", "", " 1", "1 ", "0x10", "1i", "1Eb"]
    return {f"q{i}": v for i, v in enumerate(values)}


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def main():
    for name, (selector, body) in pod_seeds().items():
        write("pod_webhooks", name, bytes([selector]) + json.dumps(body).encode())
    for name, (selector, body) in app_seeds().items():
        write("application_webhooks", name, bytes([selector]) + json.dumps(body).encode())
    for name, (selector, body) in scavenger_seeds().items():
        write("scavenger_webhooks", name, bytes([selector]) + json.dumps(body).encode())
    for name, text in quantity_seeds().items():
        write("quantity", name, text.encode())
    for i, text in enumerate(["500ms", "20s", "5m", "1h", "365d", "3650d", "3651d", "99999999999999d",
                              "18446744073709551615s", "", "5y", "-1s", " 1m "]):
        write("duration", f"d{i}", text.encode())


if __name__ == "__main__":
    main()
