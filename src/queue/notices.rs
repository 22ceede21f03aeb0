//! What to tell the user on their own object (the application, a gated pod), as Kubernetes events:
//! pure functions of what was last told and what the pass found. A workload's events are
//! transitions, not states: it starts waiting, its reason or position changes materially, it is
//! admitted, preempted, requeued, or it cannot be admitted as its queue stands. The sending (a
//! bounded queue, a global rate, the Recorder's series) is in `announcer.rs`.
//!
//! Every string that reaches a note is either sluice's own wording, a number, or a Kubernetes name
//! (queue, cohort, resource, the workload's own namespace and name), and is cleaned of control
//! characters and cut to the size events.k8s.io accepts. A workload of another namespace is never
//! named: a user sees the workloads of their own namespace only.

use std::time::Duration;

use tokio::time::Instant;

use crate::api::{DynamicWorkloadStatus, WorkloadPhase};
use crate::queue::admission::{WaitReason, WorkloadKey};

/// Updates of a waiting workload (its reason or position changed materially) are at least this far
/// apart; its first wait, admission, preemption, requeue and refusal are told at once.
pub const UPDATE_SPACING: Duration = Duration::from_secs(60);

/// The most bytes of a note (events.k8s.io refuses a note over 1 kB).
const NOTE_BYTES: usize = 1000;

/// What a pass found of one workload, as the events need it.
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    pub key: &'a WorkloadKey,
    pub queue: &'a str,
    pub phase: WorkloadPhase,
    pub pending_pods: i32,
    pub admitted_pods: i32,
    pub position: Option<u32>,
    pub waiting: Option<&'a WaitReason>,
    pub interrupted_count: i32,
    pub requeue_count: i32,
    /// The preemptor the status names (`namespace/name`).
    pub last_preempted_by: Option<&'a str>,
    /// Failed because its queue's podsReadyTimeout sent it back more than `requeueLimit` allows.
    pub requeue_exhausted: bool,
    /// The application object says it ended (its ledger's `spec.applicationEnded`): nothing more
    /// is told. Pods that all ended are not an end: an owner may create more.
    pub application_ended: bool,
}

/// The kind of a wait, without its figures: a change of kind is a material change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReasonKey {
    pub kind: &'static str,
    pub resource: Option<String>,
}

impl ReasonKey {
    pub fn of(reason: &WaitReason) -> ReasonKey {
        let (kind, resource) = match reason {
            WaitReason::QueueNotFound { .. } => ("QueueNotFound", None),
            WaitReason::NamespaceNotAllowed { .. } => ("NamespaceNotAllowed", None),
            WaitReason::Quota { resource, .. } => ("Quota", Some(resource)),
            WaitReason::NeverFits { resource, .. } => ("NeverFits", Some(resource)),
            WaitReason::BehindInStrictFifo { .. } => ("StrictFIFO", None),
            WaitReason::Preempting { .. } => ("Preempting", None),
            WaitReason::Cohort { resource, .. } => ("Cohort", Some(resource)),
            WaitReason::Reclaiming { .. } => ("Reclaiming", None),
            WaitReason::NoFlavorFits { .. } => ("NoFlavorFits", None),
            WaitReason::NoFlavorMatches { .. } => ("NoFlavorMatches", None),
            WaitReason::NoTopologyDomain { key, .. } => ("NoTopologyDomain", Some(key)),
            WaitReason::DataNotPlaceable { .. } => ("DataNotPlaceable", None),
        };
        ReasonKey {
            kind,
            resource: resource.cloned(),
        }
    }

    /// The short form of `kubectl get dwl`'s `Reason` column, e.g. `Quota:cpu`.
    pub fn short(&self) -> String {
        match &self.resource {
            Some(resource) => format!("{}:{resource}", self.kind),
            None => self.kind.to_string(),
        }
    }

    /// A reason that no pass will change by itself: the queue must change first.
    fn refused(&self) -> bool {
        matches!(
            self.kind,
            "QueueNotFound" | "NamespaceNotAllowed" | "NeverFits" | "NoFlavorMatches"
        )
    }
}

/// Where a workload stands, as last told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Nothing told yet, nothing known (a new workload).
    New,
    /// Pods of it wait. `reason` None: told before this process knew why (rebuilt from a status),
    /// any reason matches it.
    Waiting {
        position: Option<u32>,
        reason: Option<ReasonKey>,
    },
    /// It holds quota and nothing of it waits.
    Holding,
    /// Its application ended (or it failed past its requeue limit): nothing more is told.
    Done,
}

