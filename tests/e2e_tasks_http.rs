//! The `http` executor end to end in HAR request form, over https with a CA made in the test: the
//! CA bundle from a ConfigMap or a labelled Secret, a client certificate from a Secret, HTTP/2,
//! the query string, headers, cookies and a form body substituted; success judged by the status
//! and a condition over the body; a server the CA does not vouch for refused; a kill cancels the
//! request. sluice runs on the host, so the servers listen on loopback in the test process.
//! Run with `hack/test.sh --test e2e_tasks_http`.

mod support;
#[path = "support/tasks.rs"]
mod task_support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    SanType,
};
use serde_json::{Value, json};
use sluice::api::TaskPhase;
use support::*;
use task_support::*;

const T: Duration = Duration::from_secs(60);

/// A CA made for the test, and certificates it signs: (certificate PEM, key PEM).
struct TestCa {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    fn new(name: &str) -> TestCa {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).expect("CA");
        TestCa {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    fn sign(&self, cn: &str, server: bool) -> (String, String) {
        let key = KeyPair::generate().expect("key");
        let names = if server {
            vec!["localhost".to_string()]
        } else {
            vec![]
        };
        let mut params = CertificateParams::new(names).expect("params");
        params.distinguished_name.push(DnType::CommonName, cn);
        if server {
            params
                .subject_alt_names
                .push(SanType::IpAddress([127, 0, 0, 1].into()));
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        } else {
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        }
        let cert = params.signed_by(&key, &self.issuer).expect("signed");
        (cert.pem(), key.serialize_pem())
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// An https echo server on loopback: answers `{"method", "version", "path", "query", "headers",
/// "body", "ok": true}`; `/slow` never answers. With `client_ca`, a client certificate signed by it
/// is required.
async fn https_server(ca: &TestCa, client_ca: Option<&TestCa>) -> SocketAddr {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let (cert, key) = ca.sign("echo", true);
    let chain = vec![CertificateDer::from_pem_slice(cert.as_bytes()).expect("cert")];
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("key");
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("versions");
    let builder = match client_ca {
        Some(client_ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(CertificateDer::from_pem_slice(client_ca.pem.as_bytes()).expect("ca"))
                .expect("root");
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                roots.into(),
                provider(),
            )
            .build()
            .expect("verifier");
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).expect("server config");
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let app = axum::Router::new().fallback(|req: Request| async move {
        if req.uri().path().starts_with("/slow") {
            std::future::pending::<()>().await;
        }
        let method = req.method().to_string();
        let version = format!("{:?}", req.version());
        let path = req.uri().path().to_string();
        let query = req.uri().query().unwrap_or("").to_string();
        let headers: BTreeMap<String, String> = req
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
            .collect();
        let body = axum::body::to_bytes(req.into_body(), 1 << 20)
            .await
            .unwrap_or_default();
        json!({"method": method, "version": version, "path": path, "query": query,
            "headers": headers, "body": String::from_utf8_lossy(&body), "ok": true})
        .to_string()
    });
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("addr");
    let tls = axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(config));
    let server = axum_server::from_tcp_rustls(listener, tls).expect("server");
    tokio::spawn(async move {
        let _ = server.serve(app.into_make_service()).await;
    });
    addr
}

async fn create_secret(env: &TestEnv, name: &str, labelled: bool, data: &[(&str, &str)]) {
    let labels = labelled.then(|| {
        [("sluice.dev/task-tls".to_string(), "true".to_string())]
            .into_iter()
            .collect()
    });
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            labels,
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    };
    create(
        &Api::<Secret>::namespaced(env.client.clone(), &env.namespace),
        &secret,
    )
    .await;
}

async fn create_configmap(env: &TestEnv, name: &str, key: &str, value: &str) {
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some([(key.to_string(), value.to_string())].into_iter().collect()),
        ..Default::default()
    };
    create(
        &Api::<ConfigMap>::namespaced(env.client.clone(), &env.namespace),
        &cm,
    )
    .await;
}

fn http_task(name: &str, http: Value) -> Value {
    json!({"apiVersion": "sluice.dev/v1alpha1", "kind": "Task", "metadata": {"name": name},
        "spec": {"executor": {"http": http}}})
}

async fn message_of(env: &TestEnv, name: &str, phase: TaskPhase) -> String {
    let t = wait_phase(env, name, phase, T).await;
    t.status.expect("status").message
}

