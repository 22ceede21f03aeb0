//! What the preemption tests watch while they run: the queue's admitted requests at every sampled
//! moment ([`QuotaSampler`]) and every status each DynamicWorkload had ([`WorkloadHistory`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use sluice::api::{ConditionStatus, DynamicWorkload, DynamicWorkloadStatus};

use super::scene::{holding_cpu, holds_quota};
use super::{PREEMPTION_TIMEOUT, SAMPLE_EVERY};
use crate::support::*;

// ---------------------------------------------------------------------------------------------
// The queue sampler: the admitted requests at every sampled moment, and which pods were taken.

#[derive(Default)]
pub(crate) struct SamplerReport {
    pub(crate) samples: usize,
    /// The most cpu (milli) the queue's admitted pods requested at one sampled moment.
    pub(crate) most: i64,
    /// Sampled moments above the quota, with the pods admitted then.
    pub(crate) over: Vec<String>,
    /// Pods taken away while admitted (seen terminating, or gone), with their labels.
    pub(crate) taken: BTreeMap<String, BTreeMap<String, String>>,
}

impl SamplerReport {
    pub(crate) fn record(
        &mut self,
        pods: &[Pod],
        quota_millis: i64,
        before: &mut BTreeMap<String, BTreeMap<String, String>>,
    ) {
        self.samples += 1;
        let mut now = BTreeMap::new();
        for p in pods {
            if p.metadata.deletion_timestamp.is_some() && !is_ended(p) && !is_gated(p) {
                self.taken.insert(p.name_any(), p.labels().clone());
            } else if holds_quota(p) {
                now.insert(p.name_any(), p.labels().clone());
            }
        }
        for (name, labels) in before.iter() {
            if !now.contains_key(name) && !pods.iter().any(|p| &p.name_any() == name) {
                self.taken.insert(name.clone(), labels.clone());
            }
        }
        let millis = holding_cpu(pods);
        self.most = self.most.max(millis);
        if millis > quota_millis {
            self.over.push(format!(
                "{millis}m admitted: {:?}",
                now.keys().collect::<Vec<_>>()
            ));
        }
        *before = now;
    }

    /// Fails if any pod was taken away while admitted.
    pub(crate) fn assert_nothing_taken(&self) {
        assert!(
            self.taken.is_empty(),
            "nothing evicted: {:?}",
            self.taken_names()
        );
    }

    /// Fails if any sampled moment was over the quota, or if too few moments were sampled.
    pub(crate) fn assert_within(&self, quota_millis: i64) {
        // At least the moments before and after the preemption: a quick one takes under a second.
        assert!(
            self.samples >= 2,
            "only {} samples of the queue were taken",
            self.samples
        );
        assert!(
            self.over.is_empty(),
            "the queue's admitted pods exceeded its quota of {quota_millis}m cpu at {} of {} sampled moments: {:?}",
            self.over.len(),
            self.samples,
            self.over
        );
    }

    pub(crate) fn taken_names(&self) -> Vec<&str> {
        self.taken.keys().map(String::as_str).collect()
    }

    /// Fails unless exactly the pods `expected` were taken (`why` says what that means).
    pub(crate) fn assert_taken(&self, expected: &[&str], why: &str) {
        assert_eq!(self.taken_names(), expected, "{why}");
    }
}

/// Lists the queue's pods every [`SAMPLE_EVERY`] while the test runs (a list is one moment of the
/// API server's state).
pub(crate) struct QuotaSampler {
    pub(crate) quota_millis: i64,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) task: Option<tokio::task::JoinHandle<SamplerReport>>,
}

impl QuotaSampler {
    pub(crate) fn start(env: &TestEnv, queue: &str, quota_millis: i64) -> QuotaSampler {
        let pods = env.pods();
        let selector = format!("sluice.dev/queue={queue}");
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut report = SamplerReport::default();
                let mut before = BTreeMap::new();
                while !stop.load(Ordering::SeqCst) {
                    if let Ok(list) = pods.list(&ListParams::default().labels(&selector)).await {
                        report.record(&list.items, quota_millis, &mut before);
                    }
                    tokio::time::sleep(SAMPLE_EVERY).await;
                }
                report
            }
        });
        QuotaSampler {
            quota_millis,
            stop,
            task: Some(task),
        }
    }

    /// Stops sampling; fails if any sampled moment was over the quota (see
    /// [`SamplerReport::assert_within`]).
    pub(crate) async fn finish(mut self) -> SamplerReport {
        self.stop.store(true, Ordering::SeqCst);
        let report = self
            .task
            .take()
            .expect("running")
            .await
            .expect("the sampler");
        report.assert_within(self.quota_millis);
        report
    }
}

