//! Preemption inside a queue (issue 18), end to end on the local control plane with sluice running on
//! the host, KubeRay for the Ray case: a waiting workload of higher priority takes quota back from
//! admitted workloads of lower priority in the same queue, through the Eviction API, minimally, gangs
//! whole, elastic pods first, with the reasons recorded. Nothing is mocked: PriorityClasses,
//! PodDisruptionBudgets (the controller-manager's disruption controller computes them) and KubeRay
//! are the real ones, and kwok, acting as the kubelet, completes the evicted pods' deletion.
//!
//! Every test watches the queue while it runs ([`QuotaSampler`]): at no sampled moment do the
//! queue's admitted pods (no gate, not ended, not terminating) request more than its quota, and the
//! pods taken away (terminating, or gone while admitted) are exactly the expected victims.
//! Run with `hack/test.sh --test e2e_preemption`.

mod support;

#[path = "e2e_preemption/scene.rs"]
mod scene;
#[path = "e2e_preemption/watch.rs"]
mod watch;

use std::time::Duration;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use scene::*;
use serde_json::json;
use support::*;
use watch::*;

/// How long a preemption may take, from the preemptor's creation to its admission.
const PREEMPTION_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a test watches for a preemption that must not come, after sluice has seen the waiting
/// pod (its DynamicWorkload says why it waits): several passes' worth.
const QUIET_WINDOW: Duration = Duration::from_secs(8);
/// The queue sampler's period.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

// ---------------------------------------------------------------------------------------------
// The tests.

#[tokio::test]
async fn a_high_priority_pod_preempts_exactly_as_many_low_priority_pods_as_it_needs() {
    let env = env_or_skip!("preempt-count");
    let s = Scene::new(env, &[("lowest", 10), ("low", 100), ("high", 1000)], "4").await;
    // Four 1-cpu pods fill the queue: two at the lowest priority, two a little above.
    for (name, class) in [
        ("low-a", "low"),
        ("low-b", "low"),
        ("lowest-a", "lowest"),
        ("lowest-b", "lowest"),
    ] {
        s.create(name, "1", class).await;
    }
    s.env.wait_queue_counts(&s.queue, 0, 4).await;
    let sampler = QuotaSampler::start(&s.env, &s.queue, 4000);

    // 2 cpu more: the two lowest go, the two above them stay.
    s.create("urgent", "2", "high").await;
    let victims = ["lowest-a", "lowest-b"];
    wait_gone(&s.env, &victims).await;
    wait_admitted(&s.env, "urgent").await;
    s.env.wait_queue_counts(&s.queue, 0, 3).await;
    let pods = s.env.list_pods().await;
    assert_eq!(
        holding_cpu(&pods),
        4000,
        "nothing more was taken than needed: the quota is full again"
    );
    for victim in victims {
        s.history.wait_preempted(victim, "urgent").await;
        wait_preemption_event(&s.env, "Pod", victim).await;
        wait_preemption_event(&s.env, "DynamicWorkload", victim).await;
    }
    holding_and_waiting(&s.env, &["low-a", "low-b", "urgent"], &[])
        .await
        .expect("the pods above the lowest are untouched");

    sampler
        .finish()
        .await
        .assert_taken(&victims, "exactly the two lowest were evicted");
    s.end().await;
}

#[tokio::test]
async fn a_gang_victim_is_evicted_whole_never_in_part() {
    let env = env_or_skip!("preempt-gang");
    let s = Scene::new(env, &[("low", 10), ("mid", 100), ("high", 1000)], "4").await;
    // The gang `batch` (3 pods, all or nothing) at the lowest priority, one pod above it.
    let gang = ["batch-0", "batch-1", "batch-2"];
    s.env
        .create_pods_at_once(
            gang.iter()
                .map(|name| member(s.pod(name, "1", "low"), "batch", 3)),
        )
        .await;
    s.env.wait_queue_counts(&s.queue, 0, 3).await;
    s.create("steady", "1", "mid").await;
    s.env.wait_queue_counts(&s.queue, 0, 4).await;
    let sampler = QuotaSampler::start(&s.env, &s.queue, 4000);

    // 1 cpu is needed; the victim is the gang, and a gang goes whole.
    s.create("urgent", "1", "high").await;
    wait_gone(&s.env, &gang).await;
    wait_admitted(&s.env, "urgent").await;
    s.env.wait_queue_counts(&s.queue, 0, 2).await;
    holding_and_waiting(&s.env, &["steady", "urgent"], &[])
        .await
        .expect("the pod above the gang is untouched");
    s.history.wait_preempted("batch", "urgent").await;
    wait_preemption_event(&s.env, "DynamicWorkload", "batch").await;
    for member in gang {
        wait_preemption_event(&s.env, "Pod", member).await;
    }

    sampler
        .finish()
        .await
        .assert_taken(&gang, "the whole gang and nothing else");
    s.end().await;
}

