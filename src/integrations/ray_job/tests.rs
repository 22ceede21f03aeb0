use serde_json::{Value, json};

use super::*;
use crate::integrations::RayClusters;
use crate::integrations::framework::escape;
use crate::integrations::testing::{assert_holds, patched};

fn container(name: &str, cpu: &str) -> Value {
    json!({"name": name, "image": "rayproject/ray:2.41.0", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}})
}

fn rayjob(spec: Value) -> DynamicObject {
    crate::integrations::testing::application("ray.io/v1", "RayJob", "rj", spec)
}

fn cluster_spec() -> Value {
    json!({
        "headGroupSpec": {"template": {"spec": {"containers": [container("ray-head", "2")]}}},
        "workerGroupSpecs": [{"groupName": "workers", "replicas": 3, "minReplicas": 2, "maxReplicas": 4,
                              "template": {"spec": {"containers": [container("ray-worker", "1")]}}}],
    })
}

#[test]
fn one_ledger_for_the_cluster_and_the_submitter() {
    let sets = RayJobs
        .demand(&rayjob(
            json!({"entrypoint": "python x.py", "rayClusterSpec": cluster_spec()}),
        ))
        .expect("demand");
    let names: Vec<(&str, i32, Option<i32>)> = sets
        .iter()
        .map(|s| (s.name.as_str(), s.min_count, s.max_count))
        .collect();
    assert_eq!(
        names,
        [
            ("head", 1, Some(1)),
            ("workers", 2, Some(4)),
            ("submitter", 1, Some(1))
        ]
    );
    // KubeRay's default submitter: 500m, 200Mi.
    assert_eq!(sets[2].requests["cpu"].0, "500m");
    assert_eq!(sets[2].requests["memory"].0, "200Mi");

    // HTTPMode: no submitter pod. SidecarMode: the submitter is a container of the head.
    let http = RayJobs
        .demand(&rayjob(
            json!({"submissionMode": "HTTPMode", "rayClusterSpec": cluster_spec()}),
        ))
        .expect("demand");
    assert_eq!(http.len(), 2);
    let sidecar = RayJobs
        .demand(&rayjob(
            json!({"submissionMode": "SidecarMode", "rayClusterSpec": cluster_spec()}),
        ))
        .expect("demand");
    assert_eq!(sidecar.len(), 2);
    assert_eq!(sidecar[0].requests["cpu"].0, "2500m");

    // A cluster chosen by clusterSelector is that cluster's ledger: the RayJob's is its submitter.
    let selected = RayJobs
        .demand(&rayjob(
            json!({"clusterSelector": {"ray.io/cluster": "shared"}}),
        ))
        .expect("demand");
    assert_eq!(selected.len(), 1);
    assert_eq!(selected[0].name, "submitter");

    // A submitter template of its own is sized as written.
    let own = RayJobs
        .demand(&rayjob(json!({"rayClusterSpec": cluster_spec(), "submitterPodTemplate": {"spec": {"containers": [container("submit", "250m")]}}})))
        .expect("demand");
    assert_eq!(own[2].requests["cpu"].0, "250m");
}

#[test]
fn the_webhook_labels_every_template_and_makes_the_default_submitter_explicit() {
    let app = rayjob(json!({"rayClusterSpec": cluster_spec()}));
    let doc = patched(&app, RayJobs.pods_patch(&app, "q"));
    let queue = format!("/labels/{}", escape(QUEUE_LABEL));
    let job = format!("/labels/{}", escape(RAY_JOB_LABEL));
    for template in [
        "/spec/rayClusterSpec/headGroupSpec/template/metadata",
        "/spec/rayClusterSpec/workerGroupSpecs/0/template/metadata",
        "/spec/submitterPodTemplate/metadata",
    ] {
        let (queue, job) = (format!("{template}{queue}"), format!("{template}{job}"));
        assert_holds(
            &doc,
            &[(queue.as_str(), json!("q")), (job.as_str(), json!("rj"))],
        );
    }
    let image = "/spec/submitterPodTemplate/spec/containers/0/image";
    assert_holds(&doc, &[(image, json!("rayproject/ray:2.41.0"))]);
    // What the patch made is what the demand reads: the same submitter size as KubeRay's default.
    let app: DynamicObject = serde_json::from_value(doc).expect("rayjob");
    assert_eq!(
        RayJobs.demand(&app).expect("demand")[2].requests["cpu"].0,
        "500m"
    );
    // Patched once, nothing more to do.
    assert!(RayJobs.pods_patch(&app, "q").is_empty());
}

