//! `http`: the controller makes the request (method, URL, headers, body; `${...}` substituted).
//! Success on the status codes given (default any 2xx); `resultJsonPath` picks the result out of a
//! JSON response. The request runs in the background, so a kill can abort it.
//!
//! At most once: a request is never repeated. If the controller restarts while a request is in
//! flight, the Task fails with a message saying so (its effect is unknown).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::FutureExt;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::rt::TokioExecutor;
use kube::ResourceExt;
use serde_json::Value;

use super::{ExecContext, ExecError, Executor, Outcome, Plan, Progress, parse_result};
use crate::api::{HttpExecutor, TaskHandle};
use crate::tasks::jsonpath;
use crate::tasks::substitute::substitute;

/// The request after substitution.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<String>,
}

pub fn build_request(
    spec: &HttpExecutor,
    vars: &crate::tasks::substitute::Variables,
) -> Result<Request, ExecError> {
    let method = spec
        .method
        .as_deref()
        .unwrap_or("GET")
        .trim()
        .to_ascii_uppercase();
    let url = substitute(&spec.url, vars, "http.url")?;
    if !url.starts_with("http://") {
        return Err(ExecError::Invalid(format!(
            "http.url {url:?}: only http:// URLs are supported (https is not yet)"
        )));
    }
    let headers = spec
        .headers
        .iter()
        .map(|(k, v)| {
            Ok((
                k.clone(),
                substitute(v, vars, &format!("http.headers.{k}"))?,
            ))
        })
        .collect::<Result<Vec<_>, ExecError>>()?;
    let body = spec
        .body
        .as_deref()
        .map(|b| substitute(b, vars, "http.body"))
        .transpose()?;
    Ok(Request {
        method,
        url,
        headers,
        body,
    })
}

/// The Task's outcome from the response. Pure.
pub fn outcome(spec: &HttpExecutor, status: u16, body: &[u8]) -> Outcome {
    let ok = if spec.success_codes.is_empty() {
        (200..300).contains(&status)
    } else {
        spec.success_codes.contains(&status)
    };
    let text = String::from_utf8_lossy(body);
    let parsed = parse_result(&text);
    let mut message = format!("HTTP {status}");
    let result = match (&spec.result_json_path, ok) {
        (Some(path), true) => {
            let document = parsed.clone().unwrap_or(Value::Null);
            match jsonpath::pick(&document, path) {
                Ok(v) => Some(v),
                Err(e) => {
                    return Outcome {
                        success: false,
                        result: parsed,
                        message: format!("HTTP {status}, but resultJsonPath failed: {e}"),
                    };
                }
            }
        }
        _ => parsed,
    };
    if !ok {
        message = if spec.success_codes.is_empty() {
            format!("HTTP {status}: not a 2xx status")
        } else {
            format!("HTTP {status}: not one of {:?}", spec.success_codes)
        };
    }
    Outcome {
        success: ok,
        result,
        message,
    }
}

/// How long a request may take in all: connecting, sending, and reading the whole response. A
/// Task's endpoint that hangs must not hold a controller task (and its connection) forever.
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// The most of a response body read: the result lands in the Task's status (an etcd object), and
/// the controller must never buffer an unbounded body.
pub const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// The bounds of one request.
#[derive(Clone, Copy, Debug)]
struct Limits {
    total: std::time::Duration,
    max_body_bytes: usize,
}

const LIMITS: Limits = Limits {
    total: REQUEST_TIMEOUT,
    max_body_bytes: MAX_RESPONSE_BYTES,
};

/// Sends `request` within `limits`; an error is the Task's failure message.
async fn send(request: Request, limits: Limits) -> Result<(u16, Bytes), String> {
    let what = format!("{} {}", request.method, request.url);
    tokio::time::timeout(limits.total, exchange(request, limits.max_body_bytes))
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "{what}: no complete response within {:?} (the limit for connecting, sending and reading)",
                limits.total
            ))
        })
}

async fn exchange(request: Request, max_body_bytes: usize) -> Result<(u16, Bytes), String> {
    let what = format!("{} {}", request.method, request.url);
    let client: HyperClient<_, Full<Bytes>> =
        HyperClient::builder(TokioExecutor::new()).build_http();
    let mut builder = hyper::Request::builder()
        .method(request.method.as_str())
        .uri(request.url.as_str());
    for (k, v) in &request.headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    let req = builder
        .body(Full::new(Bytes::from(request.body.unwrap_or_default())))
        .map_err(|e| format!("invalid request: {e}"))?;
    let response = client
        .request(req)
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    let status = response.status().as_u16();
    let too_big = || {
        format!("{what}: the response is larger than {max_body_bytes} bytes, the most sluice reads")
    };
    // A declared length over the cap fails before reading anything.
    let declared = response
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max_body_bytes as u64) {
        return Err(too_big());
    }
    // Limited stops reading at the cap, whatever the length says (chunked bodies have none).
    let body = http_body_util::Limited::new(response.into_body(), max_body_bytes)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                too_big()
            } else {
                format!("{what}: reading the response: {e}")
            }
        })?
        .to_bytes();
    Ok((status, body))
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