impl Drop for QuotaSampler {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Every status each DynamicWorkload of the namespace had: a victim recorded from its pods alone goes
// with its last pod, so what it said when it was preempted is read from a watch.

pub(crate) struct WorkloadHistory {
    pub(crate) seen: Arc<Mutex<BTreeMap<String, Vec<DynamicWorkloadStatus>>>>,
    /// Workloads seen deleted (for failure messages).
    pub(crate) deleted: Arc<Mutex<std::collections::BTreeSet<String>>>,
    pub(crate) task: tokio::task::JoinHandle<()>,
}

impl WorkloadHistory {
    /// Starts watching the namespace's DynamicWorkloads and returns once the watch has listed them.
    pub(crate) async fn start(env: &TestEnv) -> WorkloadHistory {
        let api: Api<DynamicWorkload> = env.workloads();
        let seen: Arc<Mutex<BTreeMap<String, Vec<DynamicWorkloadStatus>>>> = Arc::default();
        let deleted: Arc<Mutex<std::collections::BTreeSet<String>>> = Arc::default();
        let listed = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let (seen, deleted, listed) = (seen.clone(), deleted.clone(), listed.clone());
            async move {
                let mut events = watcher(api, watcher::Config::default())
                    .default_backoff()
                    .boxed();
                while let Some(event) = events.next().await {
                    let workload = match event {
                        Ok(watcher::Event::Apply(w) | watcher::Event::InitApply(w)) => w,
                        Ok(watcher::Event::InitDone) => {
                            listed.store(true, Ordering::SeqCst);
                            continue;
                        }
                        Ok(watcher::Event::Delete(w)) => {
                            deleted.lock().expect("history").insert(w.name_any());
                            continue;
                        }
                        _ => continue,
                    };
                    let Some(status) = workload.status.clone() else {
                        continue;
                    };
                    let mut seen = seen.lock().expect("history");
                    let statuses = seen.entry(workload.name_any()).or_default();
                    if statuses.last() != Some(&status) {
                        statuses.push(status);
                    }
                }
            }
        });
        wait_for(
            "the watch of DynamicWorkloads to start",
            Duration::from_secs(30),
            || async { listed.load(Ordering::SeqCst).then_some(()) },
        )
        .await;
        WorkloadHistory {
            seen,
            deleted,
            task,
        }
    }

    /// Waits until `workload` has shown `interruptedCount: 1` and the condition `Preempted` naming
    /// `preemptor` and the resources it needed, and returns that status.
    pub(crate) async fn wait_preempted(
        &self,
        workload: &str,
        preemptor: &str,
    ) -> DynamicWorkloadStatus {
        let deadline = tokio::time::Instant::now() + PREEMPTION_TIMEOUT;
        loop {
            let found = self
                .seen
                .lock()
                .expect("history")
                .get(workload)
                .and_then(|statuses| {
                    statuses
                        .iter()
                        .find(|s| preempted_by(s, preemptor))
                        .cloned()
                });
            if let Some(status) = found {
                return status;
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "timed out after {PREEMPTION_TIMEOUT:?} waiting for DynamicWorkload {workload} to show interruptedCount 1 and a Preempted condition naming {preemptor} and the cpu it needed; every status it had: {:?}",
                    self.summary(workload)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Fails if any workload was interrupted more often than distinct preemptors took its pods (a
    /// preemption storm: the same need planned again while its victims terminate, or a victim
    /// taken back and forth). Preemptors that arrive in different passes may each take one surplus
    /// pod of the same elastic workload: two interruptions, two preemptors, no storm.
    pub(crate) fn assert_no_workload_preempted_twice_by_one_preemptor(&self) {
        let seen = self.seen.lock().expect("history");
        for (name, statuses) in seen.iter() {
            let most = statuses
                .iter()
                .map(|s| s.interrupted_count)
                .max()
                .unwrap_or(0);
            let preemptors: std::collections::BTreeSet<&str> = statuses
                .iter()
                .filter_map(|s| s.last_preempted_by.as_deref())
                .collect();
            assert!(
                most <= 1 || most as usize <= preemptors.len(),
                "DynamicWorkload {name} was preempted {most} times in one run, by {preemptors:?}"
            );
        }
    }

    /// Whether any status seen (message or condition) mentions one of `needles` (lowercase).
    pub(crate) fn mentions(&self, needles: &[&str]) -> Option<String> {
        let seen = self.seen.lock().expect("history");
        seen.iter().find_map(|(name, statuses)| {
            statuses.iter().find_map(|s| {
                std::iter::once(&s.message)
                    .chain(s.conditions.iter().map(|c| &c.message))
                    .find(|text| contains_any(text, needles))
                    .map(|text| format!("DynamicWorkload {name}: {text}"))
            })
        })
    }

    pub(crate) fn summary(&self, workload: &str) -> Vec<String> {
        let seen = self.seen.lock().expect("history");
        let deleted = self.deleted.lock().expect("history").contains(workload);
        let statuses = seen.get(workload).into_iter().flatten().map(|s| {
            let preempted: Vec<&str> = s
                .conditions
                .iter()
                .filter(|c| c.type_ == "Preempted")
                .map(|c| c.message.as_str())
                .collect();
            format!(
                "interrupted {} phase {:?} Preempted {preempted:?}",
                s.interrupted_count, s.phase
            )
        });
        statuses
            .chain(deleted.then(|| "then deleted".to_string()))
            .collect()
    }
}

impl Drop for WorkloadHistory {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) fn preempted_by(status: &DynamicWorkloadStatus, preemptor: &str) -> bool {
    status.interrupted_count == 1
        && status.conditions.iter().any(|c| {
            c.type_ == "Preempted"
                && c.status == ConditionStatus::True
                && c.message.contains(preemptor)
                && c.message.contains("cpu")
        })
}

pub(crate) fn contains_any(text: &str, needles: &[&str]) -> bool {
    let text = text.to_lowercase();
    needles.iter().any(|n| text.contains(n))
}
