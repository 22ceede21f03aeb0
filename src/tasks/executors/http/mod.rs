//! `http`: the controller makes a request written in HAR 1.2 request form (method, url,
//! httpVersion, headers, queryString, cookies, postData; `${...}` substituted: [`request`]) over
//! http or https (a CA bundle from a ConfigMap or Secret, an optional client certificate from a
//! Secret: [`client`]). Success: the status codes given (default any 2xx) and `successCondition`
//! over the body; the result: `resultJsonPath` of the body, or the body (capped). The request runs
//! in the background, so a kill aborts it (the connection is closed) and the Task ends Killed.
//!
//! At most once: a request is never repeated. If the controller restarts while a request is in
//! flight, the Task fails with a message saying so (its effect is unknown).

pub mod client;
pub mod request;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::Api;

use super::{ExecContext, ExecError, ExecResult, ExecutorSteps, Outcome, Plan, Progress};
use crate::api::{HttpExecutor, HttpTls, KeyReference, TaskExecutor, TaskHandle};
pub use client::{Limits, TlsMaterial, send};
pub use request::{build_request, outcome};

/// How long a request may take in all by default: connecting, sending, and reading the whole
/// response. A Task's endpoint that hangs must not hold a controller task (and its connection)
/// forever.
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// The most of a response body read: the controller must never buffer an unbounded body.
pub const MAX_RESPONSE_BYTES: usize = 1024 * 1024;
/// The label a Secret needs before a Task may use it for TLS.
pub const TASK_TLS_LABEL: &str = "sluice.dev/task-tls";

const LIMITS: Limits = Limits {
    total: REQUEST_TIMEOUT,
    max_body_bytes: MAX_RESPONSE_BYTES,
};

/// The limits of this Task's request (its `timeout`, else the default).
fn limits(spec: &HttpExecutor) -> Result<Limits, ExecError> {
    let total = match spec.timeout.as_deref() {
        Some(t) => crate::duration::parse_duration(t)
            .map_err(|e| ExecError::Invalid(format!("http.timeout {e}")))?,
        None => REQUEST_TIMEOUT,
    };
    Ok(Limits { total, ..LIMITS })
}

struct InFlight {
    task: tokio::task::JoinHandle<()>,
    outcome: Option<Outcome>,
}

/// Requests in flight, per Task uid (the controller polls them).
#[derive(Clone, Default)]
pub struct HttpRuntime {
    in_flight: Arc<Mutex<HashMap<String, InFlight>>>,
}

