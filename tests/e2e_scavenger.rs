//! ScavengerJobs end to end on kwok nodes (`hack/cluster.sh up --with-sluice --nodes 2
//! --node-cpu 4`): the real API server, scheduler (its own priority preemption), Job controller
//! and garbage collector, sluice on the host with the default threshold 0.7. A ScavengerJob's pods
//! keep running on kwok until a test ends them (hack/kwok/stages.yaml).
//!
//! The scavenger capacity is the whole cluster's, so these tests take one lock and size their jobs
//! from what `sluice::scavenger::report::gather` finds free when they start: ordinary pods of other
//! tests running meanwhile may change it (each assertion says what it saw).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use sluice::api::{
    SCAVENGER_JOB_LABEL, SCAVENGER_PRIORITY_CLASS, ScavengerJob, ScavengerJobStatus, ScavengerPhase,
};

mod support;
use support::{TestEnv, env_or_skip, wait_for};

/// The threshold sluice runs with in the local cluster (its default).
const THRESHOLD: f64 = 0.7;
const WAIT: Duration = Duration::from_secs(90);

/// One scenario at a time: they all share the cluster's scavenger capacity.
static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn scavengers(env: &TestEnv) -> Api<ScavengerJob> {
    Api::namespaced(env.client.clone(), &env.namespace)
}

fn spec(cpu_milli: i64) -> Value {
    json!({
        "image": "busybox", "command": ["sh", "-c", "sleep 3600"], "duration": "10m",
        "resources": {"requests": {"cpu": format!("{cpu_milli}m"), "memory": "64Mi"},
                      "limits": {"cpu": format!("{cpu_milli}m"), "memory": "64Mi"}},
    })
}

async fn create_sj(env: &TestEnv, name: &str, spec: Value) -> Result<ScavengerJob, kube::Error> {
    let sj: ScavengerJob = serde_json::from_value(json!({
        "apiVersion": "sluice.dev/v1alpha1", "kind": "ScavengerJob",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("ScavengerJob");
    scavengers(env).create(&PostParams::default(), &sj).await
}

async fn status(env: &TestEnv, name: &str) -> Option<ScavengerJobStatus> {
    scavengers(env).get(name).await.ok()?.status
}

/// The running pods of a ScavengerJob.
async fn running_pods(env: &TestEnv, name: &str) -> Vec<Pod> {
    env.pods()
        .list(&ListParams::default().labels(&format!("{SCAVENGER_JOB_LABEL}={name}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        })
        .collect()
}

/// Waits until the ScavengerJob is Running with `pods` pods running, `interrupted` times
/// interrupted; returns its pods.
async fn wait_running(env: &TestEnv, name: &str, pods: usize, interrupted: i32) -> Vec<Pod> {
    env.wait_scavenger_status(name, "Running", WAIT, |s| {
        s.phase == ScavengerPhase::Running && s.interrupted_count == interrupted
    })
    .await;
    wait_for(
        &format!("{pods} running pod(s) of ScavengerJob {name}"),
        WAIT,
        || async {
            let p = running_pods(env, name).await;
            (p.len() == pods).then_some(p)
        },
    )
    .await
}

/// The cluster's scavenger figures now, cpu in millicores: (room for scavengers in all, free).
async fn cpu_room(client: &Client) -> (i64, i64) {
    let r = sluice::scavenger::report::gather(client, THRESHOLD)
        .await
        .expect("the scavenger report");
    let cpu = &r.resources["cpu"];
    (cpu["for_scavengers"], cpu["free"])
}

/// An ordinary pod (no PriorityClass: sluice-default) asking for `cpu_milli`, optionally on `node`.
fn ordinary_pod(name: &str, cpu_milli: i64, node: Option<&str>) -> Pod {
    let mut spec = json!({
        "containers": [{"name": "work", "image": "busybox",
            "resources": {"requests": {"cpu": format!("{cpu_milli}m"), "memory": "64Mi"}}}],
        "terminationGracePeriodSeconds": 0,
    });
    if let Some(node) = node {
        spec["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    }
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name}, "spec": spec}))
    .expect("pod")
}

/// An ordinary pod asking for `cpu_milli` that no node can take (its nodeSelector matches none):
/// it stays Pending and admitted (no gate), so sluice counts it as ordinary work that needs room,
/// while the scheduler has nowhere to place it and evicts nothing for it. The tests of sluice's
/// own choices use it, so the scheduler's choice (by node) does not get in their way.
fn unplaceable_pod(name: &str, cpu_milli: i64) -> Pod {
    let mut pod = ordinary_pod(name, cpu_milli, None);
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_selector = Some(BTreeMap::from([(
            "sluice.dev/e2e-no-such-node".to_string(),
            "true".to_string(),
        )]));
    }
    pod
}

/// A scenario's start: its namespace (without a cluster the test is skipped), [`LOCK`] (the
/// scenarios share the cluster's idle capacity, so they run one at a time) and [`OnPanic`]:
/// `let (env, _one, _clean) = scenario!("sj-name");`.
macro_rules! scenario {
    ($prefix:literal) => {{
        let env = env_or_skip!($prefix);
        let one = LOCK.lock().await;
        let clean = OnPanic(env.client.clone(), env.namespace.clone());
        (env, one, clean)
    }};
}

/// Deletes the scenario's namespace if the test panics, so a failed scenario does not hold the
/// cluster's scavenger capacity for the next ones.
struct OnPanic(Client, String);

impl Drop for OnPanic {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let (client, namespace) = (self.0.clone(), self.1.clone());
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async {
                let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client)
                    .delete(&namespace, &DeleteParams::default())
                    .await;
            });
        })
        .join();
    }
}

