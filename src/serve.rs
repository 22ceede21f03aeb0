//! `sluice serve`: the webhook server on every replica, the queue controller on the leader.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use axum_server::tls_rustls::RustlsConfig;
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::Store;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::api::{ADMISSION_GATE, FIELD_MANAGER, PROTECTED_LABEL_PREFIX, QUEUE_LABEL};
use crate::duration::{parse_duration, parse_rate};
use crate::integrations::Adapters;
use crate::leader::{LEASE_CALL_TIMEOUT, LeaderElector, LeaseSettings};
use crate::metrics::ControllerMetrics;
use crate::queue::at_creation::AdmitAtCreation;
use crate::queue::controller::{self, ControllerSettings};
use crate::scavenger::controller::ScavengerSettings;
use crate::scavenger::metrics::ScavengerMetrics;
use crate::scavenger::mounts::Mounts;
use crate::webhook_config::{self, Endpoint};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line (for log collectors).
    Json,
    /// Human-readable lines.
    Text,
}

/// Flags of `sluice serve`. Every flag can also be set by the environment variable shown.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address the HTTPS admission webhooks listen on.
    #[arg(long, env = "SLUICE_LISTEN", default_value = "0.0.0.0:9443")]
    pub listen: SocketAddr,

    /// Address the plain-HTTP Prometheus metrics endpoint (/metrics) listens on.
    #[arg(long, env = "SLUICE_METRICS_LISTEN", default_value = "0.0.0.0:9090")]
    pub metrics_listen: SocketAddr,

    /// Run on a host outside the cluster (development, tests, the demo): register the webhooks with
    /// an https URL on --listen's address instead of the in-cluster Service, install sluice's CRDs
    /// and RBAC with the kubeconfig's credentials, then act as sluice's ServiceAccount
    /// (impersonation) so local runs have exactly the in-cluster rights.
    #[arg(long, env = "SLUICE_LOCAL")]
    pub local: bool,

    /// With --local: the base URL the API server calls the webhooks at. Default: https://<--listen>.
    #[arg(long, env = "SLUICE_WEBHOOK_URL")]
    pub webhook_url: Option<String>,

    /// With --local: do not apply the CRDs, namespace and RBAC at startup.
    #[arg(long, env = "SLUICE_NO_INSTALL")]
    pub no_install: bool,

    /// Act as this user for every API call (default with --local: sluice's ServiceAccount).
    #[arg(long, env = "SLUICE_IMPERSONATE")]
    pub impersonate: Option<String>,

    /// The namespace sluice runs in: its certificate Secret, Lease and Service live there.
    #[arg(long, env = "SLUICE_NAMESPACE", default_value = "sluice-system")]
    pub namespace: String,

    /// The Service in front of the webhooks (in-cluster mode).
    #[arg(long, env = "SLUICE_SERVICE", default_value = "sluice-webhook")]
    pub service_name: String,

    /// The Secret that keeps the webhook CA and serving certificate.
    #[arg(long, env = "SLUICE_CERT_SECRET", default_value = "sluice-webhook-tls")]
    pub cert_secret: String,

    /// How long a serving certificate is valid; it is renewed when a third of this is left.
    #[arg(long, env = "SLUICE_CERT_VALIDITY", default_value = "365d", value_parser = parse_duration)]
    pub cert_validity: Duration,

    /// How often the certificate Secret is checked for renewal and reloaded.
    #[arg(long, env = "SLUICE_CERT_CHECK_INTERVAL", default_value = "60s", value_parser = parse_duration)]
    pub cert_check_interval: Duration,

    /// During a CA rotation: how long the bundle of old and new CA is published before the new CA
    /// signs the served certificate, and how long the old CA stays after (at least two check
    /// intervals).
    #[arg(long, env = "SLUICE_CERT_ROTATION_OVERLAP", default_value = "10m", value_parser = parse_duration)]
    pub cert_rotation_overlap: Duration,

    /// Require every webhook client to present a certificate issued by a CA of this PEM file (the
    /// API server's client certificate, set in its admission configuration); without it, any
    /// client that reaches the port may send reviews.
    #[arg(long, env = "SLUICE_CLIENT_CA_FILE")]
    pub client_ca_file: Option<std::path::PathBuf>,

    /// The user allowed to remove the admission gate and edit sluice.dev/ labels (sluice itself).
    /// Default: system:serviceaccount:<namespace>:sluice.
    #[arg(long, env = "SLUICE_CONTROLLER_USER")]
    pub controller_user: Option<String>,

    /// The Lease that elects the replica running the queue controller.
    #[arg(long, env = "SLUICE_LEASE_NAME", default_value = "sluice-controller")]
    pub lease_name: String,

    /// How long a leader's Lease lasts without renewal before another replica may take over.
    #[arg(long, env = "SLUICE_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,

    /// How often the leader renews its Lease (and followers try to take it).
    #[arg(long, env = "SLUICE_LEASE_RENEW", default_value = "2s", value_parser = parse_duration)]
    pub lease_renew_period: Duration,

    /// The leader stops admitting when this long has passed since it sent its last successful
    /// renewal. Must be shorter than --lease-duration: the difference is the margin by which the
    /// old leader stops before any other replica may take over.
    #[arg(long, env = "SLUICE_LEASE_RENEW_DEADLINE", default_value = "10s", value_parser = parse_duration)]
    pub lease_renew_deadline: Duration,

    /// This replica's name in the Lease. Default: $POD_NAME, else <hostname>-<pid>.
    #[arg(long, env = "SLUICE_IDENTITY")]
    pub identity: Option<String>,

    /// How long the controller gathers changes before an admission pass.
    #[arg(long, env = "SLUICE_BATCH_WINDOW", default_value = "20ms", value_parser = parse_duration)]
    pub batch_window: Duration,

    /// While no pod waits behind the gate, admission passes (which then only refresh statuses and
    /// the room for admission at creation) are at least this far apart; a pod seen gated starts a
    /// pass at once. 0s: passes follow every change (twice sluice's CPU in the end-to-end benchmark,
    /// no faster turnover; BENCHMARKS.md).
    #[arg(long, env = "SLUICE_IDLE_INTERVAL", default_value = "250ms", value_parser = parse_duration)]
    pub idle_interval: Duration,

    /// An admission pass runs at least this often even when nothing changed.
    #[arg(long, env = "SLUICE_RESYNC_PERIOD", default_value = "30s", value_parser = parse_duration)]
    pub resync_period: Duration,

    /// Every admission pass builds and decides everything. By default a pass builds again only
    /// the workloads whose pods, DynamicWorkload or in-flight pods changed, and decides again only
    /// their queues (or cohorts), with a full pass at the start and once per --resync-period: the
    /// same decisions (a property test holds them equal), at a cost in proportion to the change.
    /// For comparison, or when in doubt.
    #[arg(long, env = "SLUICE_FULL_PASSES")]
    pub full_passes: bool,

    /// The longest grace period sluice's evictions (preemption, reclaim within a cohort,
    /// podsReadyTimeout) give a pod: a pod's own terminationGracePeriodSeconds if shorter. A
    /// victim that ignores SIGTERM keeps its quota, and its preemptor waiting, this long at most.
    #[arg(long, env = "SLUICE_EVICTION_GRACE_PERIOD", default_value = "2m", value_parser = parse_duration)]
    pub eviction_grace_period: Duration,

    /// Ungate patches and status writes in flight at once.
    #[arg(long, env = "SLUICE_MAX_CONCURRENT_WRITES", default_value_t = 32)]
    pub max_concurrent_writes: usize,

    /// Status writes to one DynamicWorkload or CapacityQueue are at least this far apart; a
    /// status that changes faster is written as its newest value.
    #[arg(long, env = "SLUICE_STATUS_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub status_interval: Duration,

    /// DynamicWorkload status writes per second at most (0, the default: no limit but the status
    /// interval of each), like a client's QPS limit but for the ledger only (never for ungating).
    /// A limit saves the API server writes under a burst of workloads (a status waiting its turn
    /// is often replaced by its successor) at the cost of statuses lagging their pods (about N /
    /// limit seconds for N workloads changing at once; pending workloads first). Waiting
    /// statuses: sluice_status_writes_pending.
    #[arg(long, env = "SLUICE_STATUS_WRITES_PER_SECOND", default_value = "0", value_parser = parse_rate)]
    pub status_writes_per_second: f64,

    /// Events posted on users' objects (their application, Job or pod: "waiting", "admitted",
    /// "preempted"...) per second at most, after a burst of five seconds' worth; events due
    /// beyond that are dropped and counted (sluice_events_dropped_total). 0: no events at all
    /// (the DynamicWorkload's status still says everything).
    #[arg(long, env = "SLUICE_EVENTS_PER_SECOND", default_value = "10", value_parser = parse_rate)]
    pub events_per_second: f64,

    /// Threads of the webhook server's own runtime (1: single-threaded). Admission answers never
    /// wait behind the controller's work; one thread answered 20,000 reviews/s on 2 cores.
    #[arg(long, env = "SLUICE_WEBHOOK_THREADS", default_value_t = 1)]
    pub webhook_threads: usize,

    /// Largest admission request body accepted, in bytes.
    #[arg(long, env = "SLUICE_MAX_BODY_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub max_body_bytes: usize,

    #[command(flatten)]
    pub dashboard: crate::dashboard::DashboardArgs,

    /// Log format.
    #[arg(long, env = "SLUICE_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,

    /// The share (0 to 1) of the allocatable of Ready, schedulable nodes that ordinary pods'
    /// requests and ScavengerJobs may fill together: scavengers get what is left of it.
    #[arg(long, env = "SLUICE_SCAVENGER_THRESHOLD", default_value_t = 0.7)]
    pub scavenger_threshold: f64,

    /// How long a ScavengerJob's pods may take to be scheduled before its Job is removed (it
    /// waits again and is retried later).
    #[arg(long, env = "SLUICE_SCAVENGER_START_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub scavenger_start_timeout: Duration,

    /// How long a ScavengerJob whose start could not be scheduled waits before it is tried again.
    #[arg(long, env = "SLUICE_SCAVENGER_RETRY_AFTER", default_value = "30s", value_parser = parse_duration)]
    pub scavenger_retry_after: Duration,
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    // Colours only for a person at a terminal, never in log files.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
    if let Err(e) = result {
        eprintln!("warning: logging already initialised: {e}");
    }
}