impl HttpRuntime {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, InFlight>> {
        // A poisoned map only means a panic elsewhere; the data is still consistent.
        self.in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

pub struct HttpExecutorImpl {
    runtime: HttpRuntime,
}

impl HttpExecutorImpl {
    pub fn new(runtime: HttpRuntime) -> Self {
        HttpExecutorImpl { runtime }
    }
}

/// The multipart boundary: fixed per Task, so the same Task builds the same request.
fn boundary(ctx: &ExecContext<'_>) -> String {
    format!("sluice-{}", ctx.task.uid().unwrap_or_default())
}

/// One key of a ConfigMap or a labelled Secret in the Task's namespace.
async fn read_key(
    ctx: &TlsSource,
    reference: &KeyReference,
    field: &str,
) -> Result<Vec<u8>, ExecError> {
    let key = reference.key.as_deref().unwrap_or("ca.crt");
    match (&reference.config_map, &reference.secret) {
        (Some(name), None) => {
            let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
            let cm = api
                .get_opt(name)
                .await
                .map_err(ExecError::api(format!("reading ConfigMap {name}")))?
                .ok_or_else(|| {
                    ExecError::Invalid(format!("{field}: ConfigMap {name} does not exist"))
                })?;
            cm.data
                .and_then(|d| d.get(key).map(|v| v.clone().into_bytes()))
                .ok_or_else(|| {
                    ExecError::Invalid(format!("{field}: ConfigMap {name} has no key {key:?}"))
                })
        }
        (None, Some(name)) => secret_key(ctx, name, key, field).await,
        _ => Err(ExecError::Invalid(format!(
            "{field}: set exactly one of configMap and secret"
        ))),
    }
}

async fn secret_key(
    ctx: &TlsSource,
    name: &str,
    key: &str,
    field: &str,
) -> Result<Vec<u8>, ExecError> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
    let secret = api
        .get_opt(name)
        .await
        .map_err(ExecError::api(format!("reading Secret {name}")))?
        .ok_or_else(|| ExecError::Invalid(format!("{field}: Secret {name} does not exist")))?;
    if secret.labels().get(TASK_TLS_LABEL).map(String::as_str) != Some("true") {
        return Err(ExecError::Invalid(format!(
            "{field}: Secret {name} is not labelled {TASK_TLS_LABEL}=true (sluice lends a Task only Secrets meant for Tasks): kubectl label secret {name} {TASK_TLS_LABEL}=true"
        )));
    }
    secret
        .data
        .and_then(|d| d.get(key).map(|v| v.0.clone()))
        .ok_or_else(|| ExecError::Invalid(format!("{field}: Secret {name} has no key {key:?}")))
}

/// Where a request's TLS material is read: the Task's namespace, with sluice's client.
struct TlsSource {
    client: kube::Client,
    namespace: String,
}

async fn tls_material(ctx: &TlsSource, tls: &HttpTls) -> Result<TlsMaterial, ExecError> {
    let ca_pem = match &tls.ca_bundle {
        Some(r) => Some(read_key(ctx, r, "http.tls.caBundle").await?),
        None => None,
    };
    let client_pem = match &tls.client_certificate_secret {
        Some(name) => {
            let field = "http.tls.clientCertificateSecret";
            let cert = secret_key(ctx, name, "tls.crt", field).await?;
            let key = secret_key(ctx, name, "tls.key", field).await?;
            Some((cert, key))
        }
        None => None,
    };
    Ok(TlsMaterial {
        ca_pem,
        client_pem,
        server_name: tls.server_name.clone(),
    })
}

/// Reads the TLS material (for https) and sends the request; an error is the failure message.
async fn exchange(
    spec: &HttpExecutor,
    source: &TlsSource,
    request: request::Request,
    limits: Limits,
) -> Result<(u16, bytes::Bytes), String> {
    let tls = match (&spec.tls, request.is_https()) {
        (Some(tls), true) => Some(tls_material(source, tls).await.map_err(|e| e.to_string())?),
        _ => None,
    };
    send(request, tls, limits).await
}

impl ExecutorSteps for HttpExecutorImpl {
    const KIND: &'static str = "http";
    type Spec = HttpExecutor;

    async fn plan(&self, ctx: &ExecContext<'_>, spec: &HttpExecutor) -> ExecResult<Plan> {
        let request = build_request(spec, ctx.vars, &boundary(ctx))?;
        limits(spec)?;
        Ok(Plan::Start {
            handle: TaskHandle {
                kind: "HTTPRequest".into(),
                name: format!("{} {}", request.method, request.url),
                ..Default::default()
            },
            worker: None,
        })
    }

    async fn start(&self, ctx: &ExecContext<'_>, _handle: &TaskHandle) -> ExecResult<String> {
        let spec = Self::spec(ctx)?;
        let request = build_request(spec, ctx.vars, &boundary(ctx))?;
        let limits = limits(spec)?;
        let uid = ctx.task.uid().unwrap_or_default();
        let mut map = self.runtime.lock();
        if map.contains_key(&uid) {
            return Ok("in-flight".into());
        }
        let runtime = self.runtime.clone();
        let key = uid.clone();
        let source = TlsSource {
            client: ctx.client.clone(),
            namespace: ctx.namespace.clone(),
        };
        // Everything that can fail from here on is the request's outcome: the Task was
        // recorded as sent, so the controller only observes it now.
        let spec = spec.clone();
        let task = tokio::spawn(async move {
            let result = match exchange(&spec, &source, request, limits).await {
                Ok((status, body)) => outcome(&spec, status, &body),
                Err(message) => Outcome {
                    success: false,
                    result: None,
                    message,
                },
            };
            if let Some(entry) = runtime.lock().get_mut(&key) {
                entry.outcome = Some(result);
            }
        });
        map.insert(
            uid,
            InFlight {
                task,
                outcome: None,
            },
        );
        Ok("in-flight".into())
    }

    async fn poll(&self, ctx: &ExecContext<'_>, _handle: &TaskHandle) -> ExecResult<Progress> {
        let uid = ctx.task.uid().unwrap_or_default();
        let mut map = self.runtime.lock();
        Ok(match map.get(&uid) {
            None => Progress::Done(Outcome {
                success: false,
                result: None,
                message: "the controller restarted while the HTTP request was in flight; it is not repeated (at most once)".into(),
            }),
            Some(InFlight { outcome: None, .. }) => Progress::Running("request in flight".into()),
            Some(InFlight {
                outcome: Some(_), ..
            }) => {
                let done = map.remove(&uid).and_then(|e| e.outcome);
                match done {
                    Some(o) => Progress::Done(o),
                    None => Progress::Running("request in flight".into()),
                }
            }
        })
    }

