//! The server-side cost of one pod AdmissionReview through the router (decode, classify, patch,
//! encode), without TLS or sockets: the part of the p99 budget this crate controls.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use serde_json::json;
use sluice_webhooks::pods::wire::PartialPod;
use sluice_webhooks::{
    AdmissionHandler, GateSettings, PodClassifier, Webhooks, mutate_pod, validate_pod,
};
use tower::ServiceExt;

struct QueueLabel;
impl PodClassifier for QueueLabel {
    fn classify(&self, pod: &Pod) -> Option<BTreeMap<String, String>> {
        let queue = pod.metadata.labels.as_ref()?.get("sluice.dev/queue")?;
        Some(BTreeMap::from([
            ("sluice.dev/queue".to_string(), queue.clone()),
            ("sluice.dev/pod-set".to_string(), "executor".to_string()),
        ]))
    }
}

/// A Spark executor pod of realistic size (a few KiB).
fn review(operation: &str) -> Vec<u8> {
    let env: Vec<_> = (0..30)
        .map(|i| json!({"name": format!("SPARK_ENV_{i}"), "value": format!("value-{i}-with-some-length")}))
        .collect();
    let pod = json!({
        "metadata": {"name": "etl-exec-7", "namespace": "research", "labels": {"sluice.dev/queue": "research", "spark-app-selector": "spark-0123456789", "spark-role": "executor"}},
        "spec": {"containers": [{"name": "executor", "image": "spark:3.5", "env": env, "resources": {"requests": {"cpu": "1", "memory": "4Gi"}}}]}
    });
    let mut gated = pod.clone();
    gated["spec"]["schedulingGates"] = json!([{"name": "sluice.dev/admission"}]);
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "7f0b2891-916f-4ed6-b7cd-27bff1815a8c",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "research", "name": "etl-exec-7", "operation": operation,
            "userInfo": {"username": "system:serviceaccount:research:spark"},
            "object": if operation == "CREATE" { pod } else { gated.clone() },
            "oldObject": if operation == "CREATE" { serde_json::Value::Null } else { gated },
            "dryRun": false,
        }
    }))
    .unwrap_or_default()
}

/// The pod webhooks as they were before the partial decode: the whole pod decoded into `Pod`
/// (a handler registered through `Webhooks::handler::<Pod>` decodes its type whole).
struct FullMutate;
impl AdmissionHandler<Pod> for FullMutate {
    fn admit(&self, request: &AdmissionRequest<Pod>) -> AdmissionResponse {
        mutate_pod(request, &QueueLabel, &GateSettings::default())
    }
}
struct FullValidate;
impl AdmissionHandler<Pod> for FullValidate {
    fn admit(&self, request: &AdmissionRequest<Pod>) -> AdmissionResponse {
        validate_pod(request, &GateSettings::default())
    }
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread().build();
    let Ok(runtime) = runtime else { return };
    let router = Webhooks::new(GateSettings::default(), Arc::new(QueueLabel))
        .handler::<Pod>("/mutate-pods-full", "mutate_full", Arc::new(FullMutate))
        .handler::<Pod>(
            "/validate-pods-full",
            "validate_full",
            Arc::new(FullValidate),
        )
        .router();
    // The share of the decoding: the whole pod into k8s-openapi's Pod (before), and only what the
    // pod webhooks judge (PartialPod, what /mutate-pods and /validate-pods decode now).
    let create = review("CREATE");
    c.bench_function("decode_pod_review_full", |b| {
        b.iter(|| {
            let review: Result<kube::core::admission::AdmissionReview<Pod>, _> =
                serde_json::from_slice(black_box(&create));
            black_box(review.ok());
        })
    });
    c.bench_function("decode_pod_review_partial", |b| {
        b.iter(|| {
            let review: Result<kube::core::admission::AdmissionReview<PartialPod>, _> =
                serde_json::from_slice(black_box(&create));
            black_box(review.ok());
        })
    });
    for (name, path, body) in [
        (
            "mutate_pods_full_decode",
            "/mutate-pods-full",
            review("CREATE"),
        ),
        ("mutate_pods", "/mutate-pods", review("CREATE")),
        (
            "validate_pods_full_decode",
            "/validate-pods-full",
            review("UPDATE"),
        ),
        ("validate_pods", "/validate-pods", review("UPDATE")),
    ] {
        c.bench_function(name, |b| {
            b.iter(|| {
                let request = Request::post(path)
                    .header("content-type", "application/json")
                    .body(Body::from(body.clone()));
                let Ok(request) = request else { return };
                let response = runtime.block_on(router.clone().oneshot(request));
                black_box(response.map(|r| r.status()).ok());
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