#[tokio::test]
async fn https_with_the_tasks_ca_in_har_form() {
    let env = env_or_skip!("task-https");
    let ca = TestCa::new("task test CA");
    let addr = https_server(&ca, None).await;
    create_configmap(&env, "echo-ca", "ca.crt", &ca.pem).await;
    let base = format!("https://127.0.0.1:{}", addr.port());
    let request = json!({
        "method": "POST", "url": format!("{base}/echo/${{task.name}}?fixed=1"),
        "httpVersion": "HTTP/2",
        "headers": [{"name": "X-Task", "value": "${task.namespace}", "comment": "who asks"}],
        "queryString": [{"name": "q", "value": "a b&${task.name}"}],
        "cookies": [{"name": "session", "value": "s-${task.name}"}],
        "postData": {"mimeType": "application/x-www-form-urlencoded",
            "params": [{"name": "n", "value": "${task.name}"}, {"name": "x", "value": "1+1"}]},
    });
    create_task(
        &env,
        http_task(
            "echo",
            json!({"request": request, "tls": {"caBundle": {"configMap": "echo-ca"}},
            "successCondition": "$.ok", "resultJsonPath": "$"}),
        ),
    )
    .await;
    let done = wait_phase(&env, "echo", TaskPhase::Success, T).await;
    let status = done.status.expect("status");
    let r = status.result.expect("result");
    assert_eq!(r["method"], "POST");
    assert_eq!(r["version"], "HTTP/2.0", "HTTP/2 negotiated with ALPN");
    assert_eq!(r["path"], "/echo/echo");
    assert_eq!(r["query"], "fixed=1&q=a+b%26echo");
    assert_eq!(r["headers"]["x-task"], json!(env.namespace));
    assert_eq!(r["headers"]["cookie"], "session=s-echo");
    assert_eq!(
        r["headers"]["content-type"],
        "application/x-www-form-urlencoded"
    );
    assert_eq!(r["body"], "n=echo&x=1%2B1");
    assert_eq!(status.message, "HTTP 200");

    // The body judged: a condition that does not hold fails the Task with the response kept.
    create_task(
        &env,
        http_task(
            "judged",
            json!({"request": {"url": format!("{base}/echo")},
            "tls": {"caBundle": {"configMap": "echo-ca"}}, "successCondition": "$.method == \"PUT\""}),
        ),
    )
    .await;
    let message = message_of(&env, "judged", TaskPhase::Failed).await;
    assert!(
        message.contains("successCondition does not hold"),
        "{message}"
    );

    // Without the CA, the server's certificate is refused (the system's roots do not know it).
    create_task(
        &env,
        http_task(
            "untrusted",
            json!({"request": {"url": format!("{base}/echo")}}),
        ),
    )
    .await;
    let message = message_of(&env, "untrusted", TaskPhase::Failed).await;
    assert!(message.to_lowercase().contains("certificate"), "{message}");

    // A kill cancels a request in flight over https.
    create_task(
        &env,
        http_task(
            "hung",
            json!({"request": {"url": format!("{base}/slow")},
            "tls": {"caBundle": {"configMap": "echo-ca"}}}),
        ),
    )
    .await;
    wait_phase(&env, "hung", TaskPhase::Running, T).await;
    kill_now(&env, "hung").await;
    wait_killed(&env, "hung", "killTimestamp", T).await;
    env.cleanup().await;
}

#[tokio::test]
async fn https_with_a_client_certificate_from_a_labelled_secret() {
    let env = env_or_skip!("task-mtls");
    let ca = TestCa::new("server CA");
    let clients = TestCa::new("client CA");
    let addr = https_server(&ca, Some(&clients)).await;
    let url = format!("https://127.0.0.1:{}/echo", addr.port());
    let (cert, key) = clients.sign("task-client", false);
    create_secret(&env, "server-ca", true, &[("ca.crt", &ca.pem)]).await;
    create_secret(
        &env,
        "client-cert",
        true,
        &[("tls.crt", &cert), ("tls.key", &key)],
    )
    .await;
    create_secret(
        &env,
        "unlabelled-cert",
        false,
        &[("tls.crt", &cert), ("tls.key", &key)],
    )
    .await;
    let with = |secret: Option<&str>| {
        let mut tls = json!({"caBundle": {"secret": "server-ca"}});
        if let Some(s) = secret {
            tls["clientCertificateSecret"] = json!(s);
        }
        json!({"request": {"url": url, "httpVersion": "HTTP/1.1"}, "tls": tls, "resultJsonPath": "$.version"})
    };
    create_task(&env, http_task("mtls", with(Some("client-cert")))).await;
    let done = wait_phase(&env, "mtls", TaskPhase::Success, T).await;
    assert_eq!(done.status.expect("status").result, Some(json!("HTTP/1.1")));

    create_task(&env, http_task("anonymous", with(None))).await;
    let message = message_of(&env, "anonymous", TaskPhase::Failed).await;
    assert!(message.contains(&url), "{message}");

    create_task(&env, http_task("borrowed", with(Some("unlabelled-cert")))).await;
    let message = message_of(&env, "borrowed", TaskPhase::Failed).await;
    assert!(
        message.contains("not labelled sluice.dev/task-tls=true"),
        "{message}"
    );
    env.cleanup().await;
}
