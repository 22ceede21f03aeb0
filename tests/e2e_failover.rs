//! Failover of the controller between two replicas sharing one Lease (issue 23), on the local
//! cluster: replica 1 is the `sluice serve --local` of `hack/cluster.sh up --with-sluice`; this test
//! starts replica 2 itself (the same binary, its own ports, log `logs/sluice-2.log` of the cluster
//! state) and stops it at the end. Both register the same webhook URL, replica 1's: the webhooks
//! stay with replica 1 (a non-leader's webhook gates, it admits nothing at creation) while
//! leadership of the controller moves between them.
//!
//! The leader is killed with SIGKILL twice (replica 1, then replica 2): the other replica takes
//! over within the lease duration plus the renew period (it polls the Lease every renew period),
//! the Lease names it with one more `leaseTransitions`, which its metric
//! `sluice_leader_lease_transitions` reports. Both replicas' metrics are sampled every 100 ms: at
//! no sample do both lead, a replica's admission counters grow only across samples in which it
//! led, and admitted pods never hold more than the quota. While replica 2 leads, replica 1's
//! webhook refuses a pod joining a workload whose ledger names another queue.
//! Its own test binary: it kills the shared sluice process, which other tests must not see.

mod support;

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use serde_json::json;
use support::*;

/// `sluice serve`'s defaults, which replica 1 runs with.
const LEASE_DURATION: Duration = Duration::from_secs(15);
const RENEW_PERIOD: Duration = Duration::from_secs(2);
const QUOTA_MILLIS: i64 = 3000;

/// What one replica's metrics said at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
struct ReplicaSample {
    leader: bool,
    term: i64,
    /// Pods admitted by passes and at creation, every queue.
    admitted: f64,
}

#[derive(Clone, Debug)]
struct Sample {
    at: Instant,
    replicas: [Option<ReplicaSample>; 2],
}

/// Scrapes one replica's metrics endpoint (None while it is down).
async fn scrape(addr: &str) -> Option<ReplicaSample> {
    let body = tokio::time::timeout(Duration::from_secs(2), metrics_text(addr))
        .await
        .ok()??;
    let mut values: HashMap<&str, f64> = HashMap::new();
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series);
        if let Ok(v) = value.trim().parse::<f64>() {
            *values.entry(name).or_default() += v;
        }
    }
    Some(ReplicaSample {
        leader: *values.get("sluice_leader")? == 1.0,
        term: *values.get("sluice_leader_lease_transitions")? as i64,
        admitted: values
            .get("sluice_admitted_pods_total")
            .copied()
            .unwrap_or(0.0)
            + values
                .get("sluice_admitted_at_creation_pods_total")
                .copied()
                .unwrap_or(0.0),
    })
}

