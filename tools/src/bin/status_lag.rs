//! How far DynamicWorkload statuses lag their pods (issue 24, part 2): watches the pods and the
//! DynamicWorkloads of one namespace while a command (the load: `e2e_load ...`) runs, and for every
//! pod change that changes what a workload's status shows (its pods pending behind the gate,
//! admitted and not running, running, ended; summed over its pod sets) records when a status first
//! showed that state or a later one. After the command exits it keeps watching until every such
//! change is shown (or `--drain` seconds pass), then writes one JSON object to `--out`: the number
//! of changes and workloads, lag p50/p90/p99/max, and the changes never shown (counted in the
//! percentiles with their lag so far: a lower bound). Every workload of the run counts, not a
//! sample. Both watches are this process's, so the times compare (the watch delay of the
//! status is part of the lag, as a user watching it would see).
//!
//!   status_lag --namespace e2e-sluice --out lag.json -- e2e_load --mode sluice --namespace e2e-sluice ...
//!
//! The command's stdout and stderr are its own (inherited).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;
use kube::runtime::watcher::Event;
use kube::{Client, ResourceExt};
use serde_json::json;
use sluice::api::DynamicWorkload;
use sluice::integrations::workload_object_name;

#[derive(Parser, Debug)]
struct Args {
    /// The namespace of the run.
    #[arg(long)]
    namespace: String,
    /// Where the JSON result goes.
    #[arg(long)]
    out: std::path::PathBuf,
    /// After the command exits, wait at most this long for the statuses to catch up.
    #[arg(long, default_value_t = 120.0)]
    drain: f64,
    /// The load to run while watching.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// What a status shows of a workload's pods: pending (gated), admitted and not running, running,
/// ended.
type Counts = [i32; 4];

#[derive(Default)]
struct Workload {
    /// Each pod's state (an index into [`Counts`]).
    pods: HashMap<String, usize>,
    counts: Counts,
    /// States the pods reached that no status showed yet, with when (seconds from the start).
    unshown: Vec<(f64, Counts)>,
    /// What its status showed last.
    shown: Option<Counts>,
}

#[derive(Default)]
struct Tracker {
    workloads: HashMap<String, Workload>,
    lags: Vec<f64>,
    /// (seconds from the start, lag) of every change shown, for the lag over time.
    shown_at: Vec<(f64, f64)>,
    status_events: u64,
}

fn pod_state(pod: &Pod) -> usize {
    let gated = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name.starts_with("sluice.dev/")));
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    match phase {
        Some("Succeeded" | "Failed") => 3,
        _ if gated => 0,
        Some("Running") => 2,
        _ => 1,
    }
}

fn workload_of(pod: &Pod) -> String {
    let raw = pod
        .labels()
        .get("sluice.dev/workload")
        .cloned()
        .unwrap_or_else(|| pod.name_any());
    workload_object_name(&raw)
}

impl Tracker {
    fn pod(&mut self, t: f64, pod: &Pod, gone: bool) {
        let state = (!gone).then(|| pod_state(pod));
        let w = self.workloads.entry(workload_of(pod)).or_default();
        let before = w.counts;
        if let Some(old) = w.pods.remove(&pod.name_any()) {
            w.counts[old] -= 1;
        }
        if let Some(new) = state {
            w.pods.insert(pod.name_any(), new);
            w.counts[new] += 1;
        }
        if w.counts == before {
            return;
        }
        if w.shown == Some(w.counts) {
            // The status showed this before the pods did (a pass counts a pod admitted as it
            // ungates it): shown at once, and so is every state before it.
            for (since, _) in w.unshown.drain(..) {
                self.lags.push(t - since);
                self.shown_at.push((t, t - since));
            }
            self.lags.push(0.0);
            self.shown_at.push((t, 0.0));
        } else {
            w.unshown.push((t, w.counts));
        }
    }

    fn status(&mut self, t: f64, dwl: &DynamicWorkload) {
        self.status_events += 1;
        let Some(status) = dwl.status.as_ref() else {
            return;
        };
        let mut counts = [0; 4];
        for set in &status.pod_sets {
            counts[0] += set.pending;
            counts[1] += set.admitted;
            counts[2] += set.running;
            counts[3] += set.finished;
        }
        let w = self.workloads.entry(dwl.name_any()).or_default();
        w.shown = Some(counts);
        // The newest state of the pods this status shows: it and every state before it are shown.
        if let Some(j) = w.unshown.iter().rposition(|(_, c)| *c == counts) {
            for (since, _) in w.unshown.drain(..=j) {
                self.lags.push(t - since);
                self.shown_at.push((t, t - since));
            }
        }
    }

    fn unshown(&self) -> usize {
        self.workloads.values().map(|w| w.unshown.len()).sum()
    }

