//! The real server on 127.0.0.1 with a certificate from sluice-certs: AdmissionReviews over
//! HTTPS with HTTP/2 and HTTP/1.1 (ALPN), a certificate reload without a restart, and a graceful
//! shutdown.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::core::v1::Pod;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use sluice_certs::{CertSettings, ServingCerts};
use sluice_webhooks::{GateSettings, PodClassifier, WebhookServer};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_util::sync::CancellationToken;

#[path = "support/queue_label.rs"]
mod queue_label;
use queue_label::QueueLabel;

fn settings() -> CertSettings {
    CertSettings {
        dns_names: vec!["localhost".into()],
        ..CertSettings::for_service("sluice-system", "sluice-webhook", "unused")
    }
}

fn review(uid: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "research", "name": "etl-7", "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {"metadata": {"name": "etl-7", "labels": {"sluice.dev/queue": "research"}}, "spec": {"containers": []}},
            "oldObject": null, "dryRun": false,
        }
    }))
    .expect("json")
}

/// Connects trusting only the CAs of `ca_pem`, offering `alpn`.
async fn connect(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    alpn: &[u8],
) -> Result<TlsStream<TcpStream>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(ca.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())
}

fn post(uri: &str, uid: &str) -> Request<Full<Bytes>> {
    Request::post(uri)
        .header("content-type", "application/json")
        .header("host", "localhost")
        .body(Full::new(Bytes::from(review(uid))))
        .expect("request")
}

async fn check_answer(response: hyper::Response<hyper::body::Incoming>, uid: &str) {
    assert_eq!(response.status(), StatusCode::OK);
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let answer: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(answer["response"]["uid"], uid);
    assert_eq!(answer["response"]["patchType"], "JSONPatch");
}

async fn start(
    certs: &ServingCerts,
) -> (
    std::net::SocketAddr,
    axum_server::tls_rustls::RustlsConfig,
    CancellationToken,
    tokio::task::JoinHandle<Result<(), sluice_webhooks::WebhookError>>,
) {
    let tls = sluice_certs::axum_rustls_config(certs).expect("tls config");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = WebhookServer::builder(addr, tls.clone())
        .gate(GateSettings::default())
        .classifier(Arc::new(QueueLabel))
        .readiness(Arc::new(AtomicBool::new(true)))
        .shutdown_grace(Duration::from_secs(1))
        .build();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(server.serve_on(listener, shutdown.clone()));
    (addr, tls, shutdown, task)
}

#[tokio::test]
async fn reviews_are_answered_over_https_with_http2_and_http1_and_certificates_reload_in_place() {
    let certs = sluice_certs::generate(&settings()).expect("certificates");
    let (addr, tls, shutdown, task) = start(&certs).await;

    // HTTP/2, chosen by ALPN; several requests multiplexed on one connection.
    let stream = connect(addr, &certs.ca_pem, b"h2")
        .await
        .expect("h2 connect");
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("h2 handshake");
    tokio::spawn(connection);
    let mut answers = Vec::new();
    for i in 0..4 {
        let mut sender = sender.clone();
        answers.push(tokio::spawn(async move {
            let uid = format!("h2-{i}");
            let response = sender
                .send_request(post("https://localhost/mutate-pods", &uid))
                .await
                .expect("h2 response");
            check_answer(response, &uid).await;
        }));
    }
    for answer in answers {
        answer.await.expect("h2 request");
    }
    drop(sender);

    // HTTP/1.1 with keep-alive: two requests on one connection.
    let stream = connect(addr, &certs.ca_pem, b"http/1.1")
        .await
        .expect("http/1.1 connect");
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("http/1.1 handshake");
    tokio::spawn(connection);
    for uid in ["h1-a", "h1-b"] {
        let response = sender
            .send_request(post("/mutate-pods", uid))
            .await
            .expect("http/1.1 response");
        check_answer(response, uid).await;
    }
    drop(sender);

    // A new CA and certificate, swapped in without a restart: new connections see it.
    let replacement = sluice_certs::generate(&settings()).expect("new certificates");
    tls.reload_from_config(Arc::new(
        sluice_certs::rustls_server_config(&replacement).expect("config"),
    ));
    assert!(
        connect(addr, &certs.ca_pem, b"h2").await.is_err(),
        "the old CA no longer matches"
    );
    let stream = connect(addr, &replacement.ca_pem, b"http/1.1")
        .await
        .expect("connect with the new CA");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    check_answer(
        sender
            .send_request(post("/mutate-pods", "after-reload"))
            .await
            .expect("response"),
        "after-reload",
    )
    .await;
    drop(sender);

    shutdown.cancel();
    let result = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("stops in time")
        .expect("task");
    assert!(result.is_ok(), "{result:?}");
}
