use super::classifier::judge_resize;
use super::*;

/// A pod `name` of namespace `ns` in queue `q`, carrying `token`, as a pass sees it.
fn seen_in_q<'a>(token: &'a str, name: &'a str) -> VisibleToken<'a> {
    VisibleToken {
        token,
        namespace: "ns",
        name,
        queue: "q",
    }
}

fn list(cpu: i64) -> ResourceList {
    let mut l = ResourceList::new();
    l.add("cpu", cpu * 1000);
    l
}

fn identity(queue: &str, workload: Option<&str>, min_count: Option<u32>) -> PodIdentity {
    PodIdentity {
        queue: queue.into(),
        workload: workload.map(str::to_string),
        pod_set: "main".into(),
        min_count,
        recorded: false,
    }
}

/// As after a pass that left `room` cpu in queue "q", where nothing waits.
fn open_with_room(room: i64) -> AdmitAtCreation {
    open(room, &[])
}

/// Admission at creation open on queue "q" with `room` cpu, used (as the last pass saw) by the
/// namespaces `users`, open to every namespace.
pub(super) fn open(room: i64, users: &[&str]) -> AdmitAtCreation {
    let a = AdmitAtCreation::default();
    {
        let mut state = a.lock();
        state.active = true;
        state.queues.insert(
            "q".into(),
            QueueRoom {
                room: list(room).0,
                published: list(room).0,
                waiting: false,
                last_gated: None,
                all_namespaces: true,
                namespaces: users.iter().map(|n| n.to_string()).collect(),
            },
        );
    }
    a
}

/// Admits at creation a pod of `cpu` cores of its own (no workload) in queue `q`, namespace `ns`.
fn single(a: &AdmitAtCreation, cpu: i64) -> Option<String> {
    a.try_admit(&pod_at("ns"), &identity("q", None, None), &list(cpu))
}

/// A pod created in `namespace` from generateName `p-` (its name not known yet).
fn pod_at(namespace: &str) -> PodBinding {
    PodBinding {
        namespace: namespace.into(),
        name: String::new(),
        generate_name: "p-".into(),
    }
}

fn holds(a: &AdmitAtCreation, token: &str) -> bool {
    a.lock().holds.contains_key(token)
}

fn room(a: &AdmitAtCreation) -> i64 {
    a.lock().queues["q"].room["cpu"] / 1000
}

#[test]
fn nothing_is_admitted_at_creation_before_a_pass_published() {
    let a = AdmitAtCreation::default();
    assert_eq!(single(&a, 1), None);
}

#[test]
fn pods_take_room_until_none_is_left_then_the_queue_waits() {
    let a = open_with_room(3);
    let one = identity("q", None, None);
    assert!(a.try_admit(&pod_at("ns"), &one, &list(2)).is_some());
    assert_eq!(room(&a), 1);
    // Does not fit: gated, and the queue now has a pod waiting...
    assert_eq!(a.try_admit(&pod_at("ns"), &one, &list(2)), None);
    // ... so a pod that would fit waits too rather than overtake it.
    assert_eq!(a.try_admit(&pod_at("ns"), &one, &list(1)), None);
    assert_eq!(room(&a), 1);
}

#[test]
fn a_pod_admitted_at_creation_names_the_term_that_admitted_it() {
    let a = open_with_room(3);
    a.begin_term("replica-1@4".to_string());
    let admitted = a
        .try_admit_by(&pod_at("ns"), &identity("q", None, None), &list(1))
        .expect("room for it");
    assert_eq!(admitted.by, "replica-1@4");
    // The next term's name from its start on.
    a.begin_term("replica-2@5".to_string());
    let admitted = a
        .try_admit_by(&pod_at("ns"), &identity("q", None, None), &list(1))
        .expect("room for it");
    assert_eq!(admitted.by, "replica-2@5");
}

