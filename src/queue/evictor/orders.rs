//! What a pass asks the evictor for, per preemptor an order of victim pods, and which of them to
//! send (pure): none of an order a PodDisruptionBudget blocked recently, never a pod twice.

use super::*;

/// One victim pod of one pass's decision, with what its eviction, events and metrics need.
#[derive(Clone)]
pub(crate) struct Victim {
    pub pod: Arc<CachedPod>,
    pub uid: String,
    /// Its workload, and the workload's DynamicWorkload when recorded.
    pub workload: WorkloadKey,
    pub workload_ref: Option<ObjectReference>,
}

/// The evictions one pass decided for one preemptor.
#[derive(Clone)]
pub(crate) struct Order {
    pub preemptor: WorkloadKey,
    pub preemptor_ref: Option<ObjectReference>,
    pub queue: String,
    /// Why (`InQueuePriority`): the reason label of the metrics and conditions.
    pub reason: String,
    /// What the preemptor needs, described for people (e.g. `2 cpu, 4Gi memory`).
    pub needed: String,
    pub victims: Vec<Victim>,
}

/// What [`plan`] makes of one pass's orders.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Per order (its position in the input), the victims (positions) to evict now: those not
    /// already being evicted.
    pub send: BTreeMap<usize, Vec<usize>>,
    /// Per preemptor (its position in the input), why it is held back: a victim a budget protects.
    pub held: BTreeMap<usize, String>,
}

/// Which evictions to send (pure): an order any of whose victims a PodDisruptionBudget protects
/// (`blocked`, by uid, until when) sends nothing and is held (evicting the others would free room
/// the preemptor still could not use); otherwise its victims not already being evicted
/// (`evicting`, by uid) go.
pub(crate) fn plan(
    orders: &[Order],
    evicting: &HashSet<String>,
    blocked: &HashMap<String, (Instant, String)>,
    now: Instant,
) -> Plan {
    let mut out = Plan::default();
    for (o, order) in orders.iter().enumerate() {
        let protected = order.victims.iter().find_map(|v| {
            blocked
                .get(&v.uid)
                .filter(|(until, _)| now < *until)
                .map(|(_, why)| why.clone())
        });
        if let Some(why) = protected {
            out.held.insert(o, why);
            continue;
        }
        let new: Vec<usize> = (0..order.victims.len())
            .filter(|v| !evicting.contains(&order.victims[*v].uid))
            .collect();
        if !new.is_empty() {
            out.send.insert(o, new);
        }
    }
    out
}

/// The message a preemptor held back by a budget shows.
pub(crate) fn held_message(pod: &str, why: &str) -> String {
    format!(
        "waits to preempt: a PodDisruptionBudget blocks the eviction of pod {pod} ({why}); \
         tried again within {}s",
        BLOCKED_FOR.as_secs()
    )
}