/// The in-cluster webhook configurations as YAML (for `sluice manifests webhooks`).
pub fn in_cluster_webhook_manifests() -> Result<String, serde_yaml::Error> {
    let endpoint = Endpoint::Service {
        namespace: "sluice-system".into(),
        name: "sluice-webhook".into(),
        port: 443,
    };
    let mutating = serde_yaml::to_string(&with_kind(
        &webhook_config::mutating(&endpoint, "sluice-system", None),
        "MutatingWebhookConfiguration",
    ))?;
    let validating = serde_yaml::to_string(&with_kind(
        &webhook_config::validating(
            &endpoint,
            "sluice-system",
            "system:serviceaccount:sluice-system:sluice",
            None,
        ),
        "ValidatingWebhookConfiguration",
    ))?;
    Ok(format!("---\n{mutating}---\n{validating}"))
}

fn with_kind<T: serde::Serialize>(object: &T, kind: &str) -> serde_json::Value {
    let mut value = serde_json::to_value(object).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        map.insert(
            "apiVersion".into(),
            "admissionregistration.k8s.io/v1".into(),
        );
        map.insert("kind".into(), kind.into());
    }
    value
}

/// Writes both webhook configurations with the current CA bundle (server-side apply: idempotent,
/// and every replica writing the same content agrees).
async fn register_webhooks(
    client: &Client,
    endpoint: &Endpoint,
    namespace: &str,
    controller_user: &str,
    ca_pem: &str,
) -> anyhow::Result<()> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mutating = with_kind(
        &webhook_config::mutating(endpoint, namespace, Some(ca_pem.as_bytes())),
        "MutatingWebhookConfiguration",
    );
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .patch(
            webhook_config::CONFIGURATION_NAME,
            &params,
            &Patch::Apply(mutating),
        )
        .await
        .context("registering the MutatingWebhookConfiguration")?;
    let validating = with_kind(
        &webhook_config::validating(
            endpoint,
            namespace,
            controller_user,
            Some(ca_pem.as_bytes()),
        ),
        "ValidatingWebhookConfiguration",
    );
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .patch(
            webhook_config::CONFIGURATION_NAME,
            &params,
            &Patch::Apply(validating),
        )
        .await
        .context("registering the ValidatingWebhookConfiguration")?;
    Ok(())
}

