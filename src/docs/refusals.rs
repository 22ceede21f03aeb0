//! The refusals reference: each case below is a request a user could send (an AdmissionReview as
//! the API server would send it), answered by the real webhooks as `sluice serve` builds them
//! ([`crate::serve::webhook_routes`]) over fixture queues and namespaces. The message on the page
//! is the one the webhook gave; the cause and the fix are written beside the case. A case the
//! webhooks let through fails the generator, so the page cannot describe a refusal that is gone.

use std::sync::Arc;

use anyhow::{Context, bail};
use axum::body::Body;
use axum::http::{Request, header};
use http_body_util::BodyExt;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::cell;

/// sluice's own identity in the fixtures (the only user who may remove the gate).
const CONTROLLER: &str = "system:serviceaccount:sluice-system:sluice";

/// One refusal: what is sent, why it is refused, what to do.
struct Case {
    title: &'static str,
    path: &'static str,
    review: Value,
    cause: &'static str,
    fix: &'static str,
}

/// The page: each case's message as the webhook gave it.
pub(super) fn page() -> anyhow::Result<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting a runtime for the webhooks")?;
    let mut out = String::from(
        "# Refusals\n\nWhat sluice's admission webhooks refuse, with the message the API server \
         passes on to `kubectl` (after `admission webhook \"...\" denied the request:`), its cause \
         and the fix. Each message here was produced by running the real webhooks on the request \
         described, with a queue `q` (8 cpu, 16Gi), a queue `capped` (2 cpu, `maxPriority: 10`), a \
         queue `team-only` (admitting namespaces labelled `team: a`) and a namespace `ns`; names \
         and numbers in your messages will be yours.\n\n",
    );
    let mut current_group = "";
    for (group, case) in cases() {
        if group != current_group {
            out.push_str(&format!("## {group}\n\n"));
            current_group = group;
        }
        let message = runtime
            .block_on(refusal(case.path, &case.review))
            .with_context(|| format!("the case \"{}\"", case.title))?;
        out.push_str(&format!(
            "### {}\n\n```text\n{}\n```\n\n| | |\n|---|---|\n| cause | {} |\n| fix | {} |\n\n",
            case.title,
            message.trim(),
            cell(case.cause),
            cell(case.fix)
        ));
    }
    Ok(out)
}

/// The message of the webhook at `path` refusing `review`, or an error if it was allowed.
async fn refusal(path: &str, review: &Value) -> anyhow::Result<String> {
    let request = Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(serde_json::to_vec(review)?))?;
    let response = routes()?.oneshot(request).await?;
    let body = response.into_body().collect().await?.to_bytes();
    let answer: Value = serde_json::from_slice(&body)?;
    let response = &answer["response"];
    if response["allowed"] != false {
        bail!("the webhook {path} allowed it: the refusal is gone, update src/docs/refusals.rs");
    }
    Ok(response["status"]["message"]
        .as_str()
        .unwrap_or("(no message)")
        .to_string())
}

/// Every webhook `sluice serve` serves, over the fixture queues and namespaces.
fn routes() -> anyhow::Result<axum::Router> {
    let (queues, mut writer) = reflector::store::<crate::api::CapacityQueue>();
    for queue in [
        json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue", "metadata": {"name": "q"},
            "spec": {"quota": {"cpu": "8", "memory": "16Gi"}}}),
        json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue", "metadata": {"name": "capped"},
            "spec": {"quota": {"cpu": "2"}, "preemption": {"maxPriority": 10}}}),
        json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue", "metadata": {"name": "team-only"},
            "spec": {"quota": {"cpu": "8"}, "namespaceSelector": {"matchLabels": {"team": "a"}}}}),
    ] {
        let queue: crate::api::CapacityQueue = serde_json::from_value(queue)?;
        writer.apply_watcher_event(&Event::Apply(queue));
    }
    let (namespaces, mut ns_writer) =
        reflector::store::<kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Namespace>>();
    for name in ["ns", "other"] {
        let mut meta =
            kube::core::PartialObjectMeta::<k8s_openapi::api::core::v1::Namespace>::default();
        meta.metadata.name = Some(name.to_string());
        ns_writer.apply_watcher_event(&Event::Apply(meta));
    }
    let inputs = crate::serve::WebhookInputs {
        queues,
        namespaces: crate::namespaces::Namespaces::from_store(namespaces),
        at_creation: Arc::new(crate::queue::at_creation::AdmitAtCreation::default()),
        mounts: crate::scavenger::mounts::Mounts::none(),
        ledgers: Default::default(),
    };
    Ok(crate::serve::webhook_routes(&inputs, CONTROLLER).router())
}

