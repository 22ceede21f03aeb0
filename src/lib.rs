#![forbid(unsafe_code)]
//! sluice: a capacity gate for dynamic batch workloads on Kubernetes.
//!
//! Webhooks put a scheduling gate on every pod of a governed application; the queue controller
//! removes it once the application's CapacityQueue has room, in priority order and with gangs.

pub mod api;
pub mod app_webhooks;
pub mod build_info;
pub mod dashboard;
pub mod docs;
pub mod duration;
pub mod events;
pub mod install;
pub mod integrations;
pub mod kubectl_plugin;
pub mod leader;
pub mod metrics;
pub mod namespaces;
pub mod queue;
pub mod recorder;
pub mod report;
pub mod resources;
pub mod scavenger;
pub mod serve;
pub mod submit_warnings;
pub mod tasks;
#[cfg(test)]
pub(crate) mod test_support;
pub mod watch_backoff;
pub mod watch_store;
pub mod webhook_config;
