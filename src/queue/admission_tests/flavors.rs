//! Flavors: a queue's quota per flavor, tried in order; a gang admitted whole in one flavor; a
//! started workload's pods beside their set's; a pod's own node constraints honoured; per-flavor
//! usage never over its quota; a queue of one flavor deciding what the plain queue decides.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use super::*;
use crate::queue::placement::Placement;

const GPU: &str = "nvidia.com/gpu";

fn gpus(n: i64) -> ResourceList {
    let mut r = res(CPU);
    r.add(GPU, n * 1000);
    r
}

fn flavor(name: &str, quota_gpus: i64) -> Arc<FlavorSnapshot> {
    let mut quota = ResourceList::new();
    quota.add(GPU, quota_gpus * 1000);
    Arc::new(FlavorSnapshot {
        name: name.into(),
        quota,
        node_labels: BTreeMap::from([("gpu".to_string(), name.to_string())]),
        tolerations: Vec::new(),
        defined: true,
    })
}

fn flavored(name: &str, flavors: Vec<Arc<FlavorSnapshot>>) -> QueueSnapshot {
    QueueSnapshot {
        flavors,
        quota: ResourceList::new(),
        ..queue(name, 0, QueueingStrategy::BestEffortFIFO)
    }
}

fn gpu_pod(name: &str, n: i64, state: PodState, created_at: i64) -> PodSnapshot {
    PodSnapshot {
        requests: Arc::new(gpus(n)),
        ..pod(name, CPU, state, created_at)
    }
}

fn in_flavor(mut pod: PodSnapshot, flavor: &str) -> PodSnapshot {
    pod.flavor = Some(Arc::from(flavor));
    pod
}

fn selecting(mut pod: PodSnapshot, gpu: &str) -> PodSnapshot {
    pod.placement = Some(Arc::new(Placement {
        node_selector: BTreeMap::from([("gpu".to_string(), gpu.to_string())]),
        terms: Vec::new(),
    }));
    pod
}

/// A gang of `size` pods of `per` GPUs each, not started.
fn gang(name: &str, queued_at: i64, size: u32, per: i64) -> WorkloadSnapshot {
    let pods = (0..size)
        .map(|p| gpu_pod(&format!("{name}-{p}"), per, PodState::Gated, queued_at))
        .collect();
    let mut w = workload(name, "q", 0, queued_at, size, pods);
    w.pod_sets[0].per_pod = gpus(per);
    w
}

/// One pod of `per` GPUs (`<name>-0`), admitted in `flavor`.
fn admitted_in(name: &str, queued_at: i64, per: i64, flavor: &str) -> WorkloadSnapshot {
    let mut w = gang(name, queued_at, 1, per);
    let pod = gpu_pod(&format!("{name}-0"), per, PodState::Admitted, queued_at);
    w.pod_sets[0].pods = vec![in_flavor(pod, flavor)];
    w
}

/// One gated pod of `per` GPUs (`<name>-0`) whose own nodeSelector asks for `gpu` nodes.
fn gated_selecting(name: &str, queued_at: i64, per: i64, gpu: &str) -> WorkloadSnapshot {
    let mut w = gang(name, queued_at, 1, per);
    let pod = gpu_pod(&format!("{name}-0"), per, PodState::Gated, queued_at);
    w.pod_sets[0].pods = vec![selecting(pod, gpu)];
    w
}

/// Queues `q1` and `q2` of the cohort `pool`, each with `[a100, h100]` GPUs of its own, and
/// `workloads`.
fn pool(q1: [i64; 2], q2: [i64; 2], workloads: Vec<WorkloadSnapshot>) -> Snapshot {
    let member = |name: &str, [a100, h100]: [i64; 2]| {
        let mut q = flavored(name, vec![flavor("a100", a100), flavor("h100", h100)]);
        q.cohort = Some(CohortMembership::new("pool"));
        q
    };
    Snapshot {
        queues: vec![member("q1", q1), member("q2", q2)],
        workloads,
    }
}

/// The names of the workloads the pass evicts from, in its order.
fn victims<'a>(s: &'a Snapshot, d: &Decisions) -> Vec<&'a str> {
    (d.evict.iter())
        .map(|e| s.workloads[e.victim.workload].key.name.as_str())
        .collect()
}

