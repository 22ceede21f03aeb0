//! The servers the load generator can start in its own process: sluice's webhook server as
//! `sluice serve` builds it, and the floor (the same TLS and HTTP stack answering without decoding).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// sluice's webhook server as `sluice serve` builds it (gate settings, the adapters as classifier,
/// a runtime of its own with `threads` threads), with a fresh CA, on `listen` (port 0: any free
/// port). Returns its URL and the CA in PEM.
pub(crate) fn start_server(listen: std::net::SocketAddr, threads: usize) -> (String, String) {
    let (tls, listener, url, ca_pem) = serving_setup(listen);
    let server = sluice_webhooks::WebhookServer::builder(listen, tls)
        .gate(sluice_webhooks::GateSettings {
            gate_name: sluice::api::ADMISSION_GATE.into(),
            protected_label_prefix: sluice::api::PROTECTED_LABEL_PREFIX.into(),
            governed_label: sluice::api::QUEUE_LABEL.into(),
            controller_usernames: vec!["system:serviceaccount:sluice-system:sluice".into()],
            ..sluice_webhooks::GateSettings::default()
        })
        .classifier(Arc::new(sluice::integrations::Adapters::default()))
        .readiness(Arc::new(AtomicBool::new(true)))
        .build();
    tokio::spawn(server.serve_dedicated(
        threads,
        Some(listener),
        tokio_util::sync::CancellationToken::new(),
    ));
    (url, ca_pem)
}

/// A fresh CA and serving certificate for `listen`'s address, the TLS config from them, and the
/// listener bound (port 0: any free port). Returns also the URL and the CA in PEM.
fn serving_setup(
    listen: std::net::SocketAddr,
) -> (
    axum_server::tls_rustls::RustlsConfig,
    std::net::TcpListener,
    String,
    String,
) {
    let settings = sluice_certs::CertSettings {
        namespace: "sluice-system".into(),
        secret_name: "unused".into(),
        dns_names: vec!["localhost".into()],
        ip_addresses: vec![listen.ip()],
        serving_validity: Duration::from_secs(3600),
        check_interval: Duration::from_secs(3600),
    };
    let certs = sluice_certs::generate(&settings).expect("certificates");
    let tls = sluice_certs::axum_rustls_config(&certs).expect("tls");
    let listener = std::net::TcpListener::bind(listen).expect("bind the listen address");
    let port = listener.local_addr().expect("addr").port();
    let url = format!("https://{}:{port}", listen.ip());
    (tls, listener, url, certs.ca_pem)
}

/// The floor of what any webhook can do on this machine beside this load generator: the TLS and
/// HTTP stack of sluice's webhook server (axum-server on rustls, TCP_NODELAY, a runtime of its own
/// with `threads` threads, a certificate from the same generator) answering every request with one
/// fixed AdmissionReview after reading its body whole, never decoding it. Whatever latency this
/// shows at a rate, sluice's server cannot beat at that rate: it is the part of the figures that
/// belongs to the machine, the kernel, TLS, HTTP and the load generator itself.
pub(crate) fn start_floor_server(listen: std::net::SocketAddr, threads: usize) -> (String, String) {
    let (tls, listener, url, ca_pem) = serving_setup(listen);
    listener
        .set_nonblocking(true)
        .expect("non-blocking listener");
    // What sluice answers for a pod it admits, in size and shape: the request's uid (the API server
    // checks it) and one fixed JSONPatch adding a label (every pod of e2e_load has labels).
    const PATCH: &str = "W3sib3AiOiJhZGQiLCJwYXRoIjoiL21ldGFkYXRhL2xhYmVscy9iZW5jaC5zbHVpY2UuZGV2fjFmbG9vciIsInZhbHVlIjoieWVzIn1d";
    async fn answer(body: axum::body::Bytes) -> ([(&'static str, &'static str); 1], String) {
        // The body is read whole (as a real webhook must) and only scanned for the first "uid":
        // request.uid, as the API server and this load generator write their reviews.
        let uid = request_uid(&body).unwrap_or("");
        let answer = format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{{"uid":"{uid}","allowed":true,"patchType":"JSONPatch","patch":"{PATCH}"}}}}"#
        );
        ([("content-type", "application/json")], answer)
    }
    std::thread::Builder::new()
        .name("floor".into())
        .spawn(move || {
            let runtime =
                sluice_webhooks::dedicated_runtime(threads).expect("floor server runtime");
            runtime.block_on(async move {
                let router = axum::Router::new().route("/mutate-pods", axum::routing::post(answer));
                let server = axum_server::tls_rustls::from_tcp_rustls(listener, tls)
                    .expect("floor server listener")
                    .map(|a| a.acceptor(axum_server::accept::NoDelayAcceptor::new()));
                if let Err(e) = server.serve(router.into_make_service()).await {
                    eprintln!("webhook_load: floor server: {e}");
                }
            });
        })
        .expect("floor server thread");
    (url, ca_pem)
}

/// The value of the first `"uid":"…"` in an AdmissionReview's bytes, without decoding them.
fn request_uid(body: &[u8]) -> Option<&str> {
    const KEY: &[u8] = b"\"uid\":\"";
    let start = body.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let len = body[start..].iter().position(|&b| b == b'"')?;
    std::str::from_utf8(&body[start..start + len]).ok()
}
