//! The seam for admission handlers: pure and synchronous (no API call on the webhook's hot path),
//! each decoding straight into the type it judges.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use serde::de::DeserializeOwned;

use crate::metrics::{Outcome, WebhookMetrics};
use crate::review::{decode, encode};

/// Answers admission requests for objects of type `K`, served under a path of its own.
pub trait AdmissionHandler<K: kube::Resource>: Send + Sync + 'static {
    fn admit(&self, request: &AdmissionRequest<K>) -> AdmissionResponse;
}

/// An admission handler for application objects of any kind (SparkApplication, RayCluster, ...),
/// decoded as [`DynamicObject`]. Pure and synchronous: no API call on the webhook's hot path.
pub trait ApplicationHandler: Send + Sync + 'static {
    /// The operation label used in metrics, e.g. "mutate_applications".
    fn name(&self) -> &'static str;
    fn admit(&self, request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse;
}

pub(crate) struct Application(pub(crate) Arc<dyn ApplicationHandler>);

impl AdmissionHandler<DynamicObject> for Application {
    fn admit(&self, request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        self.0.admit(request)
    }
}

/// A handler with its type erased, so that routes of different kinds live in one router.
pub(crate) trait Endpoint: Send + Sync + 'static {
    fn answer(&self, headers: &HeaderMap, body: Result<Bytes, BytesRejection>) -> Response;
}

pub(crate) struct TypedEndpoint<K: kube::Resource> {
    pub(crate) operation: &'static str,
    pub(crate) handler: Arc<dyn AdmissionHandler<K>>,
    pub(crate) metrics: WebhookMetrics,
    pub(crate) max_body_bytes: usize,
}

impl<K> Endpoint for TypedEndpoint<K>
where
    K: kube::Resource + DeserializeOwned + 'static,
{
    fn answer(&self, headers: &HeaderMap, body: Result<Bytes, BytesRejection>) -> Response {
        let started = Instant::now();
        let (response, outcome) = match decode::<K>(headers, body, self.max_body_bytes) {
            Err(rejection) => {
                tracing::debug!(operation = self.operation, status = %rejection.status, message = %rejection.message, "rejected a request");
                (rejection.into_response(), Outcome::RejectedBadRequest)
            }
            Ok(request) => {
                let answer = self.handler.admit(&request);
                (encode(&answer), Outcome::of(&answer))
            }
        };
        self.metrics
            .record(self.operation, outcome, started.elapsed().as_secs_f64());
        response
    }
}