/// Per admitted pod's name, the flavor it was admitted in.
fn flavors_of(s: &Snapshot, d: &Decisions) -> BTreeMap<String, String> {
    d.admit
        .iter()
        .map(|r| {
            let name = s.workloads[r.workload].pod_sets[r.pod_set].pods[r.pod]
                .name
                .clone();
            let flavor = d.flavors.get(r).map(|f| f.name.clone()).unwrap_or_default();
            (name, flavor)
        })
        .collect()
}

#[test]
fn gangs_fill_the_first_flavor_then_the_next_and_the_rest_wait_saying_why_per_flavor() {
    let s = Snapshot {
        queues: vec![flavored("q", vec![flavor("a100", 8), flavor("h100", 8)])],
        workloads: (0..5).map(|i| gang(&format!("w{i}"), i, 2, 2)).collect(),
    };
    let d = decide(&s);
    let got = flavors_of(&s, &d);
    for (w, want) in [
        ("w0", "a100"),
        ("w1", "a100"),
        ("w2", "h100"),
        ("w3", "h100"),
    ] {
        for p in 0..2 {
            assert_eq!(got[&format!("{w}-{p}")], want, "{w}");
        }
    }
    assert!(!got.contains_key("w4-0"));
    let t = &d.queues["q"];
    assert_eq!(t.usage.get(&flavored_resource("a100", GPU)), 8000);
    assert_eq!(t.usage.get(&flavored_resource("h100", GPU)), 8000);
    let why = d.workloads[4]
        .waiting
        .as_ref()
        .expect("w4 waits")
        .to_string();
    assert!(why.contains("no flavor of queue q has room"), "{why}");
    assert!(why.contains("a100: needs 4 nvidia.com/gpu more"), "{why}");
    assert!(why.contains("h100: needs 4 nvidia.com/gpu more"), "{why}");
}

#[test]
fn a_gang_is_never_split_across_flavors() {
    // a100 has room for one pod of the gang, h100 for all of it: the whole gang goes to h100.
    let mut s = Snapshot {
        queues: vec![flavored("q", vec![flavor("a100", 4), flavor("h100", 8)])],
        workloads: vec![gang("big", 1, 3, 2)],
    };
    let mut running = gang("running", 0, 1, 2);
    running.pod_sets[0].pods = vec![in_flavor(gpu_pod("r", 2, PodState::Admitted, 0), "a100")];
    s.workloads.push(running);
    let d = decide(&s);
    let got = flavors_of(&s, &d);
    assert_eq!(got.len(), 3);
    assert!(got.values().all(|f| f == "h100"), "{got:?}");
}

#[test]
fn a_started_workload_grows_in_its_own_flavor_first_then_the_queue_order() {
    let mut ray = gang("ray", 0, 1, 2);
    ray.pod_sets[0].min_count = 1;
    ray.pod_sets[0].pods = vec![
        in_flavor(gpu_pod("ray-0", 2, PodState::Admitted, 0), "h100"),
        gpu_pod("ray-1", 2, PodState::Gated, 1),
        gpu_pod("ray-2", 2, PodState::Gated, 2),
        gpu_pod("ray-3", 2, PodState::Gated, 3),
        gpu_pod("ray-4", 2, PodState::Gated, 4),
    ];
    let s = Snapshot {
        queues: vec![flavored("q", vec![flavor("a100", 8), flavor("h100", 6)])],
        workloads: vec![ray],
    };
    let got = flavors_of(&s, &decide(&s));
    // h100 (its own) has room for two more; then the queue's order: a100.
    assert_eq!(got["ray-1"], "h100");
    assert_eq!(got["ray-2"], "h100");
    assert_eq!(got["ray-3"], "a100");
    assert_eq!(got["ray-4"], "a100");
}

#[test]
fn a_pods_own_node_selector_keeps_it_out_of_a_flavor_it_would_not_run_in() {
    // The hostile pod asks for h100 nodes itself: it must never be charged to a100, which has room.
    let w = gated_selecting("sneaky", 0, 2, "h100");
    let v = gated_selecting("nowhere", 1, 2, "v100");
    let s = Snapshot {
        queues: vec![flavored("q", vec![flavor("a100", 8), flavor("h100", 8)])],
        workloads: vec![w, v],
    };
    let d = decide(&s);
    let got = flavors_of(&s, &d);
    assert_eq!(got.get("sneaky-0").map(String::as_str), Some("h100"));
    assert!(!got.contains_key("nowhere-0"));
    let why = d.workloads[1].waiting.as_ref().expect("waits").to_string();
    assert!(
        why.contains("excludes every flavor of queue q (a100, h100)"),
        "{why}"
    );
    // It does not hold the line either: a StrictFIFO queue goes on past it.
    assert_eq!(d.queues["q"].pending_workloads, 1);
}