#[tokio::test]
async fn elastic_pods_above_the_minimum_go_before_any_whole_workload() {
    let env = env_or_skip!("preempt-elastic");
    let s = Scene::new(env, &[("lowest", 10), ("low", 100), ("high", 1000)], "4").await;
    // `spread`: a minimum of 1 pod and 2 elastic pods above it, Spark-executor style.
    for (i, name) in ["spread-0", "spread-1", "spread-2"].into_iter().enumerate() {
        s.env
            .create_pod(member(s.pod(name, "1", "low"), "spread", 1))
            .await;
        s.env.wait_queue_counts(&s.queue, 0, i as i32 + 1).await;
    }
    // A whole workload of even lower priority, and the newest admitted.
    s.create("whole", "1", "lowest").await;
    s.env.wait_queue_counts(&s.queue, 0, 4).await;
    let sampler = QuotaSampler::start(&s.env, &s.queue, 4000);

    s.create("urgent", "2", "high").await;
    wait_admitted(&s.env, "urgent").await;
    s.env.wait_queue_counts(&s.queue, 0, 3).await;
    let pods = s.env.list_pods().await;
    let spread_left: Vec<String> = pods
        .iter()
        .filter(|p| p.name_any().starts_with("spread-") && holds_quota(p))
        .map(|p| p.name_any())
        .collect();
    assert_eq!(
        spread_left.len(),
        1,
        "spread keeps its minimum: {spread_left:?}"
    );
    holding_and_waiting(&s.env, &["whole", "urgent"], &[])
        .await
        .expect("the whole workload is untouched while elastic pods could go");
    assert_eq!(holding_cpu(&pods), 4000, "the quota is full again");
    // spread still runs: its ledger records the preemption.
    s.history.wait_preempted("spread", "urgent").await;
    wait_preemption_event(&s.env, "DynamicWorkload", "spread").await;

    let report = sampler.finish().await;
    let taken = report.taken_names();
    assert!(
        taken.len() == 2 && taken.iter().all(|n| n.starts_with("spread-")),
        "exactly two of spread's elastic pods were evicted: {taken:?}"
    );
    for name in taken {
        wait_preemption_event(&s.env, "Pod", name).await;
    }
    s.end().await;
}

#[tokio::test]
async fn raycluster_workers_above_min_replicas_go_before_any_whole_workload_and_come_back_gated() {
    let env = env_or_skip!("preempt-ray");
    let s = Scene::new(env, &[("low", 100), ("high", 1000)], "5").await;
    // The head and 1 worker are the gang; 2 workers above minReplicas are elastic.
    rayclusters(&s.env)
        .create(
            &PostParams::default(),
            &raycluster_of_class("rc", &s.queue, &s.classes.name("low"), 3, 1),
        )
        .await
        .expect("create the RayCluster");
    s.env.wait_queue_counts(&s.queue, 0, 4).await;
    // A whole workload of the same priority, admitted after the cluster (the newest).
    s.create("whole", "1", "low").await;
    s.env.wait_queue_counts(&s.queue, 0, 5).await;
    let sampler = QuotaSampler::start(&s.env, &s.queue, 5000);

    s.create("urgent", "2", "high").await;
    wait_admitted(&s.env, "urgent").await;
    // KubeRay recreates the two evicted workers; they wait behind the gate (nothing of lower
    // priority is left for them, and equal priority never preempts).
    wait_for(
        "the RayCluster to hold its head and 1 worker, with 2 recreated workers gated",
        PREEMPTION_TIMEOUT,
        || async {
            let pods = s.env.list_pods().await;
            let of = |kind: &str, admitted: bool| {
                pods.iter()
                    .filter(|p| ray_node_type(p.labels()) == Some(kind))
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .filter(|p| {
                        if admitted {
                            holds_quota(p)
                        } else {
                            is_gated(p)
                        }
                    })
                    .count()
            };
            (of("head", true) == 1 && of("worker", true) == 1 && of("worker", false) == 2)
                .then_some(())
        },
    )
    .await;
    s.env.wait_queue_counts(&s.queue, 2, 4).await;
    holding_and_waiting(&s.env, &["whole", "urgent"], &[])
        .await
        .expect("the whole workload is untouched while Ray workers could go");
    s.history.wait_preempted("raycluster-rc", "urgent").await;
    wait_preemption_event(&s.env, "DynamicWorkload", "raycluster-rc").await;

    let report = sampler.finish().await;
    assert!(
        report.taken.len() == 2
            && report
                .taken
                .values()
                .all(|labels| ray_node_type(labels) == Some("worker")),
        "exactly two Ray workers were evicted: {:?}",
        report.taken_names()
    );
    for name in report.taken_names() {
        wait_preemption_event(&s.env, "Pod", name).await;
    }
    s.end().await;
}

