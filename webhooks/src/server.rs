//! The HTTPS server: routes, AdmissionReview decoding with clear 4xx answers, TLS, shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum_server::tls_rustls::RustlsConfig;
use k8s_openapi::api::core::v1::Pod;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::metrics::WebhookMetrics;
use crate::pods::{GateSettings, PodClassifier, mutation_ops, validate_update};

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("webhook server on {addr}: {source}")]
    Serve {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// An admission handler for application objects (SparkApplication, RayCluster, ...), registered
/// under a path of its own. Pure and synchronous: no API call on the webhook's hot path.
pub trait ApplicationHandler: Send + Sync + 'static {
    /// The operation label used in metrics, e.g. "mutate_applications".
    fn name(&self) -> &'static str;
    fn admit(&self, request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse;
}

struct AppState {
    gate: GateSettings,
    classifier: Arc<dyn PodClassifier>,
    ready: Arc<AtomicBool>,
    metrics: WebhookMetrics,
}

/// The routes, without TLS (tests drive it directly).
pub fn router(
    gate: GateSettings,
    classifier: Arc<dyn PodClassifier>,
    ready: Arc<AtomicBool>,
    metrics: WebhookMetrics,
    max_body_bytes: usize,
    applications: Vec<(String, Arc<dyn ApplicationHandler>)>,
) -> Router<()> {
    let state = Arc::new(AppState {
        gate,
        classifier,
        ready,
        metrics,
    });
    let mut router: Router<Arc<AppState>> = Router::new();
    for (path, handler) in applications {
        let metrics = state.metrics.clone();
        router = router.route(
            &path,
            post(move |headers: HeaderMap, body: Bytes| {
                let (handler, metrics) = (handler.clone(), metrics.clone());
                async move { application(handler.as_ref(), &metrics, &headers, &body) }
            }),
        );
    }
    router
        .route("/mutate-pods", post(mutate_pods))
        .route("/validate-pods", post(validate_pods))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}

fn application(
    handler: &dyn ApplicationHandler,
    metrics: &WebhookMetrics,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    let started = Instant::now();
    let (response, outcome) = match decode::<DynamicObject>(headers, body) {
        Err(r) => (*r, "rejected_bad_request"),
        Ok(request) => {
            let answer = handler.admit(&request);
            let outcome = if !answer.allowed {
                "denied"
            } else if answer.patch.is_some() {
                "patched"
            } else {
                "allowed"
            };
            (respond(answer), outcome)
        }
    };
    metrics.record(handler.name(), outcome, started.elapsed().as_secs_f64());
    response
}

async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    if state.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: webhook configurations not registered yet",
        )
            .into_response()
    }
}

fn bad_request(status: StatusCode, message: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message,
    )
        .into_response()
}

/// Decodes an AdmissionReview, or answers what is wrong with it.
fn decode<K>(headers: &HeaderMap, body: &[u8]) -> Result<AdmissionRequest<K>, Box<Response>>
where
    K: kube::Resource + serde::de::DeserializeOwned,
{
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !content_type.starts_with("application/json") {
        return Err(Box::new(bad_request(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("expected Content-Type application/json, got {content_type:?}"),
        )));
    }
    let review: AdmissionReview<K> = serde_json::from_slice(body).map_err(|e| {
        Box::new(bad_request(
            StatusCode::BAD_REQUEST,
            format!(
                "body is not an admission.k8s.io/v1 AdmissionReview of this kind of object: {e}"
            ),
        ))
    })?;
    if review.types.api_version != "admission.k8s.io/v1" || review.types.kind != "AdmissionReview" {
        return Err(Box::new(bad_request(
            StatusCode::BAD_REQUEST,
            format!(
                "expected apiVersion admission.k8s.io/v1 kind AdmissionReview, got {} {}",
                review.types.api_version, review.types.kind
            ),
        )));
    }
    review.try_into().map_err(|e| {
        Box::new(bad_request(
            StatusCode::BAD_REQUEST,
            format!("AdmissionReview without a usable request: {e}"),
        ))
    })
}