/// Samples both replicas every 100 ms until aborted.
fn sample_replicas(addrs: [String; 2]) -> (Arc<Mutex<Vec<Sample>>>, tokio::task::JoinHandle<()>) {
    let samples = Arc::new(Mutex::new(Vec::new()));
    let out = samples.clone();
    let task = tokio::spawn(async move {
        loop {
            let (a, b) = tokio::join!(scrape(&addrs[0]), scrape(&addrs[1]));
            let sample = Sample {
                at: Instant::now(),
                replicas: [a, b],
            };
            samples.lock().expect("samples").push(sample);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    (out, task)
}

/// Replica 2: the cluster's sluice binary with its own ports, the same Lease and webhook URL.
struct Replica2 {
    child: Child,
    identity: String,
    metrics_addr: String,
}

impl Drop for Replica2 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn start_replica2() -> Replica2 {
    let state = cluster_state();
    let webhook_addr = std::env::var("SLUICE_WEBHOOK_ADDR")
        .expect("SLUICE_WEBHOOK_ADDR (hack/cluster.sh env, with --with-sluice)");
    let identity = unique("failover-replica-2");
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let log_path = state.join("logs/sluice-2.log");
    let log =
        std::fs::File::create(&log_path).unwrap_or_else(|e| panic!("{}: {e}", log_path.display()));
    let err = log.try_clone().expect("log file handle");
    let child = Command::new(state.join("sluice"))
        .args(["serve", "--local", "--no-install", "--identity", &identity])
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--metrics-listen", &metrics_addr])
        .args(["--webhook-url", &format!("https://{webhook_addr}")])
        .env("KUBECONFIG", state.join("kubeconfig"))
        .env("RUST_LOG", "info")
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(err))
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", state.join("sluice").display()));
    Replica2 {
        child,
        identity,
        metrics_addr,
    }
}

fn replica1_pid() -> i32 {
    let path = cluster_state().join("pids/sluice.pid");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (hack/cluster.sh up --with-sluice)", path.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn sigkill(pid: u32) {
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success(), "kill -KILL {pid}");
}

fn restart_replica1() {
    let status = Command::new(repo_root().join("hack/cluster.sh"))
        .args(["up", "--with-sluice", "--no-build"])
        .status()
        .expect("run hack/cluster.sh up --with-sluice --no-build");
    assert!(status.success(), "hack/cluster.sh up --with-sluice failed");
}

async fn lease() -> (Option<String>, i32) {
    let api: kube::Api<Lease> = kube::Api::namespaced(client().await, "sluice-system");
    let lease = api
        .get("sluice-controller")
        .await
        .expect("the Lease sluice-system/sluice-controller");
    let spec = lease.spec.unwrap_or_default();
    (spec.holder_identity, spec.lease_transitions.unwrap_or(0))
}

/// Waits until replica `which` (0 or 1) leads, returning how long that took and its term.
async fn wait_leading(samples: &Arc<Mutex<Vec<Sample>>>, which: usize, since: Instant) -> i64 {
    let bound = LEASE_DURATION + 2 * RENEW_PERIOD + Duration::from_secs(5);
    let (at, term) = wait_for(&format!("replica {} to lead", which + 1), bound, || async {
        let samples = samples.lock().expect("samples");
        samples
            .iter()
            .filter(|s| s.at >= since)
            .find_map(|s| s.replicas[which].filter(|r| r.leader && r.term >= 0))
            .map(|r| {
                let at = samples
                    .iter()
                    .find(|s| s.at >= since && s.replicas[which] == Some(r))
                    .map(|s| s.at);
                (at, r.term)
            })
    })
    .await;
    let took = at.map(|at| at.duration_since(since)).unwrap_or_default();
    eprintln!(
        "replica {} leads (leaseTransitions {term}) {:.1} s after the kill",
        which + 1,
        took.as_secs_f64()
    );
    // The follower takes over a lease duration after it last saw the lease change, and it
    // looks once per renew period: the old leader renewed at most a renew period before dying.
    assert!(
        took <= LEASE_DURATION + 2 * RENEW_PERIOD,
        "replica {} took {took:?} to take over, more than the lease duration {LEASE_DURATION:?} plus two renew periods",
        which + 1
    );
    term
}

/// Ends every Running admitted pod the kwok nodes have not been told to end yet.
async fn end_running(env: &TestEnv, at_most: usize) -> usize {
    let mut ended = 0;
    for p in holding(&env.list_pods().await) {
        if ended < at_most
            && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            && p.annotations().get(KWOK_PHASE_ANNOTATION).is_none()
        {
            end_pod(&env.pods(), &p.name_any(), "Succeeded").await;
            ended += 1;
        }
    }
    ended
}

/// Ends `n` Running admitted pods, polling until enough of them run.
async fn end_n(env: &TestEnv, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut left = n;
    while left > 0 {
        left -= end_running(env, left).await;
        assert!(
            Instant::now() < deadline,
            "{left} of {n} admitted pods to end never ran"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Checks the samples: never two leaders, and every admission counted by a replica across two
/// samples in which it led in at least one (its term stands in the sample).
fn check_samples(samples: &[Sample]) -> (usize, [f64; 2]) {
    let mut admitted_while_leading = [0.0; 2];
    for s in samples {
        let leaders = s.replicas.iter().flatten().filter(|r| r.leader).count();
        assert!(leaders <= 1, "two replicas led at once: {s:?}");
    }
    for pair in samples.windows(2) {
        for (which, total) in admitted_while_leading.iter_mut().enumerate() {
            let (Some(a), Some(b)) = (pair[0].replicas[which], pair[1].replicas[which]) else {
                continue;
            };
            // A restarted process counts from zero again.
            if b.admitted > a.admitted {
                assert!(
                    a.leader || b.leader,
                    "replica {} admitted {} pods while it did not lead: {:?} -> {:?}",
                    which + 1,
                    b.admitted - a.admitted,
                    pair[0],
                    pair[1]
                );
                *total += b.admitted - a.admitted;
            }
        }
    }
    (samples.len(), admitted_while_leading)
}

// Long: one scenario, step by step (two failovers, each with its checks).
/// Replica 1's webhook, while replica 2 leads, refuses a pod joining a workload whose ledger names
/// another queue: a replica that does not lead knows the workload's queue from its watch of the
/// DynamicWorkloads (it has no pass of its own).
async fn follower_refuses_a_pod_joining_another_queues_workload(env: &mut TestEnv) {
    let ledger_queue = env.queue("lq", json!({"cpu": "1"}), "BestEffortFIFO").await;
    let other = env
        .queue("other", json!({"cpu": "1"}), "BestEffortFIFO")
        .await;
    let joined = |name: &str, queue: &str| {
        with_labels(pod(name, queue, "1"), &[("sluice.dev/workload", "w")])
    };
    env.create_pod(joined("w-first", &ledger_queue)).await;
    env.wait_workload(
        "w",
        "w's ledger, naming its queue",
        Duration::from_secs(60),
        |ledger| ledger.spec.queue_name == ledger_queue,
    )
    .await;
    // The ledger reaches replica 1 by its watch a moment after the API server has it: a pod the
    // webhook let in meanwhile is deleted and asked again (before the fix, every one was let in).
    let refusal = wait_for(
        "replica 1 to refuse the intruder",
        Duration::from_secs(30),
        || async {
            match env
                .pods()
                .create(&Default::default(), &joined("w-intruder", &other))
                .await
            {
                Err(kube::Error::Api(e)) => Some(e.message),
                Ok(_) => {
                    let _ = env.pods().delete("w-intruder", &Default::default()).await;
                    None
                }
                Err(_) => None,
            }
        },
    )
    .await;
    assert!(
        refusal.contains(&format!("{other:?}")) && refusal.contains(&format!("{ledger_queue:?}")),
        "the refusal names both queues: {refusal}"
    );
}

#[tokio::test]
async fn the_other_replica_takes_over_a_killed_leader_and_two_never_admit_at_once() {
    let mut env = env_or_skip!("failover");
    let r1_metrics = std::env::var("SLUICE_METRICS_ADDR")
        .expect("SLUICE_METRICS_ADDR (hack/cluster.sh env, with --with-sluice)");
    let mut r2 = start_replica2();
    let (samples, sampler) = sample_replicas([r1_metrics, r2.metrics_addr.clone()]);
    wait_for(
        "replica 2 to serve its metrics",
        Duration::from_secs(60),
        || async { scrape(&r2.metrics_addr).await.filter(|r| !r.leader) },
    )
    .await;
    let (holder, first_term) = lease().await;
    assert_ne!(
        holder.as_deref(),
        Some(r2.identity.as_str()),
        "replica 1 leads first"
    );

    let queue = env.queue("q", json!({"cpu": "3"}), "BestEffortFIFO").await;
    let (peak, watch_task) = watch_usage_selected(
        env.pods(),
        kube::runtime::watcher::Config::default().labels(&format!("sluice.dev/queue={queue}")),
    );
    for i in 0..12 {
        env.create_pod(pod(&format!("a{i:02}"), &queue, "1")).await;
    }
    env.wait_queue_counts(&queue, 9, 3).await;

    // 1. Kill replica 1, the leader, right after ending a pod: replica 2 takes over.
    end_n(&env, 1).await;
    let killed_1 = Instant::now();
    sigkill(u32::try_from(replica1_pid()).expect("a pid"));
    end_n(&env, 1).await;
    let term_2 = wait_leading(&samples, 1, killed_1).await;
    let (holder, transitions) = lease().await;
    assert_eq!(holder.as_deref(), Some(r2.identity.as_str()));
    assert_eq!(
        i64::from(transitions),
        term_2,
        "replica 2's metric names the Lease's term"
    );
    assert_eq!(
        transitions,
        first_term + 1,
        "one transition: replica 1 to replica 2"
    );
    // Replica 2 admits into the room the ended pods left (the webhooks are down meanwhile).
    env.wait_queue_counts(&queue, 7, 3).await;

    // 2. Replica 1 back as a follower (its webhook gates, replica 2's controller admits).
    restart_replica1();
    for i in 0..4 {
        env.create_pod(pod(&format!("b{i:02}"), &queue, "1")).await;
    }
    end_n(&env, 2).await;
    env.wait_queue_counts(&queue, 9, 3).await;
    follower_refuses_a_pod_joining_another_queues_workload(&mut env).await;

    // 3. Kill replica 2, now the leader: replica 1 takes over.
    let killed_2 = Instant::now();
    sigkill(r2.child.id());
    let _ = r2.child.wait();
    end_n(&env, 1).await;
    let term_1 = wait_leading(&samples, 0, killed_2).await;
    let (holder, transitions) = lease().await;
    assert_ne!(holder.as_deref(), Some(r2.identity.as_str()));
    assert_eq!(i64::from(transitions), term_1);
    assert_eq!(i64::from(transitions), term_2 + 1);

    // Every pod admitted and ended in the end, by replica 1.
    wait_for(
        "every pod to be admitted and end",
        Duration::from_secs(180),
        || async {
            end_running(&env, usize::MAX).await;
            let pods = env.list_pods().await;
            (pods.len() == 17 && pods.iter().all(is_ended)).then_some(())
        },
    )
    .await;
    sampler.abort();
    watch_task.abort();

    let samples = samples.lock().expect("samples").clone();
    let (count, admitted) = check_samples(&samples);
    eprintln!(
        "{count} samples; admissions seen while leading: replica 1 {}, replica 2 {}",
        admitted[0], admitted[1]
    );
    assert!(admitted[1] >= 2.0, "replica 2 admitted during its term");
    let peak = *peak.lock().expect("peak");
    assert!(
        peak <= QUOTA_MILLIS,
        "admitted pods held {peak}m cpu, over the 3 cpu quota"
    );
    assert!(peak >= 1000, "the usage watch saw admitted pods");
    env.cleanup().await;
}
