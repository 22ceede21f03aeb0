//! What a governed pod is to admission: gated, admitted or ended, terminating, and when.

use super::*;

pub fn millis(ts: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> i64 {
    ts.map(|t| t.0.as_millisecond()).unwrap_or(0)
}

/// The state of a governed pod for admission.
pub fn pod_state(pod: &CachedPod, in_flight: &HashSet<String>) -> PodState {
    if matches!(pod.phase(), Some("Succeeded") | Some("Failed")) {
        return PodState::Ended;
    }
    if is_gated(pod) {
        if in_flight.contains(pod.metadata.uid.as_deref().unwrap_or_default()) {
            return PodState::Admitted;
        }
        // A gated pod on its way out will never run: it holds nothing and waits for nothing.
        if pod.metadata.deletion_timestamp.is_some() {
            return PodState::Ended;
        }
        return PodState::Gated;
    }
    PodState::Admitted
}

/// Whether an admitted pod is on its way out (it has a deletionTimestamp): it still holds its
/// quota until it is gone or ended, but its room is already being freed.
pub fn is_terminating(pod: &CachedPod, state: PodState) -> bool {
    state == PodState::Admitted && pod.metadata.deletion_timestamp.is_some()
}

/// Whether a cached pod is behind sluice's gate.
pub fn is_gated(pod: &CachedPod) -> bool {
    pod.admission_gate.is_some()
}

/// Whether a pod as the API server sends it is behind sluice's gate.
pub fn pod_is_gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|gates| gates.iter().any(|g| g.name == ADMISSION_GATE))
}
