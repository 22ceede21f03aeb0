//! What happened to each workload, from what the pod watch saw: admitted when all the pods it still
//! needs exist and are ungated, ended its runtime after that, finished when all its pods succeeded,
//! preempted when a pod of it went away unasked (its time to admit then runs to its last admission,
//! as Kueue's recorder counts it).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::json;

use crate::suite::{Class, SIZES};

/// What the watch saw of one pod.
pub struct Seen {
    pub workload: usize,
    pub name: String,
    pub ungated: bool,
    pub phase: String,
    /// Being deleted (a deletion timestamp) or gone.
    pub deleted: bool,
    /// Gone: the watch's Delete event.
    pub removed: bool,
}

/// What the watch saw of `p`; `removed`: it came as a Delete event.
pub fn seen(p: &Pod, removed: bool) -> Option<Seen> {
    let workload = p.labels().get("bench.sluice.dev/workload")?.parse().ok()?;
    let ungated = p
        .spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_none_or(|g| g.is_empty());
    let phase = p
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    Some(Seen {
        workload,
        name: p.name_any(),
        ungated,
        phase,
        deleted: removed || p.metadata.deletion_timestamp.is_some(),
        removed,
    })
}

#[derive(Default)]
struct PodState {
    ungated: bool,
    running: bool,
    /// The load asked for its end (after the workload's runtime).
    ending: bool,
    /// Being deleted (a Job's pod, preempted): it no longer counts as admitted, and may still
    /// end Succeeded (its end raced the eviction), which its Job counts as done.
    terminating: bool,
}

/// One workload of the suite (times in seconds since the start).
#[derive(Default)]
pub struct Workload {
    pub class: usize,
    pub queue: String,
    pub created: Option<f64>,
    pub admitted: Option<f64>,
    pub finished: Option<f64>,
    pub preempted: u32,
    /// The admission a pod seen being deleted took away: given back if the workload then finishes
    /// without being admitted again (its pods' ends beat the eviction).
    taken_admission: Option<f64>,
    /// Plain pods: which attempt's pod stands for it now (a preempted pod is created again).
    pub attempt: u32,
    pods: BTreeMap<String, PodState>,
    succeeded: BTreeSet<String>,
    /// Pods seen gone (their later events are old news).
    gone: BTreeSet<String>,
    /// What the watch last saw of it (for a stalled run's summary).
    pub last_seen: String,
}

/// What a workload's owner must do after an observation.
pub enum Then {
    /// End this pod of it after this many seconds.
    End { pod: String, after: f64 },
    /// Its plain pod went away unasked: create the next attempt's.
    Recreate,
}

impl Workload {
    pub fn new(class: usize, queue: String) -> Self {
        Workload {
            class,
            queue,
            ..Default::default()
        }
    }

    pub fn ending_asked(&self) -> bool {
        self.pods.values().any(|p| p.ending)
    }

    /// One pod observation applied: admission, its pods' ends, its end, or its preemption.
    pub fn observe(&mut self, class: &Class, s: &Seen, t: f64, plain_pod: &str) -> Vec<Then> {
        if self.finished.is_some()
            || self.gone.contains(&s.name)
            || self.succeeded.contains(&s.name)
        {
            return vec![];
        }
        self.created.get_or_insert(t);
        self.last_seen = format!(
            "{} {}{}{}",
            s.name,
            if s.phase.is_empty() {
                "no phase"
            } else {
                &s.phase
            },
            if s.ungated { ", ungated" } else { ", gated" },
            if s.deleted { ", deleted" } else { "" }
        );
        let known = self.pods.get(&s.name);
        let terminating = known.is_some_and(|p| p.terminating);
        let asked = known.is_some_and(|p| p.terminating || p.ending);
        if s.phase == "Succeeded" && asked {
            self.pods.remove(&s.name);
            self.succeeded.insert(s.name.clone());
            if self.succeeded.len() >= class.pods as usize {
                self.finished = Some(t);
                self.admitted = self.admitted.or(self.taken_admission);
            }
            return vec![];
        }
        if s.deleted || s.phase == "Failed" || s.phase == "Succeeded" {
            // Gone unasked: preempted (its owner, or Kueue resuming the Job, brings it back). A pod
            // already seen being deleted was counted then (its replacements may be admitted since).
            if !terminating && let Some(admitted) = self.admitted.take() {
                self.preempted += 1;
                self.taken_admission = Some(admitted);
            }
            // A Job's pod being deleted is not gone yet: it may still end Succeeded, and then its
            // Job replaces only the others (a plain pod's next attempt is created at once).
            let ended = s.removed || s.phase == "Failed" || s.phase == "Succeeded";
            if !ended && plain_pod.is_empty() {
                self.pods.entry(s.name.clone()).or_default().terminating = true;
                return vec![];
            }
            self.pods.remove(&s.name);
            self.gone.insert(s.name.clone());
            return if s.name == plain_pod {
                self.attempt += 1;
                vec![Then::Recreate]
            } else {
                vec![]
            };
        }
        let pod = self.pods.entry(s.name.clone()).or_default();
        pod.ungated = s.ungated;
        pod.running = s.phase == "Running";
        let needed = (class.pods as usize).saturating_sub(self.succeeded.len());
        let admitted_pods = self
            .pods
            .values()
            .filter(|p| !p.terminating && (p.ungated || p.running))
            .count();
        if self.admitted.is_none() && needed > 0 && admitted_pods >= needed {
            self.admitted = Some(t);
        }
        let Some(admitted) = self.admitted else {
            return vec![];
        };
        let after = admitted + class.runtime_ms as f64 / 1000.0 - t;
        self.pods
            .iter_mut()
            .filter(|(_, p)| p.running && !p.ending && !p.terminating)
            .map(|(name, p)| {
                p.ending = true;
                Then::End {
                    pod: name.clone(),
                    after,
                }
            })
            .collect()
    }
}

