//! Load generator for sluice's pod webhook: sends real pod AdmissionReviews (a Spark executor shape,
//! ~6 KB) over TLS with keep-alive and reports latency percentiles and throughput.
//!
//! Without --url it starts sluice's webhook server in this process on 127.0.0.1 (a fresh CA, the same
//! router `sluice serve` uses). With --url it loads a running `sluice serve` (give its CA with --ca).
//!
//!   cargo run --release --example webhook_load -- --requests 200000 --concurrency 64
//!   cargo run --release --example webhook_load -- --rate 20000 --seconds 10

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use serde_json::json;

struct Args {
    url: Option<String>,
    ca: Option<String>,
    requests: usize,
    concurrency: usize,
    rate: f64,
    seconds: f64,
    http2: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        url: None,
        ca: None,
        requests: 100_000,
        concurrency: 32,
        rate: 0.0,
        seconds: 0.0,
        http2: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => args.url = Some(value()?),
            "--ca" => args.ca = Some(value()?),
            "--requests" => {
                args.requests = value()?.parse().map_err(|e| format!("--requests: {e}"))?
            }
            "--concurrency" => {
                args.concurrency = value()?
                    .parse()
                    .map_err(|e| format!("--concurrency: {e}"))?
            }
            "--rate" => args.rate = value()?.parse().map_err(|e| format!("--rate: {e}"))?,
            "--seconds" => {
                args.seconds = value()?.parse().map_err(|e| format!("--seconds: {e}"))?
            }
            "--http2" => args.http2 = true,
            "-h" | "--help" => {
                println!(
                    "webhook_load [--url https://127.0.0.1:9443] [--ca ca.pem] [--requests N] [--concurrency C] [--rate R/s --seconds S] [--http2]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown flag {other} (see --help)")),
        }
    }
    Ok(args)
}

