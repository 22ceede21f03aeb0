//! Cohorts (issue 20), end to end on the local control plane with sluice running on the host:
//! queues of a cohort borrow each other's idle quota within their limits, a lender reclaims what
//! it lent by evicting only pods that run on borrowed quota, borrowers waiting together are served
//! by fair share, and a waiting workload's place in its queue is kept in its status. Nothing is
//! mocked: kwok acts as the kubelet and completes evicted pods' deletion.
//!
//! Every cohort test watches the cohort's pods while it runs ([`Sampler`]): at no sampled moment
//! do the pods holding quota (no gate, not ended; terminating ones included) request more than the
//! cohort's quotas together, or one queue more than its quota plus its borrowing limit.
//! Run with `cargo test --test e2e_cohorts` after `hack/cluster.sh up --with-sluice`.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::json;
use sluice::api::CapacityQueue;
use support::*;

const TIMEOUT: Duration = Duration::from_secs(60);
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// The most cpu held at once by the whole namespace and by each queue, and the samples taken.
type Peaks = (i64, BTreeMap<String, i64>, u32);

/// Watches the namespace's pods: the most cpu (millicores) held at once by the whole namespace
/// and by each queue, over every sample.
struct Sampler {
    stop: Arc<AtomicBool>,
    peaks: Arc<Mutex<Peaks>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    fn start(env: &TestEnv) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peaks = Arc::new(Mutex::new((0i64, BTreeMap::<String, i64>::new(), 0u32)));
        let pods = env.pods();
        let (stop_in, peaks_in) = (stop.clone(), peaks.clone());
        let task = tokio::spawn(async move {
            while !stop_in.load(Ordering::SeqCst) {
                if let Ok(list) = pods.list(&ListParams::default()).await {
                    let mut per_queue: BTreeMap<String, i64> = BTreeMap::new();
                    let mut total = 0;
                    for p in holding(&list.items) {
                        let queue = p.labels().get("sluice.dev/queue").cloned();
                        *per_queue.entry(queue.unwrap_or_default()).or_default() += cpu_millis(p);
                        total += cpu_millis(p);
                    }
                    if let Ok(mut peaks) = peaks_in.lock() {
                        peaks.0 = peaks.0.max(total);
                        for (q, held) in per_queue {
                            let peak: &mut i64 = peaks.1.entry(q).or_default();
                            *peak = (*peak).max(held);
                        }
                        peaks.2 += 1;
                    }
                }
                tokio::time::sleep(SAMPLE_EVERY).await;
            }
        });
        Sampler { stop, peaks, task }
    }

    /// Stops sampling: (the peak of the whole namespace, each queue's peak, samples taken).
    async fn finish(self) -> Peaks {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        self.peaks.lock().map(|p| p.clone()).unwrap_or_default()
    }
}

/// A queue of `cohort` with `spec` merged in.
async fn cohort_queue(
    env: &mut TestEnv,
    suffix: &str,
    cohort: &str,
    cpu: &str,
    extra: serde_json::Value,
) -> String {
    let mut spec = json!({"quota": {"cpu": cpu}, "cohort": cohort});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            spec.insert(k.clone(), v.clone());
        }
    }
    env.queue_with_spec(suffix, spec).await
}

async fn queue_status(env: &TestEnv, name: &str) -> sluice::api::CapacityQueueStatus {
    Api::<CapacityQueue>::all(env.client.clone())
        .get(name)
        .await
        .ok()
        .and_then(|q| q.status)
        .unwrap_or_default()
}

/// Waits until the queue reports these pending and admitted pods and `borrowed` cpu.
async fn wait_queue(env: &TestEnv, queue: &str, pending: i32, admitted: i32, borrowed: &str) {
    let api: Api<CapacityQueue> = Api::all(env.client.clone());
    wait_for(
        &format!("queue {queue}: {pending} pending, {admitted} admitted, {borrowed} cpu borrowed"),
        TIMEOUT,
        || async {
            let s = api.get(queue).await.ok()?.status?;
            let b = s.borrowed.get("cpu").map(|q| q.0.as_str()).unwrap_or("0");
            (s.pending_pods == pending && s.admitted_pods == admitted && b == borrowed)
                .then_some(())
        },
    )
    .await;
}

/// Waits until the queue reports `lent` cpu lent to its cohort. Each queue's status is a write of
/// its own (spaced per object), so a lender's may come a round after its borrower's.
async fn wait_lent(env: &TestEnv, queue: &str, lent: &str) {
    wait_for(
        &format!("queue {queue}: {lent} cpu lent"),
        TIMEOUT,
        || async {
            let status = queue_status(env, queue).await;
            (status.lent.get("cpu").map(|q| q.0.as_str()) == Some(lent)).then_some(())
        },
    )
    .await;
}

