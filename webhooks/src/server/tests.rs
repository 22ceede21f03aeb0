//! The HTTP layer driven through the router, without TLS.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::http::{Request, header};
use base64::Engine;
use http_body_util::BodyExt;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::*;

const UID: &str = "7f0b2891-916f-4ed6-b7cd-27bff1815a8c";

#[path = "../../tests/support/queue_label.rs"]
mod queue_label;
use queue_label::QueueLabel;

/// Denies every application whose name starts with "bad".
struct NoBadApplications;
impl ApplicationHandler for NoBadApplications {
    fn name(&self) -> &'static str {
        "validate_applications"
    }
    fn admit(&self, request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        let answer = AdmissionResponse::from(request);
        if request.name.starts_with("bad") {
            answer.deny("bad name")
        } else {
            answer
        }
    }
}

fn webhooks(ready: Arc<AtomicBool>, metrics: WebhookMetrics) -> Router {
    Webhooks::new(GateSettings::default(), Arc::new(QueueLabel))
        .readiness(ready)
        .metrics(metrics)
        .max_body_bytes(64 * 1024)
        .application("/validate-applications", Arc::new(NoBadApplications))
        .router()
}

fn app() -> Router {
    webhooks(Arc::new(AtomicBool::new(true)), WebhookMetrics::default())
}

fn pod_review(operation: &str, object: Value, old: Option<Value>, user: &str) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": UID,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "research", "name": "etl-7", "operation": operation,
            "userInfo": {"username": user},
            "object": object, "oldObject": old, "dryRun": false, "options": null,
        }
    })
}

fn gated_pod(gated: bool) -> Value {
    let mut pod = json!({"metadata": {"name": "etl-7", "namespace": "research", "labels": {"sluice.dev/queue": "research"}}, "spec": {"containers": []}});
    if gated {
        pod["spec"]["schedulingGates"] = json!([{"name": "sluice.dev/admission"}]);
    }
    pod
}

async fn call(
    app: Router,
    path: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> (StatusCode, String, Vec<u8>) {
    let mut request = Request::post(path);
    if let Some(content_type) = content_type {
        request = request.header(header::CONTENT_TYPE, content_type);
    }
    let response = app
        .oneshot(request.body(Body::from(body)).expect("request"))
        .await
        .expect("response");
    let status = response.status();
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
        .to_vec();
    (status, content_type, body)
}

fn json_body(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("json")
}

#[tokio::test]
async fn a_governed_pod_is_answered_with_a_base64_json_patch_and_its_uid() {
    let pod = json!({"metadata": {"name": "etl-7", "namespace": "research", "labels": {"sluice.dev/queue": "research"}}, "spec": {"containers": []}});
    let (status, content_type, body) = call(
        app(),
        "/mutate-pods",
        Some("application/json; charset=utf-8"),
        json_body(&pod_review("CREATE", pod.clone(), None, "alice")),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(content_type, "application/json");
    let answer: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["kind"], "AdmissionReview");
    let response = &answer["response"];
    assert_eq!(response["uid"], UID);
    assert_eq!(response["allowed"], true);
    assert_eq!(response["patchType"], "JSONPatch");
    let encoded = response["patch"]
        .as_str()
        .expect("the patch is a base64 string");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .expect("base64");
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).expect("a JSON patch");
    let mut patched = pod;
    json_patch::patch(&mut patched, &patch).expect("applies");
    assert_eq!(
        patched["spec"]["schedulingGates"],
        json!([{"name": "sluice.dev/admission"}])
    );
}

