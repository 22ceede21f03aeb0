//! ScavengerJobs: preemptible work on reserved but idle capacity (seed 004).
//!
//! The pure core: the capacity (`capacity.rs`), which waiting jobs start and which running ones
//! give their room back (`plan.rs`), what a run is doing and the status it leads to (`run.rs`),
//! the spec's checks (`spec.rs`) and the Job of a run (`job.rs`). The I/O around it: the
//! controller that applies the decisions (`controller.rs`, on the leader), the webhooks that
//! refuse bad ScavengerJobs and forged scavenger pods and Jobs (`webhook.rs`), the metrics
//! (`metrics.rs`) and `sluice scavengers` (`report.rs`).

pub mod capacity;
pub mod controller;
pub mod facts;
pub mod job;
pub mod metrics;
pub mod mounts;
pub mod plan;
pub mod pod;
pub mod report;
pub mod run;
pub mod spec;
pub mod webhook;