/// What was last told of one workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announced {
    pub stage: Stage,
    pub interrupted_count: i32,
    pub requeue_count: i32,
    /// When a waiting update was last told (None: never): updates are [`UPDATE_SPACING`] apart.
    pub updated_at: Option<Instant>,
}

impl Announced {
    /// What a status written before (by this process or an earlier one) implies was told: after a
    /// restart nothing is told again that the status already says.
    pub fn from_status(status: Option<&DynamicWorkloadStatus>) -> Announced {
        let Some(status) = status else {
            return Announced {
                stage: Stage::New,
                interrupted_count: 0,
                requeue_count: 0,
                updated_at: None,
            };
        };
        let stage = match status.phase {
            WorkloadPhase::Finished | WorkloadPhase::Failed => Stage::Holding,
            _ if status.pending_pods > 0 || status.position.is_some() => Stage::Waiting {
                position: status.position.and_then(|p| u32::try_from(p).ok()),
                reason: None,
            },
            WorkloadPhase::Admitted | WorkloadPhase::Running => Stage::Holding,
            _ => Stage::New,
        };
        Announced {
            stage,
            interrupted_count: status.interrupted_count,
            requeue_count: status.requeue_count,
            updated_at: None,
        }
    }
}

/// One event to post.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// The event's reason (CamelCase, as `kubectl describe` shows it).
    pub reason: &'static str,
    pub warning: bool,
    pub note: String,
    /// Also on the workload's oldest gated pod (where a user of `kubectl describe pod` looks).
    pub on_gated_pod: bool,
}

/// Whether a wait moved materially from `old` to `new`: to the front, at least halved, or at
/// least doubled and five places back.
pub fn position_moved(old: Option<u32>, new: Option<u32>) -> bool {
    match (old, new) {
        (Some(old), Some(new)) if old != new => {
            new == 1
                || new.saturating_mul(2) <= old
                || (new >= old.saturating_mul(2) && new >= old + 5)
        }
        (None, Some(_)) | (Some(_), None) => true,
        _ => false,
    }
}

/// The events of one workload this pass, and what is told after them. `now` is the pass's
/// clock; updates of a wait are [`UPDATE_SPACING`] apart.
pub fn notices(before: &Announced, seen: &Observed, now: Instant) -> (Vec<Notice>, Announced) {
    let mut out = Vec::new();
    let mut after = Announced {
        interrupted_count: before.interrupted_count.max(seen.interrupted_count),
        requeue_count: before.requeue_count.max(seen.requeue_count),
        ..before.clone()
    };
    if before.stage == Stage::Done {
        return (out, after);
    }
    if seen.requeue_exhausted {
        out.push(told(Change::RequeueLimit, seen));
        after.stage = Stage::Done;
        return (out, after);
    }
    if seen.application_ended {
        after.stage = Stage::Done;
        return (out, after);
    }
    if seen.requeue_count > before.requeue_count {
        out.push(told(Change::Requeued, seen));
    } else if seen.interrupted_count > before.interrupted_count {
        out.push(told(Change::Preempted, seen));
    }
    if matches!(seen.phase, WorkloadPhase::Finished | WorkloadPhase::Failed) {
        // Every pod ended (or was evicted and not yet replaced): its owner may create more, so
        // this is not an end; nothing waits now.
        after.stage = Stage::Holding;
        return (out, after);
    }
    follow_wait(before, seen, now, &mut out, &mut after);
    (out, after)
}

/// The wait's events: it starts, changes materially (at most once per [`UPDATE_SPACING`]), or ends
/// by an admission; `out` holds what this pass already tells (a preemption, a requeue).
fn follow_wait(
    before: &Announced,
    seen: &Observed,
    now: Instant,
    out: &mut Vec<Notice>,
    after: &mut Announced,
) {
    let waits = seen.pending_pods > 0 && seen.waiting.is_some();
    match (&before.stage, waits) {
        (_, true) => {
            let reason = seen.waiting.map(ReasonKey::of);
            let (first, changed) = match &before.stage {
                Stage::Waiting {
                    position,
                    reason: told,
                } => (
                    false,
                    told.as_ref().is_some_and(|t| Some(t) != reason.as_ref())
                        || position_moved(*position, seen.position),
                ),
                _ => (true, false),
            };
            let due = before
                .updated_at
                .is_none_or(|at| now.duration_since(at) >= UPDATE_SPACING);
            // Just preempted or requeued: that event says it waits again.
            let told_now = !out.is_empty();
            if (first && !told_now) || (changed && due) {
                out.push(waiting(seen, first));
                after.updated_at = Some(now);
            }
            if first || (changed && due) || told_now {
                after.stage = Stage::Waiting {
                    position: seen.position,
                    reason,
                };
            } else if let Stage::Waiting { reason: None, .. } = before.stage {
                // Rebuilt from a status: learn the reason without telling it again.
                after.stage = Stage::Waiting {
                    position: seen.position.or(match &before.stage {
                        Stage::Waiting { position, .. } => *position,
                        _ => None,
                    }),
                    reason,
                };
            }
        }
        (Stage::Waiting { .. }, false)
            if seen.admitted_pods > 0
                && matches!(seen.phase, WorkloadPhase::Admitted | WorkloadPhase::Running) =>
        {
            out.push(told(Change::Admitted, seen));
            after.stage = Stage::Holding;
        }
        (_, false) if seen.admitted_pods > 0 => after.stage = Stage::Holding,
        (_, false) => {}
    }
}