#[test]
fn tokens_differ_and_are_known_until_a_pass_sees_their_pods() {
    let a = open_with_room(10);
    let one = identity("q", None, None);
    let first = a
        .try_admit(&pod_at("ns"), &one, &list(1))
        .expect("admitted");
    let second = a
        .try_admit(&pod_at("ns"), &one, &list(2))
        .expect("admitted");
    assert_ne!(first, second);
    assert!(holds(&a, &first) && holds(&a, &second));
    let seen = seen_in_q(&first, "p-1");
    let (_, held) = a.holds_for_pass(Instant::now(), [seen]);
    assert!(
        !holds(&a, &first),
        "a pod the cache shows is an admitted pod, not a hold"
    );
    assert_eq!(
        held["q"].get("cpu"),
        2000,
        "the unseen pod's room stays held"
    );
}

#[test]
fn a_new_gang_holds_room_for_its_minimum_and_its_members_take_those_places() {
    let a = open_with_room(10);
    let member = identity("q", Some("gang"), Some(4));
    assert!(a.try_admit(&pod_at("ns"), &member, &list(2)).is_some());
    assert_eq!(room(&a), 2, "the first pod holds room for all 4 members");
    for _ in 0..3 {
        assert!(a.try_admit(&pod_at("ns"), &member, &list(2)).is_some());
    }
    assert_eq!(room(&a), 2, "members 2-4 take the places held");
    // A fifth pod grows the workload: it needs room of its own.
    assert!(a.try_admit(&pod_at("ns"), &member, &list(2)).is_some());
    assert_eq!(room(&a), 0);
}

#[test]
fn a_gang_that_does_not_fit_whole_is_not_started_at_creation() {
    let a = open_with_room(5);
    assert_eq!(
        a.try_admit(
            &pod_at("ns"),
            &identity("q", Some("gang"), Some(4)),
            &list(2)
        ),
        None
    );
    assert_eq!(room(&a), 5);
}

#[test]
fn pods_of_recorded_applications_wait_for_their_ledger() {
    let a = open_with_room(10);
    let mut ray = identity("q", Some("raycluster-x"), None);
    ray.recorded = true;
    assert_eq!(a.try_admit(&pod_at("ns"), &ray, &list(1)), None);
}

#[test]
fn a_pod_of_a_started_workload_is_admitted_alone() {
    let a = open_with_room(3);
    a.lock().started.insert(
        WorkloadKey {
            namespace: "ns".into(),
            name: workload_object_name("app"),
        },
        "q".into(),
    );
    // Its gang minimum was reserved by the pass when the workload started: one pod's room only.
    assert!(
        a.try_admit(
            &pod_at("ns"),
            &identity("q", Some("app"), Some(8)),
            &list(1)
        )
        .is_some()
    );
    assert_eq!(room(&a), 2);
}

#[test]
fn only_allowed_namespaces_and_known_queues_admit_at_creation() {
    let a = open_with_room(10);
    {
        let mut s = a.lock();
        let q = s.queues.get_mut("q").expect("queue");
        q.all_namespaces = false;
        q.namespaces.insert("team-a".into());
    }
    let one = identity("q", None, None);
    assert!(a.try_admit(&pod_at("team-a"), &one, &list(1)).is_some());
    assert_eq!(a.try_admit(&pod_at("team-b"), &one, &list(1)), None);
    assert_eq!(
        a.try_admit(&pod_at("team-a"), &identity("other", None, None), &list(1)),
        None
    );
}

#[test]
fn deactivated_it_admits_nothing_and_tokens_stay_unique() {
    let a = open_with_room(10);
    let before = single(&a, 1).expect("admitted");
    a.deactivate();
    assert_eq!(single(&a, 1), None);
    assert!(!holds(&a, &before));
    let s = a.lock();
    assert_eq!(
        s.next_seq, 1,
        "the sequence goes on: no token is handed out twice"
    );
}

/// Issue 16, hole 1: admission tokens are bound to the one pod they admitted.
mod token_replay {
    use super::*;
    use serde_json::json;
    use sluice_webhooks::PodClassifier;

    fn classifier(room_cpu: i64) -> Classifier {
        Classifier {
            ledgers: None,
            adapters: Adapters::default(),
            at_creation: Some(Arc::new(open_with_room(room_cpu))),
            queues: None,
        }
    }