    fn result(&self, t: f64) -> serde_json::Value {
        let mut all = self.lags.clone();
        let censored: Vec<f64> = self
            .workloads
            .values()
            .flat_map(|w| w.unshown.iter().map(move |(since, _)| t - since))
            .collect();
        all.extend(&censored);
        all.sort_by(f64::total_cmp);
        let q = |p: f64| -> f64 {
            if all.is_empty() {
                return 0.0;
            }
            let i = ((p * all.len() as f64).ceil() as usize).clamp(1, all.len()) - 1;
            (all[i] * 1000.0).round() / 1000.0
        };
        // The worst lag of the changes shown in each second of the run.
        let mut per_second: Vec<f64> = Vec::new();
        for (at, lag) in &self.shown_at {
            let s = *at as usize;
            if per_second.len() <= s {
                per_second.resize(s + 1, 0.0);
            }
            per_second[s] = per_second[s].max((lag * 1000.0).round() / 1000.0);
        }
        json!({
            "changes": all.len(),
            "changes_never_shown": censored.len(),
            "workloads": self.workloads.len(),
            "status_events": self.status_events,
            "lag_p50_s": q(0.50),
            "lag_p90_s": q(0.90),
            "lag_p99_s": q(0.99),
            "lag_max_s": q(1.0),
            "lag_mean_s": if all.is_empty() { 0.0 } else { all.iter().sum::<f64>() / all.len() as f64 },
            "worst_lag_shown_per_second": per_second,
        })
    }
}

enum Seen {
    Pod(Instant, Box<Pod>, bool),
    Status(Instant, Box<DynamicWorkload>),
    Ready,
}

/// Forwards one watch's objects to `tx`, and `Seen::Ready` once its first list is complete.
fn forward<K, F>(
    api: Api<K>,
    tx: tokio::sync::mpsc::UnboundedSender<Seen>,
    wrap: F,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned
        + Send
        + 'static,
    K::DynamicType: Default,
    F: Fn(Instant, K, bool) -> Seen + Send + 'static,
{
    tokio::spawn(async move {
        let mut events = Box::pin(watcher::watcher(api, watcher::Config::default()));
        while let Some(ev) = events.next().await {
            let now = Instant::now();
            let sent = match ev {
                Ok(Event::Apply(o) | Event::InitApply(o)) => tx.send(wrap(now, o, false)),
                Ok(Event::Delete(o)) => tx.send(wrap(now, o, true)),
                Ok(Event::InitDone) => tx.send(Seen::Ready),
                Ok(Event::Init) => Ok(()),
                Err(e) => {
                    eprintln!("status_lag: watch: {e}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    Ok(())
                }
            };
            if sent.is_err() {
                return;
            }
        }
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client = Client::try_default().await?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &args.namespace);
    let dwls: Api<DynamicWorkload> = Api::namespaced(client.clone(), &args.namespace);
    let watches = [
        forward(pods, tx.clone(), |t, p, gone| {
            Seen::Pod(t, Box::new(p), gone)
        }),
        forward(dwls, tx, |t, d, _| Seen::Status(t, Box::new(d))),
    ];
    // Both watches listed before the load starts: no change is missed.
    let mut ready = 0;
    while ready < 2 {
        match rx.recv().await {
            Some(Seen::Ready) => ready += 1,
            Some(_) => {}
            None => anyhow::bail!("a watch ended before its first list"),
        }
    }
    let start = Instant::now();
    let mut child = tokio::process::Command::new(&args.command[0])
        .args(&args.command[1..])
        .spawn()?;
    let mut tracker = Tracker::default();
    let secs = |at: Instant| at.saturating_duration_since(start).as_secs_f64();
    let mut exited = None;
    let mut drain_until = None;
    loop {
        let tick = tokio::time::sleep(Duration::from_millis(200));
        tokio::select! {
            seen = rx.recv() => match seen {
                Some(Seen::Pod(at, p, gone)) => tracker.pod(secs(at), &p, gone),
                Some(Seen::Status(at, d)) => tracker.status(secs(at), &d),
                Some(Seen::Ready) => {}
                None => break,
            },
            status = child.wait(), if exited.is_none() => {
                let status = status?;
                eprintln!("status_lag: the load exited ({status}) at {:.1}s; {} changes not shown yet", secs(Instant::now()), tracker.unshown());
                exited = Some(status);
                drain_until = Some(Instant::now() + Duration::from_secs_f64(args.drain));
            }
            _ = tick => {}
        }
        if let Some(until) = drain_until
            && (tracker.unshown() == 0 || Instant::now() >= until)
        {
            break;
        }
    }
    for w in watches {
        w.abort();
    }
    let end = secs(Instant::now());
    let mut result = tracker.result(end);
    result["load_exit_ok"] = json!(exited.is_some_and(|s| s.success()));
    result["caught_up_s"] = json!((end * 1000.0).round() / 1000.0);
    std::fs::write(&args.out, serde_json::to_string(&result)?)?;
    eprintln!(
        "status_lag: {} changes of {} workloads, lag p50 {} s p99 {} s max {} s, {} never shown",
        result["changes"],
        result["workloads"],
        result["lag_p50_s"],
        result["lag_p99_s"],
        result["lag_max_s"],
        result["changes_never_shown"]
    );
    Ok(())
}
