//! Why a workload still has pods behind the gate after a pass: the reasons the pass records, and
//! the messages users read in the ledger's status, its events and `kubectl sluice why`.

use super::arena::Dimensions;
use super::fit::Misfit;
use super::*;

/// Why a workload still has pods behind the gate after the pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitReason {
    QueueNotFound {
        queue: String,
    },
    NamespaceNotAllowed {
        queue: String,
    },
    /// The item would take `resource` over the quota by `missing`.
    Quota {
        queue: String,
        resource: String,
        missing: i64,
        used: i64,
        reserved: i64,
        quota: i64,
    },
    /// The item asks for more than the whole quota: it can never be admitted as the queue stands.
    NeverFits {
        queue: String,
        resource: String,
        needed: i64,
        quota: i64,
    },
    /// StrictFIFO: an earlier item that does not fit holds the line.
    BehindInStrictFifo {
        queue: String,
        blocker: WorkloadKey,
    },
    /// The item preempts: it waits for `victims` pods of lower-priority workloads to go (chosen by
    /// this pass, or already terminating), and is admitted by a later pass once they are gone.
    Preempting {
        queue: String,
        victims: u32,
    },
    /// A queue of a cohort: the item would take `resource` beyond what the queue may hold now
    /// by `missing`: `used` (usage and reservations) plus what the cohort can lend it more now
    /// (`lendable`: unused quota the cohort's queues lend, within its borrowing limit).
    Cohort {
        queue: String,
        cohort: String,
        resource: String,
        missing: i64,
        used: i64,
        quota: i64,
        lendable: i64,
    },
    /// The item fits its queue's quota but other queues of the cohort borrowed it: it waits for
    /// `victims` of their pods running on borrowed quota to go.
    Reclaiming {
        queue: String,
        cohort: String,
        victims: u32,
    },
    /// A flavored queue: no flavor has room for the item; why, per flavor tried, in order.
    NoFlavorFits {
        queue: String,
        tried: Vec<(String, WaitReason)>,
    },
    /// A flavored queue: the pod's own nodeSelector or node affinity excludes every flavor's
    /// node labels, so no flavor's quota can be charged for where it would run.
    NoFlavorMatches {
        queue: String,
        flavors: Vec<String>,
    },
    /// A gang asking for one domain of node label `key` fits its queue's quota, but no domain
    /// (of the `domains` its pods may run in; only its gang's `pinned` one for a later pod) has
    /// room on its nodes for its `pods` pods; the most any holds is `most`.
    NoTopologyDomain {
        queue: String,
        key: String,
        pods: u32,
        most: u32,
        domains: u32,
        pinned: Option<String>,
    },
    /// A gang whose data (`source`: `pods <selector>` or `claim <name>`) is required beside it
    /// fits its queue's quota, but the data's nodes (`nodes`, their hostnames; `missing`: why
    /// none was found) have room for only `room` of its `pods` pods.
    DataNotPlaceable {
        queue: String,
        source: String,
        nodes: Vec<String>,
        room: u32,
        pods: u32,
        missing: Option<String>,
    },
}

impl std::fmt::Display for WaitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitReason::QueueNotFound { queue } => write!(
                f,
                "CapacityQueue {queue:?} does not exist: create it, or label the pods with an existing queue"
            ),
            WaitReason::NamespaceNotAllowed { queue } => write!(
                f,
                "CapacityQueue {queue:?} does not admit this namespace (see its spec.namespaceSelector)"
            ),
            WaitReason::Quota {
                queue,
                resource,
                missing,
                used,
                reserved,
                quota,
            } => {
                needs_more(f, queue, resource, [*missing, *used, *quota])?;
                let reserved = describe_quantity(resource, *reserved);
                write!(f, ", {reserved} {resource} reserved")
            }
            WaitReason::NeverFits {
                queue,
                resource,
                needed,
                quota,
            } => write!(
                f,
                "needs {} {resource} but queue {queue} has a quota of {} {resource}: it cannot be admitted until the quota grows",
                describe_quantity(resource, *needed),
                describe_quantity(resource, *quota),
            ),
            WaitReason::BehindInStrictFifo { queue, blocker } => {
                write!(f, "waits behind {blocker} in StrictFIFO queue {queue}")
            }
            WaitReason::Preempting { queue, victims } => write!(
                f,
                "waits for {victims} lower-priority pods to be preempted in queue {queue}"
            ),
            WaitReason::Cohort {
                queue,
                cohort,
                resource,
                missing,
                used,
                quota,
                lendable,
            } => {
                needs_more(f, queue, resource, [*missing, *used, *quota])?;
                let lendable = describe_quantity(resource, *lendable);
                write!(
                    f,
                    ", and cohort {cohort} can lend it {lendable} {resource} more now"
                )
            }
            WaitReason::Reclaiming {
                queue,
                cohort,
                victims,
            } => write!(
                f,
                "waits for {victims} pods of other queues of cohort {cohort} running on quota borrowed from queue {queue} to be evicted"
            ),
            WaitReason::NoFlavorFits { .. } | WaitReason::NoFlavorMatches { .. } => {
                self.fmt_flavors(f)
            }
            WaitReason::NoTopologyDomain { .. } | WaitReason::DataNotPlaceable { .. } => {
                self.fmt_topology(f)
            }
        }
    }
}