fn respond(response: AdmissionResponse) -> Response {
    match serde_json::to_vec(&response.into_review()) {
        Ok(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        Err(e) => bad_request(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("could not encode the response: {e}"),
        ),
    }
}

async fn mutate_pods(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    let (response, outcome) = match decode::<Pod>(&headers, &body) {
        Err(r) => (*r, "rejected_bad_request"),
        Ok(request) => {
            let (answer, outcome) = mutate(&state, &request);
            (respond(answer), outcome)
        }
    };
    state
        .metrics
        .record("mutate_pods", outcome, started.elapsed().as_secs_f64());
    response
}

fn mutate(state: &AppState, request: &AdmissionRequest<Pod>) -> (AdmissionResponse, &'static str) {
    let allowed = AdmissionResponse::from(request);
    if request.operation != Operation::Create {
        return (allowed, "allowed");
    }
    let Some(pod) = request.object.as_ref() else {
        return (allowed, "allowed");
    };
    let Some(labels) = state.classifier.classify(pod) else {
        return (allowed, "allowed");
    };
    let ops = mutation_ops(pod, &labels, &state.gate.gate_name);
    if ops.is_empty() {
        return (allowed, "allowed");
    }
    let patch: json_patch::Patch = match serde_json::from_value(serde_json::Value::Array(ops)) {
        Ok(p) => p,
        Err(e) => {
            warn!(%e, "built an invalid patch");
            return (
                AdmissionResponse::from(request)
                    .deny(format!("sluice could not gate this pod: {e}")),
                "denied",
            );
        }
    };
    match allowed.with_patch(patch) {
        Ok(r) => (r, "patched"),
        Err(e) => (
            AdmissionResponse::from(request)
                .deny(format!("sluice could not encode its patch: {e}")),
            "denied",
        ),
    }
}

async fn validate_pods(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    let (response, outcome) = match decode::<Pod>(&headers, &body) {
        Err(r) => (*r, "rejected_bad_request"),
        Ok(request) => {
            let answer = AdmissionResponse::from(&request);
            let verdict = match (
                &request.operation,
                request.old_object.as_ref(),
                request.object.as_ref(),
            ) {
                (Operation::Update, Some(old), Some(new)) => validate_update(
                    old,
                    new,
                    request.user_info.username.as_deref().unwrap_or(""),
                    &state.gate,
                ),
                _ => Ok(()),
            };
            match verdict {
                Ok(()) => (respond(answer), "allowed"),
                Err(message) => {
                    debug!(user = ?request.user_info.username, %message, "denied");
                    (respond(answer.deny(message)), "denied")
                }
            }
        }
    };
    state
        .metrics
        .record("validate_pods", outcome, started.elapsed().as_secs_f64());
    response
}

/// The webhook server with its TLS configuration (reloadable in place, see sluice-certs).
pub struct WebhookServer {
    listen: SocketAddr,
    tls: RustlsConfig,
    router: Router,
}

pub struct WebhookServerBuilder {
    listen: SocketAddr,
    tls: RustlsConfig,
    gate: Option<GateSettings>,
    classifier: Option<Arc<dyn PodClassifier>>,
    ready: Arc<AtomicBool>,
    metrics: WebhookMetrics,
    max_body_bytes: usize,
    applications: Vec<(String, Arc<dyn ApplicationHandler>)>,
}

impl WebhookServer {
    pub fn builder(listen: SocketAddr, tls: RustlsConfig) -> WebhookServerBuilder {
        WebhookServerBuilder {
            listen,
            tls,
            gate: None,
            classifier: None,
            ready: Arc::new(AtomicBool::new(true)),
            metrics: WebhookMetrics::default(),
            max_body_bytes: 8 * 1024 * 1024,
            applications: Vec::new(),
        }
    }

    /// Serves until `shutdown` is cancelled, then drains connections for up to 10 s.
    pub async fn serve(self, shutdown: CancellationToken) -> Result<(), WebhookError> {
        let handle = axum_server::Handle::new();
        let stopper = handle.clone();
        tokio::spawn(async move {
            shutdown.cancelled().await;
            stopper.graceful_shutdown(Some(Duration::from_secs(10)));
        });
        info!(listen = %self.listen, "webhook server listening (TLS, HTTP/1.1 and HTTP/2)");
        axum_server::bind_rustls(self.listen, self.tls)
            .handle(handle)
            .serve(self.router.into_make_service())
            .await
            .map_err(|source| WebhookError::Serve {
                addr: self.listen,
                source,
            })
    }
}

struct NoPods;
impl PodClassifier for NoPods {
    fn classify(&self, _: &Pod) -> Option<std::collections::BTreeMap<String, String>> {
        None
    }
}

impl WebhookServerBuilder {
    pub fn gate(mut self, gate: GateSettings) -> Self {
        self.gate = Some(gate);
        self
    }
    pub fn classifier(mut self, classifier: Arc<dyn PodClassifier>) -> Self {
        self.classifier = Some(classifier);
        self
    }
    pub fn readiness(mut self, ready: Arc<AtomicBool>) -> Self {
        self.ready = ready;
        self
    }
    pub fn metrics(mut self, metrics: WebhookMetrics) -> Self {
        self.metrics = metrics;
        self
    }
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }
    /// Serves an application handler at `path` (e.g. "/mutate-applications").
    pub fn application(mut self, path: &str, handler: Arc<dyn ApplicationHandler>) -> Self {
        self.applications.push((path.to_string(), handler));
        self
    }
    pub fn build(self) -> WebhookServer {
        let gate = self.gate.unwrap_or(GateSettings {
            gate_name: "sluice.dev/admission".into(),
            protected_label_prefix: "sluice.dev/".into(),
            governed_label: "sluice.dev/queue".into(),
            controller_usernames: Vec::new(),
        });
        let classifier = self.classifier.unwrap_or_else(|| Arc::new(NoPods));
        WebhookServer {
            listen: self.listen,
            tls: self.tls,
            router: router(
                gate,
                classifier,
                self.ready,
                self.metrics,
                self.max_body_bytes,
                self.applications,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use serde_json::{Value, json};
    use tower::ServiceExt;

    use super::*;

    struct QueueLabel;
    impl PodClassifier for QueueLabel {
        fn classify(&self, pod: &Pod) -> Option<BTreeMap<String, String>> {
            let q = pod.metadata.labels.as_ref()?.get("sluice.dev/queue")?;
            Some(BTreeMap::from([(
                "sluice.dev/queue".to_string(),
                q.clone(),
            )]))
        }
    }

    fn app(ready: bool) -> Router {
        let gate = GateSettings {
            gate_name: "sluice.dev/admission".into(),
            protected_label_prefix: "sluice.dev/".into(),
            governed_label: "sluice.dev/queue".into(),
            controller_usernames: vec!["sluice".into()],
        };
        router(
            gate,
            Arc::new(QueueLabel),
            Arc::new(AtomicBool::new(ready)),
            WebhookMetrics::default(),
            64 * 1024,
            Vec::new(),
        )
    }

    fn review(operation: &str, object: Value, old: Option<Value>, user: &str) -> Value {
        json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "7f0b2891-916f-4ed6-b7cd-27bff1815a8c",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "ns", "name": "p", "operation": operation,
                "userInfo": {"username": user},
                "object": object, "oldObject": old, "dryRun": false,
                "options": null,
            }
        })
    }

    async fn call(
        app: Router,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (StatusCode, Vec<u8>) {
        let request = Request::post(path)
            .header(header::CONTENT_TYPE, content_type)
            .body(Body::from(body))
            .expect("request");
        let response = app.oneshot(request).await.expect("response");
        let status = response.status();
        (
            status,
            response
                .into_body()
                .collect()
                .await
                .expect("body")
                .to_bytes()
                .to_vec(),
        )
    }

    #[tokio::test]
    async fn mutation_answers_with_a_json_patch_and_the_same_uid() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns", "labels": {"sluice.dev/queue": "q"}}, "spec": {"containers": []}});
        let body = serde_json::to_vec(&review("CREATE", pod, None, "alice")).expect("json");
        let (status, body) = call(app(true), "/mutate-pods", "application/json", body).await;
        assert_eq!(status, StatusCode::OK);
        let answer: Value = serde_json::from_slice(&body).expect("json");
        let response = &answer["response"];
        assert_eq!(response["uid"], "7f0b2891-916f-4ed6-b7cd-27bff1815a8c");
        assert_eq!(response["allowed"], true);
        assert_eq!(response["patchType"], "JSONPatch");
        // kube encodes the patch bytes as a JSON array of numbers, which the API server's decoder
        // accepts for a []byte field just as it accepts base64.
        let bytes: Vec<u8> =
            serde_json::from_value(response["patch"].clone()).expect("patch bytes");
        let patch: Value = serde_json::from_slice(&bytes).expect("patch json");
        assert_eq!(patch[0]["path"], "/spec/schedulingGates");
    }

    #[tokio::test]
    async fn validation_denies_gate_removal_with_a_message() {
        let old = json!({"metadata": {"name": "p", "namespace": "ns", "labels": {"sluice.dev/queue": "q"}}, "spec": {"containers": [], "schedulingGates": [{"name": "sluice.dev/admission"}]}});
        let new = json!({"metadata": {"name": "p", "namespace": "ns", "labels": {"sluice.dev/queue": "q"}}, "spec": {"containers": []}});
        let body = serde_json::to_vec(&review("UPDATE", new, Some(old), "alice")).expect("json");
        let (status, body) = call(app(true), "/validate-pods", "application/json", body).await;
        assert_eq!(status, StatusCode::OK);
        let answer: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(answer["response"]["allowed"], false);
        assert!(
            answer["response"]["status"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("sluice.dev/admission")
        );
    }

    #[tokio::test]
    async fn malformed_oversized_and_mistyped_bodies_get_clear_4xx() {
        let (status, body) = call(
            app(true),
            "/mutate-pods",
            "application/json",
            b"{not json".to_vec(),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(String::from_utf8_lossy(&body).contains("AdmissionReview"));

        let no_request = serde_json::to_vec(
            &json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
        )
        .expect("json");
        let (status, _) = call(app(true), "/mutate-pods", "application/json", no_request).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);

        let (status, _) = call(
            app(true),
            "/mutate-pods",
            "application/json",
            vec![b' '; 128 * 1024],
        )
        .await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);

        let (status, body) = call(app(true), "/mutate-pods", "text/plain", b"{}".to_vec()).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert!(String::from_utf8_lossy(&body).contains("application/json"));
    }

    #[tokio::test]
    async fn readiness_follows_the_flag() {
        let get = |ready| async move {
            app(ready)
                .oneshot(Request::get("/readyz").body(Body::empty()).expect("req"))
                .await
                .expect("resp")
                .status()
        };
        assert_eq!(get(true).await, StatusCode::OK);
        assert_eq!(get(false).await, StatusCode::SERVICE_UNAVAILABLE);
    }
}