fn in_gang(pod: Pod, workload: &str, min_count: i32) -> Pod {
    with_annotations(
        with_labels(pod, &[("sluice.dev/workload", workload)]),
        &[("sluice.dev/min-count", &min_count.to_string())],
    )
}

#[tokio::test]
async fn a_lender_reclaims_only_what_was_borrowed_and_limits_hold() {
    let mut env = env_or_skip!("cohort-reclaim");
    let cohort = env.namespace.clone();
    // a: 2 cpu, may borrow 3 more; b: 4 cpu, lends 3 of them (keeps 1 whatever happens).
    let a = cohort_queue(
        &mut env,
        "a",
        &cohort,
        "2",
        json!({"borrowingLimit": {"cpu": "3"}}),
    )
    .await;
    let b = cohort_queue(
        &mut env,
        "b",
        &cohort,
        "4",
        json!({"lendingLimit": {"cpu": "3"}}),
    )
    .await;
    let sampler = Sampler::start(&env);

    // a asks for 8 single cores: 2 of its own and 3 of b's, never more.
    for i in 0..8 {
        env.create_pod(pod(&format!("a{i}"), &a, "1")).await;
        // Distinct creation times: the newest admitted pods are the ones given back.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_queue(&env, &a, 3, 5, "3").await;
    wait_lent(&env, &b, "3").await;
    let pods = env.list_pods().await;
    let mut admitted: Vec<&Pod> = holding(&pods);
    admitted.sort_by_key(|p| p.metadata.creation_timestamp.clone());
    let admitted: Vec<String> = admitted.iter().map(|p| p.name_any()).collect();
    // Every admitted pod of a says what it borrowed: the last three admitted, one core each.
    let mut borrowing = Vec::new();
    for name in &admitted {
        let status = env
            .wait_workload_status(name, "a workload's status", TIMEOUT, |_| true)
            .await;
        if status.borrowed.contains_key("cpu") {
            borrowing.push(name.clone());
        }
    }
    assert_eq!(
        borrowing.len(),
        3,
        "three of a's five borrow: {borrowing:?}"
    );

    // b wants 3 cores as one gang: 1 it kept, 2 it takes back from a's borrowed pods.
    let victims_before: Vec<String> = env.list_pods().await.iter().map(|p| p.name_any()).collect();
    for i in 0..3 {
        env.create_pod(in_gang(pod(&format!("b{i}"), &b, "1"), "bgang", 3))
            .await;
    }
    wait_for("b's gang to be admitted", TIMEOUT, || async {
        let pods = env.list_pods().await;
        let b_held = holding(&pods)
            .iter()
            .filter(|p| p.name_any().starts_with('b'))
            .count();
        (b_held == 3).then_some(())
    })
    .await;
    let pods = env.list_pods().await;
    let now: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
    let gone: Vec<&String> = victims_before.iter().filter(|n| !now.contains(n)).collect();
    assert_eq!(gone.len(), 2, "exactly two of a's pods reclaimed: {gone:?}");
    for name in &gone {
        assert!(
            borrowing.contains(name),
            "{name} ran within a's own quota and was evicted (borrowing: {borrowing:?})"
        );
    }
    let a_held = holding(&pods)
        .iter()
        .filter(|p| p.name_any().starts_with('a'))
        .count();
    assert_eq!(a_held, 3, "a keeps its own 2 and 1 borrowed");

    let (total, per_queue, samples) = sampler.finish().await;
    assert!(samples > 10, "the sampler ran ({samples} samples)");
    assert!(
        total <= 6000,
        "the cohort held {total}m cpu at once, over its 6"
    );
    assert!(
        per_queue.get(&a).copied().unwrap_or(0) <= 5000,
        "a over 2 + 3"
    );
    assert!(
        per_queue.get(&b).copied().unwrap_or(0) <= 4000,
        "b over its quota"
    );
    env.cleanup().await;
}

#[tokio::test]
async fn fair_sharing_serves_two_borrowers_in_turn() {
    let mut env = env_or_skip!("cohort-fair");
    let cohort = env.namespace.clone();
    // a and b keep their one core each (they lend nothing): only the lender's 4 are shared.
    let keep = json!({"lendingLimit": {"cpu": "0"}});
    let a = cohort_queue(&mut env, "a", &cohort, "1", keep.clone()).await;
    let b = cohort_queue(&mut env, "b", &cohort, "1", keep).await;
    let lender = cohort_queue(&mut env, "lender", &cohort, "4", json!({})).await;
    let sampler = Sampler::start(&env);
    // The lender uses its whole quota; a and b each run one pod on their own quota.
    for i in 0..4 {
        env.create_pod(pod(&format!("l{i}"), &lender, "1")).await;
    }
    wait_queue(&env, &lender, 0, 4, "0").await;
    // a's four are all older than b's four: first come would give a every lent core.
    for i in 0..5 {
        env.create_pod(pod(&format!("a{i}"), &a, "1")).await;
    }
    wait_queue(&env, &a, 4, 1, "0").await;
    for i in 0..5 {
        env.create_pod(pod(&format!("b{i}"), &b, "1")).await;
    }
    wait_queue(&env, &b, 4, 1, "0").await;
    // The lender's work ends: its 4 cores go to a and b by share, 2 each.
    for i in 0..4 {
        end_pod(&env.pods(), &format!("l{i}"), "Succeeded").await;
    }
    wait_queue(&env, &a, 2, 3, "2").await;
    wait_queue(&env, &b, 2, 3, "2").await;
    wait_lent(&env, &lender, "4").await;
    let (total, _, _) = sampler.finish().await;
    assert!(
        total <= 6000,
        "the cohort held {total}m cpu at once, over its 6"
    );
    env.cleanup().await;
}

/// Runs the `sluice queue` command (the binary this package builds) with the test's kubeconfig.
fn sluice_queue(args: &[&str]) -> String {
    output_of(
        std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("queue")
            .args(args),
        &format!("sluice queue {args:?}"),
    )
}

#[tokio::test]
async fn positions_follow_admissions_and_deletions() {
    let mut env = env_or_skip!("positions");
    let q = env
        .queue_with_spec(
            "q",
            json!({"quota": {"cpu": "1"}, "queueingStrategy": "BestEffortFIFO", "admission": "InPass"}),
        )
        .await;
    for i in 0..4 {
        env.create_pod(pod(&format!("p{i}"), &q, "1")).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    env.wait_queue_counts(&q, 3, 1).await;
    let position = |name: String| {
        let env = &env;
        async move {
            env.workloads()
                .get(&name)
                .await
                .ok()
                .and_then(|d| d.status)
                .and_then(|s| s.position)
        }
    };
    let positions = |expected: Vec<(&'static str, Option<i32>)>| {
        let env = &env;
        async move {
            wait_for(&format!("positions {expected:?}"), TIMEOUT, || async {
                for (name, want) in &expected {
                    let status = env.workloads().get(name).await.ok()?.status?;
                    if status.position != *want {
                        return None;
                    }
                    if want.is_some() && status.queued_since.is_none() {
                        return None;
                    }
                }
                Some(())
            })
            .await
        }
    };
    positions(vec![
        ("p0", None),
        ("p1", Some(1)),
        ("p2", Some(2)),
        ("p3", Some(3)),
    ])
    .await;
    // `sluice queue` prints that order from the API alone.
    let out = sluice_queue(&[&q, "-o", "json"]);
    let view: serde_json::Value = serde_json::from_str(&out).expect("sluice queue -o json");
    let order: Vec<&str> = (view["pending"].as_array().expect("pending").iter())
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(order, vec!["p1", "p2", "p3"], "{out}");
    let table = sluice_queue(&["-A"]);
    let row = (table.lines())
        .find(|l| l.starts_with(&q) && l.contains(" p2 "))
        .unwrap_or_else(|| panic!("no row for p2 in:\n{table}"));
    assert!(
        row.contains("cpu=1") && row.contains("needs 1 cpu more"),
        "{row}"
    );
    env.delete_pod_now("p2").await;
    positions(vec![("p1", Some(1)), ("p3", Some(2))]).await;
    end_pod(&env.pods(), "p0", "Succeeded").await;
    positions(vec![("p1", None), ("p3", Some(1))]).await;
    assert_eq!(position("p3".into()).await, Some(1));
    env.cleanup().await;
}

#[tokio::test]
async fn hostile_cohort_settings_are_refused_naming_the_field() {
    let mut env = env_or_skip!("cohort-hostile");
    let api: Api<CapacityQueue> = Api::all(env.client.clone());
    // A cohort name that is no DNS label is refused by the API server (the CRD's rule).
    for bad in [
        "Team_A",
        "a-very-long-cohort-name-that-goes-on-and-on-past-sixty-three-chars-x",
        "-x",
    ] {
        let q: CapacityQueue = serde_json::from_value(json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
            "metadata": {"name": format!("{}-bad", env.namespace)},
            "spec": {"quota": {"cpu": "1"}, "cohort": bad},
        }))
        .expect("queue");
        let err = api
            .create(&kube::api::PostParams::default(), &q)
            .await
            .expect_err("a bad cohort name is refused");
        assert!(
            err.to_string().contains("cohort must be a DNS label"),
            "{bad}: {err}"
        );
    }
    // A negative weight passes the schema (a quantity) but not sluice: the queue is inactive and
    // says which fields to look at; its pods wait.
    let name = format!("{}-weight", env.namespace);
    let q: CapacityQueue = serde_json::from_value(json!({
        "apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
        "metadata": {"name": name},
        "spec": {"quota": {"cpu": "1"}, "cohort": env.namespace, "fairSharing": {"weight": "-1"}},
    }))
    .expect("queue");
    api.create(&kube::api::PostParams::default(), &q)
        .await
        .expect("create queue");
    env.queues.push(name.clone());
    let message = wait_for("the queue to say it is inactive", TIMEOUT, || async {
        let s = api.get(&name).await.ok()?.status?;
        let c = s.conditions.iter().find(|c| c.type_ == "Active")?;
        (c.status == sluice::api::ConditionStatus::False).then(|| c.message.clone())
    })
    .await;
    assert!(message.contains("spec.fairSharing.weight"), "{message}");
    env.cleanup().await;
}