/// Every metric sluice serves, registered under its own name (`sluice_...`, no prefix).
pub fn metrics_registry() -> (
    Registry,
    ControllerMetrics,
    crate::tasks::TaskMetrics,
    sluice_webhooks::WebhookMetrics,
    ScavengerMetrics,
) {
    let mut registry = Registry::default();
    let controller_metrics = ControllerMetrics::new(&mut registry);
    let task_metrics = crate::tasks::TaskMetrics::new(&mut registry);
    let webhook_metrics = sluice_webhooks::WebhookMetrics::new(&mut registry);
    let scavenger_metrics = ScavengerMetrics::new(&mut registry);
    (
        registry,
        controller_metrics,
        task_metrics,
        webhook_metrics,
        scavenger_metrics,
    )
}

async fn serve_metrics(
    addr: SocketAddr,
    registry: Arc<Registry>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/metrics",
        get(move || {
            let registry = registry.clone();
            async move {
                let mut body = String::new();
                match prometheus_client::encoding::text::encode(&mut body, &registry) {
                    Ok(()) => (
                        axum::http::StatusCode::OK,
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        body,
                    ),
                    Err(e) => (
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                        [(axum::http::header::CONTENT_TYPE, "text/plain")],
                        format!("could not encode metrics: {e}"),
                    ),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the metrics address {addr}"))?;
    info!(%addr, "metrics on /metrics");
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .context("metrics server")
}

fn default_identity() -> String {
    std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "sluice".into());
            format!("{host}-{}", std::process::id())
        })
}

/// Who may call the webhooks: with `--client-ca-file`, only clients with a certificate from it.
fn client_auth(file: Option<&std::path::Path>) -> anyhow::Result<sluice_certs::ClientAuth> {
    let Some(file) = file else {
        return Ok(sluice_certs::ClientAuth::Anyone);
    };
    let pem = std::fs::read_to_string(file)
        .with_context(|| format!("reading --client-ca-file {}", file.display()))?;
    sluice_certs::ClientAuth::require_from(&pem)
        .with_context(|| format!("--client-ca-file {}", file.display()))
}

/// `sluice serve`: settings from the flags, then each step in turn. Every replica serves the
/// webhooks; the one holding the Lease also runs the controllers.
pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    init_tracing(args.log_format);
    // One crypto provider for the whole process: ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let settings = Settings::from_args(&args)?;

    let client = api_client(&args, &settings).await?;
    let shutdown = shutdown_on_signal();
    let (registry, controller_metrics, task_metrics, webhook_metrics, scavenger_metrics) =
        metrics_registry();
    let certs = certificates(&args, &settings, &client, &shutdown).await?;
    let state = watch_webhook_state(&client, &controller_metrics);
    let server_task = start_webhook_server(
        &args,
        &settings,
        &state,
        certs.tls.clone(),
        webhook_metrics,
        &shutdown,
    );
    publish_webhooks(&client, &settings, &certs.ca_pem, &certs.published, &state).await?;
    info!(listen = %args.listen, endpoint = ?settings.endpoint, "webhooks registered and serving");
    keep_ca_bundle_published(client.clone(), &settings, certs, shutdown.clone());
    let _dashboard = crate::dashboard::spawn(
        &args.dashboard,
        client.clone(),
        state.namespaces.clone(),
        shutdown.clone(),
    );
    let metrics_task = tokio::spawn(serve_metrics(
        args.metrics_listen,
        Arc::new(registry),
        shutdown.clone(),
    ));
    run_controllers_while_leading(
        client,
        settings,
        (controller_metrics, task_metrics, scavenger_metrics),
        state.at_creation,
        &shutdown,
    )
    .await;
    shut_down(shutdown, server_task, metrics_task).await
}

