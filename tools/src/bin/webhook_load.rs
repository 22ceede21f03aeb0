//! Load generator for sluice's pod webhook: sends real pod AdmissionReviews (a Spark executor shape,
//! ~6 KB) over TLS with keep-alive and reports latency percentiles and throughput.
//!
//! Without --url it starts sluice's webhook server in this process on 127.0.0.1 (a fresh CA, the same
//! router `sluice serve` uses). With --url it loads a running server (give its CA with --ca): a
//! `sluice serve`, or this tool started with `--serve-only` in another process (the webhook server
//! of `sluice serve`, same builder, classifier and gate settings, without the controller).
//!
//!   cargo run --release -p sluice-tools --bin webhook_load -- --requests 200000 --concurrency 64
//!   cargo run --release -p sluice-tools --bin webhook_load -- --rate 20000 --seconds 10
//!   webhook_load --serve-only --listen 127.0.0.1:9443 --ca-out ca.pem &
//!   webhook_load --url https://127.0.0.1:9443 --ca ca.pem --rate 20000 --seconds 10 --shape mixed --json

#[path = "webhook_load/reviews.rs"]
mod reviews;
#[path = "webhook_load/servers.rs"]
mod servers;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use serde_json::json;

use reviews::review;
use servers::{start_floor_server, start_server};

/// The allocator of the sluice binary, so that the in-process server measures as `sluice serve` runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Args {
    url: Option<String>,
    ca: Option<String>,
    requests: usize,
    concurrency: usize,
    rate: f64,
    seconds: f64,
    http2: bool,
    shape: Shape,
    json: bool,
    serve_only: bool,
    floor: bool,
    listen: Option<String>,
    ca_out: Option<String>,
    server_threads: usize,
    latencies_out: Option<String>,
    warmup: f64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Spark,
    Ray,
    /// Spark executors and Ray workers in turn.
    Mixed,
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
        shape: Shape::Spark,
        json: false,
        serve_only: false,
        floor: false,
        listen: None,
        ca_out: None,
        server_threads: 1,
        latencies_out: None,
        warmup: 0.0,
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
            "--json" => args.json = true,
            "--serve-only" => args.serve_only = true,
            "--floor" => args.floor = true,
            "--listen" => args.listen = Some(value()?),
            "--ca-out" => args.ca_out = Some(value()?),
            "--latencies-out" => args.latencies_out = Some(value()?),
            "--warmup" => {
                args.warmup = match value()?.parse::<f64>() {
                    Ok(s) if s.is_finite() && s >= 0.0 => s,
                    _ => return Err("--warmup: give seconds, 0 or more".into()),
                }
            }
            "--server-threads" => {
                args.server_threads = value()?
                    .parse()
                    .map_err(|e| format!("--server-threads: {e}"))?
            }
            "--shape" => {
                args.shape = match value()?.as_str() {
                    "spark" => Shape::Spark,
                    "ray" => Shape::Ray,
                    "mixed" => Shape::Mixed,
                    other => return Err(format!("--shape {other}: spark, ray or mixed")),
                }
            }
            "-h" | "--help" => {
                println!(
                    "webhook_load [--url https://127.0.0.1:9443 --ca ca.pem] [--requests N] [--concurrency C] [--rate R/s --seconds S] [--http2] [--shape spark|ray|mixed] [--warmup S] [--json] [--latencies-out FILE]\n       webhook_load --serve-only --listen 127.0.0.1:9443 --ca-out ca.pem [--server-threads N (default 1, as sluice serve --webhook-threads)] [--floor]\n  --floor: instead of sluice's webhooks, the same TLS/HTTP stack answering every request with one fixed AdmissionReview (the body read whole, never decoded): the fastest any webhook could be here.\n  The client runs on one thread; open-loop requests are released on time by a timerfd (microseconds).\n  --warmup S: with --rate, first S seconds at the rate that are sent and checked but not counted.\n  --latencies-out FILE: every answered request as `index scheduled_at_ms latency_ms`, to see when the slow ones happened."
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown flag {other} (see --help)")),
        }
    }
    Ok(args)
}

/// Where the load goes: one TLS connection per [`Sender`], HTTP/1.1 or HTTP/2 as chosen.
struct Target {
    host: String,
    port: u16,
    path: String,
    authority: String,
    http2: bool,
    tls: tokio_rustls::TlsConnector,
}

