//! batch/v1 Jobs, end to end: the Job controller of kube-controller-manager creates the pods, kwok
//! runs them (a Job's pods complete at once unless their template is annotated
//! `sluice.dev/kwok-hold`, then they end when annotated `sluice.dev/kwok-phase`), sluice records
//! one DynamicWorkload per labelled Job and gates its pods.

mod support;

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sluice::api::WorkloadPhase;
use support::*;

/// sluice's own identity (`hack/cluster.sh`'s `sluice serve --local`).
const SLUICE_USER: &str = "system:serviceaccount:sluice-system:sluice";

fn jobs(env: &TestEnv) -> Api<Job> {
    Api::namespaced(env.client.clone(), &env.namespace)
}

/// A Job of `parallelism` pods of 1 cpu; `hold`: its pods keep running until ended on purpose.
fn job(name: &str, queue: Option<&str>, spec: Value, hold: bool) -> Job {
    let mut annotations = serde_json::Map::new();
    if hold {
        annotations.insert("sluice.dev/kwok-hold".into(), json!("true"));
    }
    let mut body = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "w", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]},
            },
        },
    });
    if let Some(queue) = queue {
        body["metadata"]["labels"] = json!({"sluice.dev/queue": queue});
    }
    for (k, v) in spec.as_object().cloned().unwrap_or_default() {
        body["spec"][k] = v;
    }
    serde_json::from_value(body).expect("job")
}

async fn create(env: &TestEnv, job: &Job) -> Result<Job, kube::Error> {
    jobs(env).create(&PostParams::default(), job).await
}

async fn patch_spec(env: &TestEnv, name: &str, spec: Value) {
    jobs(env)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": spec})),
        )
        .await
        .unwrap_or_else(|e| panic!("patch Job {name}: {e}"));
}

async fn pods_of(env: &TestEnv, job: &str) -> Vec<Pod> {
    env.pods()
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
        .await
        .expect("list pods")
        .items
}

/// Ends every running pod of `job` (kwok, by annotation).
async fn end_pods(env: &TestEnv, job: &str) {
    for pod in pods_of(env, job).await {
        if !is_ended(&pod) && !is_gated(&pod) {
            end_pod(
                &env.pods(),
                &pod.metadata.name.clone().unwrap_or_default(),
                "Succeeded",
            )
            .await;
        }
    }
}

async fn wait_job_condition(env: &TestEnv, name: &str, condition: &str) -> Job {
    wait_for(
        &format!("Job {name} to be {condition}"),
        Duration::from_secs(60),
        || async {
            let job = jobs(env).get(name).await.ok()?;
            job.status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .any(|c| c.type_ == condition && c.status == "True")
                .then_some(job.clone())
        },
    )
    .await
}