#[tokio::test]
async fn equal_priority_never_preempts() {
    let env = env_or_skip!("preempt-equal");
    let s = Scene::new(env, &[("same", 500)], "2").await;
    s.create("first", "1", "same").await;
    s.create("second", "1", "same").await;
    s.env.wait_queue_counts(&s.queue, 0, 2).await;
    let sampler = QuotaSampler::start(&s.env, &s.queue, 2000);

    s.create("third", "1", "same").await;
    let message = wait_seen_waiting(&s.env, "third").await;
    assert!(message.contains("cpu"), "it waits for cpu: {message}");
    stays("an equal-priority pod must wait, never preempt", || {
        holding_and_waiting(&s.env, &["first", "second"], &["third"])
    })
    .await;
    s.env.wait_queue_counts(&s.queue, 1, 2).await;

    sampler.finish().await.assert_nothing_taken();
    s.end().await;
}

#[tokio::test]
async fn a_queue_with_within_queue_never_never_preempts() {
    let env = env_or_skip!("preempt-never");
    let s = Scene::with_spec(
        env,
        &[("low", 10), ("high", 1000)],
        json!({"quota": {"cpu": "2"}, "preemption": {"withinQueue": "Never"}}),
    )
    .await;
    s.create("low-a", "1", "low").await;
    s.create("low-b", "1", "low").await;
    s.env.wait_queue_counts(&s.queue, 0, 2).await;
    let sampler = QuotaSampler::start(&s.env, &s.queue, 2000);

    s.create("urgent", "1", "high").await;
    wait_seen_waiting(&s.env, "urgent").await;
    stays(
        "in a queue with withinQueue: Never a high-priority pod must wait, never preempt",
        || holding_and_waiting(&s.env, &["low-a", "low-b"], &["urgent"]),
    )
    .await;

    sampler.finish().await.assert_nothing_taken();
    s.end().await;
}

#[tokio::test]
async fn a_pod_above_the_queues_max_priority_is_refused_at_creation_naming_the_cap() {
    let env = env_or_skip!("preempt-cap");
    let s = Scene::with_spec(
        env,
        &[("under", 400), ("over", 1000)],
        json!({"quota": {"cpu": "4"}, "preemption": {"maxPriority": 500}}),
    )
    .await;
    let message = s
        .env
        .refused(
            &s.pod("too-high", "1", "over"),
            "a pod above the queue's maxPriority is refused",
        )
        .await;
    assert!(
        message.contains("500") && message.contains("maxPriority"),
        "the refusal names the cap: {message}"
    );
    assert!(
        s.env
            .pods()
            .get_opt("too-high")
            .await
            .expect("get")
            .is_none(),
        "the refused pod does not exist"
    );
    // At or below the cap, and without a class, pods are accepted as usual.
    s.create("under", "1", "under").await;
    s.env.create_pod(pod("plain", &s.queue, "1")).await;
    s.env.wait_queue_counts(&s.queue, 0, 2).await;
    s.end().await;
}

/// A PodDisruptionBudget covering `app=<app>` that allows no disruption while its one pod is
/// healthy; returns once the disruption controller has computed it.
async fn blocking_pdb(env: &TestEnv, app: &str) -> String {
    let name = format!("{app}-budget");
    let api: Api<PodDisruptionBudget> = Api::namespaced(env.client.clone(), &env.namespace);
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
    }))
    .expect("pdb");
    create(&api, &pdb).await;
    wait_for(
        &format!("PodDisruptionBudget {name} to allow no disruption of its healthy pod"),
        Duration::from_secs(60),
        || async {
            let status = api.get(&name).await.ok()?.status?;
            (status.observed_generation.is_some()
                && status.current_healthy == Some(1)
                && status.disruptions_allowed.unwrap_or(0) == 0)
                .then_some(())
        },
    )
    .await;
    name
}

