//! The Task controller killed (SIGKILL) in the middle of a run and restarted: no Task is lost, none
//! runs twice. Its own test binary: it stops the shared sluice process, which other tests must not
//! see. Run with `hack/test.sh --test e2e_tasks_restart`.

mod support;
#[path = "support/tasks.rs"]
mod task_support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::ListParams;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use sluice::api::TaskPhase;
use support::*;
use task_support::*;

#[tokio::test]
async fn a_restarted_controller_loses_no_task_and_runs_none_twice() {
    let (mut env, queue) = env_and_queue!("task-restart", json!({"cpu": "2"}), "BestEffortFIFO");
    let server = test_server(Duration::from_secs(30)).await;

    // Every pod a Task ever had, by uid: a Task run twice would show two.
    let pod_uids: Arc<Mutex<BTreeMap<String, BTreeSet<String>>>> = Arc::default();
    let watch = {
        let pod_uids = pod_uids.clone();
        let pods = env.pods();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(
                watcher(pods, watcher::Config::default().labels("sluice.dev/task"))
                    .default_backoff()
            );
            while let Some(event) = stream.next().await {
                if let Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) = event {
                    let task = p
                        .labels()
                        .get("sluice.dev/task")
                        .cloned()
                        .unwrap_or_default();
                    pod_uids
                        .lock()
                        .expect("uids")
                        .entry(task)
                        .or_default()
                        .insert(p.uid().unwrap_or_default());
                }
            }
        })
    };

    const N: usize = 6;
    for i in 0..N {
        create_task(
            &env,
            json!({
                "apiVersion": "sluice.dev/v1alpha1", "kind": "Task",
                "metadata": {"name": format!("p{i}")},
                "spec": {"executor": {"pod": {"queue": queue, "template": {"spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "main", "image": "busybox",
                        "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]}}}}},
            }),
        )
        .await;
    }
    // A TaskCluster whose queue has room for 2 workers, and 4 container Tasks.
    let pool_queue = env
        .queue("pool", json!({"cpu": "2"}), "BestEffortFIFO")
        .await;
    let cluster: sluice::api::TaskCluster = serde_json::from_value(json!({
        "apiVersion": "sluice.dev/v1alpha1", "kind": "TaskCluster",
        "metadata": {"name": "pool", "labels": {"sluice.dev/queue": pool_queue}},
        "spec": {"minWorkers": 1, "maxWorkers": 4, "maxTasksPerWorker": 3,
            "template": {"spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "worker", "image": "busybox",
                "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}]}}},
    }))
    .expect("cluster");
    create(
        &kube::Api::<sluice::api::TaskCluster>::namespaced(env.client.clone(), &env.namespace),
        &cluster,
    )
    .await;
    const C: usize = 4;
    for i in 0..C {
        create_task(
            &env,
            json!({
                "apiVersion": "sluice.dev/v1alpha1", "kind": "Task",
                "metadata": {"name": format!("c{i}")},
                "spec": {"executor": {"container": {"cluster": "pool", "command": ["true"]}}},
            }),
        )
        .await;
    }
    wait_for(
        "2 container Tasks running",
        Duration::from_secs(60),
        || async {
            let all = tasks(&env).list(&ListParams::default()).await.ok()?.items;
            let running = all
                .iter()
                .filter(|t| t.name_any().starts_with('c') && phase(t) == TaskPhase::Running)
                .count();
            (running == 2).then_some(())
        },
    )
    .await;

    // An HTTP Task whose request is in flight when the controller dies.
    create_task(
        &env,
        json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "Task",
            "metadata": {"name": "inflight"},
            "spec": {"executor": {"http": {"request": {"url": format!("http://{}/slow/inflight", server.addr)}}}},
        }),
    )
    .await;
    wait_for(
        "the slow request to arrive",
        Duration::from_secs(60),
        || async { (server.hits("/slow/inflight") == 1).then_some(()) },
    )
    .await;
    env.wait_queue_counts(&queue, (N - 2) as i32, 2).await;

    // End one Task's pod and the running Tasks' containers, and kill the controller at once.
    end_running_containers(&env).await;
    let running: Vec<String> = holding(&env.list_pods().await)
        .iter()
        .filter(|p| p.labels().contains_key("sluice.dev/task"))
        .map(|p| p.name_any())
        .collect();
    end_pod(&env.pods(), &running[0], "Succeeded").await;
    kill_sluice();
    // While it is down, the other admitted pod ends too.
    end_pod(&env.pods(), &running[1], "Succeeded").await;
    restart_sluice();

    // Keep ending admitted pods and started containers until every Task has ended.
    let all = wait_for("every Task to end", Duration::from_secs(180), || async {
        end_running_containers(&env).await;
        for p in holding(&env.list_pods().await) {
            if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                && p.labels().contains_key("sluice.dev/task")
                && p.annotations().get(KWOK_PHASE_ANNOTATION).is_none()
            {
                end_pod(&env.pods(), &p.name_any(), "Succeeded").await;
            }
        }
        let all = tasks(&env).list(&ListParams::default()).await.ok()?.items;
        (all.len() == N + 1 + C && all.iter().all(|t| phase(t).is_final())).then_some(all)
    })
    .await;
    watch.abort();

    for t in &all {
        let name = t.name_any();
        let status = t.status.as_ref().expect("status");
        if name == "inflight" {
            assert_eq!(status.phase, TaskPhase::Failed);
            assert!(
                status.message.contains("not repeated"),
                "{}",
                status.message
            );
        } else {
            assert_eq!(
                status.phase,
                TaskPhase::Success,
                "{name}: {}",
                status.message
            );
        }
    }
    assert_eq!(
        server.hits("/slow/inflight"),
        1,
        "the HTTP request was sent once"
    );
    // Every container Task ran exactly once: its container is in exactly one worker's spec.
    let workers = env
        .pods()
        .list(&ListParams::default().labels("sluice.dev/task-cluster=pool"))
        .await
        .expect("workers")
        .items;
    for i in 0..C {
        let container = format!("t-c{i}");
        let copies = workers
            .iter()
            .filter(|w| {
                w.spec
                    .as_ref()
                    .and_then(|s| s.ephemeral_containers.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.name == container))
            })
            .count();
        assert!(copies <= 1, "Task c{i} ran in {copies} workers");
    }
    let uids = pod_uids.lock().expect("uids").clone();
    assert_eq!(uids.len(), N, "every pod Task had a pod: {uids:?}");
    for (task, set) in &uids {
        assert_eq!(set.len(), 1, "Task {task} ran {} pods", set.len());
    }
    let pods: Vec<Pod> = env
        .pods()
        .list(&ListParams::default().labels("sluice.dev/task"))
        .await
        .expect("task pods")
        .items;
    assert_eq!(pods.len(), N);
    env.cleanup().await;
}
