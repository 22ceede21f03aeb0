//! The dashboard at scale: a dashboard (sluice's own code, `sluice::dashboard`) whose caches hold a
//! synthetic cluster (10k DynamicWorkloads of 10 pods each by default, in 100 queues of 10
//! cohorts), served on loopback, looked at by N headless Chromium pages (Debian's chromium), one
//! workload changed every second. It prints, as a Markdown table: the server's time to build a
//! view, each page's first paint (navigation to the waiting-work table drawn), the live-update
//! latency (the change made to the page's DOM showing it, measured in the page), and the server's
//! CPU and RSS while the pages are open.
//!
//! The viewers log in with a real ServiceAccount token checked by the local cluster's API server
//! (KUBECONFIG: `hack/cluster.sh up`; the data is synthetic, the TokenReview and
//! SubjectAccessReviews are real). Usage:
//! `cargo build --release -p sluice-tools --bin dashboard_load && $CARGO_TARGET_DIR/release/dashboard_load`.

#[path = "../../../tests/support/browser.rs"]
#[allow(dead_code)]
mod browser;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher::Event;
use serde_json::json;
use sluice::api::{
    CapacityQueue, CapacityQueueStatus, DynamicWorkload, DynamicWorkloadStatus, PodSetStatus,
};
use sluice::dashboard::model::Scope;
use sluice::dashboard::{Dashboard, Feeds};
use tokio_util::sync::CancellationToken;

#[derive(Parser, Debug)]
struct Args {
    #[arg(long, default_value_t = 10_000)]
    workloads: usize,
    #[arg(long, default_value_t = 10)]
    pods_per_workload: i32,
    #[arg(long, default_value_t = 100)]
    queues: usize,
    #[arg(long, default_value_t = 10)]
    browsers: usize,
    /// How long the pages stay open while one workload changes every second.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
}

fn q(v: &str) -> Quantity {
    Quantity(v.to_string())
}

fn queue(i: usize) -> CapacityQueue {
    let spec = serde_json::from_value(json!({
        "quota": {"cpu": "1000", "memory": "4000Gi"},
        "cohort": format!("cohort-{}", i / 10),
    }))
    .expect("queue spec");
    let mut cq = CapacityQueue::new(&format!("q{i:03}"), spec);
    cq.status = Some(CapacityQueueStatus {
        usage: [("cpu".into(), q("500")), ("memory".into(), q("2000Gi"))].into(),
        reserved: [("cpu".into(), q("100"))].into(),
        pending_workloads: 50,
        admitted_workloads: 50,
        pending_pods: 500,
        admitted_pods: 500,
        ..Default::default()
    });
    cq
}

fn workload(i: usize, queues: usize, pods: i32, now: jiff::Timestamp) -> DynamicWorkload {
    let queue = format!("q{:03}", i % queues);
    let spec = serde_json::from_value(json!({
        "queueName": queue, "priority": (i % 3) as i32 * 100,
        "podSets": [{"name": "main", "minCount": 1, "maxCount": pods, "requests": {"cpu": "1", "memory": "4Gi"}}],
    }))
    .expect("workload spec");
    let mut w = DynamicWorkload::new(&format!("wl-{i}"), spec);
    w.metadata.namespace = Some(format!("team-{}", i % 50));
    let waiting = (i / queues).is_multiple_of(2);
    let position = (i / queues / 2 + 1) as i32;
    let at = (now - jiff::SignedDuration::from_secs((i % 3600) as i64)).to_string();
    w.status = Some(DynamicWorkloadStatus {
        pod_sets: vec![PodSetStatus {
            name: "main".into(),
            pending: if waiting { pods } else { 0 },
            running: if waiting { 0 } else { pods },
            ..Default::default()
        }],
        pending_pods: if waiting { pods } else { 0 },
        admitted_pods: if waiting { 0 } else { pods },
        position: waiting.then_some(position),
        reason: waiting.then(|| "Quota:cpu".to_string()),
        queued_since: waiting.then(|| at.clone()),
        admitted_at: (!waiting).then(|| at.clone()),
        message: if waiting {
            format!("needs {pods} cpu more in queue {queue}: 600/1000 cpu used")
        } else {
            format!("{pods} pod(s) admitted in queue {queue}")
        },
        ..Default::default()
    });
    w
}

fn fill(d: &Dashboard, feeds: &mut Feeds, args: &Args) {
    let now = jiff::Timestamp::now();
    d.apply_queue(feeds, &Event::Init);
    for i in 0..args.queues {
        d.apply_queue(feeds, &Event::InitApply(queue(i)));
    }
    d.apply_queue(feeds, &Event::InitDone);
    d.apply_workload(feeds, &Event::Init);
    for i in 0..args.workloads {
        let w = workload(i, args.queues, args.pods_per_workload, now);
        d.apply_workload(feeds, &Event::InitApply(w));
    }
    d.apply_workload(feeds, &Event::InitDone);
}