async fn wait_pod_set(env: &TestEnv, workload: &str, min: i32, max: Option<i32>) {
    wait_for(
        &format!("DynamicWorkload {workload} to say minCount {min}, maxCount {max:?}"),
        Duration::from_secs(30),
        || async {
            let dwl = env.workloads().get(workload).await.ok()?;
            let set = dwl.spec.pod_sets.first()?;
            (set.min_count == min && set.max_count == max).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_job_is_one_workload_admitted_as_a_gang_that_gives_its_quota_back_when_it_ends() {
    let (env, queue) = env_and_queue!("jobs", json!({"cpu": "4"}), "BestEffortFIFO");

    // A: a gang of 3 (parallelism 3, completions 3): admitted together.
    create(
        &env,
        &job(
            "a",
            Some(&queue),
            json!({"parallelism": 3, "completions": 3}),
            true,
        ),
    )
    .await
    .expect("create a");
    env.wait_queue_counts(&queue, 0, 3).await;
    let dwl = env
        .workloads()
        .get("job-a")
        .await
        .expect("job-a's DynamicWorkload");
    assert_eq!(
        dwl.spec.source.as_ref().map(|s| s.kind.as_str()),
        Some("Job")
    );
    assert_eq!(
        (
            dwl.spec.pod_sets[0].min_count,
            dwl.spec.pod_sets[0].max_count
        ),
        (3, Some(3))
    );

    // B: parallelism 4, completions 2: a gang of 2, one cpu free: it waits whole.
    create(
        &env,
        &job(
            "b",
            Some(&queue),
            json!({"parallelism": 4, "completions": 2}),
            true,
        ),
    )
    .await
    .expect("create b");
    env.wait_queue_counts(&queue, 2, 3).await;
    assert!(
        pods_of(&env, "b").await.iter().all(is_gated),
        "B waits whole"
    );

    // A's pods end: A completes, its quota comes back, B is admitted.
    end_pods(&env, "a").await;
    wait_job_condition(&env, "a", "Complete").await;
    env.wait_queue_counts(&queue, 0, 2).await;
    env.wait_workload_phase("job-a", WorkloadPhase::Finished, Duration::from_secs(30))
        .await;
    end_pods(&env, "b").await;
    wait_job_condition(&env, "b", "Complete").await;
    env.wait_queue_counts(&queue, 0, 0).await;
    env.cleanup().await;
}

#[tokio::test]
async fn an_elastic_job_grows_and_shrinks_its_ledger_and_its_gang_never_grows() {
    let (env, queue) = env_and_queue!("jobs-elastic", json!({"cpu": "3"}), "BestEffortFIFO");
    // A work queue (no completions): parallelism 2 is the gang.
    create(
        &env,
        &job("w", Some(&queue), json!({"parallelism": 2}), true),
    )
    .await
    .expect("create w");
    env.wait_queue_counts(&queue, 0, 2).await;
    wait_pod_set(&env, "job-w", 2, Some(2)).await;

    // Raised to 4: the gang stays 2; one more pod fits, the fourth waits alone.
    patch_spec(&env, "w", json!({"parallelism": 4})).await;
    wait_pod_set(&env, "job-w", 2, Some(4)).await;
    env.wait_queue_counts(&queue, 1, 3).await;

    // Lowered to 1: the Job controller deletes pods, the ledger shrinks with it.
    patch_spec(&env, "w", json!({"parallelism": 1})).await;
    wait_pod_set(&env, "job-w", 1, Some(1)).await;
    env.wait_queue_counts(&queue, 0, 1).await;
    env.cleanup().await;
}

#[tokio::test]
async fn a_suspended_job_holds_nothing_until_it_is_resumed() {
    let (env, queue) = env_and_queue!("jobs-suspend", json!({"cpu": "2"}), "BestEffortFIFO");
    create(
        &env,
        &job(
            "s",
            Some(&queue),
            json!({"parallelism": 2, "suspend": true}),
            true,
        ),
    )
    .await
    .expect("create s");
    wait_pod_set(&env, "job-s", 2, Some(2)).await;
    // Suspended: no pods, nothing reserved: another Job takes the whole quota.
    create(
        &env,
        &job("o", Some(&queue), json!({"parallelism": 2}), true),
    )
    .await
    .expect("create o");
    env.wait_queue_counts(&queue, 0, 2).await;

    // Resumed: its pods wait for the quota like anyone's.
    patch_spec(&env, "s", json!({"suspend": false})).await;
    env.wait_queue_counts(&queue, 2, 2).await;
    end_pods(&env, "o").await;
    env.wait_queue_counts(&queue, 0, 2).await;

    // Suspended again while admitted: the Job controller deletes its pods, the quota comes back.
    patch_spec(&env, "s", json!({"suspend": true})).await;
    env.wait_queue_counts(&queue, 0, 0).await;
    env.cleanup().await;
}

#[tokio::test]
async fn indexed_jobs_and_pod_failure_policies_keep_working() {
    let (env, queue) = env_and_queue!("jobs-indexed", json!({"cpu": "3"}), "BestEffortFIFO");
    let spec = json!({
        "completionMode": "Indexed", "completions": 3, "parallelism": 3, "backoffLimit": 0,
        "podFailurePolicy": {"rules": [
            {"action": "FailJob", "onExitCodes": {"containerName": "w", "operator": "In", "values": [42]}},
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        ]},
    });
    create(&env, &job("idx", Some(&queue), spec, false))
        .await
        .expect("create idx");
    wait_job_condition(&env, "idx", "Complete").await;
    let pods = pods_of(&env, "idx").await;
    let mut indexes: Vec<String> = pods
        .iter()
        .filter_map(|p| {
            p.metadata
                .annotations
                .as_ref()?
                .get("batch.kubernetes.io/job-completion-index")
                .cloned()
        })
        .collect();
    indexes.sort();
    assert_eq!(indexes, ["0", "1", "2"]);
    // Every pod went through the gate: sluice's labels, its admission recorded.
    for pod in &pods {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get("sluice.dev/workload").map(String::as_str),
            Some("job-idx")
        );
    }
    env.wait_workload_phase("job-idx", WorkloadPhase::Finished, Duration::from_secs(30))
        .await;
    env.cleanup().await;
}

#[tokio::test]
async fn hostile_jobs_are_refused_naming_the_field_and_scavenger_jobs_are_left_alone() {
    let (env, queue) = env_and_queue!("jobs-hostile", json!({"cpu": "4"}), "BestEffortFIFO");
    let refusal = |result: Result<Job, kube::Error>| match result {
        Ok(job) => panic!("accepted: {:?}", job.metadata.name),
        Err(e) => e.to_string(),
    };

    // Larger than the queue's quota: refused at submit, with the numbers.
    let err = refusal(
        create(
            &env,
            &job("big", Some(&queue), json!({"parallelism": 5}), true),
        )
        .await,
    );
    assert!(
        err.contains("needs 5 cpu") && err.contains("quota of 4 cpu"),
        "{err}"
    );

    // A template claiming a RayJob's label; a min-count that is not a number.
    let mut claim = job("claim", Some(&queue), json!({}), true);
    if let Some(t) = claim.spec.as_mut().map(|s| &mut s.template.metadata) {
        t.get_or_insert_default()
            .labels
            .get_or_insert_default()
            .insert("sluice.dev/ray-job".into(), "victim".into());
    }
    let err = refusal(create(&env, &claim).await);
    assert!(
        err.contains("spec.template.metadata.labels[\"sluice.dev/ray-job\"]"),
        "{err}"
    );
    let mut count = job("count", Some(&queue), json!({}), true);
    count.metadata.annotations =
        Some([("sluice.dev/min-count".to_string(), "-1".to_string())].into());
    let err = refusal(create(&env, &count).await);
    assert!(
        err.contains("metadata.annotations[\"sluice.dev/min-count\"]"),
        "{err}"
    );

    // Relabelled into another queue after submit: refused.
    create(
        &env,
        &job("move", Some(&queue), json!({"parallelism": 1}), true),
    )
    .await
    .expect("create move");
    let moved = jobs(&env)
        .patch(
            "move",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"sluice.dev/queue": "elsewhere"}}})),
        )
        .await;
    let err = moved.expect_err("moved").to_string();
    assert!(err.contains("cannot be changed"), "{err}");

    // A namespace with a default queue: an unlabelled Job gets it; a ScavengerJob's Job is left
    // alone (no queue, no ledger: another part of sluice governs it).
    env.set_default_queue(&queue).await;
    // The API server sees the namespace's new label a moment later: until then a Job is created
    // as it is (and deleted here).
    let defaulted = wait_for(
        "the default queue to apply",
        Duration::from_secs(30),
        || async {
            let created = create(&env, &job(&unique("d"), None, json!({}), true))
                .await
                .ok()?;
            let labels = created.metadata.labels.clone().unwrap_or_default();
            if labels.get("sluice.dev/queue") == Some(&queue) {
                return Some(created);
            }
            let name = created.metadata.name.unwrap_or_default();
            let _ = jobs(&env).delete(&name, &Default::default()).await;
            None
        },
    )
    .await;
    let name = defaulted.metadata.name.clone().unwrap_or_default();
    wait_pod_set(&env, &format!("job-{name}"), 1, Some(1)).await;
    let mut scavenger = job("scavenged", None, json!({}), false);
    scavenger.metadata.labels =
        Some([("sluice.dev/scavenger-job".to_string(), "s".to_string())].into());
    // Only sluice creates such Jobs (the ScavengerJob webhook refuses anyone else, when built):
    // created here as sluice's controller does.
    let created = match create(&env, &scavenger).await {
        Ok(job) => job,
        Err(e) if e.to_string().contains("scavenger") => {
            let mut config = kube::Config::infer().await.expect("kubeconfig");
            config.auth_info.impersonate = Some(SLUICE_USER.into());
            let sluice = kube::Client::try_from(config).expect("client");
            Api::<Job>::namespaced(sluice, &env.namespace)
                .create(&PostParams::default(), &scavenger)
                .await
                .expect("create the scavenger Job as sluice")
        }
        Err(e) => panic!("create scavenger job: {e}"),
    };
    let labels = created.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("sluice.dev/queue"), None, "left alone");
    let template_labels = created
        .spec
        .and_then(|s| s.template.metadata)
        .and_then(|m| m.labels)
        .unwrap_or_default();
    assert_eq!(template_labels.get("sluice.dev/queue"), None);
    wait_job_condition(&env, "scavenged", "Complete").await;
    assert!(
        env.workloads()
            .get_opt("job-scavenged")
            .await
            .expect("get")
            .is_none(),
        "no ledger for a ScavengerJob's Job"
    );
    env.cleanup().await;
}