async fn wait_pod_running(env: &TestEnv, name: &str) {
    let pods = env.pods();
    wait_for(&format!("pod {name} to run"), WAIT, || async {
        let p = pods.get(name).await.ok()?;
        (p.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
}

/// Deletes the namespace's ScavengerJobs and waits until none of their pods is left, so the next
/// scenario finds the capacity free again; then deletes the namespace.
async fn finish(env: TestEnv) {
    let _ = scavengers(&env)
        .delete_collection(&DeleteParams::foreground(), &ListParams::default())
        .await;
    let _ = env
        .pods()
        .delete_collection(&DeleteParams::background(), &ListParams::default())
        .await;
    let pods = env.pods();
    wait_for("the scenario's pods to be gone", WAIT, || async {
        let left = pods.list(&ListParams::default()).await.ok()?;
        left.items.is_empty().then_some(())
    })
    .await;
    env.cleanup().await;
}

/// The ordinary cpu requests (non-scavenger pods that hold room) on `node`.
async fn ordinary_on(client: &Client, node: &str) -> i64 {
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default().fields(&format!(
            "spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed"
        )))
        .await
        .expect("pods on the node");
    pods.items
        .iter()
        .map(sluice::scavenger::facts::pod_facts)
        .filter(|f| !f.scavenger && f.holds_room)
        .map(|f| f.requests.get("cpu"))
        .sum()
}

async fn node_cpu(client: &Client, node: &str) -> i64 {
    let n = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .get(node)
        .await
        .expect("node");
    sluice::scavenger::facts::node_facts(&n)
        .allocatable
        .get("cpu")
}

#[tokio::test]
async fn runs_on_idle_capacity_is_preempted_by_the_scheduler_and_runs_again() {
    let (env, _one, _clean) = scenario!("sj-preempt");
    let (room, free) = cpu_room(&env.client).await;
    assert!(
        free >= 1000,
        "the cluster needs 1 cpu free for scavengers, has {free}m of {room}m"
    );
    create_sj(&env, "work", spec(1000)).await.expect("create");
    let pods = wait_running(&env, "work", 1, 0).await;
    let first = env
        .wait_scavenger_status("work", "a start recorded", WAIT, |s| {
            s.running_timestamps.len() == 1
        })
        .await;
    assert!(first.job_name.is_some());
    let node = pods[0]
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("scheduled");
    // An ordinary pod on that node that fits only without the scavenger (so the scheduler must
    // preempt it), small enough that scavengers keep 1 cpu of room cluster-wide (so sluice itself
    // has no reason to stop it).
    let size = node_cpu(&env.client, &node).await - ordinary_on(&env.client, &node).await - 500;
    let (room, _) = cpu_room(&env.client).await;
    assert!(
        room - size >= 1000,
        "the scenario needs scavengers to keep 1 cpu with a {size}m pod: room {room}m"
    );
    env.create_pod(ordinary_pod("owner", size, Some(&node)))
        .await;
    wait_pod_running(&env, "owner").await;
    // The scheduler's own preemption evicted it: its event names the victim.
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.namespace);
    let victim = pods[0].name_any();
    wait_for("the scheduler's Preempted event", WAIT, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("Preempted")
                    && e.involved_object.name.as_deref() == Some(victim.as_str())
            })
            .then_some(())
    })
    .await;
    let s = env
        .wait_scavenger_status("work", "interrupted once and running again", WAIT, |s| {
            s.interrupted_count == 1 && s.running_timestamps.len() == 2
        })
        .await;
    assert_eq!(s.interrupted_timestamps.len(), 1, "{s:?}");
    // Room is back on the other node: it runs again.
    let again = wait_running(&env, "work", 1, 1).await;
    assert_ne!(again[0].name_any(), victim);
    // It finishes with exit code 0: Completed.
    end_pods(&env, &again, "Succeeded").await;
    let s = env
        .wait_scavenger_status("work", "Completed", WAIT, |s| {
            s.phase == ScavengerPhase::Completed
        })
        .await;
    assert!(s.finished_timestamp.is_some());
    assert_eq!(s.interrupted_count, 1);
    finish(env).await;
}

