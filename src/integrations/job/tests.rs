use super::*;
use crate::integrations::testing::{assert_holds, patched};
use serde_json::{Value, json};

fn job(spec: Value) -> DynamicObject {
    crate::integrations::testing::application("batch/v1", "Job", "etl", spec)
}

fn template(cpu: &str) -> Value {
    json!({"spec": {"restartPolicy": "Never", "containers": [{"name": "w", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}]}})
}

fn submitted(spec: Value) -> DynamicObject {
    let app = job(spec);
    let doc = patched(&app, Jobs.pods_patch(&app, "q"));
    serde_json::from_value(doc).expect("job")
}

#[test]
fn the_gang_is_parallelism_or_completions_if_fewer_and_never_more_than_is_left() {
    assert_eq!(
        job_counts(Some(4), Some(10), 0, None),
        JobCounts { gang: 4, max: 4 }
    );
    assert_eq!(
        job_counts(Some(4), Some(2), 0, None),
        JobCounts { gang: 2, max: 2 }
    );
    // Defaults: parallelism 1; a work queue (no completions) runs parallelism pods.
    assert_eq!(
        job_counts(None, None, 0, None),
        JobCounts { gang: 1, max: 1 }
    );
    assert_eq!(
        job_counts(Some(3), None, 0, None),
        JobCounts { gang: 3, max: 3 }
    );
    // 8 of 10 done: two pods left to run, the gang shrinks with them.
    assert_eq!(
        job_counts(Some(4), Some(10), 8, None),
        JobCounts { gang: 2, max: 2 }
    );
    // The gang fixed at submission: parallelism raised later adds elastic pods only.
    assert_eq!(
        job_counts(Some(6), None, 0, Some(2)),
        JobCounts { gang: 2, max: 6 }
    );
    // ... and lowered, the gang follows it down.
    assert_eq!(
        job_counts(Some(1), None, 0, Some(2)),
        JobCounts { gang: 1, max: 1 }
    );
    // Hostile status: more succeeded than completions, or negative.
    assert_eq!(
        job_counts(Some(4), Some(10), i64::MAX, None),
        JobCounts { gang: 0, max: 0 }
    );
    assert_eq!(
        job_counts(Some(4), Some(10), -5, None),
        JobCounts { gang: 4, max: 4 }
    );
    assert_eq!(
        job_counts(Some(4), Some(i64::MIN), 3, None),
        JobCounts { gang: 0, max: 0 }
    );
}

#[test]
fn submission_writes_the_queue_and_the_gang_into_the_template_once() {
    let app = submitted(json!({"parallelism": 3, "completions": 2, "template": template("1")}));
    let doc = serde_json::to_value(&app).expect("json");
    assert_holds(
        &doc,
        &[
            (
                "/spec/template/metadata/labels/sluice.dev~1queue",
                json!("q"),
            ),
            (
                "/spec/template/metadata/annotations/sluice.dev~1job-gang",
                json!("2"),
            ),
        ],
    );
    let sets = Jobs.demand(&app).expect("demand");
    assert_eq!(sets.len(), 1);
    assert_eq!(
        (sets[0].name.as_str(), sets[0].min_count, sets[0].max_count),
        ("main", 2, Some(2))
    );
    assert_eq!(sets[0].requests["cpu"].0, "1");
    // Once written, nothing more to patch.
    assert!(Jobs.pods_patch(&app, "q").is_empty());

    // Raised parallelism (the template, immutable once running, keeps the gang): elastic.
    let mut grown = app.clone();
    grown.data["spec"]["parallelism"] = json!(6);
    grown.data["spec"]["completions"] = Value::Null;
    let sets = Jobs.demand(&grown).expect("demand");
    assert_eq!((sets[0].min_count, sets[0].max_count), (2, Some(6)));
}

#[test]
fn min_count_on_the_job_makes_the_gang_smaller_never_larger() {
    let mut app = job(json!({"parallelism": 4, "template": template("1")}));
    app.metadata.annotations = Some([(MIN_COUNT_ANNOTATION.to_string(), "1".to_string())].into());
    let doc = patched(&app, Jobs.pods_patch(&app, "q"));
    assert_eq!(
        doc.pointer("/spec/template/metadata/annotations/sluice.dev~1job-gang"),
        Some(&json!("1"))
    );
    let app: DynamicObject = serde_json::from_value(doc).expect("job");
    let sets = Jobs.demand(&app).expect("demand");
    assert_eq!((sets[0].min_count, sets[0].max_count), (1, Some(4)));

    let mut large = job(json!({"parallelism": 2, "template": template("1")}));
    large.metadata.annotations =
        Some([(MIN_COUNT_ANNOTATION.to_string(), "50".to_string())].into());
    let large: DynamicObject =
        serde_json::from_value(patched(&large, Jobs.pods_patch(&large, "q"))).expect("job");
    assert_eq!(Jobs.demand(&large).expect("demand")[0].min_count, 2);
}

