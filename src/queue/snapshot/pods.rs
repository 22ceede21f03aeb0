//! What a governed pod is to admission: gated, admitted or ended, terminating, and when.

use super::*;

pub fn millis(ts: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> i64 {
    ts.map(|t| t.0.as_millisecond()).unwrap_or(0)
}

/// Pods whose ungate is in flight, by uid, with where the pass that admitted each pinned it. The
/// cache shows such a pod gated and unpinned until the watch catches up; it counts as admitted,
/// in its flavor and its domain, or the next pass would charge it to the wrong flavor and place
/// the rest of its gang as if it were nowhere.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InFlight {
    pods: HashMap<String, Pins>,
}

/// Where an admitted pod is pinned, as its ungate patch writes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pins {
    /// Its flavor's name (a flavored queue).
    pub flavor: Option<Arc<str>>,
    /// Its topology domain, `<key>=<value>`.
    pub domain: Option<Arc<str>>,
    /// The hostnames of its data's nodes.
    pub data_nodes: Option<Arc<str>>,
}

impl InFlight {
    pub fn insert(&mut self, uid: String, pins: Pins) {
        self.pods.insert(uid, pins);
    }

    pub fn remove(&mut self, uid: &str) -> bool {
        self.pods.remove(uid).is_some()
    }

    pub fn contains(&self, uid: &str) -> bool {
        self.pods.contains_key(uid)
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// The pins of a pod in flight.
    pub fn pins(&self, uid: &str) -> Option<&Pins> {
        self.pods.get(uid)
    }

    /// The uids that entered, left or changed pins between `self` and `other`.
    pub fn changed<'s>(&'s self, other: &'s InFlight) -> impl Iterator<Item = &'s String> {
        let left = (self.pods.iter()).filter(|(uid, pins)| other.pods.get(*uid) != Some(pins));
        let entered = (other.pods.keys()).filter(|uid| !self.pods.contains_key(*uid));
        left.map(|(uid, _)| uid).chain(entered)
    }
}

/// Uids in flight with no pins (an unflavored, unplaced pod).
impl FromIterator<String> for InFlight {
    fn from_iter<I: IntoIterator<Item = String>>(uids: I) -> Self {
        InFlight {
            pods: uids.into_iter().map(|u| (u, Pins::default())).collect(),
        }
    }
}

/// The state of a governed pod for admission.
pub fn pod_state(pod: &CachedPod, in_flight: &InFlight) -> PodState {
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
