//! Issue 31's holes in admission at creation, as unit tests of the webhook's state and classifier.

use super::tests::open;
use super::*;
use serde_json::json;
use sluice_webhooks::PodClassifier;

fn cpu(n: i64) -> ResourceList {
    let mut l = ResourceList::new();
    l.add("cpu", n * 1000);
    l
}

fn identity(queue: &str, workload: &str) -> PodIdentity {
    PodIdentity {
        queue: queue.into(),
        workload: Some(workload.into()),
        pod_set: "main".into(),
        min_count: None,
        recorded: false,
    }
}

fn key(namespace: &str, name: &str) -> WorkloadKey {
    WorkloadKey {
        namespace: namespace.into(),
        name: name.into(),
    }
}

fn binding(namespace: &str, name: &str) -> PodBinding {
    PodBinding {
        namespace: namespace.into(),
        name: name.into(),
        generate_name: String::new(),
    }
}

fn queue_store(queues: &[serde_json::Value]) -> Store<CapacityQueue> {
    let (store, mut writer) = kube::runtime::reflector::store::<CapacityQueue>();
    for q in queues {
        let queue: CapacityQueue = serde_json::from_value(q.clone()).expect("queue");
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(queue));
    }
    store
}

fn queue(name: &str, spec: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
           "metadata": {"name": name}, "spec": spec})
}

fn plain_pod(name: &str, queue: &str, workload: &str, cpu: &str, min_count: Option<&str>) -> Pod {
    let mut pod = json!({
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue, WORKLOAD_LABEL: workload}},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu}}}]}
    });
    if let Some(min) = min_count {
        pod["metadata"]["annotations"] = json!({MIN_COUNT_ANNOTATION: min});
    }
    serde_json::from_value(pod).expect("pod")
}

/// Hole 1: a pod naming a workload the last pass charged to another queue is refused at creation,
/// with both queues and the workload in the message; one of the workload's own queue is not.
#[test]
fn a_pod_joining_a_workload_of_another_queue_is_refused_naming_both_queues() {
    let at_creation = open(8, &["ns"]);
    at_creation
        .lock()
        .known
        .insert(key("ns", "w1"), "ghost".into());
    let classifier = Classifier {
        ledgers: None,
        adapters: Adapters::default(),
        at_creation: Some(Arc::new(at_creation)),
        queues: Some(queue_store(&[queue("q", json!({"quota": {"cpu": "8"}}))])),
    };
    let refusal = classifier
        .classify_in("ns", &plain_pod("big", "q", "w1", "2", None))
        .expect_err("another queue's workload");
    assert!(
        refusal.contains("\"q\"") && refusal.contains("\"ghost\"") && refusal.contains("ns/w1"),
        "{refusal}"
    );
    assert!(
        classifier
            .classify_in("ns", &plain_pod("small", "ghost", "w1", "1", None))
            .is_ok(),
        "a pod of the workload's own queue is classified"
    );
}

/// Hole 1 on a replica that does not lead (its admission at creation is closed: it knows no
/// pass): the ledger's queue, from its watch of DynamicWorkloads, refuses the pod all the same.
#[test]
fn a_replica_that_does_not_lead_refuses_a_pod_joining_another_queues_ledger() {
    use crate::api::{DynamicWorkload, DynamicWorkloadSpec};
    use crate::queue::ledger_queues::LedgerQueues;
    let ledgers = LedgerQueues::default();
    let mut ledger = DynamicWorkload::new(
        "w1",
        DynamicWorkloadSpec {
            queue_name: "ghost".into(),
            ..Default::default()
        },
    );
    ledger.metadata.namespace = Some("ns".into());
    ledgers.apply(kube::runtime::watcher::Event::Apply(ledger));
    let classifier = Classifier {
        adapters: Adapters::default(),
        at_creation: Some(Arc::new(AdmitAtCreation::default())),
        queues: Some(queue_store(&[queue("q", json!({"quota": {"cpu": "8"}}))])),
        ledgers: Some(ledgers),
    };
    let refusal = classifier
        .classify_in("ns", &plain_pod("big", "q", "w1", "2", None))
        .expect_err("another queue's ledger");
    assert!(
        refusal.contains("\"q\"") && refusal.contains("\"ghost\"") && refusal.contains("ns/w1"),
        "{refusal}"
    );
    for (pod, namespace) in [("small", "ns"), ("elsewhere", "other")] {
        let queue = if namespace == "ns" { "ghost" } else { "q" };
        assert!(
            classifier
                .classify_in(namespace, &plain_pod(pod, queue, "w1", "1", None))
                .is_ok(),
            "{namespace}/{pod}: its own ledger's queue, or a ledger of that name in another namespace"
        );
    }
}

