//! The set-up of the preemption tests: pods of a PriorityClass, waits, Events, Ray, and the
//! [`Scene`] of one test.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::json;

use super::watch::{WorkloadHistory, contains_any};
use super::{PREEMPTION_TIMEOUT, QUIET_WINDOW};
use crate::support::*;

// ---------------------------------------------------------------------------------------------
// Pods.

/// A governed pod with a PriorityClass (the Priority admission plugin sets its `spec.priority`).
pub(crate) fn prio_pod(name: &str, queue: &str, cpu: &str, class: &str) -> Pod {
    let mut p = pod(name, queue, cpu);
    p.spec.as_mut().expect("spec").priority_class_name = Some(class.to_string());
    p
}

/// `pod` as a member of the plain workload `workload` whose first `min_count` pods are its gang.
pub(crate) fn member(pod: Pod, workload: &str, min_count: i32) -> Pod {
    with_annotations(
        with_labels(pod, &[("sluice.dev/workload", workload)]),
        &[("sluice.dev/min-count", &min_count.to_string())],
    )
}

/// Admitted, not ended and not terminating: what holds quota as issue 18 counts it (a victim's
/// quota is freed once its pods are gone or terminating).
pub(crate) fn holds_quota(pod: &Pod) -> bool {
    !is_gated(pod) && !is_ended(pod) && pod.metadata.deletion_timestamp.is_none()
}

pub(crate) fn holding_cpu(pods: &[Pod]) -> i64 {
    pods.iter().filter(|p| holds_quota(p)).map(cpu_millis).sum()
}

pub(crate) async fn wait_admitted(env: &TestEnv, name: &str) -> Pod {
    wait_for(
        &format!("pod {name} to be admitted"),
        PREEMPTION_TIMEOUT,
        || async { env.pods().get(name).await.ok().filter(holds_quota) },
    )
    .await
}

pub(crate) async fn wait_gone(env: &TestEnv, names: &[&str]) {
    for name in names {
        wait_absent(&env.pods(), name, PREEMPTION_TIMEOUT).await;
    }
}

/// Waits until sluice has looked at the waiting pod `name`: its DynamicWorkload says why it waits.
pub(crate) async fn wait_seen_waiting(env: &TestEnv, name: &str) -> String {
    env.wait_workload_status(
        name,
        &format!("the DynamicWorkload of the waiting pod {name} to say why it waits"),
        PREEMPTION_TIMEOUT,
        |s| s.pending_pods > 0 && !s.message.is_empty(),
    )
    .await
    .message
}