    /// A plain pod of queue "q" named `name` in "ns", asking `cpu`, carrying `token` if any.
    fn pod(name: &str, cpu: &str, token: Option<&str>) -> Pod {
        let mut annotations = serde_json::Map::new();
        if let Some(token) = token {
            annotations.insert(AT_CREATION_ANNOTATION.into(), json!(token));
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {QUEUE_LABEL: "q"}, "annotations": annotations},
            "spec": {"containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": cpu}}}]}
        }))
        .expect("pod")
    }

    fn labels() -> BTreeMap<String, String> {
        BTreeMap::from([(QUEUE_LABEL.to_string(), "q".to_string())])
    }

    /// The annotations `pod` is admitted with as it is created in `namespace`, or None (gated).
    fn created_in(c: &Classifier, namespace: &str, pod: &Pod) -> Option<BTreeMap<String, String>> {
        c.admit_at_creation(&CreatedPod {
            namespace,
            pod,
            labels: &labels(),
            facts: &RequestFacts::default(),
        })
    }

    /// Admits `pod` at creation in "ns": the token it was given, or None (gated).
    fn admit(c: &Classifier, pod: &Pod) -> Option<String> {
        created_in(c, "ns", pod).map(|a| a[AT_CREATION_ANNOTATION].clone())
    }

    fn room_left(c: &Classifier) -> i64 {
        room(c.at_creation.as_ref().expect("at creation"))
    }

    #[test]
    fn a_big_pod_replaying_another_pods_token_is_judged_as_new_and_gated() {
        let c = classifier(2);
        let token = admit(&c, &pod("small", "1", None)).expect("admitted");
        assert_eq!(room_left(&c), 1);
        // Another pod (another name, 8 cpu) carrying the copied token: no free pass.
        assert_eq!(admit(&c, &pod("big", "8", Some(&token))), None);
        assert_eq!(room_left(&c), 1, "the replay took no room");
    }

    #[test]
    fn the_real_reinvocation_keeps_its_token_once_and_a_second_replay_is_judged_as_new() {
        let c = classifier(2);
        let token = admit(&c, &pod("a", "1", None)).expect("admitted");
        let again = pod("a", "1", Some(&token));
        assert_eq!(
            admit(&c, &again).as_deref(),
            Some(token.as_str()),
            "the webhook's second call for the same creation keeps the token"
        );
        assert_eq!(room_left(&c), 1, "and holds no more room");
        // A third arrival with the same name and token is a replay: judged as a new pod, it
        // takes room of its own (here it fits) under a new token.
        let third = admit(&c, &again).expect("room left for one more");
        assert_ne!(third, token);
        assert_eq!(room_left(&c), 0);
        assert_eq!(admit(&c, &again), None, "no room left: gated");
    }

    #[test]
    fn a_pod_grown_by_a_sidecar_after_sluice_is_gated_and_its_hold_given_back() {
        let c = classifier(2);
        let token = admit(&c, &pod("a", "1", None)).expect("admitted");
        assert_eq!(room_left(&c), 1);
        let mut grown = pod("a", "1", Some(&token));
        let spec = grown.spec.as_mut().expect("spec");
        let mut sidecar = spec.containers[0].clone();
        sidecar.name = "injected".into();
        spec.containers.push(sidecar);
        assert_eq!(admit(&c, &grown), None, "grew beyond its hold: gated");
        assert_eq!(room_left(&c), 2, "its hold is given back");
        let at = c.at_creation.as_ref().expect("at creation");
        assert!(!holds(at, &token));
    }

    #[test]
    fn a_token_on_a_pod_of_another_namespace_or_queue_gets_no_free_pass() {
        let c = classifier(1);
        let token = admit(&c, &pod("a", "1", None)).expect("admitted");
        let copied = pod("a", "1", Some(&token));
        assert_eq!(
            created_in(&c, "other-ns", &copied),
            None,
            "same name in another namespace: no room left, gated"
        );
        let at = c.at_creation.as_ref().expect("at creation");
        assert_eq!(
            at.reinvoked(&token, &PodBinding::of("ns", &copied), "other-q", &list(1)),
            Reinvocation::Unknown
        );
    }

    #[test]
    fn a_token_shown_by_another_pod_does_not_end_the_hold() {
        let a = open_with_room(4);
        let binding = PodBinding {
            namespace: "ns".into(),
            name: "real".into(),
            generate_name: String::new(),
        };
        let token = a
            .try_admit(&binding, &identity("q", None, None), &list(1))
            .expect("admitted");
        // The token copied onto another admitted pod the cache shows: the real pod is not
        // visible yet, so its room stays held.
        let copied = seen_in_q(&token, "impostor");
        let (_, held) = a.holds_for_pass(Instant::now(), [copied]);
        assert_eq!(held["q"].get("cpu"), 1000);
        let real = seen_in_q(&token, "real");
        let (_, held) = a.holds_for_pass(Instant::now(), [real]);
        assert!(held.is_empty(), "the real pod ends the hold");
    }

    #[test]
    fn a_governed_pod_with_a_negative_request_is_refused_naming_the_field() {
        let c = classifier(2);
        let negative = pod("neg", "-1000", None);
        let refusal = c
            .classify_in("ns", &negative)
            .expect_err("a negative request is refused");
        assert!(refusal.contains("cpu"), "{refusal}");
        assert!(refusal.contains("negative"), "{refusal}");
    }
}