/// Admitted, not ended and not being deleted.
fn holds_quota(pod: &Pod) -> bool {
    !is_gated(pod) && !is_ended(pod) && pod.metadata.deletion_timestamp.is_none()
}

async fn holding(env: &TestEnv, job: &str) -> Vec<String> {
    let mut names: Vec<String> = pods_of(env, job)
        .await
        .into_iter()
        .filter(holds_quota)
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    names
}

/// Preemption reads the ledger a Job's integration fills: pods above the gang (a raised
/// `parallelism`) go first; a Job whose gang must go goes whole.
/// `job` with its pods in the PriorityClass `class`.
fn with_class(mut job: Job, class: &str) -> Job {
    if let Some(spec) = job.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        spec.priority_class_name = Some(class.to_string());
    }
    job
}

/// Creates the Job `name` of `parallelism` pods in the PriorityClass `class` and waits until all
/// of them hold quota.
async fn run_high_job(env: &TestEnv, name: &str, queue: &str, class: &str, parallelism: usize) {
    let spec = json!({"parallelism": parallelism});
    create(env, &with_class(job(name, Some(queue), spec, true), class))
        .await
        .unwrap_or_else(|e| panic!("create {name}: {e}"));
    wait_for(
        &format!("{name} admitted"),
        Duration::from_secs(60),
        || async { (holding(env, name).await.len() == parallelism).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn preemption_takes_a_jobs_elastic_pods_first_then_its_gang_whole() {
    let mut env = env_or_skip!("jobs-preempt");
    let classes = Priorities::create(&env, &[("low", 100), ("high", 1000)]).await;
    let (low, high) = (classes.name("low"), classes.name("high"));
    let queue = env.queue("q", json!({"cpu": "3"}), "BestEffortFIFO").await;
    // Evicted pods do not count against the Job (podFailurePolicy: Ignore disruptions).
    let ignore =
        json!({"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]});

    // The low Job: a gang of 2, then raised to 3 (one elastic pod): the queue is full.
    create(
        &env,
        &with_class(
            job(
                "low",
                Some(&queue),
                json!({"parallelism": 2, "podFailurePolicy": ignore}),
                true,
            ),
            &low,
        ),
    )
    .await
    .expect("create low");
    env.wait_queue_counts(&queue, 0, 2).await;
    let gang = holding(&env, "low").await;
    patch_spec(&env, "low", json!({"parallelism": 3})).await;
    env.wait_queue_counts(&queue, 0, 3).await;

    // A high Job of 1 pod: the elastic pod above the gang is the victim, the gang keeps running.
    run_high_job(&env, "high1", &queue, &high, 1).await;
    // A Job's pods are interchangeable and creation timestamps have one-second resolution, so
    // which of the three goes is not fixed: one went (the one above the gang), the gang of 2 runs.
    let kept = holding(&env, "low").await;
    assert_eq!(
        kept.len(),
        gang.len(),
        "one pod above the gang taken, the gang of {} kept: {kept:?}",
        gang.len()
    );

    // A high Job of 2 pods: the low Job's gang goes whole (its replacements wait).
    run_high_job(&env, "high2", &queue, &high, 2).await;
    assert!(holding(&env, "low").await.is_empty(), "the whole gang went");
    let status = env
        .wait_workload_status(
            "job-low",
            "job-low's preemption recorded",
            Duration::from_secs(30),
            |s| s.interrupted_count >= 1,
        )
        .await;
    assert!(status.interrupted_count >= 1);
    drop(classes);
    env.cleanup().await;
}