/// What `serve` derives from its flags before it touches the cluster; invalid flags stop it here.
struct Settings {
    /// Who the API calls act as, if not the credentials' own user (with --local: sluice's
    /// ServiceAccount, so local runs have exactly the in-cluster rights).
    impersonate: Option<String>,
    /// The one user allowed to remove the gate and edit sluice's labels.
    controller_user: String,
    /// Where the API server calls the webhooks.
    endpoint: Endpoint,
    certs: sluice_certs::CertSettings,
    rotation: sluice_certs::RotationSettings,
    lease: LeaseSettings,
    controller: ControllerSettings,
    scavenger: ScavengerSettings,
}

impl Settings {
    fn from_args(args: &ServeArgs) -> anyhow::Result<Settings> {
        let service_account = format!("system:serviceaccount:{}:sluice", args.namespace);
        let endpoint = if args.local {
            Endpoint::Url(
                args.webhook_url
                    .clone()
                    .unwrap_or_else(|| format!("https://{}", args.listen)),
            )
        } else {
            Endpoint::Service {
                namespace: args.namespace.clone(),
                name: args.service_name.clone(),
                port: 443,
            }
        };
        let lease = LeaseSettings {
            namespace: args.namespace.clone(),
            name: args.lease_name.clone(),
            identity: args.identity.clone().unwrap_or_else(default_identity),
            lease_duration: args.lease_duration,
            renew_deadline: args.lease_renew_deadline,
            retry_period: args.lease_renew_period,
            call_timeout: LEASE_CALL_TIMEOUT.min(args.lease_renew_deadline),
        };
        lease
            .validate()
            .context("--lease-duration, --lease-renew-deadline and --lease-renew")?;
        if !(0.0..=1.0).contains(&args.scavenger_threshold) {
            anyhow::bail!(
                "--scavenger-threshold {} must be between 0 and 1 (e.g. 0.7: scavengers fill up to 70% of the nodes' allocatable with ordinary work)",
                args.scavenger_threshold
            );
        }
        Ok(Settings {
            impersonate: args
                .impersonate
                .clone()
                .or_else(|| args.local.then(|| service_account.clone())),
            controller_user: args.controller_user.clone().unwrap_or(service_account),
            endpoint,
            // Certificates: shared by replicas through the Secret, reloaded without a restart.
            certs: sluice_certs::CertSettings {
                namespace: args.namespace.clone(),
                secret_name: args.cert_secret.clone(),
                dns_names: sluice_certs::service_dns_names(&args.service_name, &args.namespace),
                ip_addresses: vec![std::net::IpAddr::from([127, 0, 0, 1]), args.listen.ip()],
                serving_validity: args.cert_validity,
                check_interval: args.cert_check_interval,
            },
            rotation: sluice_certs::RotationSettings {
                overlap: args.cert_rotation_overlap,
            },
            lease,
            controller: ControllerSettings {
                batch_window: args.batch_window,
                resync_period: args.resync_period,
                max_concurrent_writes: args.max_concurrent_writes,
                status_interval: args.status_interval,
                status_writes_per_second: args.status_writes_per_second,
                idle_interval: args.idle_interval,
                full_passes: args.full_passes,
                eviction_grace_period: args.eviction_grace_period,
                events_per_second: args.events_per_second,
                ..ControllerSettings::default()
            },
            scavenger: ScavengerSettings {
                threshold: args.scavenger_threshold,
                start_timeout: args.scavenger_start_timeout,
                retry_after: args.scavenger_retry_after,
                ..ScavengerSettings::default()
            },
        })
    }
}

