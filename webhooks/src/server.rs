//! The HTTPS server: routes, readiness, TLS that can be reloaded in place, graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum_server::tls_rustls::RustlsConfig;
use k8s_openapi::api::core::v1::Pod;
use kube::core::DynamicObject;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::handler::{
    AdmissionHandler, Application, ApplicationHandler, Endpoint, TypedEndpoint, same,
};
use crate::metrics::WebhookMetrics;
use crate::pods::wire::{PartialPod, into_pod_request};
use crate::pods::{GateSettings, MutatePods, PodClassifier, ValidatePods};

/// 8 MiB: far above any real pod, far below what would hurt the process.
pub const DEFAULT_MAX_BODY_BYTES: usize = 8 * 1024 * 1024;
/// How long open connections may finish their requests after shutdown starts.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("webhook server on {addr}: {source}")]
    Serve {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("webhook server: using the given listener: {0}")]
    Listener(#[source] std::io::Error),
    #[error("webhook server: starting its runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("webhook server: its thread ended without a result (it panicked)")]
    Stopped,
}

/// TLS over TCP with `TCP_NODELAY`.
type Acceptor = axum_server::tls_rustls::RustlsAcceptor<axum_server::accept::NoDelayAcceptor>;

/// Sets `TCP_NODELAY` on every accepted connection: an answer is written as soon as it is ready.
/// Without it, the second small write of an answer (HTTP/2 sends HEADERS and DATA frames apart)
/// waits for the peer's delayed ACK, tens of milliseconds on Linux.
fn no_delay(acceptor: axum_server::tls_rustls::RustlsAcceptor) -> Acceptor {
    acceptor.acceptor(axum_server::accept::NoDelayAcceptor::new())
}

/// Builds an endpoint once the metrics and body limit are final.
type MakeEndpoint = Box<dyn FnOnce(&WebhookMetrics, usize) -> Arc<dyn Endpoint> + Send>;

/// The webhooks without their transport: what [`WebhookServer`] serves, and what tests drive
/// through [`Webhooks::router`] without TLS.
pub struct Webhooks {
    gate: GateSettings,
    classifier: Arc<dyn PodClassifier>,
    ready: Arc<AtomicBool>,
    metrics: WebhookMetrics,
    max_body_bytes: usize,
    extra: Vec<(String, MakeEndpoint)>,
}

/// Governs no pod: the classifier of a server that was given none.
struct NoPods;

impl PodClassifier for NoPods {
    fn classify(&self, _: &Pod) -> Option<std::collections::BTreeMap<String, String>> {
        None
    }
}

impl Default for Webhooks {
    fn default() -> Self {
        Webhooks::new(GateSettings::default(), Arc::new(NoPods))
    }
}

