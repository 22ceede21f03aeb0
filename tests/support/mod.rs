//! Shared helpers of the end-to-end tests: they run against the local control plane that
//! `hack/test.sh` (or `hack/cluster.sh up --with-sluice`) brings up, with sluice on the host.
//! Without a cluster each test is skipped, saying so ([`cluster_or_skip`]); under `hack/test.sh` it
//! fails instead.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use sluice::api::{ADMISSION_GATE, CapacityQueue, DynamicWorkload, DynamicWorkloadStatus};

mod operators;
mod priorities;
mod spark;
// Each test binary compiles this module; not every one uses every helper.
#[allow(unused_imports)]
pub use operators::*;
#[allow(unused_imports)]
pub use priorities::Priorities;
#[allow(unused_imports)]
pub use spark::*;

/// Set to 1 by `hack/test.sh`: a test that finds no cluster then fails instead of being skipped.
pub const REQUIRE_CLUSTER: &str = "SLUICE_REQUIRE_CLUSTER";

/// Whether the running test has a cluster to talk to (`KUBECONFIG` set). Without one, plain
/// `cargo test` skips it (the caller returns at once) and says so, while under `hack/test.sh`
/// (`SLUICE_REQUIRE_CLUSTER=1`) a missing cluster fails the test: a skip is never silent there.
pub fn cluster_or_skip() -> bool {
    if std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty()) {
        return true;
    }
    // libtest names the thread of each test after it (the body of a #[tokio::test] runs there).
    let current = std::thread::current();
    let test = current.name().unwrap_or("this test");
    if std::env::var(REQUIRE_CLUSTER).is_ok_and(|v| v == "1") {
        panic!(
            "{test}: KUBECONFIG is not set and {REQUIRE_CLUSTER}=1 requires a cluster: \
             hack/test.sh sets KUBECONFIG once the local cluster is up (hack/cluster.sh env)"
        );
    }
    // Straight to stderr: libtest hides what a passing test prints, and a skip must show.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "skipped {test}: it needs the local cluster (KUBECONFIG is not set); hack/test.sh runs it"
    );
    false
}

/// A client for the local cluster, or a failure that says how to get one.
pub async fn client() -> Client {
    if std::env::var_os("KUBECONFIG").is_none() {
        panic!(
            "KUBECONFIG is not set: these tests need the local control plane with sluice running. \
             Run them with `hack/test.sh`, or `hack/cluster.sh up --with-sluice && eval \"$(hack/cluster.sh env)\"` first."
        );
    }
    Client::try_default()
        .await
        .expect("a client from KUBECONFIG")
}

/// Runs `command` and returns what it wrote on standard output; when it cannot start or fails,
/// the test fails naming it `what`, with its standard error.
pub fn output_of(command: &mut std::process::Command, what: &str) -> String {
    let out = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The local cluster's state directory: `.cluster/` of the repository, or `SLUICE_CLUSTER_STATE`
/// when `hack/cluster.sh` runs a second cluster beside the first.
pub fn cluster_state() -> PathBuf {
    std::env::var_os("SLUICE_CLUSTER_STATE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".cluster"))
}

/// The pid of the sluice process `hack/cluster.sh` started.
pub fn sluice_pid() -> i32 {
    let path = cluster_state().join("pids/sluice.pid");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (is sluice running? hack/cluster.sh up --with-sluice)",
            path.display()
        )
    });
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Kills sluice with SIGKILL: no shutdown of its own, as a crash or an OOM kill ends it. Only in a
/// test binary of its own (the other tests of a binary share that process).
pub fn kill_sluice() {
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &sluice_pid().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
}

/// Starts sluice again with the binary already built.
pub fn restart_sluice() {
    let status = std::process::Command::new(repo_root().join("hack/cluster.sh"))
        .args(["up", "--with-sluice", "--no-build"])
        .status()
        .expect("run hack/cluster.sh up --with-sluice --no-build");
    assert!(status.success(), "hack/cluster.sh up --with-sluice failed");
}

/// A short random suffix for names, so tests never collide on the shared cluster.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{:x}{:04x}",
        std::process::id() % 0xfff,
        nanos % 0xffff
    )
}