/// The API client sluice acts with. With --local (unless --no-install), first installs the CRDs,
/// namespace and RBAC with the kubeconfig's own credentials.
async fn api_client(args: &ServeArgs, settings: &Settings) -> anyhow::Result<Client> {
    let base = kube::Config::infer()
        .await
        .context("no Kubernetes credentials found: set KUBECONFIG (for the local cluster: eval \"$(hack/cluster.sh env)\") or run sluice in a pod")?;
    let install = args.local && !args.no_install;
    if install {
        let admin =
            Client::try_from(base.clone()).context("building the installer's API client")?;
        crate::install::apply_all(&admin)
            .await
            .context("installing CRDs, namespace and RBAC (needs an administrator's kubeconfig; use --no-install if they are installed already)")?;
        info!("installed CRDs, namespace and RBAC");
    }
    let mut config = base;
    // No retries inside the client: every call of sluice's is bounded by a timeout and retried by
    // its own loop (the next pass, the next writer round), and an eviction refused by a
    // PodDisruptionBudget (429) must come back at once to be recorded, not be retried until the
    // timeout hides why.
    config.default_retry = false;
    if let Some(user) = &settings.impersonate {
        config.auth_info.impersonate = Some(user.clone());
        info!(%user, "acting as");
    }
    let client = Client::try_from(config).context("building the API client")?;
    if install && settings.impersonate.is_some() {
        // The API server's RBAC cache takes a moment to see the Role just applied: wait until the
        // identity sluice acts as may read its certificate Secret, rather than fail on a 403.
        crate::install::wait_for_rights(
            &client,
            &args.namespace,
            &args.cert_secret,
            Duration::from_secs(60),
        )
        .await
        .context("waiting for sluice's RBAC to take effect")?;
    }
    Ok(client)
}

/// A token cancelled on SIGTERM or Ctrl-C; every server and controller stops with it.
fn shutdown_on_signal() -> CancellationToken {
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        info!("shutting down");
        token.cancel();
    });
    shutdown
}

/// The webhook's certificates, from the Secret the replicas share (created when missing).
struct Certificates {
    /// The CA bundle the webhook configurations get first.
    ca_pem: String,
    /// What the server presents; the reloader renews and rotates it in place, without a restart.
    tls: RustlsConfig,
    /// Each new CA bundle to publish in the webhook configurations (empty until the first check).
    ca_updates: watch::Receiver<String>,
    /// Where the publisher confirms that a bundle is in the configurations: a CA rotation waits
    /// for it before the new CA signs.
    published: sluice_certs::PublishedBundles,
}