/// Issue 16, hole 3: gang places held at creation live no longer than the first pod's hold.
#[test]
fn gang_places_expire_with_the_hold_of_a_first_pod_that_never_appeared() {
    let a = open_with_room(10);
    let member = identity("q", Some("gang"), Some(4));
    let first = a
        .try_admit(&pod_at("ns"), &member, &list(2))
        .expect("first pod holds the gang");
    assert_eq!(room(&a), 2);
    // The first pod is deleted (or its creation failed) before any pass saw it: once its hold is
    // overdue, the API server says so.
    make_overdue(&a, &first);
    let overdue = a.overdue_holds();
    assert_eq!(overdue.len(), 1);
    assert_eq!(overdue[0].token, first);
    a.hold_checked(&first, HoldCheck::Gone);
    let (_, held) = a.holds_for_pass(Instant::now(), std::iter::empty());
    assert!(
        held.is_empty(),
        "the hold of a pod that does not exist is gone"
    );
    assert!(
        a.lock().new_gangs.is_empty(),
        "and the places it held for the rest of the gang with it"
    );
    // The pod's 2 cpu and the 6 held for the rest of its gang are back.
    assert_eq!(room(&a), 10);
}

/// A pod cache behind by more than HOLD_FOR (a burst of creations) never frees a hold by itself:
/// the hold stays while the API server has the pod, and is asked about again later.
#[test]
fn a_hold_outlives_a_late_cache_while_its_pod_exists() {
    let a = open_with_room(10);
    let token = single(&a, 2).expect("admitted at creation");
    // Not overdue yet: nothing to check.
    assert!(a.overdue_holds().is_empty());
    make_overdue(&a, &token);
    let overdue = a.overdue_holds();
    assert_eq!(overdue.len(), 1, "{overdue:?}");
    // Under way: not handed out twice.
    assert!(a.overdue_holds().is_empty());
    a.hold_checked(&token, HoldCheck::Exists);
    let (_, held) = a.holds_for_pass(Instant::now(), std::iter::empty());
    assert_eq!(held["q"].get("cpu"), 2000, "still held: the pod exists");
    assert!(a.overdue_holds().is_empty(), "checked again only later");
    // No answer (API server down): asked again soon, and held meanwhile.
    make_overdue(&a, &token);
    assert_eq!(a.overdue_holds().len(), 1);
    a.hold_checked(&token, HoldCheck::Unknown);
    let (_, held) = a.holds_for_pass(Instant::now(), std::iter::empty());
    assert_eq!(held["q"].get("cpu"), 2000);
    // The cache shows the pod at last: the hold is dropped (the pod counts now), and a late
    // answer for it changes nothing.
    let seen = seen_in_q(&token, "p-x7k2q");
    let (_, held) = a.holds_for_pass(Instant::now(), [seen]);
    assert!(held.is_empty());
    a.hold_checked(&token, HoldCheck::Gone);
    assert_eq!(room(&a), 8, "a late answer gives nothing back twice");
}

