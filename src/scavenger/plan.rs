//! Which waiting ScavengerJobs start and which running ones give their room back, as pure
//! functions of the capacity (`capacity.rs`) and the jobs.
//!
//! Start order: `interruptedCount` highest first ("finish what we started"), then the oldest; a job
//! that does not fit is passed over, so a smaller one behind it that fits may start.
//!
//! Giving room back: when scavengers use more than ordinary work leaves them (or a queue's
//! scavengers more than its `scavengerQuota`), the job with the least progress in its current
//! `duration` window goes first: its running priority is the step of a ramp that climbs in
//! [`RAMP_STEPS`] steps over `duration` and then starts over.

use std::collections::BTreeMap;
use std::time::Duration;

use super::capacity::{Capacity, fits_within};
use crate::resources::ResourceList;

/// Steps of the running-priority ramp over one `duration` window.
pub const RAMP_STEPS: i64 = 5;

/// A ScavengerJob waiting to start.
#[derive(Clone, Debug, PartialEq)]
pub struct Waiting {
    /// `namespace/name`.
    pub key: String,
    pub interrupted_count: i32,
    /// Creation time, seconds since the epoch (older first among equals).
    pub created: i64,
    /// Requests of all its pods together.
    pub demand: ResourceList,
    pub queue: Option<String>,
    /// Not before this time (seconds since the epoch): a start that could not be scheduled is
    /// retried only after a pause.
    pub not_before: i64,
}

/// A ScavengerJob whose Job runs (or starts).
#[derive(Clone, Debug, PartialEq)]
pub struct Running {
    pub key: String,
    /// Requests of all its pods together.
    pub demand: ResourceList,
    pub queue: Option<String>,
    /// When the current run started (its Job created), seconds since the epoch.
    pub started: i64,
    pub duration: Duration,
    pub interrupted_count: i32,
}

/// Where a run is on the ramp at `now`: (step 0..RAMP_STEPS, seconds into the current window,
/// the windows completed). Pure.
pub fn ramp(started: i64, duration: Duration, now: i64) -> (i64, i64, i64) {
    let window = (duration.as_secs() as i64).max(1);
    let ran = (now - started).max(0);
    let into = ran % window;
    let step = (into * RAMP_STEPS / window).min(RAMP_STEPS - 1);
    (step, into, ran / window)
}

/// The job that goes first when room is needed sorts first: lowest ramp step, least time into its
/// window, fewest interruptions, then the key.
fn victim_order(a: &Running, b: &Running, now: i64) -> std::cmp::Ordering {
    let (sa, ia, _) = ramp(a.started, a.duration, now);
    let (sb, ib, _) = ramp(b.started, b.duration, now);
    (sa, ia, a.interrupted_count, &a.key).cmp(&(sb, ib, b.interrupted_count, &b.key))
}

/// Use per queue of `running`.
pub fn queue_use(running: &[Running]) -> BTreeMap<String, ResourceList> {
    let mut out: BTreeMap<String, ResourceList> = BTreeMap::new();
    for job in running {
        if let Some(queue) = &job.queue {
            out.entry(queue.clone()).or_default().add_all(&job.demand);
        }
    }
    out
}

/// Whether `demand` more for `queue` stays within its scavenger quota. A queue with no
/// `scavengerQuota` (or that does not exist: absent from `quotas`) has no share at all.
fn queue_fits(
    queue: Option<&String>,
    demand: &ResourceList,
    used: &BTreeMap<String, ResourceList>,
    quotas: &BTreeMap<String, ResourceList>,
) -> bool {
    let Some(queue) = queue else { return true };
    let Some(quota) = quotas.get(queue) else {
        return false;
    };
    let mut total = used.get(queue).cloned().unwrap_or_default();
    total.add_all(demand);
    quota
        .0
        .iter()
        .all(|(name, limit)| total.get(name) <= *limit)
}

/// Why a waiting job did not start, for its message.
#[derive(Clone, Debug, PartialEq)]
pub enum Held {
    /// The cluster's scavenger capacity has not that much free: what is free.
    Capacity(ResourceList),
    /// Its queue's scavenger quota is used up or absent.
    Queue(String),
    /// Its last start could not be scheduled; it waits until this time.
    Backoff(i64),
}