async fn certificates(
    args: &ServeArgs,
    settings: &Settings,
    client: &Client,
    shutdown: &CancellationToken,
) -> anyhow::Result<Certificates> {
    let certs = sluice_certs::load_or_create(client.clone(), &settings.certs)
        .await
        .with_context(|| {
            format!(
                "loading or creating the webhook certificate Secret {}/{}",
                args.namespace, args.cert_secret
            )
        })?;
    let client_auth = client_auth(args.client_ca_file.as_deref())?;
    let tls = sluice_certs::axum_rustls_config_with(&certs, &client_auth)
        .context("building the TLS configuration")?;
    let (_reloader, ca_updates, published) = sluice_certs::CertReloader::spawn_with_client_auth(
        client.clone(),
        settings.certs.clone(),
        settings.rotation,
        tls.clone(),
        client_auth,
        shutdown.clone(),
    );
    Ok(Certificates {
        ca_pem: certs.ca_pem,
        tls,
        ca_updates,
        published,
    })
}

/// What the webhooks judge from, kept in memory by watches: no API call on their hot path.
struct WebhookState {
    /// The queues, for the application validator and the pod classifier (`maxPriority`).
    queues: Store<crate::api::CapacityQueue>,
    /// The namespaces' labels: default queues and namespaceSelectors.
    namespaces: crate::namespaces::Namespaces,
    /// Admission at creation: the webhook admits from what this replica's controller found, while
    /// this replica leads.
    at_creation: Arc<AdmitAtCreation>,
    /// Set once the webhooks are registered and the namespaces listed; until then /readyz says no.
    ready: Arc<AtomicBool>,
    /// Which PVCs, ConfigMaps and Secrets exist (names only), for the ScavengerJob webhook.
    mounts: Mounts,
}

impl WebhookState {
    fn inputs(&self) -> WebhookInputs {
        WebhookInputs {
            queues: self.queues.clone(),
            namespaces: self.namespaces.clone(),
            at_creation: self.at_creation.clone(),
            mounts: self.mounts.clone(),
        }
    }
}

fn watch_webhook_state(client: &Client, metrics: &ControllerMetrics) -> WebhookState {
    let (queues, queue_writer) = kube::runtime::reflector::store::<crate::api::CapacityQueue>();
    let stream = kube::runtime::reflector::reflector(
        queue_writer,
        kube::runtime::watcher(
            Api::<crate::api::CapacityQueue>::all(client.clone()),
            kube::runtime::watcher::Config::default(),
        )
        .backoff(crate::watch_backoff::watch_backoff()),
    );
    tokio::spawn(async move { stream.for_each(|_| async {}).await });
    let (namespaces, watch_namespaces) = crate::namespaces::Namespaces::watch(client.clone());
    tokio::spawn(watch_namespaces);
    WebhookState {
        queues,
        namespaces,
        at_creation: Arc::new(
            AdmitAtCreation::default().with_metrics(metrics.admitted_at_creation.clone()),
        ),
        ready: Arc::new(AtomicBool::new(false)),
        mounts: Mounts::watch(client, None, None),
    }
}

/// Starts the webhook server on a runtime of its own (`--webhook-threads`).
fn start_webhook_server(
    args: &ServeArgs,
    settings: &Settings,
    state: &WebhookState,
    tls: RustlsConfig,
    metrics: sluice_webhooks::WebhookMetrics,
    shutdown: &CancellationToken,
) -> JoinHandle<Result<(), sluice_webhooks::WebhookError>> {
    let webhooks = webhook_routes(&state.inputs(), &settings.controller_user)
        .readiness(state.ready.clone())
        .metrics(metrics)
        .max_body_bytes(args.max_body_bytes);
    let server = sluice_webhooks::WebhookServer::new(args.listen, tls, webhooks);
    let shutdown = shutdown.clone();
    let threads = args.webhook_threads;
    tokio::spawn(async move { server.serve_dedicated(threads, None, shutdown).await })
}

/// What the webhooks judge from, without an API call on their path: the queues, the namespaces'
/// labels and the room for admission at creation. `sluice serve` fills them from watches; the fuzz
/// targets (fuzz/) from fixtures.
#[derive(Clone)]
pub struct WebhookInputs {
    pub queues: Store<crate::api::CapacityQueue>,
    pub namespaces: crate::namespaces::Namespaces,
    pub at_creation: Arc<AdmitAtCreation>,
    /// The PVCs, ConfigMaps and Secrets a ScavengerJob may mount.
    pub mounts: Mounts,
}