#[test]
fn a_flavor_without_its_resource_flavor_admits_nothing() {
    let mut missing = FlavorSnapshot::clone(&flavor("a100", 8));
    missing.defined = false;
    let s = Snapshot {
        queues: vec![flavored("q", vec![Arc::new(missing), flavor("h100", 8)])],
        workloads: vec![gang("w", 0, 2, 2)],
    };
    let got = flavors_of(&s, &decide(&s));
    assert!(got.values().all(|f| f == "h100"), "{got:?}");
}

#[test]
fn an_admitted_pod_of_a_flavor_the_queue_does_not_list_is_charged_to_its_first_flavor() {
    let old = admitted_in("old", 0, 8, "gone");
    let s = Snapshot {
        queues: vec![flavored("q", vec![flavor("a100", 8), flavor("h100", 8)])],
        workloads: vec![old, gang("new", 1, 1, 2)],
    };
    let d = decide(&s);
    assert_eq!(
        d.queues["q"].usage.get(&flavored_resource("a100", GPU)),
        10000 - 2000
    );
    assert_eq!(flavors_of(&s, &d)["new-0"], "h100");
}

#[test]
fn queues_of_a_cohort_lend_and_borrow_per_flavor() {
    // q1 has 4 a100 and 0 h100 of its own; q2 lends 4 a100 and 8 h100. A gang of 6 GPUs fits
    // nowhere in q1 alone: it borrows a100 (the first flavor where it fits by borrowing).
    let s = pool([4, 0], [4, 8], in_queue(vec![gang("big", 0, 3, 2)], "q1"));
    let d = decide(&s);
    let got = flavors_of(&s, &d);
    assert_eq!(got.len(), 3, "{:?}", d.workloads[0].waiting);
    assert!(got.values().all(|f| f == "a100"), "{got:?}");
    assert_eq!(
        d.queues["q1"].borrowed.get(&flavored_resource("a100", GPU)),
        2000
    );
    assert_eq!(
        d.queues["q2"].lent.get(&flavored_resource("a100", GPU)),
        2000
    );
    assert_eq!(d.queues["q2"].lent.get(&flavored_resource("h100", GPU)), 0);
}

#[test]
fn a_gang_that_fits_a_later_flavor_of_its_own_does_not_borrow_an_earlier_one() {
    let s = pool([2, 4], [8, 8], in_queue(vec![gang("w", 0, 2, 2)], "q1"));
    let d = decide(&s);
    assert!(flavors_of(&s, &d).values().all(|f| f == "h100"));
    assert!(d.queues["q1"].borrowed.is_empty());
}

/// The same snapshot with every queue given one flavor (no labels) of its quota.
fn as_one_flavor(s: &Snapshot) -> Snapshot {
    let mut one = s.clone();
    for q in &mut one.queues {
        q.flavors = vec![Arc::new(FlavorSnapshot {
            name: "only".into(),
            quota: std::mem::take(&mut q.quota),
            node_labels: BTreeMap::new(),
            tolerations: Vec::new(),
            defined: true,
        })];
    }
    one
}

/// Random gangs and started workloads over two or three flavors, some pods pinned by their own
/// nodeSelector, some admitted already in a flavor.
pub(super) fn arb_flavored() -> impl Strategy<Value = Snapshot> {
    let quotas = prop::collection::vec(0i64..10, 2..4);
    let workloads = prop::collection::vec(
        (
            0i64..30,                    // queued_at
            1u32..4,                     // gang size
            1i64..4,                     // GPUs per pod
            prop::option::of(0usize..4), // a flavor already admitted in
            prop::option::of(0usize..4), // a nodeSelector for a flavor
            0u32..3,                     // elastic pods beyond the gang
        ),
        0..10,
    );
    (quotas, workloads, any::<bool>()).prop_map(|(quotas, workloads, strict)| {
        let names = ["a100", "h100", "l4"];
        let flavors: Vec<_> = (quotas.iter().enumerate())
            .map(|(f, q)| flavor(names[f], *q))
            .collect();
        let mut q = flavored("q", flavors);
        if strict {
            q.strategy = QueueingStrategy::StrictFIFO;
        }
        q.preemption.within_queue = WithinQueue::Never;
        let workloads = (workloads.into_iter().enumerate())
            .map(|(w, (at, size, per, started, pin, extra))| {
                let mut g = gang(&format!("w{w}"), at, size, per);
                if let Some(f) = started {
                    let name = names.get(f).copied().unwrap_or("unknown");
                    g.pod_sets[0].pods[0].state = PodState::Admitted;
                    g.pod_sets[0].pods[0].flavor = Some(Arc::from(name));
                }
                for e in 0..extra {
                    g.pod_sets[0].pods.push(gpu_pod(
                        &format!("w{w}-x{e}"),
                        per,
                        PodState::Gated,
                        at + 1,
                    ));
                }
                if let Some(f) = pin {
                    let name = names.get(f).copied().unwrap_or("v100");
                    for p in &mut g.pod_sets[0].pods {
                        *p = selecting(p.clone(), name);
                    }
                }
                g
            })
            .collect();
        Snapshot {
            queues: vec![q],
            workloads,
        }
    })
}