/// An AdmissionReview as the API server sends it.
fn review(
    resource: (&str, &str, &str, &str),
    operation: &str,
    object: Value,
    old: Value,
    user: &str,
) -> Value {
    let (group, version, kind, plural) = resource;
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "0d6b9a7e-5a2f-4c0b-9d3e-1f2a3b4c5d6e",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": plural},
        "namespace": "ns", "name": object["metadata"]["name"].clone(),
        "operation": operation,
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        "object": object, "oldObject": old, "dryRun": false}})
}

const POD: (&str, &str, &str, &str) = ("", "v1", "Pod", "pods");
const SPARK: (&str, &str, &str, &str) = (
    "sparkoperator.k8s.io",
    "v1beta2",
    "SparkApplication",
    "sparkapplications",
);
const RAY: (&str, &str, &str, &str) = ("ray.io", "v1", "RayCluster", "rayclusters");
const SCAVENGER: (&str, &str, &str, &str) =
    ("sluice.dev", "v1alpha1", "ScavengerJob", "scavengerjobs");
const JOB: (&str, &str, &str, &str) = ("batch", "v1", "Job", "jobs");
const RAY_JOB: (&str, &str, &str, &str) = ("ray.io", "v1", "RayJob", "rayjobs");

fn job(change: impl FnOnce(&mut Value)) -> Value {
    let mut job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "hello", "namespace": "ns", "labels": {"sluice.dev/queue": "q"}},
        "spec": {"parallelism": 2, "completions": 4, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox",
                "resources": {"requests": {"cpu": "500m"}}}]}}}});
    change(&mut job);
    job
}

fn pod(queue: &str, cpu: &str, extra_spec: Value) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p-1", "namespace": "ns", "labels": {"sluice.dev/queue": queue}},
        "spec": {"containers": [{"name": "c", "image": "busybox",
            "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}});
    if let (Some(spec), Some(extra)) = (pod["spec"].as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    pod
}

fn spark(queue: &str, executors: i64) -> Value {
    json!({"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
        "metadata": {"name": "pi", "namespace": "ns", "labels": {"sluice.dev/queue": queue}},
        "spec": {"type": "Scala", "mode": "cluster", "sparkVersion": "4.0.0",
            "mainClass": "org.apache.spark.examples.SparkPi",
            "driver": {"cores": 1, "memory": "512m"},
            "executor": {"cores": 1, "memory": "512m", "instances": executors}}})
}

fn ray_cluster(cpu: &str, replicas: i64) -> Value {
    json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "rc", "namespace": "ns", "labels": {"sluice.dev/queue": "q"}},
        "spec": {"headGroupSpec": {"template": {"spec": {"containers": [
                {"name": "head", "image": "ray", "resources": {"requests": {"cpu": "1"}}}]}}},
            "workerGroupSpecs": [{"groupName": "cpu", "replicas": replicas, "minReplicas": replicas,
                "maxReplicas": 5, "template": {"spec": {"containers": [
                    {"name": "w", "image": "ray", "resources": {"requests": {"cpu": cpu}}}]}}}]}})
}

fn ray_job_with_group(group: &str) -> Value {
    json!({"apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": {"name": "rj", "namespace": "ns", "labels": {"sluice.dev/queue": "q"}},
        "spec": {"entrypoint": "python -c 1", "rayClusterSpec": {
            "headGroupSpec": {"template": {"spec": {"containers": [
                {"name": "head", "image": "ray", "resources": {"requests": {"cpu": "1"}}}]}}},
            "workerGroupSpecs": [{"groupName": group, "replicas": 1, "minReplicas": 1,
                "maxReplicas": 1, "template": {"spec": {"containers": [
                    {"name": "w", "image": "ray", "resources": {"requests": {"cpu": "1"}}}]}}}]}}})
}