/// Every webhook sluice serves (the pods', each integration's application webhooks, the
/// ScavengerJobs') with the real classifier and admission at creation: one list, for the server
/// and for the fuzz targets.
pub fn webhook_routes(inputs: &WebhookInputs, controller_user: &str) -> sluice_webhooks::Webhooks {
    let webhooks = sluice_webhooks::Webhooks::new(
        gate_settings(controller_user),
        Arc::new(crate::queue::at_creation::Classifier {
            adapters: Adapters::with_namespaces(inputs.namespaces.clone()),
            at_creation: Some(inputs.at_creation.clone()),
            queues: Some(inputs.queues.clone()),
        }),
    )
    .application(
        "/mutate-applications",
        Arc::new(crate::app_webhooks::MutateApplications {
            adapters: crate::integrations::applications(),
            namespaces: inputs.namespaces.clone(),
        }),
    )
    .application(
        "/validate-applications",
        Arc::new(crate::app_webhooks::ValidateApplications {
            adapters: crate::integrations::applications(),
            queues: inputs.queues.clone(),
            namespaces: inputs.namespaces.clone(),
        }),
    );
    scavenger_routes(webhooks, inputs, controller_user)
}

/// The ScavengerJob webhooks: the ScavengerJob validator (mounts from watches) and the guard of
/// the scavenger marks on pods and Jobs.
fn scavenger_routes(
    webhooks: sluice_webhooks::Webhooks,
    inputs: &WebhookInputs,
    controller_user: &str,
) -> sluice_webhooks::Webhooks {
    webhooks
        .application(
            "/validate-scavengerjobs",
            Arc::new(crate::scavenger::webhook::ValidateScavengerJobs {
                mounts: inputs.mounts.clone(),
                queues: Some(inputs.queues.clone()),
            }),
        )
        .application(
            "/validate-scavenger-workloads",
            Arc::new(crate::scavenger::webhook::ValidateScavengerWorkloads {
                controller_user: controller_user.to_string(),
                job_controller_users: crate::scavenger::webhook::JOB_CONTROLLER_USERS
                    .iter()
                    .map(|u| u.to_string())
                    .collect(),
            }),
        )
}

/// The pod webhooks' gate: its name, sluice's labels and annotations, and who may touch them.
fn gate_settings(controller_user: &str) -> sluice_webhooks::GateSettings {
    sluice_webhooks::GateSettings {
        gate_name: ADMISSION_GATE.into(),
        protected_label_prefix: PROTECTED_LABEL_PREFIX.into(),
        governed_label: QUEUE_LABEL.into(),
        controller_usernames: vec![controller_user.to_string()],
        admission_annotations: crate::api::ADMISSION_ANNOTATIONS
            .iter()
            .map(|a| a.to_string())
            .collect(),
    }
}

/// Registers the webhook configurations with the first CA bundle, then says ready once the
/// namespaces and the queues are listed.
async fn publish_webhooks(
    client: &Client,
    settings: &Settings,
    ca_pem: &str,
    published: &sluice_certs::PublishedBundles,
    state: &WebhookState,
) -> anyhow::Result<()> {
    register_webhooks(
        client,
        &settings.endpoint,
        &settings.certs.namespace,
        &settings.controller_user,
        ca_pem,
    )
    .await?;
    published.confirm(ca_pem);
    // Until the namespaces are listed, pods in a namespace with a default queue would be refused.
    state
        .namespaces
        .wait_until_ready()
        .await
        .context("watching namespaces for their default queues")?;
    // Until the queues are listed, no queue's maxPriority would be known to the pod webhook.
    state
        .queues
        .wait_until_ready()
        .await
        .context("watching CapacityQueues")?;
    // Until they are listed, every ScavengerJob's mounts would look missing.
    state
        .mounts
        .wait_until_ready()
        .await
        .context("watching PersistentVolumeClaims, ConfigMaps and Secrets (names only)")?;
    state.ready.store(true, Ordering::SeqCst);
    Ok(())
}

/// Keeps the CA bundle in the webhook configurations in step with the Secret, until `shutdown`.
fn keep_ca_bundle_published(
    client: Client,
    settings: &Settings,
    certs: Certificates,
    shutdown: CancellationToken,
) {
    let Certificates {
        mut ca_updates,
        published,
        ..
    } = certs;
    let endpoint = settings.endpoint.clone();
    let namespace = settings.certs.namespace.clone();
    let controller_user = settings.controller_user.clone();
    tokio::spawn(async move {
        // A failed update is retried: a CA rotation waits for each bundle to be confirmed.
        let mut failed = false;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                changed = ca_updates.changed() => if changed.is_err() { break; },
                _ = tokio::time::sleep(Duration::from_secs(5)), if failed => {}
            }
            let ca = ca_updates.borrow_and_update().clone();
            if ca.is_empty() {
                continue;
            }
            match register_webhooks(&client, &endpoint, &namespace, &controller_user, &ca).await {
                Ok(()) => {
                    failed = false;
                    published.confirm(&ca);
                    info!("CA bundle of the webhook configurations updated");
                }
                Err(e) => {
                    failed = true;
                    warn!(error = %format!("{e:#}"), "could not update the CA bundle of the webhook configurations; retrying in 5 s");
                }
            }
        }
    });
}