fn make_overdue(a: &AdmitAtCreation, token: &str) {
    let mut s = a.lock();
    let hold = s.holds.get_mut(token).expect("held");
    hold.check_at = Instant::now();
}

/// Issue 16, hole 5: in-place resize (`pods/resize`) cannot grow an admitted pod past its quota.
mod resize {
    use super::*;
    use serde_json::json;

    fn pod(cpu: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "labels": {QUEUE_LABEL: "q"}},
            "spec": {"containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}
        }))
        .expect("pod")
    }

    #[test]
    fn an_inplace_resize_that_grows_an_admitted_pod_is_refused_with_the_numbers() {
        let refusal = judge_resize("ns", &pod("1"), &pod("16")).expect_err("refused");
        assert!(refusal.contains("cpu 1 -> 16"), "{refusal}");
        assert!(refusal.contains("queue \"q\""), "{refusal}");
    }

    #[test]
    fn an_inplace_resize_that_shrinks_or_keeps_a_pod_is_allowed() {
        assert_eq!(judge_resize("ns", &pod("2"), &pod("500m")), Ok(()));
        assert_eq!(judge_resize("ns", &pod("2"), &pod("2")), Ok(()));
    }

    #[test]
    fn a_resize_to_a_negative_request_is_refused() {
        assert!(judge_resize("ns", &pod("2"), &pod("-4")).is_err());
    }
}

/// Kueue #14367 / #12897 (DRA charges): devices claimed through dynamic resource allocation are
/// not counted by sluice, so a governed pod claiming them is refused rather than let past quota.
#[test]
fn a_governed_pod_claiming_dra_devices_is_refused_naming_the_field() {
    use serde_json::json;
    use sluice_webhooks::PodClassifier;
    let c = Classifier {
        ledgers: None,
        adapters: Adapters::default(),
        at_creation: None,
        queues: None,
    };
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "dra", "labels": {QUEUE_LABEL: "q"}},
        "spec": {"containers": [{"name": "c", "image": "i"}],
                 "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}
    }))
    .expect("pod");
    let refusal = c.classify_in("ns", &pod).expect_err("refused");
    assert!(refusal.contains("spec.resourceClaims: gpu"), "{refusal}");
    let mut unlabelled = pod.clone();
    unlabelled.metadata.labels = None;
    assert_eq!(
        c.classify_in("ns", &unlabelled),
        Ok(None),
        "not sluice's pod"
    );
}

/// Issue 16, hole 8: admission at creation stops at the leadership term's deadline by itself,
/// without waiting for anyone to notice the term ended and call `deactivate`.
#[test]
fn nothing_is_admitted_at_creation_past_the_terms_deadline() {
    let a = open_with_room(10);
    let one = identity("q", None, None);
    a.lock().admit_until = Instant::now().checked_add(Duration::from_secs(3600));
    assert!(a.try_admit(&pod_at("ns"), &one, &list(1)).is_some());
    a.lock().admit_until = Some(Instant::now());
    assert_eq!(a.try_admit(&pod_at("ns"), &one, &list(1)), None);
}

/// Issue 18: priority is a user's input (any PriorityClass the cluster has), and priority decides
/// who may evict whom in a queue; `spec.preemption.maxPriority` caps it at creation.
mod max_priority {
    use super::*;
    use kube::core::admission::{AdmissionRequest, AdmissionReview};
    use serde_json::{Value, json};
    use sluice_webhooks::{GateSettings, PodClassifier, mutate_pod};