/// The waiting jobs to start now, in order, and why each other one waits. Pure.
pub fn plan_starts(
    waiting: &[Waiting],
    running: &[Running],
    capacity: &Capacity,
    quotas: &BTreeMap<String, ResourceList>,
    now: i64,
) -> (Vec<String>, BTreeMap<String, Held>) {
    let mut order: Vec<&Waiting> = waiting.iter().collect();
    order.sort_by(|a, b| {
        (b.interrupted_count, a.created, &a.key).cmp(&(a.interrupted_count, b.created, &b.key))
    });
    let mut free = capacity.free();
    let mut used = queue_use(running);
    let (mut start, mut held) = (Vec::new(), BTreeMap::new());
    for job in order {
        if job.not_before > now {
            held.insert(job.key.clone(), Held::Backoff(job.not_before));
            continue;
        }
        if !fits_within(&job.demand, &free) {
            held.insert(job.key.clone(), Held::Capacity(free.clone()));
            continue;
        }
        if !queue_fits(job.queue.as_ref(), &job.demand, &used, quotas) {
            held.insert(
                job.key.clone(),
                Held::Queue(job.queue.clone().unwrap_or_default()),
            );
            continue;
        }
        for (name, want) in &job.demand.0 {
            if let Some(room) = free.0.get_mut(name) {
                *room -= want;
            }
        }
        if let Some(queue) = &job.queue {
            used.entry(queue.clone()).or_default().add_all(&job.demand);
        }
        start.push(job.key.clone());
    }
    (start, held)
}

