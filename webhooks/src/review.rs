//! AdmissionReview v1 on the wire: decoding with a clear 4xx for what is wrong, and encoding the
//! answer (the patch base64 encoded, as the API server's `[]byte` field expects).

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use kube::core::Status;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use serde::Serialize;
use serde::de::DeserializeOwned;

const API_VERSION: &str = "admission.k8s.io/v1";
const KIND: &str = "AdmissionReview";

/// A request that is not an AdmissionReview we can answer: a 4xx with a plain-text reason.
#[derive(Debug)]
pub(crate) struct Rejection {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

impl Rejection {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Rejection {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        (
            self.status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            self.message,
        )
            .into_response()
    }
}

fn is_json(headers: &HeaderMap) -> Result<(), Rejection> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Err(Rejection::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "missing Content-Type: an AdmissionReview is sent as application/json",
        ));
    };
    let media_type = value
        .to_str()
        .ok()
        .and_then(|v| v.split(';').next())
        .map(str::trim)
        .unwrap_or("");
    if media_type.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(Rejection::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "Content-Type {value:?} is not supported: an AdmissionReview is sent as application/json"
            ),
        ))
    }
}

/// Decodes an `AdmissionReview` of `K` in one pass, or says what is wrong with it.
pub(crate) fn decode<K>(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    max_body_bytes: usize,
) -> Result<AdmissionRequest<K>, Rejection>
where
    K: kube::Resource + DeserializeOwned,
{
    is_json(headers)?;
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Rejection::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is larger than the limit of {max_body_bytes} bytes"),
            )
        } else {
            Rejection::new(rejection.status(), rejection.body_text())
        }
    })?;
    let review: AdmissionReview<K> = serde_json::from_slice(&body).map_err(|e| {
        Rejection::new(
            StatusCode::BAD_REQUEST,
            format!(
                "the body is not an {KIND} ({API_VERSION}) of the expected kind of object: {e}"
            ),
        )
    })?;
    if review.types.api_version != API_VERSION || review.types.kind != KIND {
        return Err(Rejection::new(
            StatusCode::BAD_REQUEST,
            format!(
                "expected apiVersion {API_VERSION} and kind {KIND}, got apiVersion {:?} and kind {:?}",
                review.types.api_version, review.types.kind
            ),
        ));
    }
    review.try_into().map_err(|e| {
        Rejection::new(
            StatusCode::BAD_REQUEST,
            format!("the {KIND} has no usable request: {e}"),
        )
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireReview<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: WireResponse<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireResponse<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    audit_annotations: &'a HashMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<&'a Vec<String>>,
}

/// The AdmissionReview answer, 200 with JSON. kube's own serialization writes the patch as an
/// array of numbers; base64 is what Kubernetes documents and is a third of the size.
pub(crate) fn encode(response: &AdmissionResponse) -> Response {
    let status = if response.allowed {
        None
    } else {
        let mut status = response.result.clone();
        // Say 403 Forbidden in the answer itself rather than rely on the API server's default.
        if status.code == 0 {
            status.code = 403;
        }
        if status.reason.is_empty() {
            status.reason = "Forbidden".into();
        }
        Some(status)
    };
    let wire = WireReview {
        api_version: API_VERSION,
        kind: KIND,
        response: WireResponse {
            uid: &response.uid,
            allowed: response.allowed,
            status,
            patch: response
                .patch
                .as_ref()
                .map(|p| base64::engine::general_purpose::STANDARD.encode(p)),
            // kube only produces JSONPatch (its patch type field is private).
            patch_type: response.patch.as_ref().map(|_| "JSONPatch"),
            audit_annotations: &response.audit_annotations,
            warnings: response.warnings.as_ref(),
        },
    };
    match serde_json::to_vec(&wire) {
        Ok(body) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        // Unreachable in practice (strings and maps only); still an answer, not a panic.
        Err(e) => Rejection::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("could not encode the AdmissionReview answer: {e}"),
        )
        .into_response(),
    }
}