    /// A classifier that knows the queue "q", capped at `max_priority` when Some.
    fn classifier(max_priority: Option<i32>) -> Classifier {
        let (queues, mut writer) = kube::runtime::reflector::store::<CapacityQueue>();
        let mut spec = json!({"quota": {"cpu": "8"}});
        if let Some(cap) = max_priority {
            spec["preemption"] = json!({"maxPriority": cap});
        }
        let queue: CapacityQueue = serde_json::from_value(json!({
            "apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
            "metadata": {"name": "q"}, "spec": spec}))
        .expect("queue");
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(queue));
        Classifier {
            ledgers: None,
            adapters: Adapters::default(),
            at_creation: Some(Arc::new(open_with_room(8))),
            queues: Some(queues),
        }
    }

    /// A plain pod of `queue` with the priority the API server's Priority admission gave it.
    fn pod(queue: &str, priority: Option<i32>, class: Option<&str>) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {QUEUE_LABEL: queue}},
            "spec": {"priority": priority, "priorityClassName": class,
                "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "1"}}}]},
        })
    }

    /// The pod webhook's answer to the creation of `pod`.
    fn create(classifier: &Classifier, pod: Value) -> kube::core::admission::AdmissionResponse {
        let review: AdmissionReview<Pod> = serde_json::from_value(json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "name": "p", "namespace": "ns", "operation": "CREATE",
                "userInfo": {"username": "alice"}, "object": pod,
            }
        }))
        .expect("review");
        let request: AdmissionRequest<Pod> = review.try_into().expect("request");
        mutate_pod(&request, classifier, &GateSettings::default())
    }

    #[test]
    fn a_pod_above_its_queues_max_priority_is_refused_at_creation() {
        let capped = classifier(Some(1000));
        let refused = create(&capped, pod("q", Some(1_000_000), Some("urgent")));
        assert!(!refused.allowed, "a priority above the cap is refused");
        let message = &refused.result.message;
        for part in [
            "pod ns/p",
            "priority 1000000",
            "PriorityClass \"urgent\"",
            "CapacityQueue \"q\"",
            "priority 1000 at most",
            "spec.preemption.maxPriority",
            "kubectl get priorityclasses",
        ] {
            assert!(message.contains(part), "{part:?} missing from: {message}");
        }
        let nothing_held = capped.at_creation.as_ref().map(|a| a.lock().holds.len());
        assert_eq!(nothing_held, Some(0), "a refused pod holds no room");
    }

    #[test]
    fn a_pod_at_or_below_the_cap_or_in_an_uncapped_queue_is_judged_as_before() {
        let capped = classifier(Some(1000));
        for priority in [Some(1000), Some(-5), None] {
            let answer = create(&capped, pod("q", priority, Some("normal")));
            assert!(answer.allowed, "{priority:?}: {}", answer.result.message);
        }
        let uncapped = classifier(None);
        assert!(create(&uncapped, pod("q", Some(i32::MAX), Some("top"))).allowed);
        // A queue the webhook does not know yet caps nothing here (the controller judges the pod).
        let other = create(&capped, pod("other", Some(i32::MAX), Some("top")));
        assert!(other.allowed, "{}", other.result.message);
        // A pod sluice does not govern is not its business, whatever its priority.
        let mut ungoverned = pod("q", Some(i32::MAX), Some("top"));
        ungoverned["metadata"]["labels"] = json!({});
        assert!(create(&capped, ungoverned).allowed);
    }

    #[test]
    fn a_pod_without_a_priority_counts_as_zero_against_a_negative_cap() {
        let refused = classifier(Some(-1))
            .classify_in(
                "ns",
                &serde_json::from_value(pod("q", None, None)).expect("pod"),
            )
            .expect_err("0 is above -1");
        assert!(
            refused.contains("priority 0 (no PriorityClass)"),
            "{refused}"
        );
    }
}

/// Issue 23 (found by the model-based test, `queue::model_tests`): a pass may give a queue's
/// published room to pods another replica's webhook gated; while it runs, that queue admits
/// nothing at creation, so the same room is never given twice.
#[test]
fn a_queue_paused_by_a_pass_admits_nothing_at_creation_until_the_pass_publishes() {
    let a = open_with_room(4);
    let one = identity("q", None, None);
    a.pause(["q", "no-such-queue"]);
    assert_eq!(a.try_admit(&pod_at("ns"), &one, &list(1)), None);
    assert_eq!(room(&a), 4, "nothing taken");
    let other = open_with_room(4);
    other.pause(["another-queue"]);
    assert!(
        other.try_admit(&pod_at("ns"), &one, &list(1)).is_some(),
        "a queue the pass does not pause still admits"
    );
}
