//! What the Task and TaskCluster controllers know about a TaskCluster's workers. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::api::{ADMISSION_GATE, Task, TaskClusterSpec, TaskPhase};

/// One worker pod, as the controllers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worker {
    pub name: String,
    /// Not behind the sluice gate.
    pub admitted: bool,
    /// Phase Running and not being deleted.
    pub running: bool,
    pub terminating: bool,
    /// Ended (Succeeded / Failed): it must be replaced.
    pub ended: bool,
    /// Ephemeral containers in its spec plus Tasks assigned to it whose container is not there yet.
    pub used: i32,
    /// Tasks running on it (assigned and not ended, or ephemeral containers still running).
    pub busy: i32,
    /// When its last Task ended, or when it started running (RFC 3339), for idleness.
    pub idle_since: Option<String>,
    pub created: String,
}

fn is_gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == ADMISSION_GATE))
}

/// Whether the Task runs (or is about to run) on a worker of a TaskCluster.
pub fn assigned_worker(task: &Task) -> Option<&str> {
    let status = task.status.as_ref()?;
    if status.executor.as_deref() != Some("container") {
        return None;
    }
    status.worker.as_deref()
}

/// The workers of one cluster, from its pods and the Tasks of its namespace, oldest first.
pub fn workers(pods: &[Pod], tasks: &[Task]) -> Vec<Worker> {
    let mut assigned: BTreeMap<&str, Vec<&Task>> = BTreeMap::new();
    for t in tasks {
        if let Some(w) = assigned_worker(t) {
            assigned.entry(w).or_default().push(t);
        }
    }
    let mut out: Vec<Worker> = pods
        .iter()
        .map(|pod| {
            let tasks = assigned
                .get(pod.name_any().as_str())
                .map(Vec::as_slice)
                .unwrap_or_default();
            worker(pod, tasks)
        })
        .collect();
    out.sort_by(|a, b| a.created.cmp(&b.created).then(a.name.cmp(&b.name)));
    out
}

fn is_final(task: &Task) -> bool {
    task.status.as_ref().is_some_and(|s| s.phase.is_final())
}

/// The names of the pod's ephemeral containers (one per Task it ever ran).
fn ephemeral_containers(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_ref())
        .map(|c| c.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default()
}

/// Ephemeral containers of the pod whose status does not say terminated.
fn unterminated(pod: &Pod, containers: &[String]) -> i32 {
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.ephemeral_container_statuses.as_deref())
        .unwrap_or_default();
    let terminated = |name: &String| {
        statuses
            .iter()
            .any(|s| &s.name == name && s.state.as_ref().is_some_and(|st| st.terminated.is_some()))
    };
    containers.iter().filter(|c| !terminated(c)).count() as i32
}

/// Tasks assigned to the worker, not ended, whose container is not in its spec yet.
fn not_yet_added(tasks: &[&Task], containers: &[String]) -> i32 {
    tasks
        .iter()
        .filter(|t| {
            let container = t
                .status
                .as_ref()
                .and_then(|s| s.handle.as_ref())
                .and_then(|h| h.container.as_ref());
            container.is_some_and(|c| !containers.contains(c)) && !is_final(t)
        })
        .count() as i32
}

/// One worker pod with the Tasks assigned to it.
fn worker(pod: &Pod, tasks: &[&Task]) -> Worker {
    let containers = ephemeral_containers(pod);
    let active_tasks = tasks.iter().filter(|t| !is_final(t)).count() as i32;
    let last_end = tasks
        .iter()
        .filter_map(|t| t.status.as_ref().and_then(|s| s.finished_at.clone()))
        .max();
    let status = pod.status.as_ref();
    let started = status
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0.to_string());
    let phase = status.and_then(|s| s.phase.as_deref());
    let terminating = pod.metadata.deletion_timestamp.is_some();
    Worker {
        name: pod.name_any(),
        admitted: !is_gated(pod),
        running: phase == Some("Running") && !terminating,
        terminating,
        ended: matches!(phase, Some("Succeeded") | Some("Failed")),
        used: containers.len() as i32 + not_yet_added(tasks, &containers),
        busy: active_tasks.max(unterminated(pod, &containers)),
        idle_since: last_end.into_iter().chain(started).max(),
        created: pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_default(),
    }
}