/// Polls `check` until it returns Some, or fails the test after `timeout` saying what it waited for.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates `object` through `api`; fails the test naming the object's kind and name and giving
/// the API server's answer when it cannot.
pub async fn create<K>(api: &Api<K>, object: &K) -> K
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(created) => created,
        Err(e) => {
            let kind = std::any::type_name::<K>()
                .rsplit("::")
                .next()
                .unwrap_or("object");
            panic!("create {kind} {}: {e}", object.name_any())
        }
    }
}

/// Waits until `api` has no object `name` any more (deleted, its finalizers done).
pub async fn wait_absent<K>(api: &Api<K>, name: &str, timeout: Duration)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(&format!("{name} to be gone"), timeout, || async {
        api.get_opt(name)
            .await
            .ok()
            .and_then(|o| o.is_none().then_some(()))
    })
    .await;
}

/// Waits until sluice's Deployment in `namespace` (installed in-cluster) has rolled out its two
/// replicas, the current generation all updated and ready (the status of the generation before a
/// patch does not count, nor old pods on their way out), and `placed` holds for each of its pods.
pub async fn wait_sluice_rolled_out(
    env: &TestEnv,
    namespace: &str,
    what: &str,
    timeout: Duration,
    placed: impl Fn(&Pod) -> bool,
) {
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(env.client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), namespace);
    wait_for(what, timeout, || async {
        let d = deployments.get("sluice").await.ok()?;
        let generation = d.metadata.generation?;
        let s = d.status?;
        let rolled_out = s.observed_generation? >= generation
            && s.updated_replicas? == 2
            && s.ready_replicas? == 2
            && s.replicas? == 2;
        let list = pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=sluice"))
            .await
            .ok()?
            .items;
        (rolled_out && list.len() == 2 && list.iter().all(&placed)).then_some(())
    })
    .await;
}

/// Waits until `api` lists an object that matches `params`; returns the first listed.
pub async fn wait_first<K>(api: &Api<K>, params: &ListParams, what: &str, timeout: Duration) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(what, timeout, || async {
        api.list(params).await.ok()?.items.into_iter().next()
    })
    .await
}

/// The test's [`TestEnv`], or return from the test when there is no cluster ([`cluster_or_skip`]):
/// `let mut env = env_or_skip!("name");` stands for
/// `let Some(mut env) = TestEnv::new_or_skip("name").await else { return };`.
#[allow(unused_macros)]
macro_rules! env_or_skip {
    ($prefix:expr) => {
        match $crate::support::TestEnv::new_or_skip($prefix).await {
            Some(env) => env,
            None => return,
        }
    };
}
#[allow(unused_imports)]
pub(crate) use env_or_skip;

/// `env_or_skip!(prefix)` and the test's CapacityQueue `q` with `quota` and `strategy`
/// ([`TestEnv::queue`]): `let (mut env, queue) = env_and_queue!("name", json!({"cpu": "2"}), "StrictFIFO");`.
#[allow(unused_macros)]
macro_rules! env_and_queue {
    ($prefix:expr, $quota:expr, $strategy:expr) => {{
        let mut env = env_or_skip!($prefix);
        let queue = env.queue("q", $quota, $strategy).await;
        (env, queue)
    }};
}
#[allow(unused_imports)]
pub(crate) use env_and_queue;

pub struct TestEnv {
    pub client: Client,
    pub namespace: String,
    pub queues: Vec<String>,
}

impl TestEnv {
    /// [`TestEnv::new`], or None when there is no cluster (see [`cluster_or_skip`]): a test that
    /// needs one starts with `let Some(env) = TestEnv::new_or_skip("name").await else { return };`.
    pub async fn new_or_skip(prefix: &str) -> Option<TestEnv> {
        if cluster_or_skip() {
            Some(TestEnv::new(prefix).await)
        } else {
            None
        }
    }

