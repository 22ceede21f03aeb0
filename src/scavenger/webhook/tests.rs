use serde_json::{Value, json};

use super::*;

const SLUICE: &str = "system:serviceaccount:sluice-system:sluice";
const JOBS: &str = "system:serviceaccount:kube-system:job-controller";

fn workloads() -> ValidateScavengerWorkloads {
    ValidateScavengerWorkloads {
        controller_user: SLUICE.into(),
        job_controller_users: JOB_CONTROLLER_USERS.iter().map(|s| s.to_string()).collect(),
    }
}

fn scavenger_pod(owner: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "counter-run-1-0-abcde", "labels": {SCAVENGER_JOB_LABEL: "counter"},
                     "ownerReferences": [owner]},
        "spec": {"priorityClassName": SCAVENGER_PRIORITY_CLASS, "containers": [{"name": "work"}]},
    })
}

fn job_owner(name: &str) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": "u", "controller": true})
}

#[test]
fn the_job_controller_creates_the_pods_of_a_scavenger_job() {
    let pod = scavenger_pod(job_owner("counter-run-1"));
    assert_eq!(workloads().judge(JOBS, "Pod", &pod, None), Ok(()));
}

#[test]
fn a_user_labelling_their_own_pod_as_a_scavenger_is_refused() {
    let pod = scavenger_pod(job_owner("counter-run-1"));
    let e = workloads()
        .judge("alice", "Pod", &pod, None)
        .expect_err("user");
    assert!(e.contains("created by \"alice\""), "{e}");
    // Only the label, no PriorityClass: still refused (the label is sluice's).
    let mut pod = scavenger_pod(job_owner("counter-run-1"));
    pod["spec"]["priorityClassName"] = Value::Null;
    assert!(workloads().judge("alice", "Pod", &pod, None).is_err());
}

#[test]
fn a_user_setting_the_scavenger_priority_class_is_refused() {
    let pod = json!({"metadata": {"name": "p"},
        "spec": {"priorityClassName": SCAVENGER_PRIORITY_CLASS, "containers": [{"name": "c"}]}});
    assert!(workloads().judge("alice", "Pod", &pod, None).is_err());
    // An ordinary pod never concerns this webhook.
    let ordinary = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}});
    assert_eq!(workloads().judge("alice", "Pod", &ordinary, None), Ok(()));
}

#[test]
fn a_forged_owner_or_a_pod_of_another_job_is_refused_even_from_the_job_controller() {
    for owner in [
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "counter-run-1", "uid": "u", "controller": true}),
        job_owner("mine"),
        job_owner("counter"),
        json!({"apiVersion": "batch/v1", "kind": "Job", "name": "counter-run-1", "uid": "u"}),
    ] {
        let pod = scavenger_pod(owner.clone());
        assert!(
            workloads().judge(JOBS, "Pod", &pod, None).is_err(),
            "{owner}"
        );
    }
    let mut pod = scavenger_pod(job_owner("counter-run-1"));
    pod["spec"]["priorityClassName"] = json!("high");
    let e = workloads()
        .judge(JOBS, "Pod", &pod, None)
        .expect_err("class");
    assert!(e.contains("lacks the scavenger PriorityClass"), "{e}");
}

#[test]
fn only_sluice_creates_scavenger_jobs() {
    let job = json!({"metadata": {"name": "j"}, "spec": {"template": {
        "metadata": {"labels": {SCAVENGER_JOB_LABEL: "x"}},
        "spec": {"containers": [{"name": "c"}]}}}});
    assert_eq!(workloads().judge(SLUICE, "Job", &job, None), Ok(()));
    let e = workloads()
        .judge("alice", "Job", &job, None)
        .expect_err("user");
    assert!(e.contains("submit a ScavengerJob"), "{e}");
    let classed = json!({"metadata": {"name": "j"}, "spec": {"template": {
        "spec": {"priorityClassName": SCAVENGER_PRIORITY_CLASS, "containers": [{"name": "c"}]}}}});
    assert!(workloads().judge("alice", "Job", &classed, None).is_err());
    let plain =
        json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {"containers": []}}}});
    assert_eq!(workloads().judge("alice", "Job", &plain, None), Ok(()));
}

#[test]
fn nobody_but_sluice_adds_or_removes_the_mark_on_an_update() {
    let ordinary = json!({"metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {}});
    let labelled =
        json!({"metadata": {"name": "p", "labels": {SCAVENGER_JOB_LABEL: "x"}}, "spec": {}});
    assert!(
        workloads()
            .judge("alice", "Pod", &labelled, Some(&ordinary))
            .is_err()
    );
    assert!(
        workloads()
            .judge("alice", "Pod", &ordinary, Some(&labelled))
            .is_err()
    );
    // Other edits of a scavenger pod (an annotation) pass.
    let mut annotated = labelled.clone();
    annotated["metadata"]["annotations"] = json!({"note": "x"});
    assert_eq!(
        workloads().judge("alice", "Pod", &annotated, Some(&labelled)),
        Ok(())
    );
    assert_eq!(
        workloads().judge(SLUICE, "Pod", &ordinary, Some(&labelled)),
        Ok(())
    );
}

fn sj(spec: Value) -> DynamicObject {
    serde_json::from_value(
        json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "ScavengerJob",
        "metadata": {"name": "s", "namespace": "ns"}, "spec": spec}),
    )
    .expect("object")
}

#[test]
fn a_scavenger_job_with_a_bad_field_is_refused_naming_it() {
    let v = ValidateScavengerJobs {
        mounts: Mounts::none(),
        queues: None,
    };
    let good = json!({"image": "busybox", "duration": "10m",
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}});
    assert_eq!(v.judge("ns", &sj(good.clone())), Ok(()));
    // A field made bad (its path in the spec), its bad value, and what the refusal starts with
    // (or, `false`, says).
    let cases: [(&[&str], Value, bool, &str); 3] = [
        (&["duration"], json!("a while"), true, "spec.duration"),
        (&["parallelism"], json!("two"), true, "spec:"),
        (
            &["resources", "limits", "memory"],
            json!("2Gi"),
            false,
            "limits.memory (2Gi)",
        ),
    ];
    for (path, value, first, says) in cases {
        let mut bad = good.clone();
        let field = path.iter().fold(&mut bad, |v, key| &mut v[*key]);
        *field = value;
        let refusal = v.judge("ns", &sj(bad)).expect_err("refused");
        let said = if first {
            refusal.starts_with(says)
        } else {
            refusal.contains(says)
        };
        assert!(said, "{path:?}: {refusal}");
    }
    assert!(v.judge("ns", &sj(Value::Null)).is_err());
}