async fn end_pods(env: &TestEnv, pods: &[Pod], phase: &str) {
    for p in pods {
        env.pods()
            .patch(
                &p.name_any(),
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"annotations": {"sluice.dev/kwok-phase": phase}}}),
                ),
            )
            .await
            .expect("annotate the pod");
    }
}

#[tokio::test]
async fn an_interrupted_one_starts_before_a_fresh_one() {
    let (env, _one, _clean) = scenario!("sj-order");
    let (room, _) = cpu_room(&env.client).await;
    // Leave scavengers 1.5 cpu: room for one 1-cpu job, never two.
    let blocker = room - 1500;
    assert!(
        blocker > 0,
        "the cluster needs more than 1.5 cpu of scavenger room, has {room}m"
    );
    env.create_pod(unplaceable_pod("blocker", blocker)).await;
    create_sj(&env, "started", spec(1000))
        .await
        .expect("create");
    let pods = wait_running(&env, "started", 1, 0).await;
    create_sj(&env, "fresh", spec(1000)).await.expect("create");
    env.wait_scavenger_status("fresh", "waiting for capacity", WAIT, |s| {
        s.phase == ScavengerPhase::Waiting && s.message.contains("idle capacity")
    })
    .await;
    // Someone deletes the running pod: an interruption, not a failure.
    env.pods()
        .delete(&pods[0].name_any(), &DeleteParams::default())
        .await
        .expect("delete the pod");
    wait_running(&env, "started", 1, 1).await;
    let fresh = status(&env, "fresh").await.expect("status");
    assert_eq!(fresh.phase, ScavengerPhase::Waiting, "{fresh:?}");
    assert!(fresh.running_timestamps.is_empty(), "{fresh:?}");
    finish(env).await;
}

#[tokio::test]
async fn the_threshold_holds_and_the_least_progressed_goes_first() {
    let (env, _one, _clean) = scenario!("sj-threshold");
    let (room, free) = cpu_room(&env.client).await;
    // About six jobs whatever the cluster (1 to 4 cpu each: a bigger cluster, bigger jobs).
    let unit = (free / 6 / 100 * 100).clamp(1000, 4000);
    let fit = (free / unit) as usize;
    assert!(
        fit >= 2,
        "the scenario needs 2 cpu free for scavengers, has {free}m of {room}m"
    );
    // The oldest first, a second apart, so that their progress differs.
    create_sj(&env, "oldest", spec(unit)).await.expect("create");
    wait_running(&env, "oldest", 1, 0).await;
    let started = status(&env, "oldest")
        .await
        .and_then(|s| s.running_timestamps.first().cloned())
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .expect("the oldest's start");
    wait_for("the clock to pass the oldest's start", WAIT, || async {
        (jiff::Timestamp::now().as_second() > started.as_second()).then_some(())
    })
    .await;
    let names: Vec<String> = (0..fit).map(|i| format!("more-{i}")).collect();
    for n in &names {
        create_sj(&env, n, spec(unit)).await.expect("create");
    }
    // One more than fits: `fit` run in all, and the rest waits, saying why.
    let sjs = scavengers(&env);
    let (running, waiting) = wait_for(&format!("{fit} running, 1 waiting"), WAIT, || async {
        let list = sjs.list(&ListParams::default()).await.ok()?;
        let phase = |p| {
            list.items
                .iter()
                .filter(|s| s.status.as_ref().map(|s| s.phase) == Some(p))
                .map(|s| s.name_any())
                .collect::<Vec<_>>()
        };
        let (r, w) = (
            phase(ScavengerPhase::Running),
            phase(ScavengerPhase::Waiting),
        );
        (r.len() == fit && w.len() == 1).then_some((r, w))
    })
    .await;
    assert!(running.contains(&"oldest".to_string()));
    let (room_now, free_now) = cpu_room(&env.client).await;
    assert!(
        free_now < unit,
        "room {room_now}m, free {free_now}m with {running:?} running"
    );
    let w = status(&env, &waiting[0]).await.expect("status");
    assert!(w.message.contains("waiting for idle capacity"), "{w:?}");
    // Ordinary work takes all but one and a half jobs' worth of the scavengers' room: sluice stops
    // all but one, the least progressed first, so the oldest keeps running.
    let blocker = room_now - unit * 3 / 2;
    env.create_pod(unplaceable_pod("owner", blocker)).await;
    env.wait_scavenger_status("oldest", "still running", WAIT, |s| {
        s.phase == ScavengerPhase::Running
    })
    .await;
    for n in running.iter().filter(|n| *n != "oldest") {
        let s = env
            .wait_scavenger_status(n, "interrupted by sluice", WAIT, |s| {
                s.interrupted_count == 1
            })
            .await;
        assert!(s.interrupted_timestamps.len() == 1, "{n}: {s:?}");
    }
    let oldest = status(&env, "oldest").await.expect("status");
    assert_eq!(oldest.interrupted_count, 0, "{oldest:?}");
    assert_eq!(oldest.phase, ScavengerPhase::Running, "{oldest:?}");
    finish(env).await;
}