/// One connection's request sender.
enum Sender {
    Http1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    Http2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
    /// Moved to its worker (HTTP/1.1 connections are not shared).
    Taken,
}

impl Target {
    /// `https://host:port` (no path).
    fn parse(url: &str) -> Result<Target, String> {
        let rest = url
            .strip_prefix("https://")
            .ok_or("only https:// URLs are served by the webhook")?;
        let authority = rest.trim_end_matches('/').to_string();
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (h, p.parse().map_err(|e| format!("port {p:?}: {e}"))?),
            None => (authority.as_str(), 443),
        };
        Ok(Target {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port,
            path: "/mutate-pods".into(),
            authority: authority.clone(),
            http2: false,
            tls: tokio_rustls::TlsConnector::from(Arc::new(
                rustls::ClientConfig::builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth(),
            )),
        })
    }

    async fn connect(&self) -> Result<Sender, String> {
        let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| format!("connect: {e}"))?;
        tcp.set_nodelay(true).map_err(|e| format!("nodelay: {e}"))?;
        let name = rustls::pki_types::ServerName::try_from(self.host.clone())
            .map_err(|e| format!("server name {}: {e}", self.host))?;
        let stream = self
            .tls
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        let io = hyper_util::rt::TokioIo::new(stream);
        if self.http2 {
            let (sender, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
            tokio::spawn(connection);
            Ok(Sender::Http2(sender))
        } else {
            let (sender, connection) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(|e| format!("HTTP/1.1 handshake: {e}"))?;
            tokio::spawn(connection);
            Ok(Sender::Http1(sender))
        }
    }
}

impl Sender {
    /// Sends one review and checks that the answer is a JSONPatch.
    async fn send(&mut self, target: &Target, body: Bytes) -> Result<(), String> {
        let builder =
            hyper::Request::post(target.path.as_str()).header("content-type", "application/json");
        let request = match self {
            Sender::Http1(_) | Sender::Taken => builder.header("host", target.authority.as_str()),
            Sender::Http2(_) => builder.uri(format!("https://{}{}", target.authority, target.path)),
        }
        .body(Full::new(body))
        .map_err(|e| format!("request: {e}"))?;
        let response = match self {
            Sender::Http1(s) => {
                s.ready().await.map_err(|e| e.to_string())?;
                s.send_request(request).await
            }
            Sender::Http2(s) => {
                s.ready().await.map_err(|e| e.to_string())?;
                s.send_request(request).await
            }
            Sender::Taken => return Err("no connection".into()),
        }
        .map_err(|e| e.to_string())?;
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
        Ok(())
    }
}

/// Releases request `i` into `jobs` at `started + i * interval`, waiting on a timerfd in between.
async fn pace(
    jobs: async_channel::Sender<(usize, Instant)>,
    total: usize,
    started: Instant,
    interval: Duration,
) -> Result<(), String> {
    use timerfd::{ClockId, SetTimeFlags, TimerFd, TimerState};
    let timer =
        TimerFd::new_custom(ClockId::Monotonic, true, true).map_err(|e| format!("timerfd: {e}"))?;
    // `AsyncFd::new` is deprecated for values that may not own their descriptor; a `TimerFd`
    // owns its (an `OwnedFd`), so the safe constructor is sound here.
    #[allow(deprecated)]
    let mut timer =
        tokio::io::unix::AsyncFd::new(timer).map_err(|e| format!("timerfd with tokio: {e}"))?;
    let scheduled = |i: usize| started + interval.mul_f64(i as f64);
    let mut i = 0;
    while i < total {
        let now = Instant::now();
        while i < total && scheduled(i) <= now {
            if jobs.send((i, scheduled(i))).await.is_err() {
                return Ok(());
            }
            i += 1;
        }
        if i == total {
            break;
        }
        let wait = scheduled(i).saturating_duration_since(Instant::now());
        if wait.is_zero() {
            continue;
        }
        // A one-shot timer of zero would disarm it; `wait` is not zero here.
        timer
            .get_mut()
            .set_state(TimerState::Oneshot(wait), SetTimeFlags::Default);
        loop {
            let mut ready = timer
                .readable()
                .await
                .map_err(|e| format!("waiting on the timerfd: {e}"))?;
            let expired = ready.get_inner().read();
            ready.clear_ready();
            if expired > 0 {
                break;
            }
        }
    }
    jobs.close();
    Ok(())
}

