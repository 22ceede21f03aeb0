//! Why is my job waiting, where users look (issue 33), end to end on the local cluster:
//! - events on the user's own object (a RayCluster through KubeRay, a SparkApplication through the
//!   Spark operator, a gated pod) name its DynamicWorkload, queue and position;
//! - a submit into a full queue prints sluice's warning in kubectl's output;
//! - `kubectl sluice why` answers for a pod, a Job and a RayCluster as a user with only the
//!   namespace's `view` rights (and reading DynamicWorkloads);
//! - a burst of gated pods of one workload costs a bounded number of events.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DynamicObject, ListParams};
use kube::{Client, Config};
use serde_json::{Value, json};
use support::*;

/// A RayCluster in `queue` of 1-cpu pods: the head and one worker (at most 2).
fn one_worker_raycluster(name: &str, queue: &str) -> DynamicObject {
    let container = |n: &str| ray_container(n, "1", "1Gi");
    raycluster(
        name,
        Some(queue),
        raycluster_spec([1, 1, 2], container, json!({})),
    )
}

async fn create_job(env: &TestEnv, job: serde_json::Value) {
    let job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(job).expect("job");
    create(
        &Api::<k8s_openapi::api::batch::v1::Job>::namespaced(env.client.clone(), &env.namespace),
        &job,
    )
    .await;
}

/// sluice's events in the namespace (those its Recorder posted), as (kind, name, reason, note).
async fn sluice_events(env: &TestEnv) -> Vec<(String, String, String, String)> {
    let api: Api<Event> = Api::namespaced(env.client.clone(), &env.namespace);
    api.list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| e.reporting_component.as_deref() == Some("sluice"))
        .map(|e| {
            (
                e.involved_object.kind.unwrap_or_default(),
                e.involved_object.name.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
            )
        })
        .collect()
}

/// Waits for a sluice event on `kind`/`name` with `reason`; returns its note.
async fn wait_event(env: &TestEnv, kind: &str, name: &str, reason: &str) -> String {
    wait_for(
        &format!("a {reason} event on {kind} {name}"),
        Duration::from_secs(90),
        || async {
            sluice_events(env)
                .await
                .into_iter()
                .find(|(k, n, r, _)| k == kind && n == name && r == reason)
                .map(|(_, _, _, note)| note)
        },
    )
    .await
}

/// A queue of 2 cpu, filled by one admitted pod.
async fn full_queue(env: &mut TestEnv) -> String {
    let queue = env.queue("q", json!({"cpu": "2"}), "BestEffortFIFO").await;
    env.create_pod(pod("filler", &queue, "2")).await;
    env.wait_queue_counts(&queue, 0, 1).await;
    queue
}

#[tokio::test]
async fn a_waiting_raycluster_and_spark_application_are_told_their_workload_queue_and_position() {
    let mut env = env_or_skip!("why-events");
    let queue = full_queue(&mut env).await;
    let ns = env.namespace.clone();

    create(&rayclusters(&env), &one_worker_raycluster("rc", &queue)).await;
    let note = wait_event(&env, "RayCluster", "rc", "Waiting").await;
    for part in [
        format!("DynamicWorkload {ns}/raycluster-rc"),
        format!("queue {queue}"),
        "position 1".to_string(),
        "cpu".to_string(),
    ] {
        assert!(
            note.contains(&part),
            "{part:?} not in the RayCluster's event: {note}"
        );
    }

    let spark = spark_application(
        "etl",
        Some(&queue),
        spark_pi(json!({}), json!({"instances": 1})),
    );
    create(&spark_applications(&env), &spark).await;
    let note = wait_event(&env, "SparkApplication", "etl", "Waiting").await;
    assert!(note.contains(&format!("queue {queue}")), "{note}");
    assert!(note.contains("position"), "{note}");
    assert!(note.contains("DynamicWorkload"), "{note}");

    // The queue frees up: the RayCluster (first in line) is told it is admitted.
    env.pods()
        .delete("filler", &Default::default())
        .await
        .expect("delete the filler");
    let note = wait_event(&env, "RayCluster", "rc", "Admitted").await;
    assert!(note.contains(&format!("queue {queue}")), "{note}");
    env.cleanup().await;
}

/// `kubectl create` of a Job into a full queue prints sluice's warning, and still creates it.
#[tokio::test]
async fn a_submit_into_a_full_queue_prints_a_warning_in_kubectl() {
    let mut env = env_or_skip!("why-warn");
    let queue = full_queue(&mut env).await;
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "late", "namespace": env.namespace, "labels": {"sluice.dev/queue": queue}},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "w", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}},
    });
    let output = kubectl_create(job).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "kubectl create failed: {stderr}");
    assert!(
        stderr.contains(&format!("Warning: sluice: CapacityQueue {queue} is full")),
        "no warning in kubectl's output: {stderr}"
    );
    env.cleanup().await;
}