impl Webhooks {
    /// Ready from the start unless [`Webhooks::readiness`] gives a flag.
    pub fn new(gate: GateSettings, classifier: Arc<dyn PodClassifier>) -> Self {
        Webhooks {
            gate,
            classifier,
            ready: Arc::new(AtomicBool::new(true)),
            metrics: WebhookMetrics::default(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            extra: Vec::new(),
        }
    }

    pub fn gate(mut self, gate: GateSettings) -> Self {
        self.gate = gate;
        self
    }

    pub fn classifier(mut self, classifier: Arc<dyn PodClassifier>) -> Self {
        self.classifier = classifier;
        self
    }

    /// `/readyz` answers 200 while `ready` is true, else 503.
    pub fn readiness(mut self, ready: Arc<AtomicBool>) -> Self {
        self.ready = ready;
        self
    }

    pub fn metrics(mut self, metrics: WebhookMetrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Larger request bodies get 413.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Serves `handler` at `path` for objects of type `K`; `operation` labels its metrics.
    pub fn handler<K>(
        mut self,
        path: &str,
        operation: &'static str,
        handler: Arc<dyn AdmissionHandler<K>>,
    ) -> Self
    where
        K: kube::Resource + DeserializeOwned + 'static,
    {
        self.extra.push((
            path.to_string(),
            Box::new(move |metrics: &WebhookMetrics, max_body_bytes| {
                Arc::new(TypedEndpoint {
                    operation,
                    handler,
                    metrics: metrics.clone(),
                    max_body_bytes,
                    convert: same::<K>,
                }) as Arc<dyn Endpoint>
            }),
        ));
        self
    }

    /// Serves an application handler at `path` (e.g. "/mutate-applications").
    pub fn application(self, path: &str, handler: Arc<dyn ApplicationHandler>) -> Self {
        let operation = handler.name();
        self.handler::<DynamicObject>(path, operation, Arc::new(Application(handler)))
    }

    /// The routes: `/mutate-pods`, `/validate-pods`, `/healthz`, `/readyz` and the extra handlers.
    pub fn router(self) -> Router {
        let endpoint = |operation: &'static str, handler: Arc<dyn AdmissionHandler<Pod>>| {
            // Only the fields the pod webhooks judge are decoded (see pods::wire).
            Arc::new(TypedEndpoint::<Pod, PartialPod> {
                operation,
                handler,
                metrics: self.metrics.clone(),
                max_body_bytes: self.max_body_bytes,
                convert: into_pod_request,
            }) as Arc<dyn Endpoint>
        };
        let mut endpoints = vec![
            (
                "/mutate-pods".to_string(),
                endpoint(
                    "mutate_pods",
                    Arc::new(MutatePods {
                        gate: self.gate.clone(),
                        classifier: self.classifier.clone(),
                    }),
                ),
            ),
            (
                "/validate-pods".to_string(),
                endpoint(
                    "validate_pods",
                    Arc::new(ValidatePods {
                        gate: self.gate.clone(),
                        classifier: self.classifier.clone(),
                    }),
                ),
            ),
        ];
        for (path, make) in self.extra {
            endpoints.push((path, make(&self.metrics, self.max_body_bytes)));
        }
        let mut router = Router::new();
        for (path, endpoint) in endpoints {
            router = router.route(
                &path,
                post(
                    |State(endpoint): State<Arc<dyn Endpoint>>,
                     headers: HeaderMap,
                     body: Result<Bytes, BytesRejection>| async move {
                        endpoint.answer(&headers, body)
                    },
                )
                .with_state(endpoint),
            );
        }
        router
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(readyz).with_state(self.ready))
            .layer(DefaultBodyLimit::max(self.max_body_bytes))
    }
}

async fn readyz(State(ready): State<Arc<AtomicBool>>) -> Response {
    if ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the webhook configurations are not registered yet",
        )
            .into_response()
    }
}

/// The routes of `webhooks`, without TLS (see [`Webhooks::router`]).
pub fn router(webhooks: Webhooks) -> Router {
    webhooks.router()
}

/// The webhooks on HTTPS: TLS 1.2+ with HTTP/1.1 and HTTP/2 (ALPN, as configured by the
/// [`RustlsConfig`], which sluice-certs reloads in place when the certificate is renewed).
pub struct WebhookServer {
    listen: SocketAddr,
    tls: RustlsConfig,
    webhooks: Webhooks,
    shutdown_grace: Duration,
}

/// Builds a [`WebhookServer`]; every setting but the address and TLS has a default.
pub struct WebhookServerBuilder {
    server: WebhookServer,
}

impl WebhookServer {
    pub fn new(listen: SocketAddr, tls: RustlsConfig, webhooks: Webhooks) -> Self {
        WebhookServer {
            listen,
            tls,
            webhooks,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        }
    }

    pub fn builder(listen: SocketAddr, tls: RustlsConfig) -> WebhookServerBuilder {
        WebhookServerBuilder {
            server: WebhookServer::new(listen, tls, Webhooks::default()),
        }
    }

    /// Binds the listen address and serves until `shutdown` is cancelled, then lets open
    /// requests finish for the shutdown grace period.
    pub async fn serve(self, shutdown: CancellationToken) -> Result<(), WebhookError> {
        let server = axum_server::bind_rustls(self.listen, self.tls.clone()).map(no_delay);
        let listen = self.listen;
        self.run(server, listen, shutdown).await
    }