    async fn kill(&self, ctx: &ExecContext<'_>, _handle: &TaskHandle) -> ExecResult<bool> {
        let uid = ctx.task.uid().unwrap_or_default();
        if let Some(entry) = self.runtime.lock().remove(&uid) {
            // Aborting drops the connection.
            entry.task.abort();
        }
        Ok(true)
    }

    fn spec_of(executor: &TaskExecutor) -> Option<&HttpExecutor> {
        executor.http.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use request::Request;

    /// A loopback HTTP server answering one connection with `respond`, which gets the socket after
    /// the request head was read.
    async fn one_shot_server<F, Fut, T>(respond: F) -> (String, tokio::task::JoinHandle<T>)
    where
        F: FnOnce(tokio::net::TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = T> + Send,
        T: Send + 'static,
    {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let url = format!("http://{}/", listener.local_addr().expect("address"));
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("accept");
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = stream.read(&mut buf).await.expect("read the request");
                assert!(n > 0, "the client closed before sending its request");
                head.extend_from_slice(&buf[..n]);
            }
            respond(stream).await
        });
        (url, server)
    }

    fn get(url: &str) -> Request {
        Request {
            method: "GET".into(),
            url: url.into(),
            version: request::Version::Http11,
            headers: vec![],
            body: None,
        }
    }

    /// Writes an HTTP/1.1 200 head and then `total` bytes of body in 64 KiB pieces until the client
    /// goes away; returns how many body bytes were written.
    async fn stream_body(mut stream: tokio::net::TcpStream, head: String, total: usize) -> usize {
        use tokio::io::AsyncWriteExt;
        if stream.write_all(head.as_bytes()).await.is_err() {
            return 0;
        }
        let piece = vec![b'x'; 64 * 1024];
        let mut written = 0;
        while written < total {
            if stream.write_all(&piece).await.is_err() {
                break;
            }
            written += piece.len();
        }
        written
    }

    const HUNDRED_MIB: usize = 100 * 1024 * 1024;

    #[tokio::test]
    async fn a_small_response_comes_back_whole() {
        let (url, _server) = one_shot_server(|stream| {
            stream_body(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-length: 65536\r\n\r\n".into(),
                64 * 1024,
            )
        })
        .await;
        let (status, body) = send(get(&url), None, LIMITS).await.expect("response");
        assert_eq!(status, 200);
        assert_eq!(body.len(), 64 * 1024);
    }

    #[tokio::test]
    async fn a_server_that_never_answers_fails_the_task_at_the_time_limit() {
        // The server reads the request and then holds the connection open without a word.
        let (url, _server) = one_shot_server(|stream| async move {
            std::future::pending::<()>().await;
            drop(stream)
        })
        .await;
        let limits = Limits {
            total: std::time::Duration::from_millis(300),
            ..LIMITS
        };
        let message = send(get(&url), None, limits)
            .await
            .expect_err("must time out");
        assert!(
            message.contains("no complete response within 300ms"),
            "{message}"
        );
        assert!(message.contains(&url), "{message}");
    }

    #[tokio::test]
    async fn a_100_mib_response_without_a_length_is_cut_at_the_cap() {
        // Close-delimited: no length up front, so the cap must stop the reading itself.
        let (url, server) = one_shot_server(|stream| {
            stream_body(
                stream,
                "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".into(),
                HUNDRED_MIB,
            )
        })
        .await;
        let message = send(get(&url), None, LIMITS)
            .await
            .expect_err("must be cut");
        assert!(
            message.contains(&format!("larger than {MAX_RESPONSE_BYTES} bytes")),
            "{message}"
        );
        // The client hung up: the server could not deliver the 100 MiB (socket buffers aside).
        let written = server.await.expect("server");
        assert!(written < HUNDRED_MIB, "the whole body was read: {written}");
    }

    #[tokio::test]
    async fn a_100_mib_response_announced_by_its_length_is_refused_before_reading() {
        let (url, _server) = one_shot_server(|stream| {
            stream_body(
                stream,
                format!("HTTP/1.1 200 OK\r\ncontent-length: {HUNDRED_MIB}\r\n\r\n"),
                HUNDRED_MIB,
            )
        })
        .await;
        let message = send(get(&url), None, LIMITS)
            .await
            .expect_err("must be refused");
        assert!(
            message.contains(&format!("larger than {MAX_RESPONSE_BYTES} bytes")),
            "{message}"
        );
    }
}