fn waiting(seen: &Observed, first: bool) -> Notice {
    let reason_key = seen.waiting.map(ReasonKey::of);
    let refused = reason_key.as_ref().is_some_and(ReasonKey::refused);
    let position = seen.position.map_or_else(
        || "no position yet".to_string(),
        |p| format!("position {p}"),
    );
    let why = seen
        .waiting
        .map(|r| describe(r, seen.key))
        .unwrap_or_default();
    let head = if refused {
        "cannot be admitted as its queue stands"
    } else if first {
        "waiting for quota"
    } else {
        "still waiting"
    };
    Notice {
        reason: if refused { "Refused" } else { "Waiting" },
        warning: refused,
        note: clean(&format!(
            "{head}: DynamicWorkload {}, queue {}, {position}, {} pod(s) pending: {why}",
            seen.key, seen.queue, seen.pending_pods
        )),
        on_gated_pod: true,
    }
}

/// What happened to a workload that its owner is told once, on the workload's object.
#[derive(Clone, Copy)]
enum Change {
    Admitted,
    Preempted,
    Requeued,
    RequeueLimit,
}

/// The notice of `change`: its reason, whether it is a warning, and what it says.
fn told(change: Change, seen: &Observed) -> Notice {
    let (key, queue) = (seen.key, seen.queue);
    let (reason, warning, note) = match change {
        Change::Admitted => (
            "Admitted",
            false,
            format!(
                "admitted: DynamicWorkload {key} holds quota in queue {queue} ({} pod(s) admitted)",
                seen.admitted_pods
            ),
        ),
        Change::Preempted => (
            "Preempted",
            true,
            format!(
                "preempted: pods of DynamicWorkload {key} were evicted in queue {queue} to make room for {} (interruption {}); it waits again",
                preemptor(seen.last_preempted_by, key),
                seen.interrupted_count
            ),
        ),
        Change::Requeued => (
            "Requeued",
            true,
            format!(
                "requeued: admitted pods of DynamicWorkload {key} did not all run within queue {queue}'s podsReadyTimeout and were evicted (requeue {}); it waits again at the back of its priority",
                seen.requeue_count
            ),
        ),
        Change::RequeueLimit => (
            "RequeueLimitExceeded",
            true,
            format!(
                "failed: DynamicWorkload {key} was requeued by queue {queue}'s podsReadyTimeout more often than its requeueLimit allows; its waiting pods will not be admitted"
            ),
        ),
    };
    Notice {
        reason,
        warning,
        note: clean(&note),
        on_gated_pod: false,
    }
}

/// Another workload, named only when it is of the same namespace.
fn preemptor(by: Option<&str>, key: &WorkloadKey) -> String {
    match by {
        Some(by)
            if by
                .split_once('/')
                .is_some_and(|(ns, _)| ns == key.namespace) =>
        {
            format!("DynamicWorkload {by}")
        }
        Some(_) => "a workload of higher priority in another namespace".to_string(),
        None => "a workload of higher priority".to_string(),
    }
}

/// The wait in words, naming no workload of another namespace.
pub fn describe(reason: &WaitReason, key: &WorkloadKey) -> String {
    match reason {
        WaitReason::BehindInStrictFifo { queue, blocker } if blocker.namespace != key.namespace => {
            format!("waits behind a workload of another namespace in StrictFIFO queue {queue}")
        }
        other => other.to_string(),
    }
}

/// No control characters (a name cannot hold one, but nothing here relies on that), at most
/// [`NOTE_BYTES`] bytes, cut at a character boundary.
pub fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(NOTE_BYTES));
    for c in text.chars() {
        let c = if c.is_control() { ' ' } else { c };
        if out.len() + c.len_utf8() > NOTE_BYTES {
            break;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
#[path = "notices_tests.rs"]
mod tests;