    /// Like [`WebhookServer::serve`], on a runtime of its own with `threads` worker threads (1: a
    /// single-threaded runtime, no work stealing, no cross-thread wake-ups), so that admission
    /// answers never queue behind other work of the process (an admission pass over 100k pods
    /// holds a thread for a few hundred ms). Resolves when the server stops.
    pub async fn serve_dedicated(
        self,
        threads: usize,
        listener: Option<std::net::TcpListener>,
        shutdown: CancellationToken,
    ) -> Result<(), WebhookError> {
        let (done, result) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("webhooks".into())
            .spawn(move || {
                let outcome = match dedicated_runtime(threads) {
                    Ok(runtime) => runtime.block_on(async move {
                        match listener {
                            Some(listener) => self.serve_on(listener, shutdown).await,
                            None => self.serve(shutdown).await,
                        }
                    }),
                    Err(e) => Err(WebhookError::Runtime(e)),
                };
                let _ = done.send(outcome);
            })
            .map_err(WebhookError::Runtime)?;
        result.await.unwrap_or(Err(WebhookError::Stopped))
    }

    /// Like [`WebhookServer::serve`] on a listener bound by the caller (e.g. to port 0 in tests);
    /// the listen address given to the builder is ignored.
    pub async fn serve_on(
        self,
        listener: std::net::TcpListener,
        shutdown: CancellationToken,
    ) -> Result<(), WebhookError> {
        listener
            .set_nonblocking(true)
            .map_err(WebhookError::Listener)?;
        let listen = listener.local_addr().map_err(WebhookError::Listener)?;
        let server = axum_server::tls_rustls::from_tcp_rustls(listener, self.tls.clone())
            .map_err(WebhookError::Listener)?
            .map(no_delay);
        self.run(server, listen, shutdown).await
    }

    async fn run(
        self,
        server: axum_server::Server<SocketAddr, Acceptor>,
        listen: SocketAddr,
        shutdown: CancellationToken,
    ) -> Result<(), WebhookError> {
        let handle = axum_server::Handle::new();
        let stopper = {
            let handle = handle.clone();
            let grace = self.shutdown_grace;
            tokio::spawn(async move {
                shutdown.cancelled().await;
                info!("webhook server shutting down");
                handle.graceful_shutdown(Some(grace));
            })
        };
        info!(%listen, "webhook server listening (TLS, HTTP/1.1 and HTTP/2)");
        let result = server
            .handle(handle)
            .serve(self.webhooks.router().into_make_service())
            .await
            .map_err(|source| WebhookError::Serve {
                addr: listen,
                source,
            });
        stopper.abort();
        result
    }
}

/// The runtime the webhook server runs on by itself: `threads` worker threads, or with 1 a
/// single-threaded runtime (no work stealing, no cross-thread wake-ups).
pub fn dedicated_runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    builder.enable_all().thread_name("webhooks").build()
}

impl WebhookServerBuilder {
    /// The same builder with its [`Webhooks`] set by `set` (the methods below forward to them).
    fn with(mut self, set: impl FnOnce(Webhooks) -> Webhooks) -> Self {
        self.server.webhooks = set(self.server.webhooks);
        self
    }
    pub fn gate(self, gate: GateSettings) -> Self {
        self.with(|w| w.gate(gate))
    }
    pub fn classifier(self, classifier: Arc<dyn PodClassifier>) -> Self {
        self.with(|w| w.classifier(classifier))
    }
    /// `/readyz` answers 200 while `ready` is true, else 503.
    pub fn readiness(self, ready: Arc<AtomicBool>) -> Self {
        self.with(|w| w.readiness(ready))
    }
    pub fn metrics(self, metrics: WebhookMetrics) -> Self {
        self.with(|w| w.metrics(metrics))
    }
    pub fn max_body_bytes(self, bytes: usize) -> Self {
        self.with(|w| w.max_body_bytes(bytes))
    }
    /// Serves `handler` at `path` for objects of type `K`; `operation` labels its metrics.
    pub fn handler<K>(
        self,
        path: &str,
        operation: &'static str,
        handler: Arc<dyn AdmissionHandler<K>>,
    ) -> Self
    where
        K: kube::Resource + DeserializeOwned + 'static,
    {
        self.with(|w| w.handler(path, operation, handler))
    }
    /// Serves an application handler at `path` (e.g. "/mutate-applications").
    pub fn application(self, path: &str, handler: Arc<dyn ApplicationHandler>) -> Self {
        self.with(|w| w.application(path, handler))
    }
    /// How long open requests may finish after shutdown starts (default 10 s).
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.server.shutdown_grace = grace;
        self
    }
    pub fn build(self) -> WebhookServer {
        self.server
    }
}

#[cfg(test)]
mod tests;