/// The worker a new Task should run on: admitted, running, with a free slot and below the Task
/// limit; the busiest such worker first (idle ones can then be removed). Err: why none.
pub fn choose_worker(workers: &[Worker], spec: &TaskClusterSpec) -> Result<String, String> {
    workers
        .iter()
        .filter(|w| w.admitted && w.running && w.busy < spec.slots_per_worker)
        .filter(|w| w.used < spec.max_tasks_per_worker)
        .max_by(|a, b| a.busy.cmp(&b.busy).then(b.created.cmp(&a.created)).then(b.name.cmp(&a.name)))
        .map(|w| w.name.clone())
        .ok_or_else(|| {
            let live = workers.iter().filter(|w| !w.terminating && !w.ended).count();
            let admitted = workers.iter().filter(|w| w.admitted && w.running).count();
            format!(
                "waiting for a free worker: {live} worker(s), {admitted} admitted and running, all slots busy or retiring"
            )
        })
}

/// Slots free for new Tasks on admitted, running workers below their Task limit.
pub fn free_slots(workers: &[Worker], spec: &TaskClusterSpec) -> i32 {
    workers
        .iter()
        .filter(|w| w.admitted && w.running)
        .map(|w| {
            (spec.slots_per_worker - w.busy)
                .min(spec.max_tasks_per_worker - w.used)
                .max(0)
        })
        .sum()
}

/// Tasks of the cluster waiting for a worker that came before `me` (creation time, then name):
/// workers go to Tasks strictly in the order they were created.
pub fn waiting_ahead(tasks: &[Task], cluster: &str, me: &Task) -> usize {
    let key = |t: &Task| {
        (
            t.metadata.creation_timestamp.as_ref().map(|c| c.0),
            t.name_any(),
        )
    };
    let mine = key(me);
    tasks
        .iter()
        .filter(|t| {
            t.spec
                .executor
                .container
                .as_ref()
                .is_some_and(|c| c.cluster == cluster)
        })
        .filter(|t| t.spec.kill_timestamp.is_none())
        .filter(|t| {
            t.status.as_ref().is_none_or(|s| {
                s.phase == TaskPhase::Staging && !s.message.starts_with("waiting for its input")
            })
        })
        .filter(|t| key(t) < mine)
        .count()
}

/// Tasks of a cluster waiting for a worker (Staging, not killed) and running on one.
pub fn task_counts(tasks: &[Task], cluster: &str) -> (i32, i32) {
    let mut waiting = 0;
    let mut running = 0;
    for t in tasks.iter().filter(|t| {
        t.spec
            .executor
            .container
            .as_ref()
            .is_some_and(|c| c.cluster == cluster)
    }) {
        let phase = t.status.as_ref().map(|s| s.phase).unwrap_or_default();
        match phase {
            TaskPhase::Staging if t.spec.kill_timestamp.is_none() => waiting += 1,
            TaskPhase::Running | TaskPhase::Killing => running += 1,
            _ => {}
        }
    }
    (waiting, running)
}

/// How many workers the cluster should have: enough for every waiting and running Task, at least
/// minWorkers, at most maxWorkers (workers to retire do not count).
pub fn desired_workers(spec: &TaskClusterSpec, waiting: i32, running: i32) -> i32 {
    let slots = spec.slots_per_worker.max(1);
    let needed = (waiting + running + slots - 1) / slots;
    needed
        .max(spec.min_workers)
        .min(spec.max_workers.max(spec.min_workers))
}

/// What the TaskCluster controller should do with its workers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerPlan {
    /// Workers to create.
    pub create: i32,
    /// Workers to delete, with why.
    pub delete: Vec<(String, String)>,
    /// Idle extra workers not removed yet: look again this much later (seconds).
    pub recheck_secs: Option<i64>,
}

