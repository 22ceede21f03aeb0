//! Tasks end to end on the local control plane with sluice (and its Task controllers) on the host.
//! Run with `hack/test.sh --test e2e_tasks`. kwok nodes pretend to run pods; where a Task's
//! ephemeral container must end, the test plays the kubelet and writes its status.

mod support;
#[path = "support/tasks.rs"]
mod task_support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use sluice::api::{TaskCluster, TaskPhase};
use support::*;
use task_support::*;

const T: Duration = Duration::from_secs(60);

#[tokio::test]
async fn http_executor_extracts_the_result_and_fails_on_500() {
    let env = env_or_skip!("task-http");
    let server = test_server(Duration::ZERO).await;
    let base = format!("http://{}", server.addr);
    create_task(
        &env,
        json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": "fetch"},
            "spec": {"executor": {"http": {
                "request": {
                    "method": "POST",
                    "url": format!("{base}/ok/${{task.namespace}}/${{task.name}}"),
                    "postData": {"mimeType": "application/json", "text": "{\"from\": \"${task.name}\"}"},
                },
                "resultJsonPath": "$.result.jobs",
            }}},
        }),
    )
    .await;
    let done = wait_phase(&env, "fetch", TaskPhase::Success, T).await;
    let status = done.status.expect("status");
    assert_eq!(status.result, Some(json!(3)));
    assert_eq!(status.executor.as_deref(), Some("http"));
    assert!(status.started_at.is_some() && status.finished_at.is_some());
    assert_eq!(
        server.hits(&format!("/ok/{}/fetch", env.namespace)),
        1,
        "one request, substituted"
    );

    create_task(
        &env,
        json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": "broken"},
            "spec": {"executor": {"http": {"request": {"url": format!("{base}/boom")}}}},
        }),
    )
    .await;
    let failed = wait_phase(&env, "broken", TaskPhase::Failed, T).await;
    let status = failed.status.expect("status");
    assert_eq!(status.message, "HTTP 500: not a 2xx status");
    assert_eq!(status.result, Some(json!("boom")));

    // An unknown variable fails the Task at once, with a message that says which.
    create_task(
        &env,
        json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": "typo"},
            "spec": {"executor": {"http": {"request": {"url": format!("{base}/ok/${{task.nmae}}")}}}},
        }),
    )
    .await;
    let failed = wait_phase(&env, "typo", TaskPhase::Failed, T).await;
    let message = failed.status.expect("status").message;
    assert!(message.contains("${task.nmae}"), "{message}");
    assert!(message.contains("http.request.url"), "{message}");
    assert_eq!(server.hits("/ok/${"), 0);
    env.cleanup().await;
}

#[tokio::test]
async fn resource_executor_waits_for_the_success_condition_and_reads_inputs() {
    let env = env_or_skip!("task-res");
    // The input, as structured JSON, feeds the manifest.
    let objects: Api<sluice::api::TaskObject> = Api::namespaced(env.client.clone(), &env.namespace);
    let input: sluice::api::TaskObject = serde_json::from_value(json!({
        "apiVersion": "sluice.dev/v1alpha1", "kind": "TaskObject",
        "metadata": {"name": "cm-input"},
        "spec": {"data": {"greeting": "hello", "nested": {"n": 7}}},
    }))
    .expect("taskobject");
    create_task(
        &env,
        json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": "make-cm"},
            "spec": {
                "input": "cm-input",
                "executor": {"resource": {
                    "manifest": {"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "${task.name}-out"},
                        "data": {"greeting": "${input.greeting}", "n": "${input.nested.n}", "done": "false"}},
                    "successCondition": "$.data.done == \"true\"",
                    // CEL for one condition, JSONPath for the other.
                    "failureCondition": "self.data.done == \"failed\"",
                    "resultJsonPath": "$.data.answer",
                }},
            },
        }),
    )
    .await;
    // Without its input the Task waits in Staging and says why.
    let waiting = wait_for("make-cm to wait for its input", T, || async {
        let t = tasks(&env).get("make-cm").await.ok()?;
        let s = t.status?;
        (s.phase == TaskPhase::Staging && s.message.contains("TaskObject cm-input")).then_some(())
    })
    .await;
    let () = waiting;
    create(&objects, &input).await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let cm = wait_for("the ConfigMap the Task creates", T, || async {
        cms.get_opt("make-cm-out").await.ok().flatten()
    })
    .await;
    let data = cm.data.clone().unwrap_or_default();
    assert_eq!(data.get("greeting").map(String::as_str), Some("hello"));
    assert_eq!(data.get("n").map(String::as_str), Some("7"));
    assert_eq!(cm.owner_references()[0].kind, "Task");
    wait_phase(&env, "make-cm", TaskPhase::Running, T).await;
    cms.patch(
        "make-cm-out",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"done": "true", "answer": "42"}})),
    )
    .await
    .expect("patch the ConfigMap");
    let done = wait_phase(&env, "make-cm", TaskPhase::Success, T).await;
    assert_eq!(done.status.expect("status").result, Some(json!("42")));
    env.cleanup().await;
}