/// Every answered request, in the order they were scheduled: `index scheduled_at_ms latency_ms`
/// (scheduled_at from the start of the run; open loop only, closed loop writes 0).
fn write_latencies(
    path: &str,
    timed: &mut [(usize, Duration)],
    interval_s: Option<f64>,
) -> std::io::Result<()> {
    use std::io::Write;
    timed.sort_unstable_by_key(|(i, _)| *i);
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(out, "index scheduled_at_ms latency_ms")?;
    for (i, latency) in timed.iter() {
        let at = interval_s.map_or(0.0, |s| *i as f64 * s * 1000.0);
        writeln!(out, "{i} {at:.3} {:.3}", latency.as_secs_f64() * 1000.0)?;
    }
    out.flush()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
}

/// One thread: the load generator costs the machine as little as it can and never wakes a second
/// thread of its own (the server under test runs in another process, or on a runtime of its own).
#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("webhook_load: {e}");
            std::process::exit(2);
        }
    };
    let _ = rustls::crypto::ring::default_provider().install_default();

    if args.serve_only {
        let listen: std::net::SocketAddr =
            match args.listen.as_deref().unwrap_or("127.0.0.1:9443").parse() {
                Ok(addr) => addr,
                Err(e) => {
                    eprintln!("webhook_load: --listen: {e}");
                    std::process::exit(2);
                }
            };
        let (url, ca_pem) = if args.floor {
            start_floor_server(listen, args.server_threads)
        } else {
            start_server(listen, args.server_threads)
        };
        // Written whole or not at all: a reader polling for the file never sees half of it.
        if let Some(path) = &args.ca_out {
            let partial = format!("{path}.partial");
            if let Err(e) =
                std::fs::write(&partial, &ca_pem).and_then(|()| std::fs::rename(&partial, path))
            {
                eprintln!("webhook_load: writing {path}: {e}");
                std::process::exit(1);
            }
        }
        println!(
            "serving {url} (CA in {})",
            args.ca_out.as_deref().unwrap_or("-")
        );
        let _ = tokio::signal::ctrl_c().await;
        return;
    }

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
        None => start_server(([127, 0, 0, 1], 0).into(), args.server_threads),
    };

    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.expect("CA PEM")).expect("CA");
    }
    let mut tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![if args.http2 {
        b"h2".to_vec()
    } else {
        b"http/1.1".to_vec()
    }];
    let target = Target::parse(&url).unwrap_or_else(|e| {
        eprintln!("webhook_load: --url {url}: {e}");
        std::process::exit(2)
    });
    let target = Arc::new(Target {
        tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
        http2: args.http2,
        ..target
    });

    // Pre-serialised bodies, sent as they are (a Bytes clone is a reference count).
    let bodies: Arc<Vec<Bytes>> = Arc::new(
        (0..256)
            .map(|i| Bytes::from(review(args.shape, i)))
            .collect(),
    );
    let mean_size = bodies.iter().map(|b| b.len()).sum::<usize>() / bodies.len();
    if !args.json {
        println!("review size: {mean_size} bytes on average");
    }
    // Wait for the server.
    for attempt in 0..=200 {
        let result = match target.connect().await {
            Ok(mut sender) => sender.send(&target, bodies[0].clone()).await,
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => break,
            Err(e) if attempt == 200 => {
                eprintln!("webhook_load: the server at {url} does not answer: {e}");
                std::process::exit(1);
            }
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    // Open loop: `--warmup` seconds at the rate first, sent and checked like the rest but not
    // counted (a fresh process and fresh connections start with page faults and empty buffers);
    // the measured window starts after it.
    let open_loop = args.rate > 0.0;
    let warmup = if open_loop {
        Duration::from_secs_f64(args.warmup)
    } else {
        Duration::ZERO
    };
    let warmup_requests = (args.rate.max(0.0) * warmup.as_secs_f64()) as usize;
    let total = if open_loop {
        warmup_requests + (args.rate * args.seconds.max(1.0)) as usize
    } else {
        args.requests
    };
    // One task per connection (HTTP/1.1: one request at a time on each, keep-alive), all opened
    // before the clock starts. HTTP/2: the tasks share a few connections.
    let workers = args.concurrency.max(1);
    let connections = if args.http2 {
        workers.div_ceil(64)
    } else {
        workers
    };
    let mut opened = Vec::with_capacity(connections);
    for _ in 0..connections {
        match target.connect().await {
            Ok(sender) => opened.push(sender),
            Err(e) => {
                eprintln!("webhook_load: connecting to {url}: {e}");
                std::process::exit(1);
            }
        }
    }
    let senders: Vec<Sender> = if args.http2 {
        (0..workers)
            .map(|w| match &opened[w % connections] {
                Sender::Http2(s) => Sender::Http2(s.clone()),
                _ => Sender::Taken,
            })
            .collect()
    } else {
        opened
    };
    // Open loop: a pacer task releases each request at its scheduled time into one queue that
    // every idle connection takes from; latency counts from the scheduled time, so a late send or
    // a wait for a free connection is counted. The pacer waits on a timerfd (microsecond
    // resolution; tokio's own timer ticks every millisecond, which alone would put up to 1 ms on
    // every latency) on this same single thread: no second thread to wake for each release.
    // Closed loop: every request is queued at once and the connections take the next as soon as
    // they are free.
    let (jobs, queue) = async_channel::unbounded::<(usize, Instant)>();
    let started = Instant::now();
    let pacer = if open_loop {
        let interval = Duration::from_secs_f64(1.0 / args.rate);
        Some(tokio::spawn(pace(jobs, total, started, interval)))
    } else {
        for i in 0..total {
            // The time is taken again when the request is sent.
            let _ = jobs.try_send((i, started));
        }
        jobs.close();
        None
    };
    let mut tasks = Vec::with_capacity(workers);
    for mut sender in senders {
        let (queue, bodies, target) = (queue.clone(), bodies.clone(), target.clone());
        tasks.push(tokio::spawn(async move {
            let mut done = Vec::with_capacity(total / workers + 1);
            let mut errors = Vec::new();
            while let Ok((i, scheduled)) = queue.recv().await {
                let from = if open_loop { scheduled } else { Instant::now() };
                match sender.send(&target, bodies[i % bodies.len()].clone()).await {
                    Ok(()) => done.push((i, from.elapsed())),
                    Err(e) => {
                        errors.push(e);
                        // A broken connection is replaced.
                        if let Ok(fresh) = target.connect().await {
                            sender = fresh;
                        }
                    }
                }
            }
            (done, errors)
        }));
    }
    drop(queue);
    let mut timed: Vec<(usize, Duration)> = Vec::with_capacity(total);
    let mut errors = 0usize;
    for t in tasks {
        match t.await {
            Ok((done, failed)) => {
                timed.extend(done);
                if errors == 0
                    && let Some(e) = failed.first()
                {
                    eprintln!("first error: {e}");
                }
                errors += failed.len();
            }
            Err(e) => {
                eprintln!("a worker failed: {e}");
                errors += 1;
            }
        }
    }
    let paced = match pacer {
        Some(pacer) => pacer
            .await
            .unwrap_or_else(|e| Err(format!("the pacer failed: {e}"))),
        None => Ok(()),
    };
    if let Err(e) = paced {
        eprintln!("webhook_load: pacing: {e}");
        std::process::exit(1);
    }
    let elapsed = started.elapsed().saturating_sub(warmup);
    if let Some(path) = &args.latencies_out
        && let Err(e) = write_latencies(path, &mut timed, open_loop.then(|| 1.0 / args.rate))
    {
        eprintln!("webhook_load: writing {path}: {e}");
        std::process::exit(1);
    }
    let mut latencies: Vec<Duration> = timed
        .into_iter()
        .filter(|(i, _)| *i >= warmup_requests)
        .map(|(_, latency)| latency)
        .collect();
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let achieved = latencies.len() as f64 / elapsed.as_secs_f64();
    if args.json {
        println!(
            "{}",
            json!({
                "requests": latencies.len(), "errors": errors, "concurrency": args.concurrency,
                "target_rps": if args.rate > 0.0 { json!(args.rate) } else { json!(null) },
                "achieved_rps": achieved, "seconds": elapsed.as_secs_f64(), "warmup_s": warmup.as_secs_f64(),
                "review_bytes_mean": mean_size, "http2": args.http2,
                "p50_ms": ms(percentile(&latencies, 0.50)), "p99_ms": ms(percentile(&latencies, 0.99)),
                "p999_ms": ms(percentile(&latencies, 0.999)), "max_ms": ms(latencies.last().copied().unwrap_or_default()),
            })
        );
        return;
    }
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
        achieved,
        ms(percentile(&latencies, 0.50)),
        ms(percentile(&latencies, 0.99)),
        ms(percentile(&latencies, 0.999)),
        ms(latencies.last().copied().unwrap_or_default()),
    );
}