/// A token of a ServiceAccount that may list DynamicWorkloads everywhere (an operator).
async fn operator_token(client: &kube::Client) -> anyhow::Result<String> {
    let name = "sluice-dashboard-bench";
    let ssa = PatchParams::apply("sluice-dashboard-bench").force();
    let role: ClusterRole = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
        "rules": [{"apiGroups": ["sluice.dev"], "resources": ["dynamicworkloads"], "verbs": ["list"]}],
    }))?;
    Api::<ClusterRole>::all(client.clone())
        .patch(name, &ssa, &Patch::Apply(&role))
        .await?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "default"}],
    }))?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(name, &ssa, &Patch::Apply(&binding))
        .await?;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let sa: ServiceAccount = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name},
    }))?;
    sas.patch(name, &ssa, &Patch::Apply(&sa)).await?;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let answer = sas
        .create_token_request(name, &PostParams::default(), &request)
        .await?;
    answer
        .status
        .and_then(|s| s.token)
        .context("no token in the TokenRequest's answer")
}

/// utime + stime of this process, in seconds, and its RSS and peak RSS in MiB.
fn cpu_and_rss() -> (f64, f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    let kb = |key: &str| sluice_tools::proc_status_kib(key) as f64;
    (ticks / 100.0, kb("VmRSS:") / 1024.0, kb("VmHWM:") / 1024.0)
}

/// Where the pages' live updates spent their time (from the page's `window.sluiceTimings`).
#[derive(Default)]
struct Stages {
    /// From a change to the first update received after it.
    arrival: Vec<f64>,
    parse: Vec<f64>,
    draw: Vec<f64>,
}

