//! The queue: the pure admission decision and the controller that applies it.

pub mod admission;
mod announcer;
pub mod at_creation;
pub mod bound_pods;
pub mod ceiling;
pub mod cli;
pub mod clock;
mod cohort_gauges;
pub mod controller;
pub mod data_locality;
mod evictor;
mod gauges;
pub mod incremental;
pub mod ledger_queues;
pub mod notices;
pub mod placement;
pub mod pod_cache;
pub mod preemption;
pub mod ready;
mod series;
pub mod snapshot;
pub mod status;
pub mod topology;
mod writer;

/// The admission pass before its rewrite, kept to check and measure the rewrite against: compiled
/// only for the unit tests and (feature `reference`) the admission bench, never into the binary.
#[cfg(any(test, feature = "reference"))]
#[doc(hidden)]
pub mod admission_reference;
#[cfg(test)]
mod admission_tests;
#[cfg(test)]
mod in_flight_tests;
#[cfg(test)]
mod incremental_tests;
#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod quota_holes_tests;