    /// A fresh namespace named after `prefix` on the local cluster (fails without one).
    pub async fn new(prefix: &str) -> TestEnv {
        let client = client().await;
        let namespace = unique(prefix);
        let ns: Namespace = serde_json::from_value(
            json!({"metadata": {"name": namespace, "labels": {"sluice-e2e": "true"}}}),
        )
        .expect("namespace");
        create(&Api::<Namespace>::all(client.clone()), &ns).await;
        // Pods need the default ServiceAccount, which the controller-manager creates.
        let sa_api: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(client.clone(), &namespace);
        wait_for(
            "the default ServiceAccount",
            Duration::from_secs(30),
            || async { sa_api.get_opt("default").await.ok().flatten().map(|_| ()) },
        )
        .await;
        TestEnv {
            client,
            namespace,
            queues: Vec::new(),
        }
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub fn workloads(&self) -> Api<DynamicWorkload> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates a CapacityQueue named after the test namespace.
    pub async fn queue(
        &mut self,
        suffix: &str,
        quota: serde_json::Value,
        strategy: &str,
    ) -> String {
        self.queue_with_spec(
            suffix,
            json!({"quota": quota, "queueingStrategy": strategy}),
        )
        .await
    }

    /// A CapacityQueue named after the test's namespace and `suffix`, with this spec.
    pub async fn queue_with_spec(&mut self, suffix: &str, spec: serde_json::Value) -> String {
        let name = format!("{}-{suffix}", self.namespace);
        let q: CapacityQueue = serde_json::from_value(json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
            "metadata": {"name": name},
            "spec": spec,
        }))
        .expect("queue");
        create(&Api::<CapacityQueue>::all(self.client.clone()), &q).await;
        self.queues.push(name.clone());
        // A queue is in use once the controller says it is Active; until sluice's webhooks have
        // seen it, an application naming it is refused (said so, to be retried).
        self.wait_queue_active(&name).await;
        name
    }

    /// Waits until the controller has published a pass that saw `queue` (its status says Active).
    pub async fn wait_queue_active(&self, queue: &str) {
        let queues = Api::<CapacityQueue>::all(self.client.clone());
        wait_for(
            &format!("CapacityQueue {queue} to be Active"),
            Duration::from_secs(60),
            || async {
                let q = queues.get(queue).await.ok()?;
                q.status?
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Active" && c.status == sluice::api::ConditionStatus::True)
                    .then_some(())
            },
        )
        .await;
    }

    pub async fn create_pod(&self, pod: Pod) -> Pod {
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .unwrap_or_else(|e| panic!("create pod {}: {e}", pod.name_any()))
    }

    /// Creates `pod`, which must be refused, and returns what the refusal says; `why` says why
    /// it must be refused.
    pub async fn refused(&self, pod: &Pod, why: &str) -> String {
        self.pods()
            .create(&PostParams::default(), pod)
            .await
            .expect_err(why)
            .to_string()
    }

    /// Deletes the pod `name` at once (no grace period), as a finished or evicted workload goes.
    pub async fn delete_pod_now(&self, name: &str) {
        self.pods()
            .delete(name, &DeleteParams::default().grace_period(0))
            .await
            .unwrap_or_else(|e| panic!("delete pod {name}: {e}"));
    }

    /// Applies the merge patch `patch` to the pod `name`, which must be refused, and returns what
    /// the refusal says; `why` says why it must be refused.
    pub async fn patch_refused(
        &self,
        name: &str,
        patch: impl serde::Serialize + std::fmt::Debug,
        why: &str,
    ) -> String {
        self.pods()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect_err(why)
            .to_string()
    }

    /// Creates `pods` all at once (concurrent requests), each as the API server returned it.
    pub async fn create_pods_at_once(&self, pods: impl IntoIterator<Item = Pod>) -> Vec<Pod> {
        futures::future::join_all(pods.into_iter().map(|pod| self.create_pod(pod))).await
    }

    pub async fn list_pods(&self) -> Vec<Pod> {
        self.pods()
            .list(&ListParams::default())
            .await
            .expect("list pods")
            .items
    }

    /// The namespace's pods that match the label `selector`.
    pub async fn pods_labelled(&self, selector: &str) -> Vec<Pod> {
        self.pods()
            .list(&ListParams::default().labels(selector))
            .await
            .expect("list pods")
            .items
    }

    /// Labels the test's namespace with its default queue (`sluice.dev/default-queue`).
    pub async fn set_default_queue(&self, queue: &str) {
        let label = json!({"metadata": {"labels": {"sluice.dev/default-queue": queue}}});
        Api::<Namespace>::all(self.client.clone())
            .patch(
                &self.namespace,
                &PatchParams::default(),
                &Patch::Merge(&label),
            )
            .await
            .expect("label the namespace with its default queue");
    }

    /// Waits until the queue's status reports these pending and admitted pod counts, i.e. the
    /// controller has finished a pass that saw every pod.
    pub async fn wait_queue_counts(
        &self,
        queue: &str,
        pending: i32,
        admitted: i32,
    ) -> CapacityQueue {
        let api: Api<CapacityQueue> = Api::all(self.client.clone());
        // The last counts seen go into the failure message: a timeout then says what the queue did show.
        let mut last_seen = String::from("no status");
        let found = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                if let Ok(q) = api.get(queue).await
                    && let Some(s) = q.status.as_ref()
                {
                    if s.pending_pods == pending && s.admitted_pods == admitted {
                        return q;
                    }
                    last_seen = format!(
                        "{} pending and {} admitted",
                        s.pending_pods, s.admitted_pods
                    );
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        found.unwrap_or_else(|_| {
            panic!(
                "timed out after 60s waiting for queue {queue} to report {pending} pending and {admitted} admitted pods; it last reported {}",
                last_seen
            )
        })
    }

    /// Waits until the DynamicWorkload `name` exists and `ready` holds for it, and returns it.
    pub async fn wait_workload(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        ready: impl Fn(&DynamicWorkload) -> bool,
    ) -> DynamicWorkload {
        let api = self.workloads();
        wait_for(what, timeout, || async {
            api.get(name).await.ok().filter(|d| ready(d))
        })
        .await
    }

    /// Waits until the DynamicWorkload `name` has a status for which `ready` holds, and returns it.
    pub async fn wait_workload_status(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        ready: impl Fn(&DynamicWorkloadStatus) -> bool,
    ) -> DynamicWorkloadStatus {
        let has = |d: &DynamicWorkload| d.status.as_ref().is_some_and(&ready);
        let workload = self.wait_workload(name, what, timeout, has).await;
        // `has` held for it: it has a status.
        workload.status.unwrap_or_default()
    }

    /// [`TestEnv::wait_workload_status`] until the DynamicWorkload `name`'s message contains
    /// `needle`; returns the message.
    pub async fn wait_workload_message(&self, name: &str, needle: &str) -> String {
        let status = self
            .wait_workload_status(name, needle, Duration::from_secs(60), |s| {
                s.message.contains(needle)
            })
            .await;
        status.message
    }

    /// A ServiceAccount `name` in the test's namespace (Spark's driver runs as one).
    pub async fn create_service_account(&self, name: &str) {
        let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(self.client.clone(), &self.namespace);
        let sa = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
            .expect("a ServiceAccount");
        create(&sas, &sa).await;
    }

    /// [`TestEnv::wait_workload_status`] until the DynamicWorkload `name` is in `phase`.
    pub async fn wait_workload_phase(
        &self,
        name: &str,
        phase: sluice::api::WorkloadPhase,
        timeout: Duration,
    ) -> DynamicWorkloadStatus {
        let what = format!("DynamicWorkload {name} to be {phase:?}");
        self.wait_workload_status(name, &what, timeout, |s| s.phase == phase)
            .await
    }

    /// [`TestEnv::wait_workload_status`] until the DynamicWorkload `name` counts `admitted` admitted
    /// and `pending` pending pods.
    pub async fn wait_workload_pods(
        &self,
        name: &str,
        admitted: i32,
        pending: i32,
        timeout: Duration,
    ) -> DynamicWorkloadStatus {
        let what = format!(
            "DynamicWorkload {name} to count {admitted} admitted and {pending} pending pods"
        );
        self.wait_workload_status(name, &what, timeout, |s| {
            s.admitted_pods == admitted && s.pending_pods == pending
        })
        .await
    }

    /// Waits until the ScavengerJob `name`'s status satisfies `ok` (`what` says what that is).
    pub async fn wait_scavenger_status(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        ok: impl Fn(&sluice::api::ScavengerJobStatus) -> bool,
    ) -> sluice::api::ScavengerJobStatus {
        let api: Api<sluice::api::ScavengerJob> =
            Api::namespaced(self.client.clone(), &self.namespace);
        wait_for(&format!("ScavengerJob {name}: {what}"), timeout, || async {
            api.get(name).await.ok()?.status.filter(|s| ok(s))
        })
        .await
    }

    pub async fn cleanup(self) {
        let _ = Api::<Namespace>::all(self.client.clone())
            .delete(&self.namespace, &DeleteParams::default())
            .await;
        for q in &self.queues {
            let _ = Api::<CapacityQueue>::all(self.client.clone())
                .delete(q, &DeleteParams::default())
                .await;
        }
    }
}