#[tokio::test]
async fn a_pod_disruption_budget_is_honoured_and_another_victim_is_chosen() {
    let env = env_or_skip!("preempt-pdb");
    let s = Scene::new(env, &[("lowest", 10), ("low", 100), ("high", 1000)], "3").await;
    // The natural victim (lowest priority) is protected by a budget.
    s.env
        .create_pod(with_labels(
            s.pod("protected", "1", "lowest"),
            &[("app", "protected")],
        ))
        .await;
    s.create("other-a", "1", "low").await;
    s.create("other-b", "1", "low").await;
    s.env.wait_queue_counts(&s.queue, 0, 3).await;
    let budget = blocking_pdb(&s.env, "protected").await;
    let sampler = QuotaSampler::start(&s.env, &s.queue, 3000);

    s.create("urgent", "1", "high").await;
    wait_admitted(&s.env, "urgent").await;
    s.env.wait_queue_counts(&s.queue, 0, 3).await;
    holding_and_waiting(&s.env, &["protected", "urgent"], &[])
        .await
        .expect("the protected pod still holds its quota");
    let needles = ["disruption", budget.as_str()];
    let said = wait_for(
        "an Event or a DynamicWorkload status saying the disruption budget kept a victim",
        PREEMPTION_TIMEOUT,
        || said_anywhere(&s.env, &s.history, &needles),
    )
    .await;
    eprintln!("the budget was reported: {said}");

    let report = sampler.finish().await;
    let taken = report.taken_names();
    assert!(
        taken == ["other-a"] || taken == ["other-b"],
        "one unprotected pod was evicted instead, and only one: {taken:?}"
    );
    s.history.wait_preempted(taken[0], "urgent").await;
    s.end().await;
}

#[tokio::test]
async fn a_preemptor_waits_when_its_only_victim_is_protected_by_a_disruption_budget() {
    let env = env_or_skip!("preempt-pdb-wait");
    let s = Scene::new(env, &[("low", 10), ("high", 1000)], "1").await;
    s.env
        .create_pod(with_labels(
            s.pod("protected", "1", "low"),
            &[("app", "protected")],
        ))
        .await;
    s.env.wait_queue_counts(&s.queue, 0, 1).await;
    let budget = blocking_pdb(&s.env, "protected").await;
    let sampler = QuotaSampler::start(&s.env, &s.queue, 1000);

    s.create("urgent", "1", "high").await;
    wait_seen_waiting(&s.env, "urgent").await;
    let needles = ["disruption", budget.as_str()];
    let said = wait_for(
        "an Event or a DynamicWorkload status saying the disruption budget blocks the preemption",
        PREEMPTION_TIMEOUT,
        || said_anywhere(&s.env, &s.history, &needles),
    )
    .await;
    eprintln!("the budget was reported: {said}");
    stays("the protected pod must not be evicted", || {
        holding_and_waiting(&s.env, &["protected"], &["urgent"])
    })
    .await;

    sampler.finish().await.assert_nothing_taken();
    s.end().await;
}

#[tokio::test]
async fn admitted_requests_stay_within_the_quota_at_every_sampled_moment_of_a_preemption_run() {
    let env = env_or_skip!("preempt-run");
    let s = Scene::new(env, &[("lowest", 10), ("low", 100), ("high", 1000)], "6").await;
    let sampler = QuotaSampler::start(&s.env, &s.queue, 6000);

    // 6 cpu of low work: a gang of 2, an elastic workload of 1 + 2, and a single pod.
    s.env
        .create_pods_at_once(
            ["gang-0", "gang-1"]
                .iter()
                .map(|name| member(s.pod(name, "1", "low"), "gang", 2)),
        )
        .await;
    s.env.wait_queue_counts(&s.queue, 0, 2).await;
    for (i, name) in ["elastic-0", "elastic-1", "elastic-2"]
        .into_iter()
        .enumerate()
    {
        s.env
            .create_pod(member(s.pod(name, "1", "low"), "elastic", 1))
            .await;
        s.env.wait_queue_counts(&s.queue, 0, 3 + i as i32).await;
    }
    s.create("single", "1", "lowest").await;
    s.env.wait_queue_counts(&s.queue, 0, 6).await;

    // Three preemptors at once, 5 cpu together.
    let urgent = [("urgent-0", "2"), ("urgent-1", "1"), ("urgent-2", "2")];
    s.env
        .create_pods_at_once(urgent.iter().map(|(name, cpu)| s.pod(name, cpu, "high")))
        .await;
    for (name, _) in urgent {
        wait_admitted(&s.env, name).await;
    }
    wait_for(
        "the queue to settle with nothing terminating",
        PREEMPTION_TIMEOUT,
        || async {
            let pods = s.env.list_pods().await;
            pods.iter()
                .all(|p| p.metadata.deletion_timestamp.is_none())
                .then_some(())
        },
    )
    .await;
    let pods = s.env.list_pods().await;
    assert_eq!(
        holding_cpu(&pods),
        6000,
        "no more was evicted than needed: the quota is full again"
    );

    let report = sampler.finish().await;
    let taken = report.taken_names();
    assert!(
        !taken.is_empty() && taken.iter().all(|n| !n.starts_with("urgent")),
        "low pods and only low pods were evicted: {taken:?}"
    );
    eprintln!(
        "{} samples, at most {}m cpu admitted; evicted {taken:?}",
        report.samples, report.most
    );
    s.end().await;
}
