//! The queue: the pure admission decision and the controller that applies it.

pub mod admission;
pub mod controller;
pub mod resources;
pub mod snapshot;

#[cfg(test)]
mod admission_tests;