#[tokio::test]
async fn a_failing_pod_fails_it_for_good() {
    let (env, _one, _clean) = scenario!("sj-fail");
    let mut s = spec(500);
    s["parallelism"] = json!(2);
    create_sj(&env, "crash", s).await.expect("create");
    let pods = wait_running(&env, "crash", 2, 0).await;
    end_pods(&env, &pods[..1], "Failed").await;
    let s = env
        .wait_scavenger_status("crash", "Failed", WAIT, |s| {
            s.phase == ScavengerPhase::Failed
        })
        .await;
    assert!(s.message.contains("exit"), "{s:?}");
    assert_eq!(s.running_timestamps.len(), 1, "never retried: {s:?}");
    assert_eq!(s.interrupted_count, 0);
    finish(env).await;
}

#[tokio::test]
async fn bad_scavenger_jobs_are_refused_at_submit_and_a_vanished_mount_fails_one() {
    let (env, _one, _clean) = scenario!("sj-refuse");
    let mut missing = spec(100);
    missing["mounts"] = json!([{"configMap": "settings", "mountPath": "/etc/work"}]);
    let e = create_sj(&env, "missing", missing.clone())
        .await
        .expect_err("a missing ConfigMap is refused");
    let text = e.to_string();
    assert!(
        text.contains("spec.mounts[0].configMap") && text.contains("does not exist"),
        "{text}"
    );
    for (field, value, says) in [
        ("duration", json!("a while"), "spec.duration"),
        (
            "resources",
            json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}),
            "must equal limits.cpu",
        ),
        (
            "resources",
            json!({"requests": {"cpu": "lots", "memory": "1Gi"}, "limits": {"cpu": "lots", "memory": "1Gi"}}),
            "spec.resources.requests.cpu",
        ),
        ("queueName", json!("no-such-queue"), "spec.queueName"),
    ] {
        let mut bad = spec(100);
        bad[field] = value;
        let e = create_sj(&env, "bad", bad).await.expect_err(field);
        assert!(e.to_string().contains(says), "{field}: {e}");
    }
    // With the ConfigMap it is accepted; when the ConfigMap goes, it fails at once, saying so.
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "settings"}, "data": {"a": "1"}}))
            .expect("ConfigMap");
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("ConfigMap");
    wait_for("the webhook to see the ConfigMap", WAIT, || async {
        create_sj(&env, "missing", missing.clone())
            .await
            .ok()
            .map(|_| ())
    })
    .await;
    wait_running(&env, "missing", 1, 0).await;
    cms.delete("settings", &DeleteParams::default())
        .await
        .expect("delete");
    let s = env
        .wait_scavenger_status("missing", "Failed", WAIT, |s| {
            s.phase == ScavengerPhase::Failed
        })
        .await;
    assert!(s.message.contains("spec.mounts[0].configMap"), "{s:?}");
    finish(env).await;
}

