//! One workload's page: its pod sets (pods admitted, running, gated), what it holds, its
//! conditions, the states the dashboard saw it in, its evictions and its events. Pure; the caller
//! has checked the viewer sees its namespace, and messages are redacted for the viewer.
use kube::ResourceExt;
use serde::Serialize;

use crate::api::DynamicWorkload;
use crate::dashboard::events::EventRow;
use crate::dashboard::model::{PreemptionRow, Scope, preemptor_for, redact};
use crate::dashboard::tracker::StateChange;
use crate::resources::quantities_text;

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSetRow {
    pub name: String,
    pub min_count: i32,
    pub max_count: Option<i32>,
    /// Per-pod requests, e.g. `cpu=1,memory=2Gi`.
    pub requests: String,
    pub gated: i32,
    pub admitted: i32,
    pub running: i32,
    pub finished: i32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionRow {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    pub since: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadDetail {
    pub namespace: String,
    pub name: String,
    pub source: String,
    pub queue: String,
    pub priority: i32,
    pub phase: String,
    pub position: Option<i32>,
    pub reason: String,
    pub message: String,
    pub pod_sets: Vec<PodSetRow>,
    pub used: String,
    pub reserved: String,
    pub borrowed: String,
    pub interrupted_count: i32,
    pub last_preempted_by: String,
    pub requeue_count: i32,
    pub conditions: Vec<ConditionRow>,
    pub states: Vec<StateChange>,
    /// Its preemptions, reclaims and requeues the dashboard saw (filled by the caller).
    pub evictions: Vec<PreemptionRow>,
    /// Its Kubernetes Events (filled by the caller).
    pub events: Vec<EventRow>,
}

pub fn workload_detail(
    w: &DynamicWorkload,
    states: Vec<StateChange>,
    scope: &Scope,
) -> WorkloadDetail {
    let status = w.status.clone().unwrap_or_default();
    let pod_sets = w
        .spec
        .pod_sets
        .iter()
        .map(|set| {
            let counts = status.pod_sets.iter().find(|s| s.name == set.name);
            PodSetRow {
                name: set.name.clone(),
                min_count: set.min_count,
                max_count: set.max_count,
                requests: quantities_text(&set.requests, "-"),
                gated: counts.map_or(0, |c| c.pending),
                admitted: counts.map_or(0, |c| c.admitted),
                running: counts.map_or(0, |c| c.running),
                finished: counts.map_or(0, |c| c.finished),
            }
        })
        .collect();
    WorkloadDetail {
        namespace: w.namespace().unwrap_or_default(),
        name: w.name_any(),
        source: w
            .spec
            .source
            .as_ref()
            .map_or_else(|| "-".into(), |s| format!("{} {}", s.kind, s.name)),
        queue: w.spec.queue_name.clone(),
        priority: w.spec.priority,
        phase: format!("{:?}", status.phase),
        position: status.position,
        reason: status.reason.clone().unwrap_or_default(),
        message: redact(&status.message, scope),
        pod_sets,
        used: quantities_text(&status.used, "-"),
        reserved: quantities_text(&status.reserved, "-"),
        borrowed: quantities_text(&status.borrowed, "-"),
        interrupted_count: status.interrupted_count,
        last_preempted_by: match status.last_preempted_by.as_deref() {
            None => "-".into(),
            by => preemptor_for(by, scope),
        },
        requeue_count: status.requeue_count,
        conditions: status
            .conditions
            .iter()
            .map(|c| ConditionRow {
                type_: c.type_.clone(),
                status: format!("{:?}", c.status),
                reason: c.reason.clone(),
                message: redact(&c.message, scope),
                since: c.last_transition_time.clone(),
            })
            .collect(),
        states,
        evictions: Vec::new(),
        events: Vec::new(),
    }
}
