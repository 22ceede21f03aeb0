//! The seam for admission handlers: pure and synchronous (no API call on the webhook's hot path),
//! each decoding straight into the type it judges.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
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

/// The object a CREATE or UPDATE writes; None for any other operation (a DELETE or CONNECT
/// writes nothing to judge).
pub fn written_object<K: kube::Resource>(request: &AdmissionRequest<K>) -> Option<&K> {
    match request.operation {
        Operation::Create | Operation::Update => request.object.as_ref(),
        _ => None,
    }
}

/// `response` as it is when `verdict` is Ok, else denied with its message.
pub fn judged(response: AdmissionResponse, verdict: Result<(), String>) -> AdmissionResponse {
    match verdict {
        Ok(()) => response,
        Err(message) => response.deny(message),
    }
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

/// Serves a handler of `K`, decoding the review as `W` (by default `K` itself; the pod webhooks
/// decode a partial pod, see [`crate::pods::wire`]) and turning it into a request of `K`.
pub(crate) struct TypedEndpoint<K: kube::Resource, W: kube::Resource = K> {
    pub(crate) operation: &'static str,
    pub(crate) handler: Arc<dyn AdmissionHandler<K>>,
    pub(crate) metrics: WebhookMetrics,
    pub(crate) max_body_bytes: usize,
    pub(crate) convert: fn(AdmissionRequest<W>) -> AdmissionRequest<K>,
}

/// The conversion of an endpoint that decodes `K` itself.
pub(crate) fn same<K: kube::Resource>(request: AdmissionRequest<K>) -> AdmissionRequest<K> {
    request
}

impl<K, W> Endpoint for TypedEndpoint<K, W>
where
    K: kube::Resource + 'static,
    W: kube::Resource + DeserializeOwned + 'static,
{
    fn answer(&self, headers: &HeaderMap, body: Result<Bytes, BytesRejection>) -> Response {
        let started = Instant::now();
        let decoded = decode::<W>(headers, body, self.max_body_bytes).map(self.convert);
        let (response, outcome) = match decoded {
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