/// A pod no node can take: a node selector no node has.
fn unschedulable(pod: Pod) -> Pod {
    let mut pod = pod;
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_selector = Some(BTreeMap::from([(
            "sluice.dev/no-such-node".to_string(),
            "true".to_string(),
        )]));
    }
    pod
}

#[tokio::test]
async fn an_admitted_pod_no_node_takes_gives_its_quota_back_then_fails_past_the_limit() {
    let mut env = env_or_skip!("pods-ready");
    let q = env
        .queue_with_spec(
            "q",
            json!({"quota": {"cpu": "1"}, "admission": "InPass",
                   "podsReadyTimeout": "3s", "requeueLimit": 1}),
        )
        .await;
    // "stuck": three pods no node can take, one at a time (min-count 1, 1 cpu each, quota 1).
    for i in 0..3 {
        let p = in_gang(
            unschedulable(pod(&format!("stuck-{i}"), &q, "1")),
            "stuck",
            1,
        );
        env.create_pod(p).await;
    }
    env.wait_queue_counts(&q, 2, 1).await;
    env.create_pod(pod("other", &q, "1")).await;
    // After the timeout the stuck pod is evicted; "stuck" goes to the back of its priority level,
    // so "other", queued before that, is admitted first.
    wait_for("other to be admitted", TIMEOUT, || async {
        env.pods()
            .get("other")
            .await
            .ok()
            .filter(|p| !is_gated(p))
            .map(|_| ())
    })
    .await;
    let status = env
        .wait_workload_status("stuck", "stuck to be requeued", TIMEOUT, |s| {
            s.requeue_count >= 1
        })
        .await;
    let requeued = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Requeued")
        .expect("a Requeued condition");
    assert_eq!(requeued.reason, "PodsReadyTimeout");
    assert!(
        requeued.message.contains("podsReadyTimeout"),
        "{}",
        requeued.message
    );
    assert_eq!(status.interrupted_count, 0, "a requeue is no preemption");
    let pods = env.list_pods().await;
    let stuck_held = holding(&pods)
        .iter()
        .filter(|p| p.name_any().starts_with("stuck"))
        .count();
    assert_eq!(stuck_held, 0, "stuck holds nothing while other runs");
    // other ends: stuck's next pod is admitted, not taken either, and past the limit it fails.
    end_pod(&env.pods(), "other", "Succeeded").await;
    let status = env
        .wait_workload_phase("stuck", sluice::api::WorkloadPhase::Failed, TIMEOUT)
        .await;
    assert!(status.requeue_count >= 2, "{status:?}");
    assert!(
        status.message.contains("requeueLimit"),
        "the message says why: {}",
        status.message
    );
    // Its last pod stays behind the gate: a Failed workload is admitted no more.
    let pods = env.list_pods().await;
    let left: Vec<String> = gated(&pods).iter().map(|p| p.name_any()).collect();
    assert_eq!(
        left.len(),
        1,
        "one stuck pod left behind the gate: {left:?}"
    );
    wait_for("the queue's status: nothing admitted", TIMEOUT, || async {
        (queue_status(&env, &q).await.admitted_pods == 0).then_some(())
    })
    .await;
    env.cleanup().await;
}
