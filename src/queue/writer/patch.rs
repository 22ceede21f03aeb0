//! The bodies of the writer's status writes: a JSON merge patch of what changed since the value the
//! API server holds, and whether two statuses differ only in wording.

use crate::api::DynamicWorkloadStatus;

/// The merge patch (RFC 7386) of a DynamicWorkload status from `base`, the value the API server
/// holds, to `new`: the fields that changed, `null` for those gone (a map key as well as a field);
/// lists whole. None: nothing changed (nothing to write). Without a base, the whole status.
pub(super) fn status_patch(
    base: Option<&DynamicWorkloadStatus>,
    new: &DynamicWorkloadStatus,
) -> Option<serde_json::Value> {
    let new = serde_json::to_value(new).ok()?;
    let base = base.and_then(|b| serde_json::to_value(b).ok());
    match base {
        Some(base) => merge_patch(&base, &new),
        None => Some(new),
    }
}

/// The JSON merge patch that turns `from` into `to` (RFC 7386: objects merged key by key, `null`
/// removes a key, anything else replaced whole); None when they are equal.
pub(super) fn merge_patch(
    from: &serde_json::Value,
    to: &serde_json::Value,
) -> Option<serde_json::Value> {
    use serde_json::Value;
    if from == to {
        return None;
    }
    let (Value::Object(from), Value::Object(to)) = (from, to) else {
        return Some(to.clone());
    };
    let mut patch = serde_json::Map::new();
    for (key, value) in to {
        let change = match from.get(key) {
            // A null in `to` cannot be said by a merge patch (it removes): as gone.
            _ if value.is_null() => from.contains_key(key).then_some(Value::Null),
            Some(old) => merge_patch(old, value),
            None => Some(value.clone()),
        };
        if let Some(change) = change {
            patch.insert(key.clone(), change);
        }
    }
    for key in from.keys() {
        if !to.contains_key(key) {
            patch.insert(key.clone(), Value::Null);
        }
    }
    (!patch.is_empty()).then_some(Value::Object(patch))
}

/// Whether two statuses differ only in their wording and amounts (message, conditions' messages,
/// used, reserved): what a waiting workload's status does whenever anything in its queue moves.
pub(super) fn same_but_for_wording(
    old: &DynamicWorkloadStatus,
    new: &DynamicWorkloadStatus,
) -> bool {
    let conditions = |s: &DynamicWorkloadStatus| -> Vec<(String, String, String, String)> {
        s.conditions
            .iter()
            .map(|c| {
                (
                    c.type_.clone(),
                    format!("{:?}", c.status),
                    c.reason.clone(),
                    c.last_transition_time.clone(),
                )
            })
            .collect()
    };
    old.phase == new.phase
        && old.pod_sets == new.pod_sets
        && old.pending_pods == new.pending_pods
        && old.admitted_pods == new.admitted_pods
        && old.interrupted_count == new.interrupted_count
        && old.last_preempted_by == new.last_preempted_by
        && old.preempted_at == new.preempted_at
        && old.admitted_at == new.admitted_at
        && old.finished_at == new.finished_at
        && old.pod_set_summary == new.pod_set_summary
        && conditions(old) == conditions(new)
}
