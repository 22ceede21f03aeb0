//! The evictor's unit tests: which evictions are sent, their bodies, outcomes and timeouts, and
//! what the next passes learn from them.

use super::orders::Plan;
use super::*;
use serde_json::json;

fn pod(name: &str, uid: &str) -> Arc<CachedPod> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": uid},
            "spec": {"containers": []},
        }))
        .expect("pod"),
    )
}

fn victim(name: &str) -> Victim {
    Victim {
        pod: pod(name, &format!("uid-{name}")),
        uid: format!("uid-{name}"),
        workload: WorkloadKey {
            namespace: "ns".into(),
            name: format!("w-{name}"),
        },
        workload_ref: None,
    }
}

fn order(index: usize, victims: &[&str]) -> Order {
    Order {
        preemptor: WorkloadKey {
            namespace: "ns".into(),
            name: format!("urgent-{index}"),
        },
        preemptor_ref: None,
        queue: "q".into(),
        reason: "InQueuePriority".into(),
        needed: "2 cpu".into(),
        victims: victims.iter().map(|v| victim(v)).collect(),
    }
}

#[test]
fn only_victims_not_already_being_evicted_are_sent() {
    let now = Instant::now();
    let orders = [order(3, &["a", "b"]), order(5, &["c"])];
    let evicting = HashSet::from(["uid-a".to_string(), "uid-c".to_string()]);
    let plan = plan(&orders, &evicting, &HashMap::new(), now);
    assert_eq!(plan.send, BTreeMap::from([(0, vec![1])]));
    assert!(plan.held.is_empty());
}

#[test]
fn a_preemptor_with_a_victim_a_budget_protects_sends_nothing_and_says_why() {
    let now = Instant::now();
    let orders = [order(3, &["a", "b"]), order(5, &["c"])];
    let blocked = HashMap::from([(
        "uid-b".to_string(),
        (now + BLOCKED_FOR, "budget says no".to_string()),
    )]);
    let plan = plan(&orders, &HashSet::new(), &blocked, now);
    assert_eq!(plan.send, BTreeMap::from([(1, vec![0])]));
    assert_eq!(
        plan.held,
        BTreeMap::from([(0, "budget says no".to_string())])
    );
    // Once the refusal has run out, the victim may be evicted again.
    let later = plan_at(&orders, &blocked, now + BLOCKED_FOR);
    assert_eq!(later.send, BTreeMap::from([(0, vec![0, 1]), (1, vec![0])]));
    assert!(later.held.is_empty());
}

fn plan_at(orders: &[Order], blocked: &HashMap<String, (Instant, String)>, now: Instant) -> Plan {
    plan(orders, &HashSet::new(), blocked, now)
}

#[test]
fn the_eviction_applies_only_to_the_pod_it_was_decided_for() {
    let victim = victim("a");
    let body = serde_json::to_value(eviction_body(&victim.pod, &victim.uid, 120)).expect("json");
    assert_eq!(
        body,
        json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "a", "namespace": "ns"},
            "deleteOptions": {"preconditions": {"uid": "uid-a"}, "gracePeriodSeconds": 30},
        })
    );
}

#[test]
fn a_victim_that_asks_for_a_day_to_stop_gets_the_cap_and_a_short_one_keeps_its_own() {
    let mut day = victim("a");
    day.pod = Arc::new(CachedPod {
        grace_seconds: Some(86_400),
        ..CachedPod::clone(&day.pod)
    });
    let grace = |v: &Victim, cap| {
        serde_json::to_value(eviction_body(&v.pod, &v.uid, cap)).expect("json")["deleteOptions"]
            ["gracePeriodSeconds"]
            .as_i64()
    };
    assert_eq!(grace(&day, 120), Some(120), "capped");
    let mut quick = victim("b");
    quick.pod = Arc::new(CachedPod {
        grace_seconds: Some(5),
        ..CachedPod::clone(&quick.pod)
    });
    assert_eq!(grace(&quick, 120), Some(5), "its own, shorter");
}

fn api_error(code: u16, message: &str) -> kube::Error {
    kube::Error::Api(Box::new(
        Status::failure(message, "TooManyRequests").with_code(code),
    ))
}