/// Watches for `QUIET_WINDOW` that `check` holds at every poll; fails at the first poll it does not.
pub(crate) async fn stays<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let until = tokio::time::Instant::now() + QUIET_WINDOW;
    while tokio::time::Instant::now() < until {
        if let Err(broken) = check().await {
            panic!("{what}: {broken}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Fails unless every pod named holds quota and every pod in `waiting` is still gated.
pub(crate) async fn holding_and_waiting(
    env: &TestEnv,
    holding: &[&str],
    waiting: &[&str],
) -> Result<(), String> {
    let get = |name: &str| {
        let name = name.to_string();
        async move {
            let pod = env.pods().get(&name).await;
            pod.map_err(|e| format!("{name}: {e}"))
        }
    };
    for name in holding {
        if !holds_quota(&get(name).await?) {
            return Err(format!("{name} no longer holds quota"));
        }
    }
    for name in waiting {
        if !is_gated(&get(name).await?) {
            return Err(format!("{name} was admitted"));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Events.

pub(crate) fn events(env: &TestEnv) -> Api<Event> {
    Api::namespaced(env.client.clone(), &env.namespace)
}

/// Waits for an Event on the object `kind`/`name` whose reason says it was preempted.
pub(crate) async fn wait_preemption_event(env: &TestEnv, kind: &str, name: &str) -> Event {
    let fields = format!("involvedObject.kind={kind},involvedObject.name={name}");
    wait_for(
        &format!("an Event on {kind} {name} saying it was preempted"),
        PREEMPTION_TIMEOUT,
        || async {
            let list = events(env)
                .list(&ListParams::default().fields(&fields))
                .await
                .ok()?;
            list.items.into_iter().find(|e| {
                e.reason
                    .as_deref()
                    .is_some_and(|r| r.to_lowercase().contains("preempt"))
            })
        },
    )
    .await
}

/// An Event in the namespace, or a DynamicWorkload status, that mentions one of `needles`.
pub(crate) async fn said_anywhere(
    env: &TestEnv,
    history: &WorkloadHistory,
    needles: &[&str],
) -> Option<String> {
    if let Some(found) = history.mentions(needles) {
        return Some(found);
    }
    let list = events(env).list(&ListParams::default()).await.ok()?;
    list.items.into_iter().find_map(|e| {
        let text = format!(
            "{} {}",
            e.reason.clone().unwrap_or_default(),
            e.message.clone().unwrap_or_default()
        );
        contains_any(&text, needles).then(|| {
            format!(
                "Event on {} {}: {text}",
                e.involved_object.kind.unwrap_or_default(),
                e.involved_object.name.unwrap_or_default()
            )
        })
    })
}

// ---------------------------------------------------------------------------------------------
// Ray.

/// A RayCluster of 1-cpu pods: the head and one worker group, its pods in PriorityClass `class`.
pub(crate) fn raycluster_of_class(
    name: &str,
    queue: &str,
    class: &str,
    replicas: i64,
    min: i64,
) -> DynamicObject {
    let container = |n: &str| ray_container(n, "1", "1Gi");
    let pod = json!({"priorityClassName": class, "terminationGracePeriodSeconds": 0});
    raycluster(
        name,
        Some(queue),
        raycluster_spec([replicas, min, 4], container, pod),
    )
}

pub(crate) fn ray_node_type(labels: &BTreeMap<String, String>) -> Option<&str> {
    labels.get("ray.io/node-type").map(String::as_str)
}

// ---------------------------------------------------------------------------------------------
// The scene of one test: its namespace, PriorityClasses, the DynamicWorkloads' history and the queue.

pub(crate) struct Scene {
    pub(crate) env: TestEnv,
    pub(crate) classes: Priorities,
    pub(crate) history: WorkloadHistory,
    pub(crate) queue: String,
}

impl Scene {
    /// [`Scene::with_spec`] with a BestEffortFIFO queue of `cpu`.
    pub(crate) async fn new(env: TestEnv, classes: &[(&str, i32)], cpu: &str) -> Scene {
        let spec = json!({"quota": {"cpu": cpu}, "queueingStrategy": "BestEffortFIFO"});
        Scene::with_spec(env, classes, spec).await
    }

    /// The PriorityClasses `(short name, value)`, the history watch, then the queue `q` with `spec`.
    pub(crate) async fn with_spec(
        mut env: TestEnv,
        classes: &[(&str, i32)],
        spec: serde_json::Value,
    ) -> Scene {
        let classes = Priorities::create(&env, classes).await;
        let history = WorkloadHistory::start(&env).await;
        let queue = env.queue_with_spec("q", spec).await;
        Scene {
            env,
            classes,
            history,
            queue,
        }
    }

    /// A pod of the queue asking for `cpu`, in the PriorityClass `class` (its short name).
    pub(crate) fn pod(&self, name: &str, cpu: &str, class: &str) -> Pod {
        prio_pod(name, &self.queue, cpu, &self.classes.name(class))
    }

    pub(crate) async fn create(&self, name: &str, cpu: &str, class: &str) -> Pod {
        self.env.create_pod(self.pod(name, cpu, class)).await
    }

    /// No workload was preempted twice by one preemptor; the PriorityClasses and the namespace go.
    pub(crate) async fn end(self) {
        self.history
            .assert_no_workload_preempted_twice_by_one_preemptor();
        drop(self.classes);
        self.env.cleanup().await;
    }
}