/// Decides creations and deletions. Pure. `now` and `idle_since` are RFC 3339 / seconds.
pub fn plan_workers(
    spec: &TaskClusterSpec,
    workers: &[Worker],
    waiting: i32,
    running: i32,
    now: jiff::Timestamp,
    idle_timeout_secs: i64,
) -> WorkerPlan {
    let mut plan = WorkerPlan::default();
    let desired = desired_workers(spec, waiting, running);
    let mut live: Vec<&Worker> = Vec::new();
    for w in workers.iter().filter(|w| !w.terminating) {
        if w.ended {
            plan.delete
                .push((w.name.clone(), "worker pod ended".into()));
        } else if w.used >= spec.max_tasks_per_worker && w.busy == 0 {
            plan.delete.push((
                w.name.clone(),
                format!("retired after {} Tasks (maxTasksPerWorker)", w.used),
            ));
        } else {
            live.push(w);
        }
    }
    let mut excess = live.len() as i32 - desired;
    if excess > 0 {
        // Gated workers nobody needs go first (newest first): they hold no quota and no Task.
        for w in live.iter().rev().filter(|w| !w.admitted && w.busy == 0) {
            if excess == 0 {
                break;
            }
            plan.delete
                .push((w.name.clone(), "not needed: no Task waits for it".into()));
            excess -= 1;
        }
        // Then admitted idle workers above minWorkers, once idle for idleTimeout.
        for w in live.iter().rev().filter(|w| w.admitted && w.busy == 0) {
            if excess == 0 {
                break;
            }
            let idle_for = w
                .idle_since
                .as_deref()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .map(|t| now.duration_since(t).as_secs())
                .unwrap_or(i64::MAX);
            if idle_for >= idle_timeout_secs {
                plan.delete
                    .push((w.name.clone(), format!("idle for {idle_for}s")));
                excess -= 1;
            } else {
                let left = idle_timeout_secs - idle_for;
                plan.recheck_secs = Some(plan.recheck_secs.map_or(left, |r| r.min(left)));
            }
        }
    } else {
        plan.create = -excess;
    }
    plan
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::api::{ContainerExecutor, TaskHandle, TaskStatus};
    use serde_json::json;

    fn spec() -> TaskClusterSpec {
        TaskClusterSpec {
            min_workers: 1,
            max_workers: 4,
            slots_per_worker: 1,
            max_tasks_per_worker: 2,
            idle_timeout: "30s".into(),
            template: json!({}),
        }
    }

    fn pod(name: &str, gated: bool, ephemeral: &[&str], created: &str) -> Pod {
        let gates = if gated {
            json!([{"name": ADMISSION_GATE}])
        } else {
            json!([])
        };
        let eph: Vec<_> = ephemeral
            .iter()
            .map(|n| json!({"name": n, "image": "i"}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"containers": [], "schedulingGates": gates, "ephemeralContainers": eph},
            "status": {"phase": if gated {"Pending"} else {"Running"},
                       "ephemeralContainerStatuses": ephemeral.iter().map(|n| json!({"name": n, "image": "i", "imageID": "", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0}}})).collect::<Vec<_>>()},
        }))
        .unwrap()
    }

    fn task(name: &str, worker: Option<&str>, phase: TaskPhase) -> Task {
        let mut t = Task::new(name, Default::default());
        t.spec.executor.container = Some(ContainerExecutor {
            cluster: "c".into(),
            ..Default::default()
        });
        t.status = Some(TaskStatus {
            phase,
            executor: worker.map(|_| "container".into()),
            worker: worker.map(str::to_string),
            handle: worker.map(|_| TaskHandle {
                kind: "EphemeralContainer".into(),
                container: Some(format!("t-{name}")),
                ..Default::default()
            }),
            ..Default::default()
        });
        t
    }

    #[test]
    fn picks_an_admitted_free_worker_below_the_task_limit() {
        let pods = vec![
            pod("w0", false, &["t-a", "t-b"], "2025-01-01T00:00:00Z"),
            pod("w1", false, &[], "2025-01-01T00:00:01Z"),
            pod("w2", true, &[], "2025-01-01T00:00:02Z"),
        ];
        let tasks = vec![
            task("a", Some("w0"), TaskPhase::Success),
            task("b", Some("w0"), TaskPhase::Success),
            task("c", Some("w1"), TaskPhase::Running),
            task("d", None, TaskPhase::Staging),
        ];
        let ws = workers(&pods, &tasks);
        assert_eq!(ws[0].used, 2, "w0 ran its two Tasks");
        assert_eq!(ws[1].busy, 1, "w1 runs c (its container is not added yet)");
        assert_eq!(ws[1].used, 1);
        // w0 is at its limit, w1 busy, w2 gated: nobody.
        assert!(choose_worker(&ws, &spec()).is_err());
        let mut two_slots = spec();
        two_slots.slots_per_worker = 2;
        assert_eq!(choose_worker(&ws, &two_slots).unwrap(), "w1");
        assert_eq!(task_counts(&tasks, "c"), (1, 1));
        assert_eq!(free_slots(&ws, &two_slots), 1);
        let mut e = task("e", None, TaskPhase::Staging);
        e.metadata.creation_timestamp = tasks[3].metadata.creation_timestamp.clone();
        assert_eq!(waiting_ahead(&tasks, "c", &e), 1, "d comes first");
        assert_eq!(waiting_ahead(&tasks, "c", &tasks[3]), 0);
        assert_eq!(task_counts(&tasks, "other"), (0, 0));
    }

    /// A worker (running when admitted) that ran `used` Tasks, `busy` of them now, idle since
    /// `idle_since`.
    pub(crate) fn w(name: &str, admitted: bool, used: i32, busy: i32, idle_since: &str) -> Worker {
        Worker {
            name: name.into(),
            admitted,
            running: admitted,
            terminating: false,
            ended: false,
            used,
            busy,
            idle_since: Some(idle_since.into()),
            created: name.into(),
        }
    }

    #[test]
    fn worker_plans() {
        let now: jiff::Timestamp = "2025-01-01T00:01:00Z".parse().unwrap();
        let s = spec();
        // 3 Tasks wait, one worker: create 2 more (max 4).
        let one = vec![w("a", true, 0, 0, "2025-01-01T00:00:00Z")];
        assert_eq!(plan_workers(&s, &one, 3, 0, now, 30).create, 2);
        // A worker at its Task limit and idle is retired; a replacement is created.
        let spent = vec![w("a", true, 2, 0, "2025-01-01T00:00:59Z")];
        let p = plan_workers(&s, &spent, 0, 0, now, 30);
        assert_eq!(p.delete.len(), 1);
        assert!(p.delete[0].1.contains("retired"));
        assert_eq!(p.create, 1);
        // Nothing waits: gated extras go at once, admitted idle extras after idleTimeout.
        let extra = vec![
            w("a", true, 1, 0, "2025-01-01T00:00:00Z"),
            w("b", true, 1, 0, "2025-01-01T00:00:50Z"),
            w("c", false, 0, 0, "2025-01-01T00:00:50Z"),
        ];
        let p = plan_workers(&s, &extra, 0, 0, now, 30);
        let deleted: Vec<&str> = p.delete.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(deleted, vec!["c", "a"]);
        assert_eq!(p.recheck_secs, Some(20));
        assert_eq!(p.create, 0);
        // Busy workers stay.
        let busy = vec![
            w("a", true, 1, 1, "2025-01-01T00:00:00Z"),
            w("b", true, 1, 1, "2025-01-01T00:00:00Z"),
        ];
        assert!(plan_workers(&s, &busy, 0, 2, now, 30).delete.is_empty());
    }

    #[test]
    fn desired_worker_counts() {
        let s = spec();
        assert_eq!(desired_workers(&s, 0, 0), 1);
        assert_eq!(desired_workers(&s, 2, 1), 3);
        assert_eq!(desired_workers(&s, 10, 0), 4);
        let mut two = spec();
        two.slots_per_worker = 2;
        assert_eq!(desired_workers(&two, 3, 0), 2);
    }
}