/// The start of the quota and cohort messages, the same for both so they read alike:
/// "needs 2 cpu more in queue q: 3/4 cpu used" (amounts: `[missing, used, quota]`).
fn needs_more(
    f: &mut std::fmt::Formatter<'_>,
    queue: &str,
    resource: &str,
    [missing, used, quota]: [i64; 3],
) -> std::fmt::Result {
    let [missing, used, quota] = [missing, used, quota].map(|q| describe_quantity(resource, q));
    write!(
        f,
        "needs {missing} {resource} more in queue {queue}: {used}/{quota} {resource} used"
    )
}

impl WaitReason {
    /// The reasons of a flavored queue.
    fn fmt_flavors(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitReason::NoFlavorFits { queue, tried } => {
                write!(f, "no flavor of queue {queue} has room; tried")?;
                for (i, (flavor, why)) in tried.iter().enumerate() {
                    let sep = if i == 0 { " " } else { "; " };
                    write!(f, "{sep}{flavor}: {why}")?;
                }
                Ok(())
            }
            WaitReason::NoFlavorMatches { queue, flavors } => write!(
                f,
                "the pod's own nodeSelector or node affinity excludes every flavor of queue {queue} ({}): change them, or ask for a flavor that allows them",
                flavors.join(", ")
            ),
            _ => Ok(()),
        }
    }
}

/// A reason to wait as the pass records it, made a [`WaitReason`] only in the tally, where an
/// equal reason of the pass before is taken instead: a StrictFIFO queue's thousands of waiting
/// workloads do not each copy the queue's name and the blocker's key again, pass after pass.
#[derive(Clone)]
pub(super) enum Waiting {
    Reason(WaitReason),
    /// StrictFIFO: behind the first item that did not fit, of this workload (an index).
    Behind(usize),
    /// Over the queue's quota ([`WaitReason::Quota`] or [`WaitReason::NeverFits`]).
    Misfit(Misfit),
}

impl QueuePass<'_> {
    /// The reason `now` says: `old` when it says the same, else a new one.
    pub(super) fn reason(&self, now: Waiting, old: Option<WaitReason>) -> WaitReason {
        let same = match (&now, &old) {
            (Waiting::Behind(b), Some(WaitReason::BehindInStrictFifo { queue, blocker })) => {
                *queue == self.queue.name && *blocker == self.snapshot.workloads[*b].key
            }
            (Waiting::Misfit(misfit), Some(old)) => misfit.is(old, &self.queue.name, &self.dims),
            _ => false,
        };
        match (now, old) {
            (_, Some(old)) if same => old,
            (Waiting::Reason(reason), _) => reason,
            (Waiting::Behind(b), _) => WaitReason::BehindInStrictFifo {
                queue: self.queue.name.clone(),
                blocker: self.snapshot.workloads[b].key.clone(),
            },
            (Waiting::Misfit(misfit), _) => misfit.reason(&self.queue.name, &self.dims),
        }
    }
}

impl Misfit {
    /// Whether [`Misfit::reason`] would be `reason`, without making it.
    fn is(&self, reason: &WaitReason, queue_name: &str, dims: &Dimensions) -> bool {
        let resource_name = dims.base_name(self.dimension);
        match reason {
            WaitReason::NeverFits {
                queue,
                resource,
                needed,
                quota,
            } => {
                self.needed > self.limit
                    && (queue.as_str(), resource.as_str()) == (queue_name, resource_name)
                    && (*needed, *quota) == (self.needed, self.limit)
            }
            WaitReason::Quota {
                queue,
                resource,
                missing,
                used,
                reserved,
                quota,
            } => {
                self.needed <= self.limit
                    && (queue.as_str(), resource.as_str()) == (queue_name, resource_name)
                    && (*missing, *used, *reserved, *quota)
                        == (
                            self.after - self.limit,
                            self.used,
                            self.reserved,
                            self.limit,
                        )
            }
            _ => false,
        }
    }
}

/// `values` as a list ([`Dimensions::to_list`]), or `old` taken when it is that list already.
pub(super) fn reuse_list(
    old: Option<&mut ResourceList>,
    dims: &Dimensions,
    values: &[i64],
) -> ResourceList {
    match old {
        Some(old) if dims.is_list_of(values, old) => std::mem::take(old),
        _ => dims.to_list(values),
    }
}