/// `kubectl create -f -` of `object`: its output (warnings are on stderr).
async fn kubectl_create(object: Value) -> std::process::Output {
    let body = object.to_string();
    tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        use std::process::{Command, Stdio};
        let mut child = Command::new("kubectl")
            .args(["create", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(body.as_bytes())?;
        }
        child.wait_with_output()
    })
    .await
    .expect("join")
    .expect("run kubectl (hack/cluster.sh env puts it on PATH)")
}

/// A plain pod created into a full queue, into a queue that does not exist and into one that does
/// not admit its namespace: kubectl prints why it will wait, and creates it (behind the gate).
#[tokio::test]
async fn a_pod_created_behind_the_gate_prints_why_it_waits_in_kubectl() {
    let mut env = env_or_skip!("why-podwarn");
    let queue = full_queue(&mut env).await;
    let closed = env
        .queue_with_spec(
            "closed",
            json!({"quota": {"cpu": "4"}, "namespaceSelector": {"matchLabels": {"sluice-e2e-team": "nobody"}}}),
        )
        .await;
    let missing = format!("{queue}-missing");
    let cases = [
        (
            "late",
            queue.clone(),
            format!("Warning: sluice: CapacityQueue {queue} is full"),
        ),
        (
            "nowhere",
            missing.clone(),
            format!("Warning: sluice: CapacityQueue {missing} does not exist"),
        ),
        (
            "outsider",
            closed.clone(),
            format!(
                "Warning: sluice: CapacityQueue {closed} does not admit namespace {}",
                env.namespace
            ),
        ),
    ];
    for (name, queue, expected) in cases {
        let mut object = serde_json::to_value(pod(name, &queue, "1")).expect("pod");
        object["metadata"]["namespace"] = json!(env.namespace);
        let output = kubectl_create(object).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "kubectl create of {name} failed: {stderr}"
        );
        assert!(
            stderr.contains(&expected),
            "{name}: no {expected:?} in kubectl's output: {stderr}"
        );
    }
    env.cleanup().await;
}

/// A client acting as `user` (impersonated by the cluster's admin credentials).
async fn as_user(user: &str) -> Client {
    let mut config = Config::infer().await.expect("kubeconfig");
    config.auth_info.impersonate = Some(user.to_string());
    Client::try_from(config).expect("client")
}

/// `user` gets the built-in `view` role in the namespace, and reading DynamicWorkloads (what
/// sluice's user roles aggregate into `view`; granted here too, so the test does not depend on
/// which install the cluster runs).
async fn grant_view(env: &TestEnv, user: &str) {
    let roles: Api<Role> = Api::namespaced(env.client.clone(), &env.namespace);
    let bindings: Api<RoleBinding> = Api::namespaced(env.client.clone(), &env.namespace);
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "read-dwl"},
        "rules": [{"apiGroups": ["sluice.dev"], "resources": ["dynamicworkloads"], "verbs": ["get", "list", "watch"]}],
    }))
    .expect("role");
    create(&roles, &role).await;
    for (name, kind, role) in [
        ("view", "ClusterRole", "view"),
        ("read-dwl", "Role", "read-dwl"),
    ] {
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": format!("{user}-{name}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }))
        .expect("binding");
        create(&bindings, &binding).await;
    }
}

#[tokio::test]
async fn kubectl_sluice_why_answers_for_a_pod_a_job_and_a_raycluster_with_view_rights() {
    let mut env = env_or_skip!("why-plugin");
    let queue = full_queue(&mut env).await;
    let user = format!("alice-{}", env.namespace);
    grant_view(&env, &user).await;
    env.create_pod(pod("lonely", &queue, "1")).await;
    create_job(&env, json!({
        "metadata": {"name": "batch", "labels": {"sluice.dev/queue": queue}},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "w", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}},
    })).await;
    create(&rayclusters(&env), &one_worker_raycluster("rc", &queue)).await;
    env.wait_queue_counts(&queue, 1 + 1 + 2, 1).await;

    let alice = as_user(&user).await;
    // She may not list pods cluster-wide: the plugin must not need to.
    assert!(
        Api::<k8s_openapi::api::core::v1::Pod>::all(alice.clone())
            .list(&ListParams::default())
            .await
            .is_err(),
        "the test user should not list pods cluster-wide"
    );
    for target in ["pod/lonely", "job/batch", "raycluster/rc"] {
        let report = wait_for(
            &format!("`why {target}` to give a position"),
            Duration::from_secs(60),
            || async {
                let r = sluice::kubectl_plugin::read::why(&alice, &env.namespace, target)
                    .await
                    .unwrap_or_else(|e| panic!("why {target} as {user}: {e:#}"));
                r.workload
                    .as_ref()
                    .and_then(|w| w.status.as_ref()?.position)
                    .map(|_| r)
            },
        )
        .await;
        let text = sluice::kubectl_plugin::render_why(&report, jiff::Timestamp::now());
        for part in [
            format!("queue:      {queue}"),
            "position:".into(),
            "why:".into(),
            "estimate:".into(),
        ] {
            assert!(
                text.contains(&part),
                "{part:?} not in `why {target}`:\n{text}"
            );
        }
        eprintln!("kubectl sluice why {target}:\n{text}");
    }
    let queue_table = sluice::kubectl_plugin::read::queue(
        &alice,
        Some(&env.namespace),
        None,
        sluice::queue::cli::Output::Table,
    )
    .await
    .expect("kubectl sluice queue as the namespace user");
    assert!(queue_table.contains("raycluster-rc"), "{queue_table}");
    eprintln!("kubectl sluice queue:\n{queue_table}");
    env.cleanup().await;
}