#[test]
fn pods_of_the_cluster_and_the_submitter_are_the_rayjobs() {
    let pod =
        |labels: &[(&str, &str)]| crate::integrations::testing::labelled_pod(None, labels, &[]);
    let worker = RayJobs
        .identify_pod(&pod(&[
            (RAY_JOB_LABEL, "rj"),
            (QUEUE_LABEL, "q"),
            (CLUSTER_LABEL, "rj-x7k2p"),
            (NODE_TYPE_LABEL, "worker"),
            (GROUP_LABEL, "workers"),
        ]))
        .expect("worker");
    assert_eq!(worker.workload.as_deref(), Some("rayjob-rj"));
    assert_eq!(worker.pod_set, "workers");
    let submitter = RayJobs
        .identify_pod(&pod(&[
            (RAY_JOB_LABEL, "rj"),
            (QUEUE_LABEL, "q"),
            (JOB_NAME_LABEL, "rj"),
        ]))
        .expect("submitter");
    assert_eq!(submitter.pod_set, "submitter");
    // Neither a Ray pod nor a Job's: not the RayJob's.
    assert_eq!(
        RayJobs.identify_pod(&pod(&[(RAY_JOB_LABEL, "rj"), (QUEUE_LABEL, "q")])),
        None
    );
}

#[test]
fn the_cluster_a_rayjob_creates_has_no_ledger_of_its_own() {
    let mut spec = cluster_spec();
    spec["headGroupSpec"]["template"]["metadata"] = json!({"labels": {RAY_JOB_LABEL: "rj"}});
    let owned: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "rj-x7k2p", "namespace": "ns", "labels": {"sluice.dev/queue": "q"},
                     "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rj", "uid": "u", "controller": true}]},
        "spec": spec,
    }))
    .expect("raycluster");
    assert!(!RayClusters.records_workload(&owned));
    assert!(RayClusters.demand(&owned).is_ok());
    // A RayCluster of its own claiming a RayJob's label is refused, the field named.
    let mut stray = owned.clone();
    stray.metadata.owner_references = None;
    assert!(RayClusters.records_workload(&stray));
    let err = RayClusters
        .demand(&stray)
        .expect_err("claims a RayJob")
        .to_string();
    assert!(
        err.starts_with(
            "spec.headGroupSpec.template.metadata.labels[\"sluice.dev/ray-job\"]: \"rj\""
        ),
        "{err}"
    );
}

#[test]
fn hostile_rayjobs_are_refused_naming_the_field() {
    let err = |app: DynamicObject| RayJobs.demand(&app).expect_err("refused").to_string();
    let mut huge = cluster_spec();
    let group = huge["workerGroupSpecs"][0].clone();
    huge["workerGroupSpecs"] = Value::Array(
        (0..=MAX_WORKER_GROUPS)
            .map(|i| {
                let mut g = group.clone();
                g["groupName"] = json!(format!("g{i}"));
                g
            })
            .collect(),
    );
    assert!(
        err(rayjob(json!({"rayClusterSpec": huge})))
            .starts_with("spec.rayClusterSpec.workerGroupSpecs: 65 worker groups"),
    );
    let mut clash = cluster_spec();
    clash["workerGroupSpecs"][0]["groupName"] = json!("submitter");
    assert!(
        err(rayjob(json!({"rayClusterSpec": clash})))
            .starts_with("spec.rayClusterSpec.workerGroupSpecs[0].groupName: \"submitter\""),
    );
    let mut twice = cluster_spec();
    let first = twice["workerGroupSpecs"][0].clone();
    twice["workerGroupSpecs"] = json!([first.clone(), first]);
    assert!(
        err(rayjob(json!({"rayClusterSpec": twice})))
            .starts_with("spec.rayClusterSpec.workerGroupSpecs[1].groupName: \"workers\" is taken"),
    );
    let mut negative = cluster_spec();
    negative["workerGroupSpecs"][0]["minReplicas"] = json!(-1);
    assert_eq!(
        err(rayjob(json!({"rayClusterSpec": negative}))),
        "spec.rayClusterSpec.workerGroupSpecs[0].minReplicas: must not be negative (-1)"
    );
    assert!(err(rayjob(json!({"entrypoint": "x"}))).starts_with("spec.rayClusterSpec is missing"));
    let mut cpu = json!({"spec": {"containers": [container("submit", "-1")]}});
    cpu["metadata"] = json!({});
    assert!(
        err(rayjob(
            json!({"rayClusterSpec": cluster_spec(), "submitterPodTemplate": cpu})
        ))
        .starts_with("spec.submitterPodTemplate.spec.containers[0].resources.requests.cpu"),
    );
    let mut long = rayjob(json!({"rayClusterSpec": cluster_spec()}));
    long.metadata.name = Some("x".repeat(64));
    assert!(err(long).starts_with("metadata.name: "));
}

#[test]
fn a_rayjob_ends_with_its_deployment_status() {
    let mut app = rayjob(json!({"rayClusterSpec": cluster_spec()}));
    for (status, end) in [
        ("Running", None),
        ("Suspended", None),
        ("Complete", Some(ApplicationEnd::Succeeded)),
        ("Failed", Some(ApplicationEnd::Failed)),
    ] {
        app.data["status"] = json!({"jobDeploymentStatus": status});
        assert_eq!(RayJobs.ended(&app), end, "{status}");
    }
}