#[test]
fn a_refusal_by_a_budget_is_told_from_a_gone_pod_and_an_unknown_outcome() {
    let budget = "Cannot evict pod as it would violate the pod's disruption budget.";
    assert_eq!(
        outcome_of(Ok(Err(api_error(429, budget)))),
        Outcome::Blocked(budget.into())
    );
    assert_eq!(outcome_of(Ok(Err(api_error(404, "gone")))), Outcome::Gone);
    // The uid precondition failed: another pod under the same name.
    assert_eq!(outcome_of(Ok(Err(api_error(409, "uid")))), Outcome::Gone);
    assert!(matches!(
        outcome_of(Ok(Err(api_error(500, "oops")))),
        Outcome::Unknown(_)
    ));
    assert_eq!(outcome_of(Ok(Ok(Status::success()))), Outcome::Evicted);
}

#[test]
fn an_eviction_is_forgotten_once_the_cache_shows_the_pod_terminating_or_after_its_age() {
    let now = Instant::now();
    let age = Duration::from_secs(30);
    let mut evicting = HashMap::from([
        ("live".to_string(), now + age),
        ("terminating".to_string(), now + age),
    ]);
    prune_evicting(&mut evicting, &HashSet::from(["live"]), now);
    assert_eq!(evicting.keys().collect::<Vec<_>>(), vec!["live"]);
    prune_evicting(&mut evicting, &HashSet::from(["live"]), now + age);
    assert!(evicting.is_empty(), "past its age: decided again");
}

/// An Evictor on a client whose API server accepts connections and never answers.
async fn evictor_on_a_silent_server(
    api_timeout: Duration,
) -> (Arc<Evictor>, tokio::task::JoinHandle<()>) {
    let (client, server) = crate::test_support::silent_api_client().await;
    let term = crate::test_support::long_term();
    let recorder = Recorder::new(
        client.clone(),
        kube::runtime::events::Reporter {
            controller: "sluice".into(),
            instance: None,
        },
    );
    let metrics = ControllerMetrics::new(&mut prometheus_client::registry::Registry::default());
    let evictor = Evictor::new(
        client,
        metrics,
        recorder,
        term,
        4,
        api_timeout,
        api_timeout * 3,
    );
    (Arc::new(evictor), server)
}

#[tokio::test]
async fn an_eviction_that_hangs_fails_within_the_timeout() {
    let (evictor, server) = evictor_on_a_silent_server(Duration::from_millis(100)).await;
    let outcome = evictor.evict(&victim("a"), false).await;
    assert!(matches!(outcome, Outcome::Unknown(_)), "{outcome:?}");
    server.abort();
}

#[tokio::test]
async fn nothing_is_evicted_once_the_term_is_over() {
    let (evictor, server) = evictor_on_a_silent_server(Duration::from_secs(3600)).await;
    evictor.term.revoke();
    // With an hour's timeout on a silent server, any call sent would hang the test.
    let outcome = evictor.evict(&victim("a"), false).await;
    assert!(matches!(outcome, Outcome::Unknown(_)), "{outcome:?}");
    evictor.start(vec![order(0, &["a"])], Instant::now());
    assert!(
        evictor.ledger().evicting.is_empty(),
        "nothing counted in flight"
    );
    server.abort();
}

#[tokio::test]
async fn a_refusal_marks_the_pod_and_holds_the_preemptor_until_it_runs_out() {
    let (evictor, server) = evictor_on_a_silent_server(Duration::from_millis(50)).await;
    let order = order(0, &["a"]);
    evictor
        .blocked(&order, &order.victims[0], "no disruptions")
        .await;
    assert_eq!(evictor.blocked_uids(), HashSet::from(["uid-a".to_string()]));
    let statuses = evictor.for_statuses();
    assert_eq!(
        statuses.held.get(&order.preemptor).map(String::as_str),
        Some(held_message("ns/a", "no disruptions").as_str())
    );
    evictor.prune(&[], Instant::now() + BLOCKED_FOR);
    assert!(evictor.blocked_uids().is_empty());
    assert!(evictor.for_statuses().held.is_empty());
    server.abort();
}

#[test]
fn a_preemptor_held_by_a_budget_says_which_pod_and_when_it_is_tried_again() {
    assert_eq!(
        held_message("ns/a", "no disruptions allowed"),
        "waits to preempt: a PodDisruptionBudget blocks the eviction of pod ns/a \
         (no disruptions allowed); tried again within 15s"
    );
}