#[tokio::test]
async fn an_ungoverned_pod_is_allowed_without_a_patch() {
    let pod = json!({"metadata": {"name": "web"}, "spec": {"containers": []}});
    let (status, _, body) = call(
        app(),
        "/mutate-pods",
        Some("application/json"),
        json_body(&pod_review("CREATE", pod, None, "alice")),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let answer: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(answer["response"]["allowed"], true);
    assert!(answer["response"].get("patch").is_none());
    assert!(answer["response"].get("patchType").is_none());
    assert!(answer["response"].get("status").is_none());
}

#[tokio::test]
async fn removing_the_gate_is_denied_with_403_and_a_message() {
    let review = pod_review("UPDATE", gated_pod(false), Some(gated_pod(true)), "alice");
    let (status, _, body) = call(
        app(),
        "/validate-pods",
        Some("application/json"),
        json_body(&review),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let answer: Value = serde_json::from_slice(&body).expect("json");
    let response = &answer["response"];
    assert_eq!(response["uid"], UID);
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 403);
    assert_eq!(response["status"]["reason"], "Forbidden");
    let message = response["status"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("scheduling gate \"sluice.dev/admission\""),
        "{message}"
    );
}

// Long: a table of malformed requests, each with the answer it must get.
#[tokio::test]
async fn unreadable_requests_get_a_plain_text_4xx_saying_what_is_wrong() {
    // (case, Content-Type, body, expected status, expected text)
    type Case = (
        &'static str,
        Option<&'static str>,
        Vec<u8>,
        StatusCode,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            "malformed",
            Some("application/json"),
            b"{not json".to_vec(),
            StatusCode::BAD_REQUEST,
            "is not an AdmissionReview (admission.k8s.io/v1)",
        ),
        (
            "wrong apiVersion",
            Some("application/json"),
            json_body(
                &json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": pod_review("CREATE", gated_pod(true), None, "a")["request"].clone()}),
            ),
            StatusCode::BAD_REQUEST,
            "expected apiVersion admission.k8s.io/v1",
        ),
        (
            "wrong kind",
            Some("application/json"),
            json_body(
                &json!({"apiVersion": "admission.k8s.io/v1", "kind": "Pod", "request": pod_review("CREATE", gated_pod(true), None, "a")["request"].clone()}),
            ),
            StatusCode::BAD_REQUEST,
            "kind \"Pod\"",
        ),
        (
            "no request",
            Some("application/json"),
            json_body(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"})),
            StatusCode::BAD_REQUEST,
            "no usable request",
        ),
        (
            "not a pod",
            Some("application/json"),
            json_body(&pod_review(
                "CREATE",
                json!({"metadata": {"name": 7}}),
                None,
                "a",
            )),
            StatusCode::BAD_REQUEST,
            "AdmissionReview",
        ),
        (
            "another kind of object",
            Some("application/json"),
            json_body(&pod_review(
                "CREATE",
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}),
                None,
                "a",
            )),
            StatusCode::BAD_REQUEST,
            "not a \"Pod\"",
        ),
        (
            "labels not a map",
            Some("application/json"),
            json_body(&pod_review(
                "CREATE",
                json!({"metadata": {"labels": ["sluice.dev/queue"]}}),
                None,
                "a",
            )),
            StatusCode::BAD_REQUEST,
            "AdmissionReview",
        ),
        (
            "truncated",
            Some("application/json"),
            json_body(&pod_review("CREATE", gated_pod(false), None, "a"))[..200].to_vec(),
            StatusCode::BAD_REQUEST,
            "is not an AdmissionReview",
        ),
        (
            "oversized",
            Some("application/json"),
            vec![b' '; 128 * 1024],
            StatusCode::PAYLOAD_TOO_LARGE,
            "limit of 65536 bytes",
        ),
        (
            "wrong type",
            Some("text/plain"),
            b"{}".to_vec(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "application/json",
        ),
        (
            "no type",
            None,
            b"{}".to_vec(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "missing Content-Type",
        ),
    ];
    for (case, content_type, body, expected_status, expected_text) in cases {
        let (status, response_type, body) = call(app(), "/mutate-pods", content_type, body).await;
        let text = String::from_utf8_lossy(&body);
        assert_eq!(status, expected_status, "{case}: {text}");
        assert!(
            response_type.starts_with("text/plain"),
            "{case}: {response_type}"
        );
        assert!(
            text.contains(expected_text),
            "{case}: {text:?} lacks {expected_text:?}"
        );
    }
}

#[tokio::test]
async fn health_is_always_ok_and_readiness_follows_the_flag() {
    let ready = Arc::new(AtomicBool::new(false));
    let router = webhooks(ready.clone(), WebhookMetrics::default());
    let get = |path: &'static str| {
        let router = router.clone();
        async move {
            router
                .oneshot(Request::get(path).body(Body::empty()).expect("request"))
                .await
                .expect("response")
                .status()
        }
    };
    assert_eq!(get("/healthz").await, StatusCode::OK);
    assert_eq!(get("/readyz").await, StatusCode::SERVICE_UNAVAILABLE);
    ready.store(true, Ordering::SeqCst);
    assert_eq!(get("/readyz").await, StatusCode::OK);
    assert_eq!(get("/mutate-pods").await, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn extra_handlers_get_their_own_path_and_metrics() {
    let metrics = WebhookMetrics::default();
    let router = webhooks(Arc::new(AtomicBool::new(true)), metrics.clone());
    let review = |name: &str| {
        json_body(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": UID,
                "kind": {"group": "ray.io", "version": "v1", "kind": "RayCluster"},
                "resource": {"group": "ray.io", "version": "v1", "resource": "rayclusters"},
                "namespace": "research", "name": name, "operation": "CREATE",
                "userInfo": {"username": "alice"},
                "object": {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": name}, "spec": {}},
                "oldObject": null, "dryRun": false,
            }
        }))
    };
    let (status, _, body) = call(
        router.clone(),
        "/validate-applications",
        Some("application/json"),
        review("bad-1"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let answer: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(answer["response"]["allowed"], false);
    let (_, _, body) = call(
        router.clone(),
        "/validate-applications",
        Some("application/json"),
        review("good"),
    )
    .await;
    let answer: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(answer["response"]["allowed"], true);
    let (status, _, _) = call(
        router,
        "/validate-applications",
        Some("application/json"),
        b"[]".to_vec(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let count = |outcome: &'static str| {
        metrics
            .requests
            .get_or_create(&crate::metrics::OutcomeLabels {
                operation: "validate_applications",
                outcome,
            })
            .get()
    };
    assert_eq!(
        (
            count("denied"),
            count("allowed"),
            count("rejected_bad_request")
        ),
        (1, 1, 1)
    );
}