/// Per flavor, what the queue's admitted pods use after the decisions (admitted before: in their
/// recorded flavor, or the first; admitted now: in the flavor decided), computed independently;
/// with `reservations`, plus the members of started gangs not admitted yet, in the flavor of
/// their set's first admitted pod (else the workload's first).
fn held_per_flavor(s: &Snapshot, d: &Decisions, reservations: bool) -> HashMap<String, i64> {
    let q = &s.queues[0];
    let admitted: HashSet<PodRef> = d.admit.iter().copied().collect();
    let recorded = |p: &PodSnapshot| {
        let named = p.flavor.as_deref().unwrap_or_default();
        if q.flavors.iter().any(|f| f.name == named) {
            named.to_string()
        } else {
            q.flavors[0].name.clone()
        }
    };
    let mut held: HashMap<String, i64> = HashMap::new();
    for (w, wl) in s.workloads.iter().enumerate() {
        let first = wl
            .pod_sets
            .iter()
            .flat_map(|set| &set.pods)
            .find(|p| p.state == PodState::Admitted);
        for (si, set) in wl.pod_sets.iter().enumerate() {
            let mut count = 0u32;
            for (pi, p) in set.pods.iter().enumerate() {
                let at = PodRef {
                    workload: w,
                    pod_set: si,
                    pod: pi,
                };
                let flavor = match p.state {
                    PodState::Admitted => recorded(p),
                    PodState::Gated if admitted.contains(&at) => d.flavors[&at].name.clone(),
                    _ => continue,
                };
                count += 1;
                *held.entry(flavor).or_default() += p.requests.get(GPU);
            }
            let set_first = set
                .pods
                .iter()
                .find(|p| p.state == PodState::Admitted)
                .or(first);
            if let (true, Some(p)) = (reservations, set_first) {
                let missing = i64::from(set.min_count.saturating_sub(count));
                *held.entry(recorded(p)).or_default() += missing * set.per_pod.get(GPU);
            }
        }
    }
    held
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// A queue of one flavor (no labels) decides what the plain queue decides (the reference
    /// model's admissions and counts), and every admitted pod is recorded in that flavor.
    #[test]
    fn one_flavor_decides_what_the_plain_queue_decides(s in arb_snapshot()) {
        let plain = without_preemption(&s);
        let one = as_one_flavor(&plain);
        let reference = crate::queue::admission_reference::decide(&plain);
        let d = decide(&one);
        prop_assert_eq!(&d.admit, &reference.admit);
        prop_assert_eq!(d.flavors.len(), d.admit.len());
        for (fast, slow) in d.workloads.iter().zip(&reference.workloads) {
            prop_assert_eq!((fast.admitted_pods, fast.pending_pods), (slow.admitted_pods, slow.pending_pods));
        }
        for (name, t) in &reference.queues {
            let f = &d.queues[name];
            prop_assert_eq!((f.pending_pods, f.admitted_pods), (t.pending_pods, t.admitted_pods));
            let usage: i64 = f.usage.0.iter().filter(|(k, _)| k.ends_with(":cpu")).map(|(_, v)| *v).sum();
            prop_assert_eq!(usage, t.usage.get("cpu"));
        }
    }

    /// Over several flavors: a gang is admitted whole in one flavor its pods' own constraints
    /// allow; no flavor's quota is exceeded by the decisions; and a gang admitted in a flavor did
    /// not fit any earlier flavor it was allowed in (the order is honoured: what an earlier
    /// flavor holds only grows during a pass, so it does not fit there at the end either).
    #[test]
    fn flavors_are_honoured(s in arb_flavored()) {
        let d = decide(&s);
        let q = &s.queues[0];
        let used = held_per_flavor(&s, &d, false);
        let before = held_per_flavor(&s, &Decisions { admit: vec![], ..d.clone() }, true);
        let t = &d.queues["q"];
        for f in &q.flavors {
            let key = flavored_resource(&f.name, GPU);
            let (quota, was) = (f.quota.get(GPU), before.get(&f.name).copied().unwrap_or(0));
            prop_assert_eq!(t.usage.get(&key), used.get(&f.name).copied().unwrap_or(0));
            prop_assert!(t.usage.get(&key) + t.reserved.get(&key) <= quota.max(was),
                "flavor {} holds {} + {} > {} (before {})", f.name, t.usage.get(&key), t.reserved.get(&key), quota, was);
        }
        let mut per_workload: HashMap<usize, HashSet<String>> = HashMap::new();
        for r in &d.admit {
            let f = d.flavors[r].name.clone();
            let pod = &s.workloads[r.workload].pod_sets[r.pod_set].pods[r.pod];
            if let Some(p) = &pod.placement {
                let labels = &q.flavors.iter().find(|x| x.name == f).expect("listed").node_labels;
                prop_assert!(p.allows(labels), "pod {} charged to {} its nodeSelector excludes", pod.name, f);
            }
            per_workload.entry(r.workload).or_default().insert(f);
        }
        for (w, fl) in &per_workload {
            let wl = &s.workloads[*w];
            let started = wl.pod_sets.iter().any(|set| set.pods.iter().any(|p| p.state == PodState::Admitted));
            if started {
                continue;
            }
            prop_assert_eq!(fl.len(), 1, "gang {} split over {:?}", wl.key, fl);
            let chosen = fl.iter().next().expect("one");
            let at = q.flavors.iter().position(|f| &f.name == chosen).expect("listed");
            let need: i64 = wl.pod_sets.iter().map(|set| set.per_pod.get(GPU) * i64::from(set.min_count)).sum();
            for earlier in &q.flavors[..at] {
                let allowed = wl.pod_sets[0].pods[0].placement.as_ref().is_none_or(|p| p.allows(&earlier.node_labels));
                if !allowed {
                    continue;
                }
                let key = flavored_resource(&earlier.name, GPU);
                let t = &d.queues["q"];
                prop_assert!(t.usage.get(&key) + t.reserved.get(&key) + need > earlier.quota.get(GPU),
                    "gang {} went to {} but fits {}", wl.key, chosen, earlier.name);
            }
        }
    }
}

