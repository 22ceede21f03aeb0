//! Kill and timeout for every executor, end to end on the local control plane with sluice on the
//! host: an external kill (`spec.killTimestamp`) goes Killing then Killed and stops the work; a
//! timeout does the same and says so; what a Task runs as, deleted from outside, ends it Killed
//! (not Failed); a `timeout` that does not parse is refused at submit.
//! Run with `hack/test.sh --test e2e_tasks_kill`.

mod support;
#[path = "support/tasks.rs"]
mod task_support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use sluice::api::{Task, TaskPhase};
use support::*;
use task_support::*;

const T: Duration = Duration::from_secs(60);

/// The samples of `src/api/task.rs`' duration rule, submitted to the API server.
const VALID: &[&str] = sluice::api::DURATION_RULE_ACCEPTS;
const INVALID: &[&str] = sluice::api::DURATION_RULE_REFUSES;

#[tokio::test]
async fn a_timeout_that_does_not_parse_is_refused_at_submit() {
    let env = env_or_skip!("task-timeout-rule");
    let task = |name: &str, timeout: &str| -> Task {
        serde_json::from_value(json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": name},
            // Killed at once: these Tasks are only here to be stored.
            "spec": {"killTimestamp": "2000-01-01T00:00:00Z", "timeout": timeout,
                "executor": {"http": {"request": {"url": "http://127.0.0.1:9/"}}}},
        }))
        .expect("task")
    };
    for (i, bad) in INVALID.iter().enumerate() {
        let refused = tasks(&env)
            .create(&PostParams::default(), &task(&format!("bad-{i}"), bad))
            .await
            .expect_err(&format!("timeout {bad:?} must be refused"));
        let text = refused.to_string();
        assert!(
            text.contains("spec.timeout") && text.contains("must be a duration"),
            "{bad:?}: {text}"
        );
    }
    for (i, ok) in VALID.iter().enumerate() {
        tasks(&env)
            .create(&PostParams::default(), &task(&format!("ok-{i}"), ok))
            .await
            .unwrap_or_else(|e| panic!("timeout {ok:?} must be accepted: {e}"));
    }
    env.cleanup().await;
}

fn http_task(name: &str, url: &str, timeout: Option<&str>) -> Value {
    let mut spec = json!({"executor": {"http": {"request": {"url": url}}}});
    if let Some(t) = timeout {
        spec["timeout"] = json!(t);
    }
    json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "Task", "metadata": {"name": name}, "spec": spec})
}

#[tokio::test]
async fn http_kill_and_timeout_cancel_the_request() {
    let env = env_or_skip!("task-http-kill");
    let server = test_server(Duration::from_secs(300)).await;
    let base = format!("http://{}", server.addr);
    create_task(
        &env,
        http_task("killed", &format!("{base}/slow/killed"), None),
    )
    .await;
    create_task(
        &env,
        http_task("timed", &format!("{base}/slow/timed"), Some("2s")),
    )
    .await;
    wait_for("the killed Task's request to arrive", T, || async {
        (server.hits("/slow/killed") == 1).then_some(())
    })
    .await;
    kill_now(&env, "killed").await;
    let killed = wait_killed(&env, "killed", "killTimestamp", T).await;
    assert!(went_through_killing(&killed));
    let timed = wait_killed(&env, "timed", "killed: timeout 2s exceeded", T).await;
    assert!(went_through_killing(&timed));
    // The kill severed the connection: the server's handler was dropped before it answered.
    for path in ["/slow/killed", "/slow/timed"] {
        wait_for(&format!("{path}'s connection to be closed"), T, || async {
            let cancelled = server.cancelled.lock().expect("cancelled").clone();
            cancelled.iter().any(|p| p == path).then_some(())
        })
        .await;
    }
    assert_eq!(server.hits("/slow/"), 2, "each request sent once");
    env.cleanup().await;
}

fn configmap_task(name: &str, timeout: Option<&str>) -> Value {
    let mut spec = json!({"executor": {"resource": {
        "manifest": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "${task.name}-cm"}, "data": {"done": "false"}},
        "successCondition": "$.data.done == \"true\"",
    }}});
    if let Some(t) = timeout {
        spec["timeout"] = json!(t);
    }
    json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "Task", "metadata": {"name": name}, "spec": spec})
}