/// When admissions and ends were last seen to move, to tell a stalled run from a slow one.
#[derive(Default)]
pub struct Progress {
    admitted: usize,
    finished: usize,
    since: f64,
}

impl Progress {
    /// Whether nothing moved for `limit` seconds once every workload was created.
    pub fn stalled(
        &mut self,
        admitted: usize,
        finished: usize,
        created_all: bool,
        t: f64,
        limit: f64,
    ) -> bool {
        if (admitted, finished) != (self.admitted, self.finished) || !created_all {
            *self = Progress {
                admitted,
                finished,
                since: t,
            };
            return false;
        }
        t - self.since > limit
    }
}

fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).map(|v| (v * 1000.0).round() / 1000.0)
}

fn rounded(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// Time to admit (creation to last admission) of the workloads `filter` keeps.
fn time_to_admit(wls: &[Workload], filter: &dyn Fn(&Workload) -> bool) -> serde_json::Value {
    let mut v: Vec<f64> = wls
        .iter()
        .filter(|w| filter(w))
        .filter_map(|w| Some(w.admitted? - w.created?))
        .map(|d| d.max(0.0))
        .collect();
    v.sort_by(f64::total_cmp);
    let avg = (!v.is_empty()).then(|| rounded(v.iter().sum::<f64>() / v.len() as f64));
    json!({"count": v.len(), "avg_s": avg, "p50_s": percentile(&v, 0.5),
        "p99_s": percentile(&v, 0.99), "max_s": percentile(&v, 1.0)})
}

/// The run's JSON summary (`hack/bench/peers_report.py` reads it).
pub fn summary(
    classes: &[Class],
    wls: &[Workload],
    create_s: f64,
    elapsed: f64,
) -> serde_json::Value {
    let admit_times: Vec<f64> = wls.iter().filter_map(|w| w.admitted).collect();
    let complete = wls
        .iter()
        .all(|w| w.admitted.is_some() && w.finished.is_some());
    let wall_admit = admit_times.iter().copied().fold(0.0, f64::max);
    let wall_finish = wls.iter().filter_map(|w| w.finished).fold(0.0, f64::max);
    let by_size: serde_json::Map<_, _> = SIZES
        .iter()
        .map(|size| {
            let keep = |w: &Workload| classes[w.class].size == *size;
            (size.to_string(), time_to_admit(wls, &keep))
        })
        .collect();
    let by_class: serde_json::Map<_, _> = classes
        .iter()
        .enumerate()
        .map(|(ci, c)| {
            (
                c.name.to_string(),
                time_to_admit(wls, &|w: &Workload| w.class == ci),
            )
        })
        .collect();
    json!({
        "workloads": wls.len(),
        "pods": wls.iter().map(|w| classes[w.class].pods as usize).sum::<usize>(),
        "complete": complete,
        "admitted": admit_times.len(),
        "finished": wls.iter().filter(|w| w.finished.is_some()).count(),
        "preempted": wls.iter().map(|w| w.preempted).sum::<u32>(),
        "create_s": create_s,
        "wall_admit_all_s": rounded(wall_admit),
        "wall_finish_all_s": rounded(wall_finish),
        "elapsed_s": elapsed,
        "admissions_per_s": (wall_admit > 0.0).then(|| admit_times.len() as f64 / wall_admit),
        "time_to_admit": time_to_admit(wls, &|_| true),
        "time_to_admit_by_class": by_size,
        "time_to_admit_by_workload_class": by_class,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_PODS: Class = Class {
        name: "small-required-rack",
        size: "small",
        count: 1,
        interval_ms: 100,
        pods: 2,
        pod_millicpu: 500,
        runtime_ms: 200,
        priority: 50,
        topology: None,
    };

    fn pod(name: &str, phase: &str, ungated: bool, deleted: bool) -> Seen {
        Seen {
            workload: 0,
            name: name.into(),
            ungated,
            phase: phase.into(),
            deleted,
            removed: false,
        }
    }

    /// A Job's workload whose pods `a` and `b` both run, their ends asked.
    fn running_job() -> Workload {
        let mut w = Workload::new(0, "q".into());
        for name in ["a", "b"] {
            w.observe(&TWO_PODS, &pod(name, "Pending", false, false), 0.0, "");
        }
        w.observe(&TWO_PODS, &pod("a", "Running", true, false), 1.0, "");
        let ends = w.observe(&TWO_PODS, &pod("b", "Running", true, false), 1.0, "");
        assert_eq!(ends.len(), 2, "both ends asked once admitted");
        assert_eq!(w.admitted, Some(1.0));
        w
    }

    #[test]
    fn a_job_pod_whose_end_beat_its_eviction_counts_as_done() {
        let mut w = running_job();
        // `a` is evicted (preempted) and still ends Succeeded: its Job counts it done.
        w.observe(&TWO_PODS, &pod("a", "Running", true, true), 2.0, "");
        assert_eq!((w.admitted, w.preempted), (None, 1));
        w.observe(&TWO_PODS, &pod("a", "Succeeded", true, true), 2.1, "");
        // `b` is evicted too and fails: the Job replaces `b` only.
        w.observe(&TWO_PODS, &pod("b", "Running", true, true), 2.2, "");
        w.observe(&TWO_PODS, &pod("b", "Failed", true, true), 2.3, "");
        assert_eq!(w.preempted, 1, "one preemption of the workload");
        w.observe(&TWO_PODS, &pod("c", "Pending", false, false), 3.0, "");
        let ends = w.observe(&TWO_PODS, &pod("c", "Running", true, false), 4.0, "");
        assert_eq!(
            w.admitted,
            Some(4.0),
            "admitted again with the one pod it still needs"
        );
        assert_eq!(ends.len(), 1);
        w.observe(&TWO_PODS, &pod("c", "Succeeded", true, false), 5.0, "");
        assert_eq!(w.finished, Some(5.0));
    }

    #[test]
    fn a_workload_whose_pods_all_end_despite_their_eviction_keeps_its_admission() {
        let mut w = running_job();
        for name in ["a", "b"] {
            w.observe(&TWO_PODS, &pod(name, "Running", true, true), 2.0, "");
        }
        assert_eq!((w.admitted, w.preempted), (None, 1));
        for name in ["a", "b"] {
            w.observe(&TWO_PODS, &pod(name, "Succeeded", true, true), 2.5, "");
        }
        assert_eq!(w.finished, Some(2.5));
        assert_eq!(
            w.admitted,
            Some(1.0),
            "admitted once, at 1.0, and never again"
        );
    }

    #[test]
    fn a_terminating_pods_last_events_do_not_undo_a_later_admission() {
        let mut w = running_job();
        w.observe(&TWO_PODS, &pod("a", "Running", true, true), 2.0, "");
        w.observe(&TWO_PODS, &pod("b", "Running", true, true), 2.0, "");
        for name in ["c", "d"] {
            w.observe(&TWO_PODS, &pod(name, "Running", true, false), 3.0, "");
        }
        assert_eq!(
            w.admitted,
            Some(3.0),
            "the replacements admitted, not the terminating pods"
        );
        w.observe(&TWO_PODS, &pod("a", "Failed", true, true), 3.5, "");
        let mut gone = pod("b", "Running", true, true);
        gone.removed = true;
        w.observe(&TWO_PODS, &gone, 3.6, "");
        assert_eq!((w.admitted, w.preempted), (Some(3.0), 1));
    }

    #[test]
    fn a_plain_pod_deleted_is_gone_at_once_and_created_again() {
        let mut w = Workload::new(0, "q".into());
        let one = Class {
            pods: 1,
            ..TWO_PODS
        };
        w.observe(&one, &pod("p-0", "Running", true, false), 1.0, "p-0");
        let then = w.observe(&one, &pod("p-0", "Running", true, true), 2.0, "p-0");
        assert!(matches!(then.as_slice(), [Then::Recreate]));
        assert_eq!((w.admitted, w.preempted, w.attempt), (None, 1, 1));
    }
}
