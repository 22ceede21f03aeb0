//! `sluice serve`'s flags ([`ServeArgs`]) and what it derives from them before it touches the
//! cluster ([`Settings`]); invalid flags stop it here.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;

use crate::duration::{parse_duration, parse_rate};
use crate::leader::{LEASE_CALL_TIMEOUT, LeaseSettings};
use crate::queue::controller::ControllerSettings;
use crate::scavenger::controller::ScavengerSettings;
use crate::webhook_config::Endpoint;

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

/// What `serve` derives from its flags before it touches the cluster; invalid flags stop it here.
pub(super) struct Settings {
    /// Who the API calls act as, if not the credentials' own user (with --local: sluice's
    /// ServiceAccount, so local runs have exactly the in-cluster rights).
    pub(super) impersonate: Option<String>,
    /// The one user allowed to remove the gate and edit sluice's labels.
    pub(super) controller_user: String,
    /// Where the API server calls the webhooks.
    pub(super) endpoint: Endpoint,
    pub(super) certs: sluice_certs::CertSettings,
    pub(super) rotation: sluice_certs::RotationSettings,
    pub(super) lease: LeaseSettings,
    pub(super) controller: ControllerSettings,
    pub(super) scavenger: ScavengerSettings,
}

impl Settings {
    pub(super) fn from_args(args: &ServeArgs) -> anyhow::Result<Settings> {
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
        let controller_identity = lease.identity.clone();
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
                identity: controller_identity,
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