/// Hole 1, at creation: even without the refusal (another replica's webhook), admission at
/// creation never admits a pod into a workload the last pass charged to another queue.
#[test]
fn a_pod_of_a_known_workload_of_another_queue_is_never_admitted_at_creation() {
    let a = open(8, &["ns"]);
    a.lock().known.insert(key("ns", "w1"), "ghost".into());
    assert_eq!(
        a.try_admit(&binding("ns", "big"), &identity("q", "w1"), &cpu(2)),
        None
    );
    assert_eq!(a.lock().queues["q"].room["cpu"], 8000, "no room taken");
}

/// Hole 6: a workload Failed by its queue's requeueLimit (or losing pods to evictions) admits
/// nothing at creation, though it held quota at the last pass.
#[test]
fn a_closed_workload_admits_nothing_at_creation() {
    let a = open(8, &["ns"]);
    {
        let mut state = a.lock();
        state.started.insert(key("ns", "w1"), "q".into());
        state.known.insert(key("ns", "w1"), "q".into());
        state.closed.insert(key("ns", "w1"));
    }
    assert_eq!(
        a.try_admit(&binding("ns", "again"), &identity("q", "w1"), &cpu(1)),
        None
    );
    // The next pass reopens it (and the queue: the gated pod is its to admit).
    {
        let mut state = a.lock();
        state.closed.clear();
        state.queues.get_mut("q").expect("q").waiting = false;
    }
    assert!(
        a.try_admit(&binding("ns", "again"), &identity("q", "w1"), &cpu(1))
            .is_some(),
        "once the pass reopens it"
    );
}

/// Hole 10: holds no pass has seen (a creation the API server refused after sluice's webhook
/// leaves one for ten seconds) take at most half the published room per namespace in a queue
/// another namespace uses, so one namespace cannot keep a shared queue full with them.
#[test]
fn one_namespaces_unseen_holds_cannot_take_more_than_half_a_shared_queue() {
    let a = open(8, &["attacker", "victim"]);
    for i in 0..2 {
        assert!(
            a.try_admit(
                &binding("attacker", &format!("a{i}")),
                &identity("q", &format!("a{i}")),
                &cpu(2)
            )
            .is_some(),
            "within its half"
        );
    }
    assert_eq!(
        a.try_admit(&binding("attacker", "a2"), &identity("q", "a2"), &cpu(2)),
        None,
        "a third unseen hold would take more than half the room"
    );
    // The gated pod makes the queue wait (order is kept) until the next pass; the pass publishes
    // the room that is left, and the victim's pod is admitted from it.
    a.lock().queues.get_mut("q").expect("q").waiting = false;
    assert!(
        a.try_admit(&binding("victim", "v0"), &identity("q", "v0"), &cpu(4))
            .is_some(),
        "the other half is the victim's"
    );
}

/// Hole 10: a namespace alone in its queue keeps the whole room (no one to starve).
#[test]
fn a_namespace_alone_in_its_queue_may_hold_all_of_it() {
    let a = open(8, &["ns"]);
    for i in 0..4 {
        assert!(
            a.try_admit(
                &binding("ns", &format!("p{i}")),
                &identity("q", &format!("p{i}")),
                &cpu(2)
            )
            .is_some()
        );
    }
}

/// Holes 4 and 9: a pod whose gang (its min-count, or itself) needs more than its queue could
/// ever give is refused at creation with the numbers; the cohort's lending counts.
#[test]
fn a_pod_or_gang_larger_than_its_queue_could_ever_give_is_refused_with_the_numbers() {
    let classifier = Classifier {
        ledgers: None,
        adapters: Adapters::default(),
        at_creation: None,
        queues: Some(queue_store(&[
            queue("q", json!({"quota": {"cpu": "2"}})),
            queue("a", json!({"quota": {"cpu": "4"}, "cohort": "c"})),
            queue("b", json!({"quota": {"cpu": "4"}, "cohort": "c"})),
        ])),
    };
    let too_big = classifier
        .classify_in("ns", &plain_pod("huge", "q", "huge", "3", None))
        .expect_err("3 cpu in a 2-cpu queue");
    assert!(
        too_big.contains("needs 3 cpu") && too_big.contains("a quota of 2 cpu"),
        "{too_big}"
    );
    let absurd = classifier
        .classify_in("ns", &plain_pod("g", "q", "g", "100m", Some("100000")))
        .expect_err("a gang of 100000");
    assert!(absurd.contains("100000"), "{absurd}");
    assert!(
        classifier
            .classify_in("ns", &plain_pod("fits", "q", "fits", "1", Some("2")))
            .is_ok()
    );
    // 8 pods of 1 cpu in queue a (4 cpu): b lends its 4.
    assert!(
        classifier
            .classify_in("ns", &plain_pod("borrow", "a", "borrow", "1", Some("8")))
            .is_ok(),
        "the cohort can lend the rest"
    );
    assert!(
        classifier
            .classify_in("ns", &plain_pod("never", "a", "never", "1", Some("9")))
            .is_err(),
        "more than the whole cohort"
    );
}