/// A Spark executor pod as the driver creates it, governed by queue "research".
fn review(i: usize) -> Vec<u8> {
    let env: Vec<serde_json::Value> = (0..24)
        .map(|k| json!({"name": format!("SPARK_ENV_{k}"), "value": format!("value-{k}-{}", "x".repeat(40))}))
        .collect();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": "etl-exec-", "namespace": "research",
            "labels": {"spark-app-selector": "spark-0123456789abcdef", "spark-role": "executor", "spark-exec-id": i.to_string(), "sluice.dev/queue": "research"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "etl-driver", "uid": "9b0f4c1e-8a43-4a4e-9d1e-2f3b9a7c1d11", "controller": true}],
        },
        "spec": {
            "restartPolicy": "Never", "hostname": format!("etl-exec-{i}"),
            "containers": [{
                "name": "spark-kubernetes-executor", "image": "apache/spark:3.5.3",
                "args": ["executor"], "env": env,
                "resources": {"requests": {"cpu": "1", "memory": "1408Mi"}, "limits": {"memory": "1408Mi"}},
                "ports": [{"containerPort": 7079, "name": "blockmanager"}],
                "volumeMounts": [{"name": "spark-local-dir-1", "mountPath": "/var/data/spark-1"}, {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
            }],
            "volumes": [{"name": "spark-local-dir-1", "emptyDir": {}}, {"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
        },
    });
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": format!("00000000-0000-0000-0000-{i:012}"),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "research", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:research:spark"},
            "object": pod, "oldObject": null, "dryRun": false,
        }
    }))
    .expect("review encodes")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("webhook_load: {e}");
            std::process::exit(2);
        }
    };
    let _ = rustls::crypto::ring::default_provider().install_default();

    // The server: in this process unless --url is given.
    let (url, ca_pem) = match &args.url {
        Some(url) => {
            let path = args.ca.as_deref().unwrap_or_else(|| {
                eprintln!("webhook_load: --url needs --ca (the CA bundle, e.g. from the Secret sluice-webhook-tls)");
                std::process::exit(2)
            });
            (
                url.clone(),
                std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}")),
            )
        }
        None => {
            let settings = sluice_certs::CertSettings {
                namespace: "sluice-system".into(),
                secret_name: "unused".into(),
                dns_names: vec!["localhost".into()],
                ip_addresses: vec![std::net::IpAddr::from([127, 0, 0, 1])],
                serving_validity: Duration::from_secs(3600),
                check_interval: Duration::from_secs(3600),
            };
            let certs = sluice_certs::generate(&settings).expect("certificates");
            let tls = sluice_certs::axum_rustls_config(&certs).expect("tls");
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .expect("port")
                .local_addr()
                .expect("addr")
                .port();
            let listen: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
            let server = sluice_webhooks::WebhookServer::builder(listen, tls)
                .gate(sluice_webhooks::GateSettings {
                    gate_name: sluice::api::ADMISSION_GATE.into(),
                    protected_label_prefix: sluice::api::PROTECTED_LABEL_PREFIX.into(),
                    governed_label: sluice::api::QUEUE_LABEL.into(),
                    controller_usernames: vec!["system:serviceaccount:sluice-system:sluice".into()],
                })
                .classifier(Arc::new(sluice::adapters::Adapters::default()))
                .readiness(Arc::new(AtomicBool::new(true)))
                .build();
            tokio::spawn(server.serve(tokio_util::sync::CancellationToken::new()));
            (format!("https://127.0.0.1:{port}"), certs.ca_pem)
        }
    };

    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.expect("CA PEM")).expect("CA");
    }
    let tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only();
    let connector = if args.http2 {
        builder.enable_http2().build()
    } else {
        builder.enable_http1().build()
    };
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .http2_only(args.http2)
        .pool_max_idle_per_host(args.concurrency)
        .build(connector);
    let target: hyper::Uri = format!("{url}/mutate-pods").parse().expect("url");

    // Wait for the server, then warm up the connections.
    let bodies: Arc<Vec<Bytes>> = Arc::new((0..256).map(|i| Bytes::from(review(i))).collect());
    println!("review size: {} bytes", bodies[0].len());
    let send = |client: Client<_, Full<Bytes>>, body: Bytes, target: hyper::Uri| async move {
        let request = hyper::Request::post(target)
            .header("content-type", "application/json")
            .body(Full::new(body))
            .expect("request");
        let response = client.request(request).await.map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        if !status.is_success() || !body.windows(9).any(|w| w == b"JSONPatch") {
            return Err(format!(
                "unexpected answer {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ));
        }
        Ok::<(), String>(())
    };
    for _ in 0..200 {
        if send(client.clone(), bodies[0].clone(), target.clone())
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    let total = if args.rate > 0.0 {
        (args.rate * args.seconds.max(1.0)) as usize
    } else {
        args.requests
    };
    let interval = (args.rate > 0.0).then(|| Duration::from_secs_f64(1.0 / args.rate));
    let started = Instant::now();
    let semaphore = Arc::new(tokio::sync::Semaphore::new(args.concurrency));
    let mut tasks = Vec::with_capacity(total);
    for i in 0..total {
        if let Some(interval) = interval {
            // Open loop at a fixed rate: latency counts from the scheduled send time.
            let due = started + interval * i as u32;
            tokio::time::sleep_until(due.into()).await;
        }
        let permit = semaphore.clone().acquire_owned().await.expect("semaphore");
        let (client, body, target) = (
            client.clone(),
            bodies[i % bodies.len()].clone(),
            target.clone(),
        );
        let scheduled = interval
            .map(|iv| started + iv * i as u32)
            .unwrap_or_else(Instant::now);
        tasks.push(tokio::spawn(async move {
            let result = send(client, body, target).await;
            drop(permit);
            result.map(|_| scheduled.elapsed())
        }));
    }
    let mut latencies = Vec::with_capacity(total);
    let mut errors = 0usize;
    for t in tasks {
        match t.await {
            Ok(Ok(d)) => latencies.push(d),
            Ok(Err(e)) => {
                if errors == 0 {
                    eprintln!("first error: {e}");
                }
                errors += 1;
            }
            Err(_) => errors += 1,
        }
    }
    let elapsed = started.elapsed();
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "requests {} errors {} concurrency {} {} in {:.2}s: {:.0} reviews/s; latency ms p50 {:.3} p99 {:.3} p99.9 {:.3} max {:.3}",
        latencies.len(),
        errors,
        args.concurrency,
        if args.rate > 0.0 {
            format!("target {:.0}/s", args.rate)
        } else {
            "max rate".to_string()
        },
        elapsed.as_secs_f64(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        ms(percentile(&latencies, 0.50)),
        ms(percentile(&latencies, 0.99)),
        ms(percentile(&latencies, 0.999)),
        ms(latencies.last().copied().unwrap_or_default()),
    );
}