fn scavenger(change: impl FnOnce(&mut Value)) -> Value {
    let mut sj = json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "ScavengerJob",
        "metadata": {"name": "counter", "namespace": "ns"},
        "spec": {"image": "busybox", "command": ["sh", "-c", "true"],
            "resources": {"requests": {"cpu": "500m", "memory": "64Mi"},
                "limits": {"cpu": "500m", "memory": "64Mi"}},
            "parallelism": 1, "duration": "10m"}});
    change(&mut sj["spec"]);
    sj
}

// Long: a table of cases, one entry each, read top to bottom.
fn cases() -> Vec<(&'static str, Case)> {
    let gated = pod(
        "q",
        "1",
        json!({"schedulingGates": [{"name": "sluice.dev/admission"}]}),
    );
    let ungated = pod("q", "1", json!({}));
    let mut relabelled = ungated.clone();
    relabelled["metadata"]["labels"]["sluice.dev/queue"] = json!("capped");
    let mut grown = ungated.clone();
    grown["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("4");
    let mut moved = spark("q", 1);
    moved["metadata"]["labels"]["sluice.dev/queue"] = json!("capped");
    let scavenger_job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "counter-run-1", "namespace": "ns",
            "labels": {"sluice.dev/scavenger-job": "counter"}},
        "spec": {"template": {"metadata": {"labels": {"sluice.dev/scavenger-job": "counter"}},
            "spec": {"priorityClassName": "sluice-scavenger",
                "containers": [{"name": "c", "image": "busybox"}]}}}});
    vec![
        (
            "Pods",
            Case {
                title: "Removing the gate yourself",
                path: "/validate-pods",
                review: review(POD, "UPDATE", ungated.clone(), gated, "alice"),
                cause: "A user (not sluice's controller) removed the scheduling gate `sluice.dev/admission` of a governed pod that waits for quota.",
                fix: "Wait: sluice removes the gate when the queue has room. See why it waits with `kubectl get dynamicworkloads -n <namespace>` or `sluice queue <queue>`.",
            },
        ),
        (
            "Pods",
            Case {
                title: "Changing a sluice label",
                path: "/validate-pods",
                review: review(POD, "UPDATE", relabelled, ungated.clone(), "alice"),
                cause: "A user added, changed or removed a `sluice.dev/*` label (here the queue) of a governed pod: the labels say which queue and workload the pod counts in.",
                fix: "Delete the pod and create it again with the labels you want.",
            },
        ),
        (
            "Pods",
            Case {
                title: "Changing an admission annotation",
                path: "/validate-pods",
                review: {
                    let mut noted = ungated.clone();
                    noted["metadata"]["annotations"] =
                        json!({"sluice.dev/admitted-at-creation": "t-1"});
                    review(POD, "UPDATE", noted, ungated.clone(), "alice")
                },
                cause: "A user set or changed `sluice.dev/admitted-at-creation`, `sluice.dev/admitted-at`, `sluice.dev/admitted-by`, `sluice.dev/flavor`, `sluice.dev/topology-domain` or `sluice.dev/data-nodes`: they record how, when, by which leadership term, in which flavor, in which topology domain and beside which data nodes sluice admitted the pod.",
                fix: "Leave them to sluice; a pod created with a copied token is gated, not admitted.",
            },
        ),
        (
            "Pods",
            Case {
                title: "A topology ask that names no label key",
                path: "/mutate-pods",
                review: {
                    let mut asking = pod("q", "1", json!({}));
                    asking["metadata"]["annotations"] =
                        json!({"sluice.dev/topology-required": "rack name"});
                    review(POD, "CREATE", asking, Value::Null, "alice")
                },
                cause: "`sluice.dev/topology-required` or `sluice.dev/topology-preferred` holds something that is not a node label key, so no domain could ever be chosen.",
                fix: "Set it to the node label whose values are the domains, e.g. `topology.kubernetes.io/zone`, a rack label or `kubernetes.io/hostname` (see [Placement](../concepts/placement.md)).",
            },
        ),
        (
            "Pods",
            Case {
                title: "A data locality ask that says nowhere",
                path: "/mutate-pods",
                review: {
                    let mut asking = pod("q", "1", json!({}));
                    asking["metadata"]["annotations"] =
                        json!({"sluice.dev/data-pods": "app in (cache"});
                    review(POD, "CREATE", asking, Value::Null, "alice")
                },
                cause: "`sluice.dev/data-pods` is not a label selector, `sluice.dev/data-claim` is not a claim name, both are set, or `sluice.dev/data-locality` is neither `required` nor `preferred` (or is set alone).",
                fix: "Set `sluice.dev/data-pods` to the labels of the pods in the same namespace whose nodes hold the data (e.g. `app=cache`), or `sluice.dev/data-claim` to a claim of the namespace whose volume has node affinity (see [Placement](../concepts/placement.md#data-locality)).",
            },
        ),
        (
            "Pods",
            Case {
                title: "A negative request",
                path: "/mutate-pods",
                review: review(
                    POD,
                    "CREATE",
                    pod("q", "-1", json!({})),
                    Value::Null,
                    "alice",
                ),
                cause: "A container asks for a negative amount of a resource (or an amount that does not parse as a Kubernetes quantity, or that overflows).",
                fix: "Give requests and limits as non-negative quantities (`500m`, `2`, `1Gi`).",
            },
        ),
        (
            "Pods",
            Case {
                title: "Devices through dynamic resource allocation",
                path: "/mutate-pods",
                review: review(
                    POD,
                    "CREATE",
                    pod(
                        "q",
                        "1",
                        json!({"resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]}),
                    ),
                    Value::Null,
                    "alice",
                ),
                cause: "A governed pod claims devices through `spec.resourceClaims`: sluice cannot count DRA claims against a quota yet.",
                fix: "Request the device as an extended resource (`nvidia.com/gpu: 1`) in the container's resources, or run the pod outside sluice's queues.",
            },
        ),
        (
            "Pods",
            Case {
                title: "A priority above the queue's cap",
                path: "/mutate-pods",
                review: review(
                    POD,
                    "CREATE",
                    pod(
                        "capped",
                        "1",
                        json!({"priority": 1000, "priorityClassName": "high"}),
                    ),
                    Value::Null,
                    "alice",
                ),
                cause: "The pod's priority (from its PriorityClass) is above the queue's `spec.preemption.maxPriority`.",
                fix: "Use a PriorityClass at or below the cap, or ask the queue's owner to raise `maxPriority`.",
            },
        ),
        (
            "Pods",
            Case {
                title: "Growing an admitted pod in place",
                path: "/validate-pods",
                review: {
                    let mut r = review(POD, "UPDATE", grown, ungated.clone(), "alice");
                    r["request"]["subResource"] = json!("resize");
                    r
                },
                cause: "An in-place resize (`pods/resize`) asks for more than the pod was admitted with (or, still gated, than a pass may have admitted it at): the queue's quota was checked for the old size.",
                fix: "Shrinking is allowed; to grow, create a bigger pod: it waits for room like any other.",
            },
        ),
        (
            "Pods",
            Case {
                title: "Moving a pod to another workload or gang",
                path: "/validate-pods",
                review: {
                    let mut grown_gang = ungated.clone();
                    grown_gang["metadata"]["annotations"] =
                        json!({"sluice.dev/min-count": "100000"});
                    review(POD, "UPDATE", grown_gang, ungated.clone(), "alice")
                },
                cause: "A user changed a label an integration joins pods by (`ray.io/cluster`, `spark-app-selector`, a Job's labels...) or an annotation a gang is read from (`sluice.dev/min-count`, `sluice.dev/job-gang`) on a governed pod: it would move what the pod holds into another ledger or grow its gang with no fit check.",
                fix: "Create a new pod with the labels and annotations you want.",
            },
        ),
        (
            "Pods",
            Case {
                title: "A pod that could never fit",
                path: "/mutate-pods",
                review: review(
                    POD,
                    "CREATE",
                    pod("q", "9", json!({})),
                    Value::Null,
                    "alice",
                ),
                cause: "The pod (times its gang, `sluice.dev/min-count`) asks for more than its queue could ever give: its quota, plus what its cohort can lend it up to its borrowing limit. Left waiting it would wait for ever, and block a StrictFIFO queue.",
                fix: "Lower its requests or its minimum, or ask for a larger quota (or a cohort that can lend).",
            },
        ),
        (
            "Applications",
            Case {
                title: "A queue that does not exist",
                path: "/validate-applications",
                review: review(SPARK, "CREATE", spark("nope", 1), Value::Null, "alice"),
                cause: "The application's `sluice.dev/queue` label names a CapacityQueue that does not exist.",
                fix: "Fix the label (`kubectl get capacityqueues` lists the queues), or ask an administrator to create the queue.",
            },
        ),
        (
            "Applications",
            Case {
                title: "A queue that does not admit the namespace",
                path: "/validate-applications",
                review: review(SPARK, "CREATE", spark("team-only", 1), Value::Null, "alice"),
                cause: "The queue's `spec.namespaceSelector` does not select the application's namespace.",
                fix: "Use a queue open to your namespace, or ask for the namespace to be labelled as the queue's selector says.",
            },
        ),
        (
            "Applications",
            Case {
                title: "A gang that could never fit",
                path: "/validate-applications",
                review: review(SPARK, "CREATE", spark("q", 20), Value::Null, "alice"),
                cause: "The application's minimum (the gang: a Spark driver and its minimum executors, a Ray head and each group's minimum workers, a Job's parallelism) asks for more than the queue could ever give (its quota, plus what its cohort can lend it up to its borrowing limit): it would wait for ever.",
                fix: "Lower the minimum (Spark `dynamicAllocation.minExecutors` or `executor.instances`, Ray `minReplicas`, Job `parallelism` or `sluice.dev/min-count`), or use a bigger queue.",
            },
        ),
        (
            "Applications",
            Case {
                title: "Moving an application to another queue",
                path: "/validate-applications",
                review: review(SPARK, "UPDATE", moved, spark("q", 1), "alice"),
                cause: "The `sluice.dev/queue` label of an application was changed or removed: its pods already count in the first queue.",
                fix: "Delete the application and submit it again with the new label.",
            },
        ),
        (
            "Applications",
            Case {
                title: "A negative amount in a template",
                path: "/validate-applications",
                review: review(RAY, "CREATE", ray_cluster("-2", 1), Value::Null, "alice"),
                cause: "A pod template of the application asks for a negative, unparsable or overflowing amount (or negative replicas, executors or hosts).",
                fix: "Fix the field the message names.",
            },
        ),
        (
            "Applications",
            Case {
                title: "A Job's gang that is not a number",
                path: "/validate-applications",
                review: review(
                    JOB,
                    "CREATE",
                    job(|j| j["metadata"]["annotations"] = json!({"sluice.dev/min-count": "many"})),
                    Value::Null,
                    "alice",
                ),
                cause: "The annotation `sluice.dev/min-count` (the gang) of a Job, or of its template, is not a whole number.",
                fix: "Write the gang's size as a number (`\"2\"`), at most `parallelism`.",
            },
        ),
        (
            "Applications",
            Case {
                title: "A Job that claims to be a RayJob's submitter",
                path: "/validate-applications",
                review: review(
                    JOB,
                    "CREATE",
                    job(|j| {
                        j["spec"]["template"]["metadata"] =
                            json!({"labels": {"sluice.dev/ray-job": "other"}})
                    }),
                    Value::Null,
                    "alice",
                ),
                cause: "A Job's template carries `sluice.dev/ray-job`, the label by which a RayJob's pods are counted in its ledger.",
                fix: "Remove the label: only KubeRay's submitter Job of that RayJob carries it (sluice puts it there).",
            },
        ),
        (
            "Applications",
            Case {
                title: "A RayJob worker group named submitter",
                path: "/validate-applications",
                review: review(
                    RAY_JOB,
                    "CREATE",
                    ray_job_with_group("submitter"),
                    Value::Null,
                    "alice",
                ),
                cause: "`submitter` is the pod set of a RayJob's submitter pod in its DynamicWorkload; a worker group of that name would be counted as it. (A RayJob with more than 64 worker groups, or whose name is not a label value, is refused the same way, naming the field.)",
                fix: "Name the worker group otherwise.",
            },
        ),
        (
            "ScavengerJobs",
            Case {
                title: "Requests that differ from limits",
                path: "/validate-scavengerjobs",
                review: review(
                    SCAVENGER,
                    "CREATE",
                    scavenger(|s| s["resources"]["limits"]["cpu"] = json!("1")),
                    Value::Null,
                    "alice",
                ),
                cause: "A ScavengerJob's pods are Guaranteed: its `resources.requests` must equal `resources.limits`.",
                fix: "Give the same cpu and memory in both.",
            },
        ),
        (
            "ScavengerJobs",
            Case {
                title: "A duration that is not one",
                path: "/validate-scavengerjobs",
                review: review(
                    SCAVENGER,
                    "CREATE",
                    scavenger(|s| s["duration"] = json!("soon")),
                    Value::Null,
                    "alice",
                ),
                cause: "`spec.duration` is not a duration (`30s`, `30m`, `2h`, `1d`), is 0, or is more than a year.",
                fix: "Write a duration up to `365d`; the job should checkpoint more often than this.",
            },
        ),
        (
            "ScavengerJobs",
            Case {
                title: "A relative mount path",
                path: "/validate-scavengerjobs",
                review: review(
                    SCAVENGER,
                    "CREATE",
                    scavenger(|s| {
                        s["mounts"] =
                            json!([{"persistentVolumeClaim": "counter", "mountPath": "data"}])
                    }),
                    Value::Null,
                    "alice",
                ),
                cause: "A mount's `mountPath` is relative, repeated, or the mount names no source or several (`persistentVolumeClaim`, `configMap`, `secret`).",
                fix: "Give each mount exactly one source and an absolute, distinct `mountPath`.",
            },
        ),
        (
            "ScavengerJobs",
            Case {
                title: "A queue without scavenger quota",
                path: "/validate-scavengerjobs",
                review: review(
                    SCAVENGER,
                    "CREATE",
                    scavenger(|s| s["queueName"] = json!("q")),
                    Value::Null,
                    "alice",
                ),
                cause: "`spec.queueName` names a queue that does not exist or has no `spec.scavengerQuota`: such a queue runs no ScavengerJobs.",
                fix: "Leave `queueName` out (the cluster's idle capacity only), or ask for a `scavengerQuota` on the queue.",
            },
        ),
        (
            "ScavengerJobs",
            Case {
                title: "A Job that claims to be a ScavengerJob's",
                path: "/validate-scavenger-workloads",
                review: review(JOB, "CREATE", scavenger_job, Value::Null, "alice"),
                cause: "Only sluice creates Jobs labelled `sluice.dev/scavenger-job` or using the `sluice-scavenger` PriorityClass (and only the Job controller their pods): anyone else would get scavenger capacity outside a ScavengerJob.",
                fix: "Create a ScavengerJob; sluice creates its Job.",
            },
        ),
        (
            "ScavengerJobs",
            Case {
                title: "A pod that claims to be a ScavengerJob's",
                path: "/validate-scavenger-workloads",
                review: {
                    let mut forged = pod(
                        "q",
                        "500m",
                        json!({"priorityClassName": "sluice-scavenger"}),
                    );
                    forged["metadata"]["labels"] = json!({"sluice.dev/scavenger-job": "counter"});
                    review(POD, "CREATE", forged, Value::Null, "alice")
                },
                cause: "A pod labelled `sluice.dev/scavenger-job` or using the `sluice-scavenger` PriorityClass, not created by the Job controller for a ScavengerJob's Job.",
                fix: "Create a ScavengerJob.",
            },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_is_refused_with_a_message() {
        let page = page().expect("every case refused");
        assert_eq!(page.matches("\n### ").count(), cases().len());
        assert!(!page.contains("(no message)"), "{page}");
    }
}
