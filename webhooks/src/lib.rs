#![forbid(unsafe_code)]
//! sluice's admission webhooks: an HTTPS server (axum on rustls) answering AdmissionReview v1, and
//! the pod mutation (add the scheduling gate and sluice's labels, one JSON patch) and validation
//! (only sluice removes its gate or edits its labels). Pure: no API call on the hot path. The
//! root crate plugs in what it knows about applications through [`PodClassifier`],
//! [`AdmissionHandler`] and [`ApplicationHandler`]; this crate never depends on it.

mod handler;
mod metrics;
pub mod pods;
mod review;
mod server;

pub use handler::{AdmissionHandler, ApplicationHandler, judged, written_object};
pub use metrics::{OperationLabels, Outcome, OutcomeLabels, WebhookMetrics};
pub use pods::{
    Classified, CreatedPod, GateSettings, PodClassifier, RequestFacts, mutate_pod, mutation_patch,
    validate_identity, validate_pod,
};
pub use server::{
    DEFAULT_MAX_BODY_BYTES, DEFAULT_SHUTDOWN_GRACE, WebhookError, WebhookServer,
    WebhookServerBuilder, Webhooks, dedicated_runtime, router,
};