/// A governed pod: the queue label, one container asking for `cpu`.
pub fn pod(name: &str, queue: &str, cpu: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"sluice.dev/queue": queue}},
        "spec": {
            "containers": [{"name": "work", "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}],
            "terminationGracePeriodSeconds": 0,
        },
    }))
    .expect("pod")
}

pub fn with_labels(mut pod: Pod, labels: &[(&str, &str)]) -> Pod {
    let map = pod.metadata.labels.get_or_insert_with(BTreeMap::new);
    for (k, v) in labels {
        map.insert(k.to_string(), v.to_string());
    }
    pod
}

pub fn with_annotations(mut pod: Pod, annotations: &[(&str, &str)]) -> Pod {
    let map = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    for (k, v) in annotations {
        map.insert(k.to_string(), v.to_string());
    }
    pod
}

pub fn is_gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == ADMISSION_GATE))
}

pub fn is_ended(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

/// Pods holding quota: admitted (no gate) and not ended.
pub fn holding(pods: &[Pod]) -> Vec<&Pod> {
    pods.iter()
        .filter(|p| !is_gated(p) && !is_ended(p))
        .collect()
}

pub fn gated(pods: &[Pod]) -> Vec<&Pod> {
    pods.iter().filter(|p| is_gated(p)).collect()
}

/// cpu requested by a pod, in millicores.
pub fn cpu_millis(pod: &Pod) -> i64 {
    pod.spec
        .as_ref()
        .map(|s| {
            sluice::resources::pod_requests(s)
                .map(|r| r.get("cpu"))
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

/// Ends a pod on purpose: kwok moves a pod with this annotation to the given phase.
pub async fn end_pod(pods: &Api<Pod>, name: &str, phase: &str) {
    let patch = json!({"metadata": {"annotations": {KWOK_PHASE_ANNOTATION: phase}}});
    pods.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("annotate {name}: {e}"));
}

/// The annotation hack/cluster.sh's kwok stages react to.
pub const KWOK_PHASE_ANNOTATION: &str = "sluice.dev/kwok-phase";

/// The value of sluice's metric `name` (a series without labels) from its metrics endpoint
/// (`SLUICE_METRICS_ADDR`, set by `hack/cluster.sh env`); None if it cannot be read.
pub async fn sluice_metric(name: &str) -> Option<f64> {
    let addr = std::env::var("SLUICE_METRICS_ADDR").ok()?;
    let body = metrics_text(&addr).await?;
    body.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

/// What the metrics endpoint at `addr` (`host:port`, plain HTTP) answers to `GET /metrics`, the
/// response's head included; None if it cannot be read.
pub async fn metrics_text(addr: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: sluice\r\n\r\n")
        .await
        .ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).await.ok()?;
    Some(body)
}

/// Follows every pod of the namespace and records the largest cpu ever held by admitted pods.
pub fn watch_usage(
    pods: kube::Api<Pod>,
) -> (
    std::sync::Arc<std::sync::Mutex<i64>>,
    tokio::task::JoinHandle<()>,
) {
    watch_usage_selected(pods, kube::runtime::watcher::Config::default())
}

/// [`watch_usage`] of the pods `config` selects (e.g. one queue's, by its label).
pub fn watch_usage_selected(
    pods: kube::Api<Pod>,
    config: kube::runtime::watcher::Config,
) -> (
    std::sync::Arc<std::sync::Mutex<i64>>,
    tokio::task::JoinHandle<()>,
) {
    let peak = std::sync::Arc::new(std::sync::Mutex::new(0i64));
    let peak_out = peak.clone();
    let task = tokio::spawn(async move {
        let mut holding: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
        let mut stream = std::pin::pin!(kube::runtime::WatchStreamExt::default_backoff(
            kube::runtime::watcher(pods, config)
        ));
        while let Some(event) = futures::StreamExt::next(&mut stream).await {
            let (pod, gone) = match event {
                Ok(kube::runtime::watcher::Event::Apply(p))
                | Ok(kube::runtime::watcher::Event::InitApply(p)) => (p, false),
                Ok(kube::runtime::watcher::Event::Delete(p)) => (p, true),
                _ => continue,
            };
            let name = pod.name_any();
            if !gone && !is_gated(&pod) && !is_ended(&pod) {
                holding.insert(name, cpu_millis(&pod));
            } else {
                holding.remove(&name);
            }
            let total: i64 = holding.values().sum();
            let mut peak = peak.lock().expect("peak");
            *peak = (*peak).max(total);
        }
    });
    (peak_out, task)
}
