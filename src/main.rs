#![forbid(unsafe_code)]
//! The `sluice` command.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use sluice::serve::ServeArgs;

/// mimalloc: the webhook's answers are mostly small allocations (see Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// sluice: a capacity gate for dynamic batch workloads (Spark, Ray, Jobs, plain pods) on Kubernetes.
///
/// Governed pods (labelled `sluice.dev/queue: <queue>`) are created behind the scheduling gate
/// `sluice.dev/admission`; sluice removes the gate once the queue's quota has room for them, in
/// priority order, whole gangs at a time; queues of a cohort lend each other idle quota and take it
/// back. ScavengerJobs run on idle capacity and step aside when it is needed. Watch it with
/// `kubectl get dynamicworkloads`, `kubectl get capacityqueues`, `sluice queue -A` and
/// `sluice scavengers`.
#[derive(Parser, Debug)]
#[command(
    name = "sluice",
    version = sluice::build_info::LONG_VERSION,
    about,
    long_about,
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the admission webhooks and (on the replica holding the leader Lease) run the queue controller.
    Serve(Box<ServeArgs>),
    /// Print the CustomResourceDefinitions (YAML) that `manifests/crds/` holds.
    Crds,
    /// The client for Task code, inside a Task's container: read the input, write the result,
    /// spawn downstream Tasks.
    #[command(subcommand)]
    Task(sluice::tasks::client::TaskCommand),
    /// Print generated manifests.
    Manifests {
        #[command(subcommand)]
        what: ManifestKind,
    },
    /// Print the table of integrations (the kinds of application sluice governs: what is the
    /// gang, what is elastic, what ends it) that the book's "Gangs and elastic pods" holds, in
    /// Markdown.
    Integrations,
    /// Show the scavenger capacity: the threshold, what ordinary pods hold, what ScavengerJobs
    /// may use and use, the ScavengerJobs by phase and each queue's scavengerQuota.
    Scavengers(sluice::scavenger::report::ScavengersArgs),
    /// Show a queue's pending order (`sluice queue <name>`, or every queue with `-A`): position,
    /// priority, what each workload asks, borrows and waits for. Reads only the API.
    Queue(sluice::queue::cli::QueueArgs),
    /// Remove sluice from the cluster without stranding a pod: stop its Deployment, delete the
    /// webhook configurations, ungate (or, with --keep-gated, list) every pod still gated, then
    /// delete the namespace, roles and priority classes (CRDs only with --delete-crds).
    Uninstall(sluice::install::uninstall::UninstallArgs),
    /// Write the generated pages of the docs book (hidden: for the project, not for users).
    #[command(hide = true)]
    Docs {
        #[command(subcommand)]
        what: DocsKind,
    },
}

#[derive(Subcommand, Debug)]
enum DocsKind {
    /// The reference pages (CRD fields, commands and flags, metrics, refusals) into `--out`.
    Reference {
        #[arg(long, default_value = "docs/src/reference")]
        out: std::path::PathBuf,
    },
}

#[derive(Subcommand, Debug)]
enum ManifestKind {
    /// The webhook configurations for an in-cluster install (the Service `sluice-webhook` in
    /// `sluice-system`); sluice fills in the CA bundle when it starts.
    Webhooks,
    /// sluice's ClusterRole, Role and bindings (`manifests/install/01-rbac.yaml`): its own rules
    /// and each integration's.
    Rbac,
    /// The Task rights (`manifests/install/01-rbac-tasks.yaml`).
    RbacTasks,
}

/// Prints a generated manifest, or the error naming `what`.
fn print_manifest(what: &str, rendered: Result<String, serde_norway::Error>) -> ExitCode {
    match rendered {
        Ok(yaml) => {
            print!("{yaml}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: could not render {what}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `sluice docs reference --out DIR`: writes the generated reference pages, printing each path.
fn write_docs(out: &std::path::Path) -> ExitCode {
    match sluice::docs::write_reference(Cli::command(), out) {
        Ok(files) => {
            for file in files {
                println!("{}", out.join(file).display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `sluice uninstall`: its steps, one line each (sluice::install::uninstall).
async fn uninstall(args: sluice::install::uninstall::UninstallArgs) -> anyhow::Result<String> {
    let client = kube::Client::try_default().await?;
    let report = sluice::install::uninstall::run(&client, &args).await?;
    Ok(report.lines.iter().map(|l| format!("{l}\n")).collect())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crds => match sluice::api::crds_yaml() {
            Ok(docs) => {
                for (_, yaml) in docs {
                    print!("---\n{yaml}");
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: could not render the CRDs: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Manifests { what } => match what {
            ManifestKind::Webhooks => print_manifest(
                "the webhook configurations",
                sluice::serve::in_cluster_webhook_manifests(),
            ),
            ManifestKind::Rbac => print_manifest("the RBAC", sluice::install::rbac_yaml()),
            ManifestKind::RbacTasks => {
                print_manifest("the Task RBAC", sluice::install::rbac_tasks_yaml())
            }
        },
        Command::Docs {
            what: DocsKind::Reference { out },
        } => write_docs(&out),
        Command::Integrations => {
            print!("{}", sluice::integrations::docs_table());
            ExitCode::SUCCESS
        }
        Command::Scavengers(args) => {
            sluice::report::print_report(sluice::scavenger::report::run(args))
        }
        Command::Queue(args) => sluice::report::print_report(sluice::queue::cli::run(args)),
        Command::Uninstall(args) => sluice::report::print_report(uninstall(args)),
        Command::Task(command) => {
            match sluice::report::block_on(sluice::tasks::client::run(command)) {
                Ok(Ok(())) => ExitCode::SUCCESS,
                Ok(Err(e)) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
                Err(code) => code,
            }
        }
        Command::Serve(args) => {
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: could not start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(sluice::serve::serve(*args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    // Print the whole chain: the outermost context says what, the innermost why.
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
