#![forbid(unsafe_code)]
//! sluice's admission webhooks: an HTTPS server (axum on rustls) answering AdmissionReview v1, and
//! the pod mutation (add the scheduling gate and sluice's labels, one JSON patch) and validation
//! (only sluice removes its gate or edits its labels). Pure: no API call on the hot path. The
//! root crate plugs in what it knows about applications through [`PodClassifier`].

mod metrics;
pub mod pods;
mod server;

pub use metrics::WebhookMetrics;
pub use pods::{GateSettings, PodClassifier};
pub use server::{ApplicationHandler, WebhookError, WebhookServer, WebhookServerBuilder, router};