/// Takes part in the leader election until `shutdown`; during each term this replica holds the
/// Lease, it runs the queue controller, the recorder and the Task controllers.
async fn run_controllers_while_leading(
    client: Client,
    settings: Settings,
    (metrics, task_metrics, scavenger_metrics): (
        ControllerMetrics,
        crate::tasks::TaskMetrics,
        ScavengerMetrics,
    ),
    at_creation: Arc<AdmitAtCreation>,
    shutdown: &CancellationToken,
) {
    let elector = LeaderElector::new(client.clone(), settings.lease);
    let leader_gauge = metrics.leader.clone();
    let term_gauge = metrics.leader_term.clone();
    let ended_term_gauge = term_gauge.clone();
    // The moment a term ends the webhook admits nothing more at creation, before the controller
    // has even stopped.
    let stop_admitting: Arc<dyn Fn() + Send + Sync> = {
        let at_creation = at_creation.clone();
        Arc::new(move || at_creation.deactivate())
    };
    let controller = settings.controller;
    let scavenger = (settings.scavenger, scavenger_metrics);
    elector
        .run(
            shutdown.clone(),
            move |leading| {
                leader_gauge.set(i64::from(leading));
                if !leading {
                    ended_term_gauge.set(-1);
                }
            },
            stop_admitting,
            move |term: Arc<crate::leader::Term>| {
                term_gauge.set(i64::from(term.generation()));
                lead(
                    client.clone(),
                    metrics.clone(),
                    controller.clone(),
                    task_metrics.clone(),
                    scavenger.clone(),
                    at_creation.clone(),
                    term,
                )
            },
        )
        .await;
}

/// One term as leader: the controllers run until the term ends.
async fn lead(
    client: Client,
    metrics: ControllerMetrics,
    settings: ControllerSettings,
    task_metrics: crate::tasks::TaskMetrics,
    (scavenger, scavenger_metrics): (ScavengerSettings, ScavengerMetrics),
    at_creation: Arc<AdmitAtCreation>,
    term: Arc<crate::leader::Term>,
) {
    let token = term.cancelled().clone();
    // ScavengerJobs: leader only.
    let scavengers = tokio::spawn(crate::scavenger::controller::run(
        client.clone(),
        scavenger,
        scavenger_metrics,
        token.clone(),
    ));
    // The recorder writes DynamicWorkloads from application objects: leader only, like the
    // controller.
    let recorder = tokio::spawn(crate::recorder::run(client.clone(), token.clone()));
    // Task and TaskCluster controllers: leader only too.
    let tasks = tokio::spawn(crate::tasks::run(client.clone(), task_metrics, token));
    if let Err(e) = controller::run(
        client,
        Adapters::default(),
        metrics,
        settings,
        Some(at_creation),
        term,
    )
    .await
    {
        error!(%e, "queue controller stopped");
    }
    let _ = recorder.await;
    let _ = tasks.await;
    let _ = scavengers.await;
}

/// Stops the servers and waits for them: the webhook server's failure is the command's.
async fn shut_down(
    shutdown: CancellationToken,
    server_task: JoinHandle<Result<(), sluice_webhooks::WebhookError>>,
    metrics_task: JoinHandle<anyhow::Result<()>>,
) -> anyhow::Result<()> {
    shutdown.cancel();
    match server_task.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(anyhow::Error::new(e).context("webhook server")),
        Err(e) => return Err(anyhow::anyhow!("webhook server task: {e}")),
    }
    if let Ok(Err(e)) = metrics_task.await {
        warn!(error = %format!("{e:#}"), "metrics server");
    }
    Ok(())
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn metrics_are_served_under_their_documented_names() {
        let (registry, controller, _, _, _) = super::metrics_registry();
        controller.status_writes.inc();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        let names: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| l.split(['{', ' ']).next().unwrap_or_default())
            .collect();
        assert!(!names.is_empty());
        for name in &names {
            assert!(name.starts_with("sluice_"), "metric {name} in:\n{text}");
        }
        assert!(names.contains(&"sluice_status_writes_total"), "{text}");
        let reference = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/src/reference/metrics.md"
        ))
        .expect("docs/src/reference/metrics.md");
        for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
            let mut words = line.split_whitespace().skip(2);
            let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                continue;
            };
            let documented = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_string()
            };
            assert!(
                reference.contains(&format!("`{documented}`")),
                "docs/src/reference/metrics.md lacks `{documented}`: run hack/gen-manifests.sh"
            );
        }
    }
}
