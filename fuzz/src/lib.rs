//! What the fuzz targets share: sluice's webhooks built as `sluice serve` builds them
//! (`sluice::serve::webhook_routes`, the real classifier and admission at creation) over fixture
//! queues and namespaces, one request per input, and the slowest input's time.
#![forbid(unsafe_code)]

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use cpu_time::ThreadTime;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, header};
use http_body_util::BodyExt;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use sluice::api::CapacityQueue;
use tower::ServiceExt;

/// Every webhook `sluice serve` serves, over two queues ("q": 8 cpu and 16Gi with room left for admission at creation;
/// "capped": maxPriority 10, withinQueue preemption) and namespaces "ns" (default queue "q"),
/// "plain" (none). Built once per process.
pub fn routes() -> &'static Router {
    static ROUTES: OnceLock<Router> = OnceLock::new();
    ROUTES.get_or_init(|| {
        let (queues, mut writer) = reflector::store::<CapacityQueue>();
        for queue in [
            serde_json::json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
                "metadata": {"name": "q"},
                "spec": {"quota": {"cpu": "8", "memory": "16Gi"}}}),
            serde_json::json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "CapacityQueue",
                "metadata": {"name": "capped"},
                "spec": {"quota": {"cpu": "2"}, "preemption": {"maxPriority": 10}}}),
        ] {
            let queue: CapacityQueue = serde_json::from_value(queue).expect("fixture queue");
            writer.apply_watcher_event(&Event::Apply(queue));
        }
        let inputs = sluice::serve::WebhookInputs {
            queues,
            namespaces: sluice::namespaces::testing::namespaces(&[
                ("ns", &[(sluice::api::DEFAULT_QUEUE_LABEL, "q")]),
                ("plain", &[]),
            ]),
            at_creation: std::sync::Arc::new(
                sluice::queue::at_creation::fixture::open_with_rooms(&[
                    ("q", &[("cpu", 6_000), ("memory", 8 << 30)]),
                    ("capped", &[("cpu", 2_000)]),
                ]),
            ),
            // Every mount exists: the ScavengerJob validator's other checks are reached.
            mounts: sluice::scavenger::mounts::Mounts::none(),
            ledgers: Default::default(),
        };
        sluice::serve::webhook_routes(&inputs, "system:serviceaccount:sluice-system:sluice")
            .router()
    })
}

/// One POST of `body` to `path`, answered in full (status and body read), on a current-thread
/// runtime kept for the process.
pub fn post(path: &str, body: &[u8]) {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a tokio runtime")
    });
    let request = Request::post(path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_vec()))
        .expect("a request");
    runtime.block_on(async {
        let response = routes()
            .clone()
            .oneshot(request)
            .await
            .expect("the router never fails");
        let _ = response.into_body().collect().await;
    });
}

/// Runs `one` on an input and keeps the slowest time seen; a new slowest is written (microseconds
/// and input length) to `$SLUICE_FUZZ_SLOWEST`, which hack/fuzz.sh reads after the run. The time is
/// the thread's CPU time: on a loaded machine wall time also counts the moments the thread was
/// not running, which say nothing about the input (libFuzzer's -timeout bounds the wall time).
pub fn timed(input_len: usize, one: impl FnOnce()) {
    static SLOWEST_US: AtomicU64 = AtomicU64::new(0);
    let started = ThreadTime::now();
    one();
    let took = started.elapsed().as_micros() as u64;
    if took > SLOWEST_US.fetch_max(took, Ordering::Relaxed)
        && let Some(path) = std::env::var_os("SLUICE_FUZZ_SLOWEST")
    {
        let _ = std::fs::write(path, format!("{took} {input_len}\n"));
    }
}