fn spec(ctx: &ExecContext<'_>) -> Result<HttpExecutor, ExecError> {
    ctx.task
        .spec
        .executor
        .http
        .clone()
        .ok_or_else(|| ExecError::Invalid("not an http Task".into()))
}

impl Executor for HttpExecutorImpl {
    fn kind(&self) -> &'static str {
        "http"
    }

    fn plan<'a>(&'a self, ctx: &'a ExecContext<'a>) -> BoxFuture<'a, Result<Plan, ExecError>> {
        async move {
            let request = build_request(&spec(ctx)?, ctx.vars)?;
            Ok(Plan::Start {
                handle: TaskHandle {
                    kind: "HTTPRequest".into(),
                    name: format!("{} {}", request.method, request.url),
                    ..Default::default()
                },
                worker: None,
            })
        }
        .boxed()
    }

    fn start<'a>(
        &'a self,
        ctx: &'a ExecContext<'a>,
        _handle: &'a TaskHandle,
    ) -> BoxFuture<'a, Result<String, ExecError>> {
        async move {
            let spec = spec(ctx)?;
            let request = build_request(&spec, ctx.vars)?;
            let uid = ctx.task.uid().unwrap_or_default();
            let mut map = self.runtime.lock();
            if map.contains_key(&uid) {
                return Ok("in-flight".into());
            }
            let runtime = self.runtime.clone();
            let key = uid.clone();
            let task = tokio::spawn(async move {
                let result = match send(request, LIMITS).await {
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
        .boxed()
    }

    fn poll<'a>(
        &'a self,
        ctx: &'a ExecContext<'a>,
        _handle: &'a TaskHandle,
    ) -> BoxFuture<'a, Result<Progress, ExecError>> {
        async move {
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
        .boxed()
    }

    fn kill<'a>(
        &'a self,
        ctx: &'a ExecContext<'a>,
        _handle: &'a TaskHandle,
    ) -> BoxFuture<'a, Result<bool, ExecError>> {
        async move {
            let uid = ctx.task.uid().unwrap_or_default();
            if let Some(entry) = self.runtime.lock().remove(&uid) {
                // Aborting drops the connection.
                entry.task.abort();
            }
            Ok(true)
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::substitute::Variables;
    use serde_json::json;

    #[test]
    fn success_codes_and_results() {
        let mut spec = HttpExecutor {
            url: "http://x".into(),
            ..Default::default()
        };
        let o = outcome(&spec, 200, br#"{"result": {"jobs": 3}}"#);
        assert!(o.success);
        assert_eq!(o.result, Some(json!({"result": {"jobs": 3}})));
        spec.result_json_path = Some("$.result.jobs".into());
        assert_eq!(
            outcome(&spec, 201, br#"{"result": {"jobs": 3}}"#).result,
            Some(json!(3))
        );
        let failed = outcome(&spec, 500, b"boom");
        assert!(!failed.success);
        assert_eq!(failed.message, "HTTP 500: not a 2xx status");
        assert_eq!(failed.result, Some(json!("boom")));
        let missing = outcome(&spec, 200, br#"{"other": 1}"#);
        assert!(!missing.success);
        assert!(
            missing.message.contains("resultJsonPath"),
            "{}",
            missing.message
        );
        spec.success_codes = vec![404];
        spec.result_json_path = None;
        assert!(outcome(&spec, 404, b"").success);
        assert!(!outcome(&spec, 200, b"").success);
    }

    #[test]
    fn requests_are_substituted() {
        let vars = Variables::new()
            .with("task", json!({"name": "t1", "namespace": "ns"}))
            .with("input", json!({"n": 2}));
        let spec = HttpExecutor {
            method: Some("post".into()),
            url: "http://svc/${task.namespace}/${task.name}".into(),
            headers: [("X-N".to_string(), "${input.n}".to_string())].into(),
            body: Some(r#"{"n": ${input.n}}"#.into()),
            ..Default::default()
        };
        let r = build_request(&spec, &vars).unwrap();
        assert_eq!(r.method, "POST");
        assert_eq!(r.url, "http://svc/ns/t1");
        assert_eq!(r.headers, vec![("X-N".into(), "2".into())]);
        assert_eq!(r.body.as_deref(), Some(r#"{"n": 2}"#));
        let bad = HttpExecutor {
            url: "http://svc/${task.nope}".into(),
            ..Default::default()
        };
        assert!(build_request(&bad, &vars).is_err());
        let tls = HttpExecutor {
            url: "https://svc/".into(),
            ..Default::default()
        };
        assert!(build_request(&tls, &vars).is_err());
    }

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
        let (status, body) = send(get(&url), LIMITS).await.expect("response");
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
        let message = send(get(&url), limits).await.expect_err("must time out");
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
        let message = send(get(&url), LIMITS).await.expect_err("must be cut");
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
        let message = send(get(&url), LIMITS).await.expect_err("must be refused");
        assert!(
            message.contains(&format!("larger than {MAX_RESPONSE_BYTES} bytes")),
            "{message}"
        );
    }
}