/// The running jobs to stop so that scavengers use no more than ordinary work leaves them and no
/// queue's scavengers more than its quota: least progress first, only jobs that hold some of
/// what is over, and no more than needed. Pure.
pub fn plan_evictions(
    running: &[Running],
    capacity: &Capacity,
    quotas: &BTreeMap<String, ResourceList>,
    now: i64,
) -> Vec<String> {
    let mut order: Vec<&Running> = running.iter().collect();
    order.sort_by(|a, b| victim_order(a, b, now));
    let mut over = capacity.over();
    let mut queue_over: BTreeMap<String, ResourceList> = BTreeMap::new();
    for (queue, used) in queue_use(running) {
        let quota = quotas.get(&queue).cloned().unwrap_or_default();
        let mut excess = ResourceList::new();
        for (name, value) in &used.0 {
            let limit = if quotas.contains_key(&queue) {
                quota.0.get(name).copied().unwrap_or(i64::MAX)
            } else {
                0
            };
            if *value > 0 && *value > limit {
                excess.0.insert(name.clone(), value - limit);
            }
        }
        if !excess.0.is_empty() {
            queue_over.insert(queue, excess);
        }
    }
    let mut out = Vec::new();
    for job in order {
        let helps = |excess: &ResourceList| {
            excess
                .0
                .iter()
                .any(|(name, e)| *e > 0 && job.demand.get(name) > 0)
        };
        let for_queue = job.queue.as_ref().and_then(|q| queue_over.get_mut(q));
        let queue_helps = for_queue.as_ref().is_some_and(|e| helps(e));
        if !helps(&over) && !queue_helps {
            continue;
        }
        for (name, e) in over.0.iter_mut() {
            *e -= job.demand.get(name);
        }
        if let Some(excess) = for_queue {
            for (name, e) in excess.0.iter_mut() {
                *e -= job.demand.get(name);
            }
        }
        out.push(job.key.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scavenger::capacity::{NodeFacts, PodFacts, capacity};

    fn cpu(milli: i64) -> ResourceList {
        ResourceList([("cpu".to_string(), milli)].into())
    }

    fn cap(node_cpu: i64, ordinary: i64, scavengers: i64) -> Capacity {
        let nodes = [NodeFacts {
            allocatable: cpu(node_cpu),
            ready: true,
            schedulable: true,
        }];
        let pods = [
            PodFacts {
                requests: cpu(ordinary).into(),
                scavenger: false,
                holds_room: true,
                scavenger_job: None,
            },
            PodFacts {
                requests: cpu(scavengers).into(),
                scavenger: true,
                holds_room: true,
                scavenger_job: None,
            },
        ];
        capacity(&nodes, &pods, 0.7)
    }

    fn waiting(key: &str, interrupted: i32, created: i64, milli: i64) -> Waiting {
        Waiting {
            key: key.into(),
            interrupted_count: interrupted,
            created,
            demand: cpu(milli),
            queue: None,
            not_before: 0,
        }
    }

    fn running(key: &str, started: i64, milli: i64) -> Running {
        Running {
            key: key.into(),
            demand: cpu(milli),
            queue: None,
            started,
            duration: Duration::from_secs(600),
            interrupted_count: 0,
        }
    }

    #[test]
    fn interrupted_jobs_start_first_then_older_fresh_ones() {
        let w = [
            waiting("fresh-old", 0, 1, 1000),
            waiting("once", 1, 5, 1000),
            waiting("twice", 2, 9, 1000),
            waiting("fresh-new", 0, 2, 1000),
        ];
        let (start, held) = plan_starts(&w, &[], &cap(10_000, 0, 0), &BTreeMap::new(), 100);
        assert_eq!(start, ["twice", "once", "fresh-old", "fresh-new"]);
        assert!(held.is_empty());
        // Room for two: the interrupted ones.
        let (start, held) = plan_starts(&w, &[], &cap(3000, 0, 0), &BTreeMap::new(), 100);
        assert_eq!(start, ["twice", "once"]);
        assert!(matches!(held.get("fresh-old"), Some(Held::Capacity(_))));
    }

    #[test]
    fn a_fresh_job_that_fits_starts_when_the_interrupted_one_does_not() {
        let w = [waiting("big", 3, 1, 5000), waiting("small", 0, 2, 1000)];
        let (start, held) = plan_starts(&w, &[], &cap(5000, 0, 0), &BTreeMap::new(), 100);
        assert_eq!(start, ["small"]);
        assert_eq!(held.get("big"), Some(&Held::Capacity(cpu(3500))));
    }

    #[test]
    fn the_threshold_holds_across_starts_in_one_pass() {
        let w: Vec<Waiting> = (0..10)
            .map(|i| waiting(&format!("j{i}"), 0, i, 1000))
            .collect();
        let (start, _) = plan_starts(&w, &[], &cap(10_000, 2000, 1000), &BTreeMap::new(), 0);
        // 7000 - 2000 ordinary - 1000 in use = 4000: four more.
        assert_eq!(start.len(), 4);
    }

    #[test]
    fn a_job_in_backoff_waits_until_its_time() {
        let mut w = waiting("a", 0, 1, 1000);
        w.not_before = 50;
        let (start, held) = plan_starts(
            std::slice::from_ref(&w),
            &[],
            &cap(10_000, 0, 0),
            &BTreeMap::new(),
            49,
        );
        assert!(start.is_empty());
        assert_eq!(held.get("a"), Some(&Held::Backoff(50)));
        let (start, _) = plan_starts(&[w], &[], &cap(10_000, 0, 0), &BTreeMap::new(), 50);
        assert_eq!(start, ["a"]);
    }

    #[test]
    fn a_queue_share_limits_its_jobs_and_a_queue_without_one_runs_none() {
        let mut a = waiting("a", 0, 1, 2000);
        a.queue = Some("team".into());
        let mut b = waiting("b", 0, 2, 2000);
        b.queue = Some("team".into());
        let mut c = waiting("c", 0, 3, 1000);
        c.queue = Some("no-share".into());
        let quotas = BTreeMap::from([("team".to_string(), cpu(3000))]);
        let (start, held) = plan_starts(&[a, b, c], &[], &cap(100_000, 0, 0), &quotas, 0);
        assert_eq!(start, ["a"]);
        assert_eq!(held.get("b"), Some(&Held::Queue("team".into())));
        assert_eq!(held.get("c"), Some(&Held::Queue("no-share".into())));
    }

    #[test]
    fn the_ramp_climbs_in_steps_over_the_duration_and_starts_over() {
        let d = Duration::from_secs(600);
        assert_eq!(ramp(0, d, 0), (0, 0, 0));
        assert_eq!(ramp(0, d, 119), (0, 119, 0));
        assert_eq!(ramp(0, d, 120), (1, 120, 0));
        assert_eq!(ramp(0, d, 599), (4, 599, 0));
        assert_eq!(ramp(0, d, 600), (0, 0, 1));
        assert_eq!(ramp(0, d, 1300), (0, 100, 2));
        // A clock behind the start and a zero duration do not panic.
        assert_eq!(ramp(100, d, 0), (0, 0, 0));
        assert_eq!(ramp(0, Duration::ZERO, 7).0, 0);
    }

    #[test]
    fn the_least_progressed_in_its_window_goes_first_and_only_as_many_as_needed() {
        // Capacity for scavengers: 7000 - 4000 = 3000; in use 6000: 3000 over.
        let c = cap(10_000, 4000, 6000);
        let now = 1000;
        let jobs = [
            running("old", now - 500, 2000),    // step 4
            running("young", now - 30, 2000),   // step 0, 30 s in
            running("middle", now - 250, 2000), // step 2
            // Started 650 s ago: its window started over 50 s ago, so it has least progress.
            running("wrapped", now - 650, 2000),
        ];
        let out = plan_evictions(&jobs, &c, &BTreeMap::new(), now);
        assert_eq!(out, ["young", "wrapped"]);
    }

    #[test]
    fn nothing_is_stopped_while_scavengers_fit() {
        let c = cap(10_000, 1000, 6000);
        let jobs = [running("a", 0, 3000), running("b", 0, 3000)];
        assert!(plan_evictions(&jobs, &c, &BTreeMap::new(), 10).is_empty());
    }

    #[test]
    fn a_queue_over_its_scavenger_quota_gives_back_its_least_progressed() {
        let c = cap(100_000, 0, 4000);
        let mut a = running("a", 0, 2000);
        a.queue = Some("team".into());
        let mut b = running("b", 90, 2000);
        b.queue = Some("team".into());
        let other = running("other", 95, 2000);
        let quotas = BTreeMap::from([("team".to_string(), cpu(3000))]);
        assert_eq!(
            plan_evictions(&[a.clone(), b.clone(), other.clone()], &c, &quotas, 100),
            ["b"]
        );
        // The queue's share was removed: all of its jobs stop, others stay.
        assert_eq!(
            plan_evictions(&[a, b, other], &c, &BTreeMap::new(), 100),
            ["b", "a"]
        );
    }
}