/// The cost of events: N gated pods of one workload (an application's burst of executors) post a
/// bounded number of events, not one per pod; N single-pod workloads post one each at most (the
/// global rate limit and the queue bound the rest). Prints the counts (BENCHMARKS.md quotes them).
#[tokio::test]
async fn a_burst_of_gated_pods_of_one_workload_posts_a_bounded_number_of_events() {
    let mut env = env_or_skip!("why-burst");
    const N: usize = 40;
    let queue = full_queue(&mut env).await;
    let burst = (0..N).map(|i| {
        with_labels(
            pod(&format!("exec-{i}"), &queue, "500m"),
            &[("sluice.dev/workload", "burst")],
        )
    });
    env.create_pods_at_once(burst).await;
    env.wait_queue_counts(&queue, N as i32, 1).await;
    wait_for(
        "a Waiting event on a pod of the burst",
        Duration::from_secs(90),
        || async {
            sluice_events(&env)
                .await
                .into_iter()
                .find(|(k, n, r, _)| k == "Pod" && n.starts_with("exec-") && r == "Waiting")
        },
    )
    .await;
    // Several passes later (the statuses of every pod were written), still the one event: an
    // event is a transition, and the queue status written after the burst shows the passes ran.
    env.wait_workload_status(
        "burst",
        "the burst's status",
        Duration::from_secs(30),
        |s| s.pending_pods == N as i32,
    )
    .await;
    let events = sluice_events(&env).await;
    let on_burst: Vec<_> = events
        .iter()
        .filter(|(kind, name, _, _)| kind == "Pod" && name.starts_with("exec-"))
        .collect();
    eprintln!(
        "events for a burst of {N} gated pods of one workload: {} ({:?})",
        on_burst.len(),
        on_burst.iter().map(|e| &e.2).collect::<Vec<_>>()
    );
    assert!(on_burst.len() <= 2, "{on_burst:?}");

    // The same number of pods, each its own workload: at most one event each.
    let solo = (0..N).map(|i| pod(&format!("solo-{i}"), &queue, "500m"));
    env.create_pods_at_once(solo).await;
    env.wait_queue_counts(&queue, 2 * N as i32, 1).await;
    let solo_events = wait_for(
        "Waiting events on the single pods",
        Duration::from_secs(90),
        || async {
            let n = sluice_events(&env)
                .await
                .into_iter()
                .filter(|(k, n, _, _)| k == "Pod" && n.starts_with("solo-"))
                .count();
            (n > 0).then_some(n)
        },
    )
    .await;
    eprintln!("events for {N} single-pod workloads: {solo_events} (so far)");
    assert!(solo_events <= N, "{solo_events} events for {N} workloads");
    env.cleanup().await;
}

/// A Job preempted by a pod of higher priority in the same queue is told so, on the Job, naming
/// the preemptor (of its own namespace).
#[tokio::test]
async fn a_preempted_job_is_told_on_its_object_who_took_its_quota() {
    let mut env = env_or_skip!("why-preempt");
    let classes = Priorities::create(&env, &[("low", 10), ("high", 1000)]).await;
    let (low, high) = (classes.name("low"), classes.name("high"));
    let queue = env.queue("q", json!({"cpu": "2"}), "BestEffortFIFO").await;
    create_job(&env, json!({
        "metadata": {"name": "low", "labels": {"sluice.dev/queue": queue}},
        "spec": {"parallelism": 2, "completions": 2, "template": {
            "metadata": {"annotations": {"sluice.dev/kwok-hold": "true"}},
            "spec": {"restartPolicy": "Never", "priorityClassName": low,
                "containers": [{"name": "w", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}},
    })).await;
    env.wait_queue_counts(&queue, 0, 2).await;
    let mut urgent = pod("urgent", &queue, "2");
    if let Some(spec) = urgent.spec.as_mut() {
        spec.priority_class_name = Some(high.clone());
    }
    env.create_pod(urgent).await;
    let note = wait_event(&env, "Job", "low", "Preempted").await;
    assert!(
        note.contains(&format!("DynamicWorkload {}/urgent", env.namespace)),
        "the preemptor is not named: {note}"
    );
    assert!(note.contains(&format!("queue {queue}")), "{note}");
    drop(classes);
    env.cleanup().await;
}