#[test]
fn preemption_in_a_flavored_queue_takes_back_only_what_the_chosen_flavor_needs() {
    // a100 is held by a low-priority workload, h100 by another; a high-priority gang that may run
    // only on a100 (its own nodeSelector) preempts the a100 one, never the h100 one.
    let mut low_a = admitted_in("low-a", 0, 4, "a100");
    low_a.priority = -1;
    let mut low_h = admitted_in("low-h", 1, 4, "h100");
    low_h.priority = -1;
    let mut high = gated_selecting("high", 2, 4, "a100");
    high.priority = 10;
    let s = Snapshot {
        queues: vec![flavored("q", vec![flavor("a100", 4), flavor("h100", 4)])],
        workloads: vec![low_a, low_h, high],
    };
    let d = decide(&s);
    assert_eq!(victims(&s, &d), vec!["low-a"]);
    assert!(
        d.admit.is_empty(),
        "the preemptor waits for its victim to go"
    );
}

#[test]
fn a_queue_takes_back_its_flavors_quota_that_the_cohort_borrowed() {
    // q2 owns no a100 and runs 4 a100 GPUs borrowed from q1; q1's own gang needs them back. The
    // h100 pod of q2 (its own quota) is never the victim.
    let borrower = admitted_in("borrower", 0, 4, "a100");
    let owner = admitted_in("own", 1, 4, "h100");
    let mut workloads = in_queue(vec![borrower, owner], "q2");
    workloads.extend(in_queue(vec![gang("back", 2, 1, 4)], "q1"));
    let s = pool([4, 0], [0, 4], workloads);
    let d = decide(&s);
    assert_eq!(victims(&s, &d), vec!["borrower"]);
    assert!(d.admit.is_empty());
}