#[tokio::test]
async fn resource_kill_timeout_and_deletion() {
    let env = env_or_skip!("task-res-kill");
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    create_task(&env, configmap_task("killed", None)).await;
    create_task(&env, configmap_task("timed", Some("2s"))).await;
    create_task(&env, configmap_task("deleted", None)).await;
    for name in ["killed", "deleted"] {
        wait_phase(&env, name, TaskPhase::Running, T).await;
        wait_for(&format!("{name}'s ConfigMap"), T, || async {
            cms.get_opt(&format!("{name}-cm")).await.ok().flatten()
        })
        .await;
    }
    kill_now(&env, "killed").await;
    let killed = wait_killed(&env, "killed", "killTimestamp", T).await;
    assert!(went_through_killing(&killed));
    wait_absent(&cms, "killed-cm", T).await;

    let timed = wait_killed(&env, "timed", "killed: timeout 2s exceeded", T).await;
    assert!(went_through_killing(&timed));
    wait_absent(&cms, "timed-cm", T).await;

    cms.delete("deleted-cm", &DeleteParams::default())
        .await
        .expect("delete the ConfigMap");
    wait_killed(&env, "deleted", "ConfigMap deleted-cm was deleted", T).await;
    env.cleanup().await;
}

#[tokio::test]
async fn pod_deleted_from_outside_ends_the_task_killed() {
    let (env, queue) = env_and_queue!("task-pod-del", json!({"cpu": "2"}), "BestEffortFIFO");
    create_task(
        &env,
        json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "Task", "metadata": {"name": "victim"},
            "spec": {"executor": {"pod": {"queue": queue, "template": {"spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": "busybox",
                    "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]}}}}}}),
    )
    .await;
    wait_phase(&env, "victim", TaskPhase::Running, T).await;
    wait_for("victim's pod", T, || async {
        env.pods().get_opt("victim-task").await.ok().flatten()
    })
    .await;
    env.delete_pod_now("victim-task").await;
    wait_killed(&env, "victim", "pod victim-task was deleted", T).await;
    env.cleanup().await;
}

fn container_task(name: &str, timeout: Option<&str>) -> Value {
    let mut spec =
        json!({"executor": {"container": {"cluster": "pool", "command": ["sleep", "3600"]}}});
    if let Some(t) = timeout {
        spec["timeout"] = json!(t);
    }
    json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "Task", "metadata": {"name": name}, "spec": spec})
}

/// The worker a running container Task was placed on, once its ephemeral container is added.
async fn worker_of(env: &TestEnv, name: &str) -> String {
    wait_for(&format!("{name}'s ephemeral container"), T, || async {
        let t = tasks(env).get(name).await.ok()?;
        let s = t.status?;
        let worker = s.worker?;
        let container = s.handle?.container?;
        let pod = env.pods().get(&worker).await.ok()?;
        pod.spec?
            .ephemeral_containers?
            .iter()
            .any(|c| c.name == container)
            .then_some(worker)
    })
    .await
}

#[tokio::test]
async fn container_kill_timeout_and_worker_deletion() {
    let (env, queue) = env_and_queue!("task-ctr-kill", json!({"cpu": "4"}), "BestEffortFIFO");
    create_pool(
        &env,
        &queue,
        json!({"minWorkers": 1, "maxWorkers": 3, "slotsPerWorker": 1, "idleTimeout": "30s"}),
    )
    .await;
    for (name, timeout) in [("killed", None), ("timed", Some("3s")), ("orphan", None)] {
        create_task(&env, container_task(name, timeout)).await;
    }
    let killed_worker = worker_of(&env, "killed").await;
    let orphan_worker = worker_of(&env, "orphan").await;
    kill_now(&env, "killed").await;
    let killed = wait_killed(&env, "killed", "killTimestamp", T).await;
    assert!(went_through_killing(&killed));
    // An ephemeral container cannot be stopped: its worker went.
    wait_absent(&env.pods(), &killed_worker, T).await;

    let timed = wait_killed(&env, "timed", "killed: timeout 3s exceeded", T).await;
    assert!(went_through_killing(&timed));

    env.pods()
        .delete(&orphan_worker, &DeleteParams::default().grace_period(0))
        .await
        .expect("delete the worker");
    wait_killed(
        &env,
        "orphan",
        &format!("worker {orphan_worker} was deleted"),
        T,
    )
    .await;
    env.cleanup().await;
}