#[test]
fn hostile_counts_and_annotations_are_refused_naming_the_field() {
    let err = |spec: Value| Jobs.demand(&job(spec)).expect_err("refused").to_string();
    assert_eq!(
        err(json!({"parallelism": -3, "template": template("1")})),
        "spec.parallelism: must not be negative (-3)"
    );
    assert_eq!(
        err(json!({"completions": 1.5, "template": template("1")})),
        "spec.completions: must be a whole number, not 1.5"
    );
    assert!(
        err(json!({"template": template("-1")}))
            .starts_with("spec.template.spec.containers[0].resources.requests.cpu"),
    );
    let overflow =
        err(json!({"parallelism": i64::from(i32::MAX), "template": template("9223372036854775m")}));
    assert!(
        overflow.starts_with("spec.parallelism: ") && overflow.contains("than sluice can count"),
        "{overflow}"
    );
    let mut t = template("1");
    t["metadata"] = json!({"annotations": {JOB_GANG_ANNOTATION: "-1"}});
    assert!(err(json!({"template": t})).starts_with(
        "spec.template.metadata.annotations[\"sluice.dev/job-gang\"]: \"-1\" is not a whole number"
    ));
    let mut app = job(json!({"template": template("1")}));
    app.metadata.annotations =
        Some([(MIN_COUNT_ANNOTATION.to_string(), "many".to_string())].into());
    let refused = Jobs.demand(&app).expect_err("refused").to_string();
    assert!(
        refused.starts_with("metadata.annotations[\"sluice.dev/min-count\"]: \"many\""),
        "{refused}"
    );
    // A template claiming a RayJob's label would put its pods in that RayJob's ledger.
    let mut t = template("1");
    t["metadata"] = json!({"labels": {RAY_JOB_LABEL: "victim"}});
    assert!(
        err(json!({"template": t}))
            .starts_with("spec.template.metadata.labels[\"sluice.dev/ray-job\"]: \"victim\""),
    );
    // The mutation never fails on hostile counts: it writes no gang, the validator refuses.
    let app = job(json!({"parallelism": -3, "template": template("1")}));
    let ops = Jobs.pods_patch(&app, "q");
    assert_eq!(ops.len(), 1, "{ops:?}");
    // A spec that is not an object reads as empty; the template's absence is refused.
    let app = job(json!("nonsense"));
    assert!(Jobs.demand(&app).is_err());
}

#[test]
fn pods_are_the_jobs_only_when_sluice_marked_its_template() {
    let pod = |labels: &[(&str, &str)], annotations: &[(&str, &str)]| {
        crate::integrations::testing::labelled_pod(Some("etl-abcde"), labels, annotations)
    };
    let id = Jobs
        .identify_pod(&pod(
            &[(JOB_NAME_LABEL, "etl"), (QUEUE_LABEL, "q")],
            &[(JOB_GANG_ANNOTATION, "2")],
        ))
        .expect("a Job's pod");
    assert_eq!(id.workload.as_deref(), Some("job-etl"));
    assert_eq!((id.pod_set.as_str(), id.recorded), ("main", true));
    // An unlabelled Job whose template alone carries the queue: plain pods, as before.
    assert_eq!(
        Jobs.identify_pod(&pod(&[(JOB_NAME_LABEL, "etl"), (QUEUE_LABEL, "q")], &[])),
        None
    );
    // A ScavengerJob's pods are another part of sluice's.
    assert_eq!(
        Jobs.identify_pod(&pod(
            &[
                (JOB_NAME_LABEL, "etl"),
                (QUEUE_LABEL, "q"),
                (SCAVENGER_JOB_LABEL, "s")
            ],
            &[(JOB_GANG_ANNOTATION, "2")],
        )),
        None
    );
}

#[test]
fn scavenger_and_rayjob_submitter_jobs_are_left_alone() {
    let mut app = job(json!({"template": template("1")}));
    assert!(!Jobs.left_alone(&app));
    app.metadata.labels = Some([(SCAVENGER_JOB_LABEL.to_string(), "s".to_string())].into());
    assert!(Jobs.left_alone(&app));
    let submitter: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "rj", "namespace": "ns", "ownerReferences": [
            {"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rj", "uid": "u", "controller": true}]},
        "spec": {"template": template("1")},
    }))
    .expect("job");
    assert!(Jobs.left_alone(&submitter));
}

#[test]
fn a_job_ends_with_its_final_conditions() {
    let mut app = job(json!({"template": template("1")}));
    assert_eq!(Jobs.ended(&app), None);
    app.data["status"] = json!({"conditions": [{"type": "Suspended", "status": "True"}]});
    assert_eq!(Jobs.ended(&app), None);
    app.data["status"] = json!({"conditions": [{"type": "Complete", "status": "False"}]});
    assert_eq!(Jobs.ended(&app), None);
    app.data["status"] = json!({"conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]});
    assert_eq!(Jobs.ended(&app), Some(ApplicationEnd::Succeeded));
    app.data["status"] = json!({"conditions": [{"type": "FailureTarget", "status": "True"}]});
    assert_eq!(Jobs.ended(&app), Some(ApplicationEnd::Failed));
    app.data["status"] = json!({"conditions": "garbage"});
    assert_eq!(Jobs.ended(&app), None);
}

/// A Job's template claiming another kind's labels (Ray's, Spark's, a TaskCluster's): its pods
/// are still the Job's (the Job integration comes before them in the registry), never counted in
/// that application's ledger.
#[test]
fn a_jobs_pods_claiming_another_kinds_labels_stay_the_jobs() {
    let mut p = Pod::default();
    p.metadata.labels = Some(
        [
            (JOB_NAME_LABEL, "etl"),
            (QUEUE_LABEL, "q"),
            ("ray.io/cluster", "victim"),
            ("ray.io/node-type", "worker"),
            ("spark-app-selector", "spark-victim"),
            ("spark-role", "executor"),
            ("sparkoperator.k8s.io/app-name", "victim"),
            ("sluice.dev/task-cluster", "victim"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    );
    p.metadata.annotations = Some([(JOB_GANG_ANNOTATION.to_string(), "1".to_string())].into());
    let id = crate::integrations::Adapters::default()
        .identify(&p)
        .expect("governed");
    assert_eq!(id.workload.as_deref(), Some("job-etl"));
}
