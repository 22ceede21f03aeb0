use super::*;

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
    let a = AdmitAtCreation::default();
    {
        let mut s = a.lock();
        s.active = true;
        s.queues.insert(
            "q".into(),
            QueueRoom {
                room: [("cpu".to_string(), room * 1000)].into(),
                waiting: false,
                last_gated: None,
                all_namespaces: true,
                namespaces: HashSet::new(),
            },
        );
    }
    a
}

fn room(a: &AdmitAtCreation) -> i64 {
    a.lock().queues["q"].room["cpu"] / 1000
}

#[test]
fn nothing_is_admitted_at_creation_before_a_pass_published() {
    let a = AdmitAtCreation::default();
    assert_eq!(
        a.try_admit("ns", &identity("q", None, None), &list(1)),
        None
    );
}

#[test]
fn pods_take_room_until_none_is_left_then_the_queue_waits() {
    let a = open_with_room(3);
    let one = identity("q", None, None);
    assert!(a.try_admit("ns", &one, &list(2)).is_some());
    assert_eq!(room(&a), 1);
    // Does not fit: gated, and the queue now has a pod waiting...
    assert_eq!(a.try_admit("ns", &one, &list(2)), None);
    // ... so a pod that would fit waits too rather than overtake it.
    assert_eq!(a.try_admit("ns", &one, &list(1)), None);
    assert_eq!(room(&a), 1);
}

#[test]
fn tokens_differ_and_are_known_until_a_pass_sees_their_pods() {
    let a = open_with_room(10);
    let one = identity("q", None, None);
    let first = a.try_admit("ns", &one, &list(1)).expect("admitted");
    let second = a.try_admit("ns", &one, &list(2)).expect("admitted");
    assert_ne!(first, second);
    assert!(a.holds(&first) && a.holds(&second));
    let seen: HashSet<&str> = [first.as_str()].into();
    let (_, held) = a.holds_for_pass(Instant::now(), &seen);
    assert!(
        !a.holds(&first),
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
    assert!(a.try_admit("ns", &member, &list(2)).is_some());
    assert_eq!(room(&a), 2, "the first pod holds room for all 4 members");
    for _ in 0..3 {
        assert!(a.try_admit("ns", &member, &list(2)).is_some());
    }
    assert_eq!(room(&a), 2, "members 2-4 take the places held");
    // A fifth pod grows the workload: it needs room of its own.
    assert!(a.try_admit("ns", &member, &list(2)).is_some());
    assert_eq!(room(&a), 0);
}

#[test]
fn a_gang_that_does_not_fit_whole_is_not_started_at_creation() {
    let a = open_with_room(5);
    assert_eq!(
        a.try_admit("ns", &identity("q", Some("gang"), Some(4)), &list(2)),
        None
    );
    assert_eq!(room(&a), 5);
}

#[test]
fn pods_of_recorded_applications_wait_for_their_ledger() {
    let a = open_with_room(10);
    let mut ray = identity("q", Some("raycluster-x"), None);
    ray.recorded = true;
    assert_eq!(a.try_admit("ns", &ray, &list(1)), None);
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
        a.try_admit("ns", &identity("q", Some("app"), Some(8)), &list(1))
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
    assert!(a.try_admit("team-a", &one, &list(1)).is_some());
    assert_eq!(a.try_admit("team-b", &one, &list(1)), None);
    assert_eq!(
        a.try_admit("team-a", &identity("other", None, None), &list(1)),
        None
    );
}

#[test]
fn deactivated_it_admits_nothing_and_tokens_stay_unique() {
    let a = open_with_room(10);
    let before = a
        .try_admit("ns", &identity("q", None, None), &list(1))
        .expect("admitted");
    a.deactivate();
    assert_eq!(
        a.try_admit("ns", &identity("q", None, None), &list(1)),
        None
    );
    assert!(!a.holds(&before));
    let s = a.lock();
    assert_eq!(
        s.next_seq, 1,
        "the sequence goes on: no token is handed out twice"
    );
}
