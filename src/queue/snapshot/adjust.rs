//! Corrections to a built snapshot before its pass: workloads requeued too often, holds
//! subtracted from quotas, evictions blocked, and gated pods left behind.

use super::*;

/// The last workload added, if its queue's podsReadyTimeout sent it back: it queues from then (the
/// back of its priority level); sent back more than the queue's requeueLimit, it is Failed and its
/// gated pods are left out of the pass.
pub(super) fn requeued(built: &mut Built, dwl: Option<&Arc<DynamicWorkload>>, limit: Option<i32>) {
    let status = dwl.and_then(|d| d.status.as_ref());
    let since = status
        .and_then(|s| s.requeued_at.as_deref())
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_millisecond());
    let Some(workload) = built.snapshot.workloads.last_mut() else {
        return;
    };
    if let Some(since) = since {
        workload.queued_at = workload.queued_at.max(since);
    }
    if exhausted(dwl.map(|d| d.as_ref()), limit) {
        let w = built.snapshot.workloads.len() - 1;
        leave_gated_behind(built, w);
    }
}

/// Takes the room held for pods admitted at creation (not in the pod cache yet) off each queue's
/// quota, so that the pass never gives it twice.
pub fn subtract_holds(snapshot: &mut Snapshot, holds: &HashMap<String, ResourceList>) {
    for queue in &mut snapshot.queues {
        if let Some(held) = holds.get(&queue.name) {
            for (name, limit) in queue.quota.0.iter_mut() {
                *limit = limit.saturating_sub(held.get(name));
            }
        }
    }
}

/// Marks the pods a PodDisruptionBudget protects (`blocked`, by uid): the pass chooses other
/// victims, or none.
pub fn mark_eviction_blocked(built: &mut Built, blocked: &HashSet<String>) {
    if blocked.is_empty() {
        return;
    }
    for (workload, objects) in built.snapshot.workloads.iter_mut().zip(&built.pods) {
        for (set, objects) in workload.pod_sets.iter_mut().zip(objects) {
            for (pod, object) in set.pods.iter_mut().zip(objects) {
                pod.eviction_blocked = object
                    .metadata
                    .uid
                    .as_deref()
                    .is_some_and(|uid| blocked.contains(uid));
            }
        }
    }
}

/// Takes workload `w`'s gated pods out of the pass (they are never admitted; counted as left
/// behind): a workload that is Failed.
pub fn leave_gated_behind(built: &mut Built, w: usize) {
    let (Some(workload), Some(pods)) = (built.snapshot.workloads.get_mut(w), built.pods.get_mut(w))
    else {
        return;
    };
    let mut dropped = 0u32;
    for (set, objects) in workload.pod_sets.iter_mut().zip(pods.iter_mut()) {
        let snaps = std::mem::take(&mut set.pods);
        let kept = std::mem::take(objects);
        let (snaps, kept) = drop_gated_if(true, snaps, kept, &mut dropped);
        set.pods = snaps;
        *objects = kept;
    }
    if let Some(left) = built.left_behind.get_mut(w) {
        *left += dropped;
    }
}

/// Whether a workload was sent back more often than its queue allows: it is Failed.
pub fn exhausted(dwl: Option<&DynamicWorkload>, limit: Option<i32>) -> bool {
    let count = dwl
        .and_then(|d| d.status.as_ref())
        .map_or(0, |s| s.requeue_count);
    limit.is_some_and(|limit| count > limit)
}

/// With `drop`, keeps only the pods that are not gated and counts the others in `dropped`.
pub(super) fn drop_gated_if(
    drop: bool,
    snaps: Vec<PodSnapshot>,
    kept: Vec<Arc<CachedPod>>,
    dropped: &mut u32,
) -> (Vec<PodSnapshot>, Vec<Arc<CachedPod>>) {
    if !drop {
        return (snaps, kept);
    }
    let (mut out_snaps, mut out_kept) = (Vec::new(), Vec::new());
    for (snap, pod) in snaps.into_iter().zip(kept) {
        if snap.state == PodState::Gated {
            *dropped += 1;
        } else {
            out_snaps.push(snap);
            out_kept.push(pod);
        }
    }
    (out_snaps, out_kept)
}