fn pod_task(name: &str, queue: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut spec = json!({"executor": {"pod": {
        "queue": queue,
        "template": {"spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "busybox",
                "args": ["echo", "${task.name}"],
                "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]}},
    }}});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            s.insert(k.clone(), v.clone());
        }
    }
    json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "Task", "metadata": {"name": name}, "spec": spec})
}

#[tokio::test]
async fn pod_executor_tasks_go_through_the_gate() {
    let (env, queue) = env_and_queue!("task-pod", json!({"cpu": "1"}), "BestEffortFIFO");
    create_task(&env, pod_task("first", &queue, json!({}))).await;
    wait_phase(&env, "first", TaskPhase::Running, T).await;
    env.wait_queue_counts(&queue, 0, 1).await;
    create_task(&env, pod_task("second", &queue, json!({}))).await;
    env.wait_queue_counts(&queue, 1, 1).await;
    let second = wait_for("second to say it waits at the gate", T, || async {
        let t = tasks(&env).get("second").await.ok()?;
        t.status
            .as_ref()
            .filter(|s| s.message.contains("gate"))
            .map(|_| t.clone())
    })
    .await;
    assert_eq!(phase(&second), TaskPhase::Running);
    let pod: Pod = env.pods().get("second-task").await.expect("second's pod");
    assert!(is_gated(&pod), "the Task's pod waits behind the gate");
    assert_eq!(pod.labels().get("sluice.dev/queue"), Some(&queue));
    assert_eq!(pod.owner_references()[0].name, "second");

    end_pod(&env.pods(), "first-task", "Succeeded").await;
    let first = wait_phase(&env, "first", TaskPhase::Success, T).await;
    assert_eq!(first.status.expect("status").message, "pod succeeded");
    env.wait_queue_counts(&queue, 0, 1).await;
    end_pod(&env.pods(), "second-task", "Failed").await;
    let second = wait_phase(&env, "second", TaskPhase::Failed, T).await;
    let message = second.status.expect("status").message;
    assert!(message.starts_with("pod failed"), "{message}");
    env.cleanup().await;
}