impl Stages {
    fn add(&mut self, timings: &serde_json::Value, marks: &[i64]) {
        let rows: Vec<(f64, f64, f64)> = timings
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| {
                let t = t.as_array()?;
                Some((
                    t.first()?.as_f64()?,
                    t.get(1)?.as_f64()?,
                    t.get(2)?.as_f64()?,
                ))
            })
            .collect();
        // The page keeps its last 100 updates: only the marks since its first one count.
        let first = rows.first().map_or(f64::MAX, |r| r.0);
        for &mark in marks.iter().filter(|&&m| m as f64 >= first) {
            if let Some(r) = rows.iter().find(|r| r.0 >= mark as f64) {
                self.arrival.push(r.0 - mark as f64);
            }
        }
        for (_, parse, draw) in rows {
            self.parse.push(parse);
            self.draw.push(draw);
        }
    }

    fn sort(&mut self) {
        for v in [&mut self.arrival, &mut self.parse, &mut self.draw] {
            v.sort_by(f64::total_cmp);
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = kube::Client::try_default()
        .await
        .context("KUBECONFIG: hack/cluster.sh up")?;
    let token = operator_token(&client).await?;
    let (dashboard, mut feeds) = Dashboard::new(client, sluice::namespaces::Namespaces::none());
    let started = Instant::now();
    fill(&dashboard, &mut feeds, &args);
    println!(
        "filled {} workloads in {:?}",
        args.workloads,
        started.elapsed()
    );

    let mut builds = Vec::new();
    let mut bytes = 0;
    for _ in 0..5 {
        let t = Instant::now();
        bytes = serde_json::to_string(&dashboard.state(&Scope::All))?.len();
        builds.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    builds.sort_by(f64::total_cmp);

    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let shutdown = CancellationToken::new();
    tokio::spawn(sluice::dashboard::http::serve(
        addr,
        dashboard.clone(),
        shutdown.clone(),
    ));
    let url = format!("http://{addr}/#waiting");

    let mut pages = Vec::new();
    let mut first_paints = Vec::new();
    for i in 0..args.browsers {
        let mut page = browser::Browser::launch(&format!("bench{i}"), 1280, 900).await;
        page.goto(&url).await;
        page.wait_for(
            "the login form",
            Duration::from_secs(60),
            "!document.getElementById('login').hidden",
        )
        .await;
        let login = format!(
            "document.getElementById('token').value = {}; document.getElementById('login').requestSubmit(); true",
            serde_json::to_string(&token)?
        );
        page.eval(&login).await;
        let drawn = "document.querySelectorAll('[data-testid=waiting] tbody tr').length >= 500";
        page.wait_for("the waiting table", Duration::from_secs(60), drawn)
            .await;
        // First paint: a fresh navigation with the session cookie to the table drawn.
        page.goto("about:blank").await;
        let t = Instant::now();
        page.goto(&url).await;
        page.wait_for("the waiting table", Duration::from_secs(60), drawn)
            .await;
        first_paints.push(t.elapsed().as_secs_f64() * 1000.0);
        page.eval(
            r#"window.lat = []; window.lastMark = null;
               new MutationObserver(() => {
                 const m = document.getElementById('view-waiting').textContent.match(/mark-(\d+)/);
                 if (m && m[1] !== window.lastMark) { window.lastMark = m[1]; window.lat.push(Date.now() - Number(m[1])); }
               }).observe(document.getElementById('view-waiting'), {childList: true, subtree: true}); true"#,
        )
        .await;
        pages.push(page);
    }
    first_paints.sort_by(f64::total_cmp);

    let (cpu0, _, _) = cpu_and_rss();
    let window = Instant::now();
    let mut changed = workload(
        0,
        args.queues,
        args.pods_per_workload,
        jiff::Timestamp::now(),
    );
    let mut marks = Vec::new();
    for _ in 0..args.seconds {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now_ms = jiff::Timestamp::now().as_millisecond();
        marks.push(now_ms);
        if let Some(s) = changed.status.as_mut() {
            s.message = format!("mark-{now_ms} needs 10 cpu more in queue q000");
        }
        dashboard.apply_workload(&mut feeds, &Event::Apply(changed.clone()));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (cpu1, rss, peak) = cpu_and_rss();
    let cpu_share = (cpu1 - cpu0) / window.elapsed().as_secs_f64();

    let mut latencies = Vec::new();
    let mut heaps = Vec::new();
    let mut stages = Stages::default();
    for page in &mut pages {
        if let Some(v) = page.eval("window.sluiceTimings").await {
            stages.add(&v, &marks);
        }
        if let Some(v) = page.eval("window.lat").await {
            latencies.extend(
                v.as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|x| x.as_f64()),
            );
        }
        if let Some(v) = page
            .eval("performance.memory ? performance.memory.usedJSHeapSize : 0")
            .await
        {
            heaps.push(v.as_f64().unwrap_or(0.0) / 1_048_576.0);
        }
    }
    latencies.sort_by(f64::total_cmp);
    heaps.sort_by(f64::total_cmp);
    stages.sort();
    for page in pages {
        page.close().await;
    }
    shutdown.cancel();

    let rows: BTreeMap<&str, String> = [
        (
            "synthetic cluster",
            format!(
                "{} workloads x {} pods, {} queues in {} cohorts, 50 namespaces",
                args.workloads,
                args.pods_per_workload,
                args.queues,
                args.queues / 10
            ),
        ),
        (
            "view build + JSON (operator, all)",
            format!(
                "median {:.1} ms, max {:.1} ms; {} kB",
                percentile(&builds, 0.5),
                percentile(&builds, 1.0),
                bytes / 1024
            ),
        ),
        (
            "first paint (navigation to 500-row table)",
            format!(
                "median {:.0} ms, max {:.0} ms over {} pages",
                percentile(&first_paints, 0.5),
                percentile(&first_paints, 1.0),
                first_paints.len()
            ),
        ),
        (
            "live update (change to DOM)",
            format!(
                "p50 {:.0} ms, p95 {:.0} ms, max {:.0} ms ({} updates seen)",
                percentile(&latencies, 0.5),
                percentile(&latencies, 0.95),
                percentile(&latencies, 1.0),
                latencies.len()
            ),
        ),
        (
            "server CPU with the pages open",
            format!(
                "{:.1}% of one core ({} pages, 1 change/s, {} s)",
                cpu_share * 100.0,
                args.browsers,
                args.seconds
            ),
        ),
        ("server RSS", format!("{rss:.0} MiB (peak {peak:.0} MiB)")),
        (
            "live update, change to update received by the page",
            format!(
                "p50 {:.0} ms, p95 {:.0} ms",
                percentile(&stages.arrival, 0.5),
                percentile(&stages.arrival, 0.95)
            ),
        ),
        (
            "live update, in the page: JSON parse / drawing",
            format!(
                "p50 {:.1} / {:.1} ms, p95 {:.1} / {:.1} ms",
                percentile(&stages.parse, 0.5),
                percentile(&stages.draw, 0.5),
                percentile(&stages.parse, 0.95),
                percentile(&stages.draw, 0.95)
            ),
        ),
        (
            "page JS heap",
            format!(
                "median {:.1} MiB, max {:.1} MiB",
                percentile(&heaps, 0.5),
                percentile(&heaps, 1.0)
            ),
        ),
    ]
    .into_iter()
    .collect();
    println!("| measure | result |\n|---|---|");
    for (k, v) in rows {
        println!("| {k} | {v} |");
    }
    Ok(())
}