#[tokio::test]
async fn nobody_gets_scavenger_pods_or_jobs_but_through_a_scavenger_job() {
    let (env, _one, _clean) = scenario!("sj-abuse");
    let base = ordinary_pod("forged", 100, None);
    let mut labelled = base.clone();
    labelled.metadata.labels = Some(BTreeMap::from([(
        SCAVENGER_JOB_LABEL.to_string(),
        "x".to_string(),
    )]));
    let mut classed = base.clone();
    if let Some(spec) = classed.spec.as_mut() {
        spec.priority_class_name = Some(SCAVENGER_PRIORITY_CLASS.into());
    }
    let mut owned = labelled.clone();
    if let Some(spec) = owned.spec.as_mut() {
        spec.priority_class_name = Some(SCAVENGER_PRIORITY_CLASS.into());
    }
    owned.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job", "name": "x-run-1",
            "uid": "00000000-0000-0000-0000-000000000000", "controller": true,
        }))
        .expect("owner"),
    ]);
    for (what, pod) in [
        ("label", labelled),
        ("PriorityClass", classed),
        ("forged owner", owned),
    ] {
        let e = env
            .pods()
            .create(&PostParams::default(), &pod)
            .await
            .expect_err(what);
        assert!(e.to_string().contains("ScavengerJob"), "{what}: {e}");
    }
    let job: Job = serde_json::from_value(json!({"metadata": {"name": "sneaky"}, "spec": {
        "template": {"metadata": {"labels": {SCAVENGER_JOB_LABEL: "x"}},
            "spec": {"restartPolicy": "Never", "priorityClassName": SCAVENGER_PRIORITY_CLASS,
                     "containers": [{"name": "c", "image": "busybox"}]}}}}))
    .expect("job");
    let e = Api::<Job>::namespaced(env.client.clone(), &env.namespace)
        .create(&PostParams::default(), &job)
        .await
        .expect_err("a user's scavenger Job");
    assert!(e.to_string().contains("submit a ScavengerJob"), "{e}");
    // Labelling an ordinary running pod as a scavenger's afterwards is refused too.
    env.create_pod(ordinary_pod("plain", 100, None)).await;
    let e = env
        .patch_refused(
            "plain",
            json!({"metadata": {"labels": {SCAVENGER_JOB_LABEL: "x"}}}),
            "relabel",
        )
        .await;
    assert!(e.to_string().contains("only sluice"), "{e}");
    env.cleanup().await;
}

#[tokio::test]
async fn a_start_that_cannot_be_scheduled_is_removed_and_waits_again() {
    let (env, _one, _clean) = scenario!("sj-unschedulable");
    let mut s = spec(100);
    s["nodeSelector"] = json!({"sluice.dev/e2e-no-such-node": "true"});
    create_sj(&env, "nowhere", s).await.expect("create");
    let started = env
        .wait_scavenger_status("nowhere", "started", WAIT, |s| s.job_name.is_some())
        .await;
    let job = started.job_name.clone().unwrap_or_default();
    // sluice's default --scavenger-start-timeout is 60 s; a pass runs at least every 5 s.
    let waiting = wait_for(
        "the start to be given up and the ScavengerJob to wait again",
        Duration::from_secs(150),
        || async {
            status(&env, "nowhere").await.filter(|s| {
                s.phase == ScavengerPhase::Waiting && s.message.contains("scheduled within")
            })
        },
    )
    .await;
    assert!(waiting.message.contains("0 of 1"), "{waiting:?}");
    assert_eq!(waiting.interrupted_count, 0, "{waiting:?}");
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), &env.namespace);
    wait_for(&format!("Job {job} removed"), WAIT, || async {
        let j = jobs.get_opt(&job).await.ok()?;
        j.is_none_or(|j| j.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
    finish(env).await;
}

#[tokio::test]
async fn a_scavenger_job_in_a_namespace_with_a_default_queue_is_not_gated() {
    let (mut env, _one, _clean) = scenario!("sj-default-queue");
    let queue = env.queue("q", json!({"cpu": "1"}), "BestEffortFIFO").await;
    env.set_default_queue(&queue).await;
    create_sj(&env, "outside-the-gate", spec(500))
        .await
        .expect("create");
    let pods = wait_running(&env, "outside-the-gate", 1, 0).await;
    let pod = &pods[0];
    assert!(
        !pod.labels().contains_key("sluice.dev/queue"),
        "a scavenger pod is not queued: {:?}",
        pod.labels()
    );
    assert!(!support::is_gated(pod), "{:?}", pod.spec);
    let job = Api::<Job>::namespaced(env.client.clone(), &env.namespace)
        .get("outside-the-gate-run-1")
        .await
        .expect("the Job");
    assert!(
        !job.labels().contains_key("sluice.dev/queue"),
        "{:?}",
        job.labels()
    );
    finish(env).await;
}