#[tokio::test]
async fn kill_and_timeout_end_a_long_task() {
    let (env, queue) = env_and_queue!("task-kill", json!({"cpu": "4"}), "BestEffortFIFO");
    create_task(&env, pod_task("long", &queue, json!({}))).await;
    create_task(&env, pod_task("timed", &queue, json!({"timeout": "3s"}))).await;
    wait_phase(&env, "long", TaskPhase::Running, T).await;
    wait_for("long's pod to run", T, || async {
        let p = env.pods().get("long-task").await.ok()?;
        (p.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
    kill_now(&env, "long").await;
    let killed = wait_killed(&env, "long", "killTimestamp", T).await;
    assert!(went_through_killing(&killed), "went through Killing");
    wait_absent(&env.pods(), "long-task", T).await;

    let timed = wait_phase(&env, "timed", TaskPhase::Killed, T).await;
    let status = timed.status.expect("status");
    assert_eq!(status.message, "killed: timeout 3s exceeded");
    assert!(status.killing_at.is_some());
    env.cleanup().await;
}

#[tokio::test]
async fn task_cluster_admits_only_what_the_queue_allows_and_runs_every_task_in_order() {
    let (env, queue) = env_and_queue!("task-cluster", json!({"cpu": "2"}), "BestEffortFIFO");
    let clusters: Api<TaskCluster> = Api::namespaced(env.client.clone(), &env.namespace);
    create_pool(
        &env,
        &queue,
        json!({"minWorkers": 1, "maxWorkers": 5, "slotsPerWorker": 1, "maxTasksPerWorker": 2,
            "idleTimeout": "1s"}),
    )
    .await;

    // Follow the workers: never more than 2 admitted and running at once.
    let peak = Arc::new(Mutex::new(0usize));
    let watch = {
        let peak = peak.clone();
        let pods = env.pods();
        tokio::spawn(async move {
            let mut admitted: BTreeSet<String> = BTreeSet::new();
            let mut stream = std::pin::pin!(
                watcher(
                    pods,
                    watcher::Config::default().labels("sluice.dev/task-cluster=pool")
                )
                .default_backoff()
            );
            while let Some(event) = stream.next().await {
                let (pod, gone) = match event {
                    Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) => (p, false),
                    Ok(watcher::Event::Delete(p)) => (p, true),
                    _ => continue,
                };
                if !gone && !is_gated(&pod) && !is_ended(&pod) {
                    admitted.insert(pod.name_any());
                } else {
                    admitted.remove(&pod.name_any());
                }
                let mut p = peak.lock().expect("peak");
                *p = (*p).max(admitted.len());
            }
        })
    };

    for i in 0..5 {
        create_task(
            &env,
            json!({
                "apiVersion": "sluice.dev/v1alpha1", "kind": "Task",
                "metadata": {"name": format!("job-{i}")},
                "spec": {"executor": {"container": {"cluster": "pool", "command": ["sh", "-c", "echo {\"i\": ${task.name}}"]}}},
            }),
        )
        .await;
    }
    // 5 Tasks wait: 5 workers are asked for, the queue admits 2.
    wait_for("5 workers, 2 admitted", T, || async {
        let s = clusters.get("pool").await.ok()?.status?;
        (s.workers == 5 && s.admitted == 2 && s.gated == 3).then_some(())
    })
    .await;
    let dwl = env
        .workloads()
        .get("taskcluster-pool")
        .await
        .expect("the TaskCluster's DynamicWorkload");
    assert_eq!(dwl.spec.pod_sets[0].min_count, 1);
    assert_eq!(dwl.spec.pod_sets[0].max_count, Some(5));

    // Play the kubelet: end each running Task's container; all 5 must finish, started in the order
    // they were created.
    wait_for(
        "all 5 Tasks to succeed",
        Duration::from_secs(180),
        || async {
            end_running_containers(&env).await;
            let all = tasks(&env).list(&ListParams::default()).await.ok()?.items;
            (all.len() == 5 && all.iter().all(|t| phase(t) == TaskPhase::Success)).then_some(())
        },
    )
    .await;
    let all = tasks(&env)
        .list(&ListParams::default())
        .await
        .expect("tasks")
        .items;
    for t in &all {
        let s = t.status.as_ref().expect("status");
        assert_eq!(s.result, Some(json!({"task": t.name_any()})));
        assert_eq!(s.executor.as_deref(), Some("container"));
    }
    let mut by_start: Vec<_> = all
        .iter()
        .map(|t| {
            (
                t.status
                    .as_ref()
                    .and_then(|s| s.started_at.clone())
                    .unwrap_or_default(),
                t.name_any(),
            )
        })
        .collect();
    by_start.sort();
    let names: Vec<_> = by_start.iter().map(|(_, n)| n.clone()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(
        names, sorted,
        "Tasks started in the order they were created"
    );
    watch.abort();
    let peak = *peak.lock().expect("peak");
    assert!(
        peak <= 2,
        "{peak} workers admitted at once; the queue allows 2"
    );
    assert!(peak >= 1);

    // Nothing waits any more: extra workers go (idleTimeout 1s), the minimum stays.
    wait_for("the pool to shrink to minWorkers", T, || async {
        let s = clusters.get("pool").await.ok()?.status?;
        (s.workers == 1 && s.waiting_tasks == 0).then_some(())
    })
    .await;
    env.cleanup().await;
}
